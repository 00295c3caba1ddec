"""Committed offsets in memory, laid out compactly, and as columns for the snapshot.

The classic design target is 64 bytes per group/topic/partition/offset entry. A dict of
dataclasses costs about 240. Here each (group, topic) holds two typed arrays indexed by
partition number (partitions are small dense integers): ``values`` pairs each offset with
its commit timestamp (8 bytes each) and ``epochs`` holds the leader epoch (4), 20 bytes
per partition. Metadata strings and explicit expire timestamps are rare, so they live in
small side dicts only when present. A group with one topic (the usual case) maps straight
to that topic's ``TopicOffsets``; only a group with several topics has a dict of them.
``OffsetValue`` objects are built on the way out, never stored.

``dump`` writes the store as the snapshot's offsets section and ``restore`` adopts one
(``offset_columns``): loading keeps the section's columns whole and leaves each group
there until it is first used, so start-up costs the snapshot's bytes, not a Python step
per offset. A group still in the columns is an ``int`` in ``_groups`` (its index there).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from broker.coordinator.offset_columns import MAX_PARTITION, ChunkWriter, Columns, EntryImage, load_columns
from broker.coordinator.requests import FetchedPartition
from protocol.consumer_offsets import OffsetValue
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.coordinator.records import OffsetCommitRecord

__all__ = ["MAX_PARTITION", "OffsetStore", "TopicOffsets"]

_ABSENT = -(2**63)  # commit timestamp of a partition with no committed offset
_NONE = ErrorCode.NONE


class TopicOffsets:
    """Offsets of one group for one topic."""

    __slots__ = ("count", "epochs", "expire_ts", "metadata", "topic", "values")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        #: offset and commit timestamp of partition p at 2p and 2p + 1 (_ABSENT: none committed).
        self.values = array("q")
        self.epochs = array("i")
        self.metadata: dict[int, str] | None = None
        self.expire_ts: dict[int, int] | None = None
        self.count = 0

    def _grow(self, partition: int) -> None:
        missing = partition + 1 - len(self.epochs)
        if missing > 0:
            self.values.extend((0, _ABSENT) * missing)
            self.epochs.extend((-1,) * missing)

    def put(self, partition: int, value: OffsetValue) -> None:
        if partition >= len(self.epochs):
            if not 0 <= partition < MAX_PARTITION:
                raise ValueError(f"partition {partition} out of range")
            self._grow(partition)
        elif partition < 0:
            raise ValueError(f"partition {partition} out of range")
        values = self.values
        at = partition * 2
        if values[at + 1] == _ABSENT:
            self.count += 1
        values[at] = value.offset
        commit_ts = value.commit_timestamp
        values[at + 1] = commit_ts if commit_ts != _ABSENT else _ABSENT + 1
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

    def has(self, partition: int) -> bool:
        return 0 <= partition < len(self.epochs) and self.values[partition * 2 + 1] != _ABSENT

    def fetched(self, partitions: tuple[int, ...]) -> tuple[FetchedPartition, ...]:
        """What an OffsetFetch answers for these partitions (offset -1 where none is
        committed), read straight from the arrays: no ``OffsetValue`` on the way."""
        values, epochs, metadata = self.values, self.epochs, self.metadata
        known = len(epochs)
        new = tuple.__new__
        out = []
        for p in partitions:
            if 0 <= p < known and values[2 * p + 1] != _ABSENT:
                out.append(new(FetchedPartition, (p, values[2 * p], epochs[p],
                                                  metadata.get(p, "") if metadata else "", _NONE)))
            else:
                out.append(new(FetchedPartition, (p, -1, -1, "", _NONE)))
        return tuple(out)

    def get(self, partition: int) -> OffsetValue | None:
        if not 0 <= partition < len(self.epochs):
            return None
        at = partition * 2
        commit_ts = self.values[at + 1]
        if commit_ts == _ABSENT:
            return None
        return OffsetValue(
            offset=self.values[at],
            leader_epoch=self.epochs[partition],
            metadata=self.metadata.get(partition, "") if self.metadata else "",
            commit_timestamp=commit_ts,
            expire_timestamp=self.expire_ts.get(partition, -1) if self.expire_ts else -1,
        )

    def delete(self, partition: int) -> bool:
        if not self.has(partition):
            return False
        self.values[partition * 2 + 1] = _ABSENT
        self.count -= 1
        if self.metadata:
            self.metadata.pop(partition, None)
        if self.expire_ts:
            self.expire_ts.pop(partition, None)
        return True

    def partitions(self) -> Iterator[int]:
        values = self.values
        return (p for p in range(len(self.epochs)) if values[p * 2 + 1] != _ABSENT)


#: A group's offsets: its one topic's, or (several topics) a dict of them by topic.
GroupOffsets = TopicOffsets | dict[str, TopicOffsets]


def _topics(entry: GroupOffsets) -> Iterator[TopicOffsets]:
    if isinstance(entry, TopicOffsets):
        yield entry
    else:
        yield from entry.values()


class OffsetStore:
    """The latest committed offset per group/topic/partition (what replay of the log yields)."""

    __slots__ = ("_columns", "_columns_groups", "_columns_offsets", "_columns_slots", "_groups", "_topic_names")

    def __init__(self) -> None:
        #: A group's offsets, or (a group not used since ``restore``) its index in ``_columns``.
        self._groups: dict[str, GroupOffsets | int] = {}
        self._columns: Columns | None = None
        self._columns_groups = 0  # groups still only in the columns
        self._columns_offsets = 0  # their committed offsets
        self._columns_slots = 0  # their slots: what the columns hold that is still used
        self._topic_names: dict[str, str] = {}  # one str per topic name taken out of the columns

    def _entry(self, group: str) -> GroupOffsets | None:
        entry = self._groups.get(group)
        if isinstance(entry, int):
            return self._take_out(group, entry)
        return entry

    def _take_out(self, group: str, index: int, free_when_mostly_copied: bool = True) -> GroupOffsets:
        """A group's first use since ``restore``: its slices of the columns become its own arrays."""
        columns = self._columns
        assert columns is not None
        found: list[TopicOffsets] = []
        for topic, count, values, epochs, metadata, expire in columns.entries(index, self._topic_names):
            offsets = TopicOffsets.__new__(TopicOffsets)
            offsets.topic, offsets.count, offsets.values, offsets.epochs = topic, count, values, epochs
            offsets.metadata, offsets.expire_ts = metadata, expire
            found.append(offsets)
        entry: GroupOffsets = found[0] if len(found) == 1 else {offsets.topic: offsets for offsets in found}
        self._groups[group] = entry
        self._columns_groups -= 1
        self._columns_offsets -= sum(offsets.count for offsets in found)
        self._columns_slots -= columns.group_slots(index)
        if not self._columns_groups:
            self._columns = None
        elif free_when_mostly_copied and self._columns_slots * 2 < columns.slots:
            # Most of the columns are copies now: take the rest out too and free them, so
            # memory stays within what the store holds (once, as a store's use spreads).
            for other, entry_or_index in list(self._groups.items()):
                if isinstance(entry_or_index, int):
                    self._take_out(other, entry_or_index, free_when_mostly_copied=False)
        return entry

    def _find(self, group: str, topic: str) -> TopicOffsets | None:
        entry = self._entry(group)
        if entry is None:
            return None
        if isinstance(entry, TopicOffsets):
            return entry if entry.topic == topic else None
        return entry.get(topic)

    def put(self, group: str, topic: str, partition: int, value: OffsetValue) -> None:
        groups = self._groups
        entry = self._entry(group)
        if entry is None:
            offsets = TopicOffsets(topic)
            offsets.put(partition, value)  # raises before anything is stored
            groups[group] = offsets
            return
        if isinstance(entry, TopicOffsets):
            if entry.topic == topic:
                entry.put(partition, value)
                return
            offsets = TopicOffsets(topic)
            offsets.put(partition, value)
            groups[group] = {entry.topic: entry, topic: offsets}
            return
        offsets_or_none = entry.get(topic)
        if offsets_or_none is None:
            offsets = TopicOffsets(topic)
            offsets.put(partition, value)
            entry[topic] = offsets
            return
        offsets_or_none.put(partition, value)

    def put_records(self, records: list[OffsetCommitRecord]) -> None:
        """``put`` (or ``delete``, for a tombstone) of each record in turn; one lookup per run of
        records of the same group and topic, as a commit writes them.

        ``TopicOffsets.put`` is written out here for a partition the arrays already hold:
        this runs once per committed offset, and a call per offset cost more than the
        lines it saves. Anything else (a partition to grow into or to refuse) goes to it.
        """
        group = topic = None
        offsets: TopicOffsets | None = None
        for group_id, topic_name, partition, value in records:
            if value is None:
                self.delete(group_id, topic_name, partition)
                offsets = None  # the delete may have dropped it
                continue
            if offsets is None or topic_name != topic or group_id != group:
                group, topic = group_id, topic_name
                offsets = self._find(group, topic)
                if offsets is None:  # the group's first offset of this topic
                    self.put(group, topic, partition, value)
                    offsets = cast(TopicOffsets, self._find(group, topic))
                    values, epochs = offsets.values, offsets.epochs
                    continue
                values, epochs = offsets.values, offsets.epochs
            if not 0 <= partition < len(epochs):
                offsets.put(partition, value)
                continue
            at = partition * 2
            if values[at + 1] == _ABSENT:
                offsets.count += 1
            values[at] = value.offset
            commit_ts = value.commit_timestamp
            values[at + 1] = commit_ts if commit_ts != _ABSENT else _ABSENT + 1
            epochs[partition] = value.leader_epoch
            if value.metadata:
                if offsets.metadata is None:
                    offsets.metadata = {}
                offsets.metadata[partition] = value.metadata
            elif offsets.metadata:
                offsets.metadata.pop(partition, None)
            if value.expire_timestamp >= 0:
                if offsets.expire_ts is None:
                    offsets.expire_ts = {}
                offsets.expire_ts[partition] = value.expire_timestamp
            elif offsets.expire_ts:
                offsets.expire_ts.pop(partition, None)

    def get(self, group: str, topic: str, partition: int) -> OffsetValue | None:
        offsets = self._find(group, topic)
        return None if offsets is None else offsets.get(partition)

    def fetched(self, group: str, topic: str, partitions: tuple[int, ...]) -> tuple[FetchedPartition, ...]:
        """``TopicOffsets.fetched`` of the group's offsets of ``topic``, one lookup for all."""
        offsets = self._find(group, topic)
        if offsets is None:
            new = tuple.__new__
            return tuple(new(FetchedPartition, (p, -1, -1, "", _NONE)) for p in partitions)
        return offsets.fetched(partitions)

    def offset_of(self, group: str, topic: str, partition: int) -> int:
        """The committed offset alone (-1 if none), without building an ``OffsetValue``."""
        offsets = self._find(group, topic)
        if offsets is None or not offsets.has(partition):
            return -1
        return offsets.values[partition * 2]

    def delete(self, group: str, topic: str, partition: int) -> bool:
        offsets = self._find(group, topic)
        if offsets is None or not offsets.delete(partition):
            return False
        if offsets.count == 0:
            entry = self._groups[group]
            if isinstance(entry, TopicOffsets):
                del self._groups[group]
            elif isinstance(entry, dict):
                del entry[topic]
                if not entry:
                    del self._groups[group]
        return True

    def has_group(self, group: str) -> bool:
        return group in self._groups

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def partitions_of(self, group: str) -> list[tuple[str, int]]:
        entry = self._entry(group)
        if entry is None:
            return []
        return [(offsets.topic, p) for offsets in _topics(entry) for p in offsets.partitions()]

    def items_of(self, group: str) -> Iterator[tuple[tuple[str, int], OffsetValue]]:
        entry = self._entry(group)
        if entry is None:
            return
        for offsets in list(_topics(entry)):
            for p in offsets.partitions():
                value = offsets.get(p)
                assert value is not None
                yield (offsets.topic, p), value

    def count(self) -> int:
        return self._columns_offsets + sum(
            offsets.count for entry in self._groups.values() if not isinstance(entry, int) for offsets in _topics(entry))

    def snapshot(self) -> dict[str, dict[tuple[str, int], OffsetValue]]:
        """A deep copy, for comparing live state with a replay."""
        return {g: dict(self.items_of(g)) for g in list(self._groups)}

    # ------------------------------------------------------------------ the snapshot's offsets section

    def dump(self, groups_per_part: int = 1000) -> Iterator[list[bytes]]:
        """The offsets section (``offset_columns``), a list of byte strings per ``groups_per_part`` groups.

        Between two parts the caller may let the store change (the broker hands the event
        loop back): each group is written as it is when its part is made, and a change made
        meanwhile is a record after the snapshot's covered offsets, replayed again at load.
        A group still in the loaded columns is copied from them as it stands.
        """
        writer = ChunkWriter()
        yield [writer.start()]
        names = list(self._groups)
        for start in range(0, len(names), groups_per_part):
            for group in names[start : start + groups_per_part]:
                entry = self._groups.get(group)
                if entry is None:
                    continue  # deleted since the dump began
                if isinstance(entry, int):
                    assert self._columns is not None
                    writer.add_columns(group, self._columns, entry)
                else:
                    writer.add_group(group, [_image(offsets) for offsets in _topics(entry)])
            part = writer.chunk()
            if part:
                yield part
        yield [writer.end()]

    def restore(self, data: memoryview, pos: int = 0) -> int:
        """Adopt the section ``dump`` wrote at ``data[pos:]`` into this empty store; where it ends.

        Raises ``ValueError`` (or ``struct.error``, ``UnicodeDecodeError``) if the bytes are
        not such a section; the caller has checked the snapshot's checksum already. This is
        the start-up path from a snapshot: the columns are taken whole and every group stays
        in them until it is first used.
        """
        if self._groups:
            raise ValueError("restore into a store that holds offsets")
        columns, index, end = load_columns(data, pos)
        if index:
            self._groups = cast("dict[str, GroupOffsets | int]", index)  # every group still in the columns
            self._columns = columns
            self._columns_groups = len(index)
            self._columns_offsets = sum(columns.counts)
            self._columns_slots = columns.slots
        return end


def _image(offsets: TopicOffsets) -> EntryImage:
    return (offsets.topic, offsets.count, offsets.values, offsets.epochs, offsets.metadata, offsets.expire_ts)
