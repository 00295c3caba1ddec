"""Committed offsets in memory, laid out compactly, and as columns for the snapshot.

The classic design target is 64 bytes per group/topic/partition/offset entry. A dict of
dataclasses costs about 240. Here each (group, topic) holds two typed arrays indexed by
partition number (partitions are small dense integers): ``values`` pairs each offset with
its commit timestamp (8 bytes each) and ``epochs`` holds the leader epoch (4), 20 bytes
per partition. Metadata strings and explicit expire timestamps are rare, so they live in
small side dicts only when present. A group with one topic (the usual case) maps straight
to that topic's ``TopicOffsets``; only a group with several topics has a dict of them.
``OffsetValue`` objects are built on the way out, never stored.

``dump`` writes the store as the snapshot's offsets section (``storage.
coordinator_snapshot``): per topic the two arrays as they are in memory, so ``load`` builds
each one with a single ``frombytes``.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterator
from typing import TYPE_CHECKING

from protocol.consumer_offsets import OffsetValue

if TYPE_CHECKING:
    from broker.coordinator.records import OffsetCommitRecord

_ABSENT = -(2**63)  # commit timestamp of a partition with no committed offset
MAX_PARTITION = 1 << 20  # a guard against a hostile partition number inflating the arrays


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

    __slots__ = ("_groups",)

    def __init__(self) -> None:
        self._groups: dict[str, GroupOffsets] = {}

    def _find(self, group: str, topic: str) -> TopicOffsets | None:
        entry = self._groups.get(group)
        if entry is None:
            return None
        if isinstance(entry, TopicOffsets):
            return entry if entry.topic == topic else None
        return entry.get(topic)

    def put(self, group: str, topic: str, partition: int, value: OffsetValue) -> None:
        groups = self._groups
        entry = groups.get(group)
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
        records of the same group and topic, as a commit writes them."""
        group = topic = None
        offsets: TopicOffsets | None = None
        for r in records:
            value = r.value
            if value is None:
                self.delete(r.group_id, r.topic, r.partition)
                offsets = None  # the delete may have dropped it
                continue
            if offsets is None or r.group_id != group or r.topic != topic:
                group, topic = r.group_id, r.topic
                self.put(group, topic, r.partition, value)
                offsets = self._find(group, topic)
            else:
                offsets.put(r.partition, value)

    def get(self, group: str, topic: str, partition: int) -> OffsetValue | None:
        offsets = self._find(group, topic)
        return None if offsets is None else offsets.get(partition)

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
            else:
                del entry[topic]
                if not entry:
                    del self._groups[group]
        return True

    def has_group(self, group: str) -> bool:
        return group in self._groups

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def partitions_of(self, group: str) -> list[tuple[str, int]]:
        entry = self._groups.get(group)
        if entry is None:
            return []
        return [(offsets.topic, p) for offsets in _topics(entry) for p in offsets.partitions()]

    def items_of(self, group: str) -> Iterator[tuple[tuple[str, int], OffsetValue]]:
        entry = self._groups.get(group)
        if entry is None:
            return
        for offsets in list(_topics(entry)):
            for p in offsets.partitions():
                value = offsets.get(p)
                assert value is not None
                yield (offsets.topic, p), value

    def count(self) -> int:
        return sum(offsets.count for entry in self._groups.values() for offsets in _topics(entry))

    def snapshot(self) -> dict[str, dict[tuple[str, int], OffsetValue]]:
        """A deep copy, for comparing live state with a replay."""
        return {g: dict(self.items_of(g)) for g in self._groups}

    # ------------------------------------------------------------------ the snapshot's offsets section

    def dump(self, groups_per_part: int = 1000) -> Iterator[list[bytes]]:
        """The offsets section, a list of byte strings per ``groups_per_part`` groups.

        Between two parts the caller may let the store change (the broker hands the event
        loop back): each group is written as it is when its part is made, and a change made
        meanwhile is a record after the snapshot's covered offsets, replayed again at load.

        One entry per group and topic (a group's topics are consecutive): a fixed header
        (``_ENTRY``), the group and topic names, the two arrays as they are in memory, then
        the rare metadata and expire timestamps. An entry with empty names ends the section.
        """
        yield [_ORDER.pack(_NATIVE_ORDER)]
        entries = list(self._groups.items())
        for start in range(0, len(entries), groups_per_part):
            part: list[bytes] = []
            for group, entry in entries[start : start + groups_per_part]:
                name = group.encode()
                for offsets in _topics(entry):
                    if not offsets.count:
                        continue  # deleted since the dump began
                    topic = offsets.topic.encode()
                    metadata = offsets.metadata or {}
                    expire = offsets.expire_ts or {}
                    part += (_ENTRY.pack(len(name), len(topic), len(offsets.epochs), offsets.count, len(metadata),
                                         len(expire)),
                             name, topic, offsets.values.tobytes(), offsets.epochs.tobytes())
                    for p, text in metadata.items():
                        raw = text.encode()
                        part += (_METADATA.pack(p, len(raw)), raw)
                    part += [_EXPIRE.pack(p, ts) for p, ts in expire.items()]
            yield part
        yield [_ENTRY.pack(0, 0, 0, 0, 0, 0)]

    def restore(self, data: memoryview, pos: int = 0) -> int:
        """Fill this empty store with what ``dump`` wrote at ``data[pos:]``; where the section ends.

        Raises ``ValueError`` (or ``struct.error``, ``UnicodeDecodeError``) if the bytes are
        not such a section; the caller has checked the snapshot's checksum already. This is
        the start-up path from a snapshot: one header unpack and two ``frombytes`` per entry.
        """
        groups = self._groups
        if groups:
            raise ValueError("restore into a store that holds offsets")
        (order,) = _ORDER.unpack_from(data, pos)
        pos += _ORDER.size
        swap = order != _NATIVE_ORDER
        names: dict[str, str] = {}  # one str per topic name, shared by every group
        unpack_entry = _ENTRY.unpack_from
        entry_size = _ENTRY.size
        new = TopicOffsets.__new__
        last_group = ""
        while True:
            group_length, topic_length, size, present, metadata_count, expire_count = unpack_entry(data, pos)
            pos += entry_size
            if not group_length:
                return pos
            end = pos + group_length
            group = str(data[pos:end], "utf-8")
            pos, end = end, end + topic_length
            topic = str(data[pos:end], "utf-8")
            topic = names.setdefault(topic, topic)
            if not 0 < present <= size <= MAX_PARTITION:
                raise ValueError(f"bad offsets entry for {group!r}/{topic!r}")
            offsets = new(TopicOffsets)
            offsets.topic = topic
            offsets.count = present
            offsets.metadata = offsets.expire_ts = None
            values = offsets.values = array("q")
            pos, end = end, end + size * 16
            values.frombytes(data[pos:end])
            epochs = offsets.epochs = array("i")
            pos, end = end, end + size * 4
            epochs.frombytes(data[pos:end])
            pos = end
            if len(epochs) != size:
                raise ValueError("offsets section cut short")
            if swap:
                values.byteswap()
                epochs.byteswap()
            if metadata_count:
                metadata = offsets.metadata = {}
                for _ in range(metadata_count):
                    partition, length = _METADATA.unpack_from(data, pos)
                    pos += _METADATA.size
                    metadata[partition] = str(data[pos : pos + length], "utf-8")
                    pos += length
            if expire_count:
                expire = offsets.expire_ts = {}
                for _ in range(expire_count):
                    partition, ts = _EXPIRE.unpack_from(data, pos)
                    pos += _EXPIRE.size
                    expire[partition] = ts
            if group != last_group:
                if group in groups:
                    raise ValueError(f"group {group!r} twice in the offsets section")
                groups[group] = offsets
                last_group = group
                continue
            existing = groups[group]  # another topic of the same group
            if isinstance(existing, TopicOffsets):
                if existing.topic == topic:
                    raise ValueError(f"{group!r}/{topic!r} twice in the offsets section")
                groups[group] = {existing.topic: existing, topic: offsets}
            elif topic in existing:
                raise ValueError(f"{group!r}/{topic!r} twice in the offsets section")
            else:
                existing[topic] = offsets


# The offsets section's framing: little-endian, whatever the machine; the arrays are in the
# byte order the header names (the writer's), swapped at load on a machine of the other order.
_ORDER = struct.Struct("<B")
_NATIVE_ORDER = 1 if sys.byteorder == "little" else 2
#: group name length, topic name length, array size, offsets present, metadata entries, expire entries
_ENTRY = struct.Struct("<HHIIII")
_METADATA = struct.Struct("<II")  # partition, UTF-8 length
_EXPIRE = struct.Struct("<Iq")  # partition, expire timestamp
