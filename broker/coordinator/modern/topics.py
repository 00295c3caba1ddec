"""The topic metadata a modern group's assignment is computed from (Kafka's TopicMetadata).

A group records, for every topic its members subscribe to, the topic's id, name and
partition count (the ConsumerGroupPartitionMetadata record). When any of them changes the
group epoch is bumped and a new target assignment is computed. ``MetadataImage`` is what
the coordinator may ask of the broker's topic catalogue.
"""

from __future__ import annotations

import uuid
from collections.abc import Container, Iterable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


class MetadataImage(Protocol):
    """The topics the broker knows, as the coordinator sees them.

    ``version`` grows whenever a topic is created, deleted or gains partitions, so a group
    knows to look at its subscriptions again.
    """

    @property
    def version(self) -> int: ...

    def partition_exists(self, topic: str, partition: int) -> bool: ...

    def partitions_of(self, topic: str) -> Container[int]:
        """The topic's partition indexes, 0..n-1 (none if the topic is unknown)."""
        ...

    def topic_metadata(self, name: str) -> TopicMetadata | None: ...

    def topic_name(self, topic_id: uuid.UUID) -> str | None: ...

    def topic_names(self) -> Iterable[str]: ...


@dataclass
class StaticImage:
    """A fixed set of topics: for tests, and for a shard without a broker around it."""

    topics: dict[str, TopicMetadata]
    version: int = 0

    def set_partitions(self, name: str, count: int) -> None:
        """Create a topic or change its partition count (tests move the image on with this)."""
        old = self.topics.get(name)
        topic_id = old.topic_id if old is not None else uuid.uuid5(uuid.NAMESPACE_URL, name)
        self.topics[name] = TopicMetadata(topic_id, name, count)
        self.version += 1

    def delete(self, name: str) -> None:
        self.topics.pop(name, None)
        self.version += 1

    @classmethod
    def of(cls, partitions: dict[str, int]) -> StaticImage:
        return cls({name: TopicMetadata(uuid.uuid5(uuid.NAMESPACE_URL, name), name, count)
                    for name, count in partitions.items()})

    def partition_exists(self, topic: str, partition: int) -> bool:
        meta = self.topics.get(topic)
        return meta is not None and 0 <= partition < meta.num_partitions

    def partitions_of(self, topic: str) -> range:
        meta = self.topics.get(topic)
        return range(meta.num_partitions if meta is not None else 0)

    def topic_metadata(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        for meta in self.topics.values():
            if meta.topic_id == topic_id:
                return meta.name
        return None

    def topic_names(self) -> Iterable[str]:
        return list(self.topics)
