"""The topic catalogue: which topics exist, their ids, partitions and configs.

The catalogue lives in ``topics.json`` in the data directory, replaced atomically
(write, fsync, rename, fsync the directory). Each partition is a ``PartitionLog`` in
``<data-dir>/<topic>-<partition>/``, the same segment engine as the coordinator log (paths
from ``storage.layout``, file operations through ``storage.fs``). If ``topics.json`` cannot
be written the broker stops (``on_storage_failure``): the change is not acknowledged.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from broker.coordinator.modern.topics import TopicMetadata
from broker.topic_configs import (
    BrokerDefaults,
    ConfigValueError,
    Resolved,
    canonical_value,
    resolve,
)
from protocol.errors import ErrorCode
from storage.fs import REAL_FS, FileSystem
from storage.layout import COORDINATOR_TOPIC, partition_dir, topics_file
from storage.partition import PartitionLog

log = logging.getLogger("kcoord.topics")

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
INTERNAL_TOPIC = COORDINATOR_TOPIC

def validate_topic_name(name: str | None) -> str | None:
    """Kafka's topic name rules; returns why a name is invalid, or None."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_NAME_LENGTH:
        return f"topic name is longer than {MAX_NAME_LENGTH} characters"
    if not _LEGAL.fullmatch(name):
        return f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def validate_topic_config(name: str, value: str | None) -> str | None:
    """Why a topic config cannot be set to ``value`` (Kafka's message), or None."""
    try:
        canonical_value(name, value)
    except ConfigValueError as exc:
        return str(exc)
    return None


def validate_topic_configs(configs: Mapping[str, str | None]) -> tuple[dict[str, str], str | None]:
    """Every config canonical, or the first problem (an INVALID_CONFIG message)."""
    clean: dict[str, str] = {}
    for key, value in configs.items():
        try:
            clean[key] = canonical_value(key, value)
        except ConfigValueError as exc:
            return {}, str(exc)
    return clean, None


class TopicListener(Protocol):
    """Told of topic changes as they happen (Kafka's onPartitionsDeleted and its kin).

    Called synchronously, before the request that made the change is answered, so whatever
    the listener records can be made durable before the client hears of the change.
    """

    def on_partitions_added(self, topic: str, start_offsets: dict[int, int]) -> None: ...

    def on_topic_deleted(self, topic: str) -> None: ...


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    #: The topic's own overrides (what topics.json keeps), canonical strings.
    configs: dict[str, str]
    #: Each partition's log; None where this node holds none (in a cluster, a partition led elsewhere).
    partitions: list[PartitionLog | None] = field(default_factory=list)
    #: The broker's topic defaults (log.retention.hours and kin), for configs not overridden.
    defaults: BrokerDefaults = field(default_factory=lambda: BrokerDefaults({}, frozenset()))

    def config(self, name: str) -> str:
        """The effective value: the override, else the broker's synonym, else Kafka's default."""
        return resolve(name, self.configs, self.defaults).value

    def resolved(self, name: str) -> Resolved:
        return resolve(name, self.configs, self.defaults)

    def logs(self) -> list[PartitionLog]:
        """The logs this node holds (every partition's, on a single node)."""
        return [log for log in self.partitions if log is not None]

    @property
    def policies(self) -> set[str]:
        return set(self.config("cleanup.policy").split(","))


def _raise(what: str, error: OSError) -> None:
    log.error("%s failed: %s", what, error)
    raise error


