"""Committed offsets in memory, laid out compactly.

The classic design target is 64 bytes per group/topic/partition/offset entry. A dict of
dataclasses costs about 240. Here each (group, topic) holds parallel typed arrays indexed
by partition number (partitions are small dense integers): offset and commit timestamp
(8 bytes each) and leader epoch (4), about 20 bytes per partition. Metadata strings and
explicit expire timestamps are rare, so they live in small side dicts only when present.
``OffsetValue`` objects are built on the way out, never stored.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

from protocol.consumer_offsets import OffsetValue

_ABSENT = -(2**63)  # commit timestamp of a partition with no committed offset
MAX_PARTITION = 1 << 20  # a guard against a hostile partition number inflating the arrays


class TopicOffsets:
    """Offsets of one group for one topic."""

    __slots__ = ("commit_ts", "count", "epochs", "expire_ts", "metadata", "offsets")

    def __init__(self) -> None:
        self.offsets = array("q")
        self.commit_ts = array("q")
        self.epochs = array("i")
        self.metadata: dict[int, str] | None = None
        self.expire_ts: dict[int, int] | None = None
        self.count = 0

    def _grow(self, partition: int) -> None:
        missing = partition + 1 - len(self.offsets)
        if missing > 0:
            self.offsets.extend([0] * missing)
            self.commit_ts.extend([_ABSENT] * missing)
            self.epochs.extend([-1] * missing)

    def put(self, partition: int, value: OffsetValue) -> None:
        if partition >= len(self.offsets):
            if not 0 <= partition < MAX_PARTITION:
                raise ValueError(f"partition {partition} out of range")
            self._grow(partition)
        elif partition < 0:
            raise ValueError(f"partition {partition} out of range")
        if self.commit_ts[partition] == _ABSENT:
            self.count += 1
        self.offsets[partition] = value.offset
        self.commit_ts[partition] = value.commit_timestamp if value.commit_timestamp != _ABSENT else _ABSENT + 1
        self.epochs[partition] = value.leader_epoch
        if value.metadata:
            if self.metadata is None:
                self.metadata = {}
            self.metadata[partition] = value.metadata
        elif self.metadata:
            self.metadata.pop(partition, None)
        if value.expire_timestamp >= 0:
            if self.expire_ts is None:
                self.expire_ts = {}
            self.expire_ts[partition] = value.expire_timestamp
        elif self.expire_ts:
            self.expire_ts.pop(partition, None)

    def get(self, partition: int) -> OffsetValue | None:
        if not 0 <= partition < len(self.offsets) or self.commit_ts[partition] == _ABSENT:
            return None
        return OffsetValue(
            offset=self.offsets[partition],
            leader_epoch=self.epochs[partition],
            metadata=self.metadata.get(partition, "") if self.metadata else "",
            commit_timestamp=self.commit_ts[partition],
            expire_timestamp=self.expire_ts.get(partition, -1) if self.expire_ts else -1,
        )

    def delete(self, partition: int) -> bool:
        if not 0 <= partition < len(self.offsets) or self.commit_ts[partition] == _ABSENT:
            return False
        self.commit_ts[partition] = _ABSENT
        self.count -= 1
        if self.metadata:
            self.metadata.pop(partition, None)
        if self.expire_ts:
            self.expire_ts.pop(partition, None)
        return True

    def partitions(self) -> Iterator[int]:
        commit_ts = self.commit_ts
        return (p for p in range(len(commit_ts)) if commit_ts[p] != _ABSENT)


class OffsetStore:
    """The latest committed offset per group/topic/partition (what replay of the log yields)."""

    __slots__ = ("_groups",)

    def __init__(self) -> None:
        self._groups: dict[str, dict[str, TopicOffsets]] = {}

    def put(self, group: str, topic: str, partition: int, value: OffsetValue) -> None:
        topics = self._groups.get(group)
        if topics is None:
            topics = self._groups[group] = {}
        offsets = topics.get(topic)
        if offsets is None:
            offsets = topics[topic] = TopicOffsets()
        offsets.put(partition, value)

    def get(self, group: str, topic: str, partition: int) -> OffsetValue | None:
        topics = self._groups.get(group)
        if topics is None:
            return None
        offsets = topics.get(topic)
        return None if offsets is None else offsets.get(partition)

    def offset_of(self, group: str, topic: str, partition: int) -> int:
        """The committed offset alone (-1 if none), without building an ``OffsetValue``."""
        topics = self._groups.get(group)
        if topics is None:
            return -1
        offsets = topics.get(topic)
        if offsets is None or not 0 <= partition < len(offsets.offsets) or offsets.commit_ts[partition] == _ABSENT:
            return -1
        return offsets.offsets[partition]

    def delete(self, group: str, topic: str, partition: int) -> bool:
        topics = self._groups.get(group)
        if topics is None:
            return False
        offsets = topics.get(topic)
        if offsets is None or not offsets.delete(partition):
            return False
        if offsets.count == 0:
            del topics[topic]
            if not topics:
                del self._groups[group]
        return True

    def has_group(self, group: str) -> bool:
        return group in self._groups

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def partitions_of(self, group: str) -> list[tuple[str, int]]:
        return [(topic, p) for topic, offsets in self._groups.get(group, {}).items()
                for p in offsets.partitions()]

    def items_of(self, group: str) -> Iterator[tuple[tuple[str, int], OffsetValue]]:
        for topic, offsets in self._groups.get(group, {}).items():
            for p in offsets.partitions():
                value = offsets.get(p)
                assert value is not None
                yield (topic, p), value

    def count(self) -> int:
        return sum(o.count for topics in self._groups.values() for o in topics.values())

    def snapshot(self) -> dict[str, dict[tuple[str, int], OffsetValue]]:
        """A deep copy, for comparing live state with a replay."""
        return {g: dict(self.items_of(g)) for g in self._groups}
