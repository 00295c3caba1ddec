"""The topic catalogue of a cluster node: topics from etcd, logs for what this node holds.

The catalogue is etcd's ``topics/`` keys, not ``topics.json``. A request that changes it
(CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, a Metadata that auto-creates)
runs the same handler and validation as on a single node, but the change it makes here is
only an *intent*: the node writes the intents to etcd (compare-and-set) before the reply
goes out, and every node, this one included, applies the change when its watch delivers
it (``sync``). That is also when the catalogue's listeners (the group coordinator) hear of
deleted and grown topics, on each node for the groups it coordinates.

A topic's ``partitions`` holds a log only where this node holds one (it leads the partition,
or keeps it as a replica); the others are None.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.topics import Topic, TopicCatalog
from cluster.model import TopicInfo
from protocol.errors import ErrorCode
from storage.fs import REAL_FS, FileSystem
from storage.layout import partition_dir
from storage.partition import PartitionLog

log = logging.getLogger("kcoord.cluster")


@dataclass
class Intent:
    """One change a request asked for, to be written to etcd before its reply."""

    kind: str  # create, delete, grow, configs
    name: str
    topic_id: uuid.UUID | None = None
    partitions: int = 0
    configs: dict[str, str] = field(default_factory=dict)
    replication_factor: int = 1


class ClusterCatalog(TopicCatalog):
    def __init__(self, data_dir: Path, config: Any, fs: FileSystem = REAL_FS) -> None:
        self.intents: list[Intent] = []
        #: How many nodes are alive (set by the node): the most replicas a new topic may ask for.
        self.live_nodes: Callable[[], int] = lambda: 1
        super().__init__(data_dir, config, fs)

    # ---------------------------------------------------------------- no topics.json

    def _load(self) -> None:
        """The topics arrive from etcd (``sync``), not from the data directory."""

    def _persist(self) -> bool:
        return True

    # ---------------------------------------------------------------- changes become intents

    def take_intents(self) -> list[Intent]:
        intents, self.intents = self.intents, []
        return intents

    def create(self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str | None],
               validate_only: bool = False) -> tuple[ErrorCode, str | None, Topic | None]:
        factor = self.config["default.replication.factor"] if replication_factor == -1 else replication_factor
        live = self.live_nodes()
        if factor < 1 or factor > live:
            return (ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"Replication factor: {factor} larger than available brokers: {live}.", None)
        error, message, topic = super().create(name, num_partitions, -1, configs, validate_only=True)
        if error is not ErrorCode.NONE or topic is None or validate_only:
            return error, message, topic
        count = self.config["num.partitions"] if num_partitions == -1 else num_partitions
        self.intents.append(Intent("create", name, topic.topic_id, count, dict(topic.configs), factor))
        return error, message, topic

    def delete(self, name: str) -> Topic | None:
        topic = self.topics.get(name)
        if topic is not None:
            self.intents.append(Intent("delete", name, topic.topic_id))
        return topic

    def add_partitions(self, name: str, count: int, validate_only: bool = False) -> tuple[ErrorCode, str | None]:
        error, message = super().add_partitions(name, count, validate_only=True)
        if error is ErrorCode.NONE and not validate_only:
            self.intents.append(Intent("grow", name, partitions=count))
        return error, message

    def alter_configs(self, name: str, overrides: dict[str, str]) -> tuple[ErrorCode, str | None]:
        if name not in self.topics:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
        self.intents.append(Intent("configs", name, configs=dict(overrides)))
        return ErrorCode.NONE, None

    # ---------------------------------------------------------------- etcd's topics applied

    def sync(self, topics: dict[str, TopicInfo]) -> bool:
        """Make the catalogue match etcd's topics; True if anything changed.

        New topics appear with no local logs; deleted ones lose theirs (the listeners hear
        of it); grown ones get their new partitions (the listeners hear of it, start offset
        0: a new partition is empty); configs are replaced.
        """
        changed = False
        for name in [n for n in self.topics if n not in topics or topics[n].topic_id != self.topics[n].topic_id]:
            self._remove(name)
            changed = True
        for name, info in topics.items():
            if info.name.startswith("__"):
                continue  # internal topics (the coordinator log) are not in the catalogue
            topic = self.topics.get(name)
            if topic is None:
                topic = Topic(name, info.topic_id, dict(info.configs), defaults=self.defaults)
                topic.partitions = [None] * info.partitions
                self.topics[name] = topic
                self._by_id[topic.topic_id] = topic
                log.info("topic %s (%d partitions) appeared", name, info.partitions)
                changed = True
                continue
            if info.partitions > len(topic.partitions):
                grown_from = len(topic.partitions)
                topic.partitions.extend([None] * (info.partitions - grown_from))
                self.version += 1
                for listener in self.listeners:
                    listener.on_partitions_added(name, dict.fromkeys(range(grown_from, info.partitions), 0))
                changed = True
            if info.configs != topic.configs:
                topic.configs = dict(info.configs)
                segment_bytes = self._segment_bytes(topic.configs)
                for partition in topic.logs():
                    partition.segment_bytes = segment_bytes
                changed = True
        if changed:
            self.version += 1
        return changed

    def _remove(self, name: str) -> None:
        topic = self.topics.pop(name)
        self._by_id.pop(topic.topic_id, None)
        self.version += 1
        for index, partition in enumerate(topic.partitions):
            if partition is not None:
                partition.close()
            directory = partition_dir(self.data_dir, name, index)
            if self.fs.exists(directory):
                self.fs.remove_tree(directory)
        log.info("topic %s is gone", name)
        for listener in self.listeners:
            listener.on_topic_deleted(name)

    # ---------------------------------------------------------------- local logs

    def hold(self, name: str, index: int) -> PartitionLog | None:
        """Open (creating if needed) this node's log of a partition; None if the topic is unknown."""
        topic = self.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        existing = topic.partitions[index]
        if existing is None:
            existing = topic.partitions[index] = self._open_partition(name, index, topic.configs)
        return existing

    def release(self, name: str, index: int) -> None:
        """Close this node's log of a partition and delete it: another node holds it now."""
        topic = self.topics.get(name)
        if topic is not None and 0 <= index < len(topic.partitions):
            existing = topic.partitions[index]
            topic.partitions[index] = None
            if existing is not None:
                existing.close()
        directory = partition_dir(self.data_dir, name, index)
        if self.fs.exists(directory):
            self.fs.remove_tree(directory)
            self.fs.fsync_directory(self.data_dir)