class TopicCatalog:
    def __init__(self, data_dir: Path, config: Any, fs: FileSystem = REAL_FS) -> None:
        self.data_dir = Path(data_dir)
        self.config = config
        self.fs = fs
        self.topics: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        self.on_storage_failure: Callable[[str, OSError], None] = _raise
        self.stopped = False  # a write failed: the catalogue changes nothing any more
        self.listeners: list[TopicListener] = []
        #: Grows with every topic created, deleted or grown: the coordinator's metadata image version.
        self.version = 0
        self.defaults = BrokerDefaults(config, getattr(config, "explicit", frozenset()))
        self._load()

    @property
    def _file(self) -> Path:
        return topics_file(self.data_dir)

    def _open_partition(self, name: str, index: int, configs: dict[str, str]) -> PartitionLog:
        return PartitionLog.open(partition_dir(self.data_dir, name, index), self._segment_bytes(configs), fs=self.fs)

    def _segment_bytes(self, configs: dict[str, str]) -> int:
        return int(resolve("segment.bytes", configs, self.defaults).value)

    def _load(self) -> None:
        if not self.fs.exists(self._file):
            return
        saved = json.loads(self.fs.read_bytes(self._file))
        for entry in saved["topics"]:
            topic = Topic(entry["name"], uuid.UUID(entry["id"]), dict(entry["configs"]), defaults=self.defaults)
            for p in range(entry["partitions"]):
                topic.partitions.append(self._open_partition(topic.name, p, topic.configs))
            self.topics[topic.name] = topic
            self._by_id[topic.topic_id] = topic

    def _persist(self) -> bool:
        """Write the catalogue; False (the broker is stopping) if that failed."""
        data = {
            "topics": [
                {"name": t.name, "id": str(t.topic_id), "partitions": len(t.partitions), "configs": t.configs}
                for t in self.topics.values()
            ]
        }
        try:
            self.fs.write_atomically(self._file, json.dumps(data, indent=1).encode())
        except OSError as exc:
            self._failed(f"writing {self._file}", exc)
            return False
        return True

    def _failed(self, what: str, exc: OSError) -> None:
        self.stopped = True
        self.on_storage_failure(what, exc)

    def _stopped_error(self) -> tuple[ErrorCode, str]:
        return ErrorCode.KAFKA_STORAGE_ERROR, "the broker is stopping after a storage failure"

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def partition(self, name: str, index: int) -> PartitionLog | None:
        topic = self.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def partition_exists(self, name: str, index: int) -> bool:
        """The partition exists (in a cluster, wherever its log is)."""
        topic = self.topics.get(name)
        return topic is not None and 0 <= index < len(topic.partitions)

    def partitions_of(self, name: str) -> range:
        """The partition indexes of the topic (none if there is no such topic)."""
        topic = self.topics.get(name)
        return range(len(topic.partitions) if topic is not None else 0)

    def create(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str | None],
        validate_only: bool = False,
    ) -> tuple[ErrorCode, str | None, Topic | None]:
        """Create a topic with Kafka's validation; (error, message, topic)."""
        problem = validate_topic_name(name)
        if problem is not None or name == INTERNAL_TOPIC:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, problem or f"{name} is reserved", None
        if name in self.topics:
            return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists", None
        if num_partitions == -1:
            num_partitions = self.config["num.partitions"]
        if num_partitions <= 0:
            return ErrorCode.INVALID_PARTITIONS, "number of partitions must be larger than 0", None
        if replication_factor not in (-1, 1):
            return (ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"replication factor {replication_factor} is larger than the 1 available broker", None)
        clean, problem = validate_topic_configs(configs)
        if problem is not None:
            return ErrorCode.INVALID_CONFIG, problem, None
        topic = Topic(name, uuid.uuid4(), clean, defaults=self.defaults)
        if validate_only:
            topic.partitions = []
            return ErrorCode.NONE, None, topic
        if self.stopped:
            return *self._stopped_error(), None
        try:
            for p in range(num_partitions):
                topic.partitions.append(self._open_partition(name, p, clean))
        except OSError as exc:
            self._failed(f"creating the partitions of {name}", exc)
            return *self._stopped_error(), None
        self.topics[name] = topic
        self._by_id[topic.topic_id] = topic
        if not self._persist():
            return *self._stopped_error(), None
        self.version += 1
        log.info("created topic %s with %d partitions", name, num_partitions)
        return ErrorCode.NONE, None, topic

    def delete(self, name: str) -> Topic | None:
        """Remove a topic and its data; the catalogue is rewritten before files go."""
        if self.stopped:
            return None
        topic = self.topics.pop(name, None)
        if topic is None:
            return None
        self._by_id.pop(topic.topic_id, None)
        if not self._persist():
            return None
        self.version += 1
        for index, partition in enumerate(topic.partitions):
            if partition is not None:
                partition.close()
                self.fs.remove_tree(partition_dir(self.data_dir, name, index))
        try:
            self.fs.fsync_directory(self.data_dir)
        except OSError as exc:
            self._failed(f"fsync of {self.data_dir}", exc)
        log.info("deleted topic %s", name)
        for listener in self.listeners:
            listener.on_topic_deleted(name)
        return topic

    def add_partitions(self, name: str, count: int, validate_only: bool = False) -> tuple[ErrorCode, str | None]:
        """Grow a topic to ``count`` partitions (Kafka never shrinks one)."""
        topic = self.topics.get(name)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
        current = len(topic.partitions)
        if count < current:
            return (ErrorCode.INVALID_PARTITIONS,
                    f"topic currently has {current} partitions, which is higher than the requested {count}")
        if count == current:
            return ErrorCode.INVALID_PARTITIONS, f"topic already has {current} partitions"
        if validate_only:
            return ErrorCode.NONE, None
        if self.stopped:
            return self._stopped_error()
        try:
            for index in range(current, count):
                topic.partitions.append(self._open_partition(name, index, topic.configs))
        except OSError as exc:
            self._failed(f"creating the partitions of {name}", exc)
            return self._stopped_error()
        if not self._persist():
            return self._stopped_error()
        self.version += 1
        log.info("topic %s grew from %d to %d partitions", name, current, count)
        starts = {index: plog.log_start_offset if (plog := topic.partitions[index]) is not None else 0
                  for index in range(current, count)}
        for listener in self.listeners:
            listener.on_partitions_added(name, starts)
        return ErrorCode.NONE, None

    # --- what the group coordinator may ask (broker.coordinator.modern.topics.MetadataImage)

    def topic_metadata(self, name: str) -> TopicMetadata | None:
        topic = self.topics.get(name)
        return None if topic is None else TopicMetadata(topic.topic_id, name, len(topic.partitions))

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self._by_id.get(topic_id)
        return None if topic is None else topic.name

    def topic_names(self) -> list[str]:
        return list(self.topics)
    def alter_configs(self, name: str, overrides: dict[str, str]) -> tuple[ErrorCode, str | None]:
        """Replace a topic's config overrides (validated, canonical); they apply at once.

        The new segment size applies to the next roll; retention, cleanup policy,
        compression and the produce checks read the topic's configs on every use.
        """
        topic = self.topics.get(name)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
        if self.stopped:
            return self._stopped_error()
        before = topic.configs
        topic.configs = dict(overrides)
        if not self._persist():
            topic.configs = before
            return self._stopped_error()
        segment_bytes = self._segment_bytes(topic.configs)
        for partition in topic.logs():
            partition.segment_bytes = segment_bytes
        changed = sorted(set(before.items()) ^ set(overrides.items()))
        if changed:
            described = ", ".join(
                f"{key}={overrides.get(key, '(default)')} (was {before.get(key, '(default)')})"
                for key in sorted({key for key, _ in changed}))
            log.info("altered configs of topic %s: %s", name, described)
        return ErrorCode.NONE, None

    def flush(self) -> None:
        for topic in self.topics.values():
            for partition in topic.logs():
                partition.flush()

    def close(self) -> None:
        for topic in self.topics.values():
            for partition in topic.logs():
                partition.close()
