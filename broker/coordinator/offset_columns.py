"""The snapshot's offsets section as columns: written a part at a time, loaded in bulk, read lazily.

Start-up must cost what the snapshot's bytes cost, not a Python step per offset or per
group. So the section is a run of chunks, each a handful of columns (docs/storage.md, "The
coordinator snapshot"), and loading one chunk is a few ``frombytes`` appends of its small
columns onto store-wide arrays, one decode of its group names, and two views of the bytes
read (its values and epochs, nearly all of the section, are never copied at load). Every
position a column holds is already store-wide (the writer counts across chunks), so
nothing is renumbered at load.

What loading builds is ``Columns``: the committed offsets of every group as they were in
the file, with the group names alone turned into Python strings (the store's dict needs
them). ``OffsetStore`` keeps a group there until it is first used and then copies its
slices into its own ``TopicOffsets`` (``entries``); ``OffsetStore.dump`` copies a group it
never touched straight from the columns to the next snapshot (``ChunkWriter.add_columns``).

Columns, per chunk (positions are store-wide ends: an item's start is the previous end):

- group names: UTF-8, with each name's end counted in code points within the chunk;
- per group: the end of its entries (an entry is one group and topic);
- per entry: its topic's UTF-8 bytes (end), its slots (end: one slot per partition up to
  the highest, as ``TopicOffsets`` lays them out), its count of committed offsets, and
  the end of its rare metadata and expire timestamps;
- per slot: committed offset and commit timestamp (i64 pairs), leader epoch (i32).
"""

from __future__ import annotations

import operator
import struct
import sys
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate, chain

__all__ = ["MAX_PARTITION", "ChunkWriter", "Columns", "EntryImage", "load_columns"]

#: The byte order of the section's columns: the writer's, swapped at load on the other kind.
SECTION_ORDER = struct.Struct("<B")
NATIVE_ORDER = 1 if sys.byteorder == "little" else 2
#: groups, entries, slots, then the bytes of the group names, the topic names and the metadata.
_CHUNK = struct.Struct("<IIQQQQ")
_META_COUNTS = struct.Struct("<II")  # metadata entries, expire timestamp entries
_METADATA = struct.Struct("<II")  # partition, UTF-8 length
_EXPIRE = struct.Struct("<Iq")  # partition, expire timestamp

#: A guard against a hostile partition number inflating the arrays (``offset_store`` uses it too).
MAX_PARTITION = 1 << 20

for _code, _size in (("I", 4), ("Q", 8), ("q", 8), ("i", 4)):
    assert array(_code).itemsize == _size, f"array({_code!r}) is not {_size} bytes here"

#: One group-and-topic entry as ``OffsetStore`` builds it: topic, count, values, epochs,
#: metadata by partition, expire timestamps by partition.
EntryImage = tuple[str, int, "array[int]", "array[int]", dict[int, str] | None, dict[int, int] | None]


def encode_meta(metadata: dict[int, str] | None, expire: dict[int, int] | None) -> bytes:
    """An entry's metadata strings and explicit expire timestamps (nothing when it has none)."""
    if not metadata and not expire:
        return b""
    metadata, expire = metadata or {}, expire or {}
    parts = [_META_COUNTS.pack(len(metadata), len(expire))]
    for partition, text in metadata.items():
        raw = text.encode()
        parts += (_METADATA.pack(partition, len(raw)), raw)
    parts += [_EXPIRE.pack(partition, ts) for partition, ts in expire.items()]
    return b"".join(parts)


def decode_meta(data: bytes | bytearray | memoryview) -> tuple[dict[int, str] | None, dict[int, int] | None]:
    """``encode_meta`` read back; ``ValueError`` if it is not that."""
    if not data:
        return None, None
    metadata_count, expire_count = _META_COUNTS.unpack_from(data, 0)
    pos = _META_COUNTS.size
    metadata: dict[int, str] = {}
    for _ in range(metadata_count):
        partition, length = _METADATA.unpack_from(data, pos)
        pos += _METADATA.size
        metadata[partition] = str(data[pos : pos + length], "utf-8")
        pos += length
    expire: dict[int, int] = {}
    for _ in range(expire_count):
        partition, ts = _EXPIRE.unpack_from(data, pos)
        pos += _EXPIRE.size
        expire[partition] = ts
    if pos != len(data):
        raise ValueError("damaged metadata of an offsets entry")
    return metadata or None, expire or None


class Columns:
    """Every group's offsets as the snapshot held them.

    The per-group and per-entry columns are one array each for the whole store. The
    values and leader epochs, nearly all of the bytes, are not copied at all: they stay
    views of the snapshot's bytes, one per chunk, and a group's slices are copied out of
    them when it is taken out (``entries``).
    """

    __slots__ = ("chunk_epochs", "chunk_slots", "chunk_values", "counts", "group_ends", "meta", "meta_ends",
                 "slot_ends", "slots", "swap", "topic_ends", "topics")

    def __init__(self, swap: bool = False) -> None:
        # Each *_ends column starts with a 0, so item i spans ends[i] to ends[i + 1].
        self.group_ends = array("Q", [0])  # entries of each group
        self.topic_ends = array("Q", [0])  # bytes of ``topics`` of each entry
        self.slot_ends = array("Q", [0])  # slots of each entry
        self.meta_ends = array("Q", [0])  # bytes of ``meta`` of each entry
        self.counts = array("I")  # committed offsets of each entry
        self.topics = bytearray()
        self.meta = bytearray()
        self.slots = 0
        self.chunk_slots: list[int] = []  # first slot of each chunk
        self.chunk_values: list[memoryview] = []  # offset and commit timestamp of each slot (16 bytes)
        self.chunk_epochs: list[memoryview] = []  # leader epoch of each slot (4 bytes)
        self.swap = swap  # the values and epochs are of the other byte order

    @property
    def group_count(self) -> int:
        return len(self.group_ends) - 1

    def group_slots(self, group: int) -> int:
        slot_ends, group_ends = self.slot_ends, self.group_ends
        return slot_ends[group_ends[group + 1]] - slot_ends[group_ends[group]]

    def slot_bytes(self, first: int, end: int) -> tuple[memoryview, memoryview]:
        """The values and epochs of slots ``first`` to ``end``, which lie in one chunk."""
        chunk = bisect_right(self.chunk_slots, first) - 1
        start = first - self.chunk_slots[chunk]
        stop = start + end - first
        return self.chunk_values[chunk][16 * start : 16 * stop], self.chunk_epochs[chunk][4 * start : 4 * stop]

    def entries(self, group: int, topic_names: dict[str, str]) -> list[EntryImage]:
        """A group's entries, copied out of the columns (``topic_names`` shares topic strings)."""
        out = []
        topic_ends, slot_ends, meta_ends = self.topic_ends, self.slot_ends, self.meta_ends
        for entry in range(self.group_ends[group], self.group_ends[group + 1]):
            topic = str(self.topics[topic_ends[entry] : topic_ends[entry + 1]], "utf-8")
            raw_values, raw_epochs = self.slot_bytes(slot_ends[entry], slot_ends[entry + 1])
            values, epochs = array("q"), array("i")
            values.frombytes(raw_values)
            epochs.frombytes(raw_epochs)
            if self.swap:
                values.byteswap()
                epochs.byteswap()
            metadata, expire = decode_meta(self.meta[meta_ends[entry] : meta_ends[entry + 1]])
            out.append((topic_names.setdefault(topic, topic), self.counts[entry], values, epochs, metadata, expire))
        return out

    def _check(self, names: Sequence[str], groups: int) -> None:
        """The columns agree with each other: ends rise, and each ends where its data does."""
        le, lt, sub = operator.le, operator.lt, operator.sub
        group_ends, slot_ends = self.group_ends, self.slot_ends
        entries = len(self.counts)
        if len(names) != self.group_count:
            raise ValueError("group columns of the offsets section do not agree")
        if groups != len(names):
            raise ValueError("two groups of the same name in the offsets section")
        if not all(map(lt, group_ends, group_ends[1:])) or group_ends[-1] != entries:
            raise ValueError("group columns of the offsets section do not agree")
        for ends, total in ((self.topic_ends, len(self.topics)), (self.meta_ends, len(self.meta))):
            if len(ends) != entries + 1 or not all(map(le, ends, ends[1:])) or ends[-1] != total:
                raise ValueError("entry columns of the offsets section do not agree")
        if len(slot_ends) != entries + 1 or slot_ends[-1] != self.slots:
            raise ValueError("slot columns of the offsets section do not agree")
        if entries:
            sizes = array("Q", map(sub, slot_ends[1:], slot_ends))
            if min(self.counts) < 1 or not all(map(le, self.counts, sizes)) or max(sizes) > MAX_PARTITION:
                raise ValueError("entry sizes of the offsets section are out of range")

    def _swap(self) -> None:
        for column in (self.group_ends, self.topic_ends, self.slot_ends, self.meta_ends, self.counts):
            column.byteswap()  # the leading 0s stay 0


def load_columns(data: memoryview, pos: int) -> tuple[Columns, dict[str, int], int]:
    """The section at ``data[pos:]``: its columns, each group's index by name, and where it ends.

    Raises ``ValueError`` (or ``struct.error``, ``UnicodeDecodeError``) when the bytes are not
    such a section; the snapshot's checksum was checked before. No step here is per offset
    or per group in Python: small columns are appended whole, names sliced by ``map``, and
    the values and epochs stay where they are in ``data`` (which the columns keep alive).
    """
    (order,) = SECTION_ORDER.unpack_from(data, pos)
    if order not in (1, 2):
        raise ValueError(f"offsets section of byte order {order}")
    pos += SECTION_ORDER.size
    columns = Columns(swap=order != NATIVE_ORDER)
    names: list[str] = []
    size = len(data)
    while True:
        groups, entries, slots, names_size, topics_size, meta_size = _CHUNK.unpack_from(data, pos)
        pos += _CHUNK.size
        if not groups:
            if entries or slots or names_size or topics_size or meta_size:
                raise ValueError("damaged end of the offsets section")
            break
        body = names_size + 12 * groups + topics_size + 28 * entries + meta_size + 20 * slots
        if pos + body > size or not entries or not slots:
            raise ValueError("offsets section cut short")
        text = str(data[pos : pos + names_size], "utf-8")
        pos += names_size
        name_ends = array("I")
        name_ends.frombytes(data[pos : pos + 4 * groups])
        pos += 4 * groups
        if columns.swap:
            name_ends.byteswap()
        if name_ends[-1] != len(text) or not all(map(operator.le, name_ends, name_ends[1:])):
            raise ValueError("group names of the offsets section do not agree")
        names += map(text.__getitem__, map(slice, chain((0,), name_ends), name_ends))
        columns.group_ends.frombytes(data[pos : pos + 8 * groups])
        pos += 8 * groups
        columns.topics += data[pos : pos + topics_size]
        pos += topics_size
        for column in (columns.topic_ends, columns.slot_ends, columns.meta_ends):
            column.frombytes(data[pos : pos + 8 * entries])
            pos += 8 * entries
        columns.counts.frombytes(data[pos : pos + 4 * entries])
        pos += 4 * entries
        columns.meta += data[pos : pos + meta_size]
        pos += meta_size
        columns.chunk_slots.append(columns.slots)
        columns.slots += slots
        columns.chunk_values.append(data[pos : pos + 16 * slots])
        pos += 16 * slots
        columns.chunk_epochs.append(data[pos : pos + 4 * slots])
        pos += 4 * slots
        # A chunk's entries end where its slots do, so no group's slots straddle two chunks.
        last_slot_end = columns.slot_ends[-1]
        if (last_slot_end if not columns.swap else _swapped(last_slot_end)) != columns.slots:
            raise ValueError("slot columns of the offsets section do not agree")
    if columns.swap:
        columns._swap()
    index = dict(zip(names, range(len(names)), strict=True))
    columns._check(names, len(index))
    return columns, index, pos


def _swapped(value: int) -> int:
    return int.from_bytes(value.to_bytes(8, sys.byteorder), "big" if sys.byteorder == "little" else "little")


class ChunkWriter:
    """The section written a chunk at a time; it counts store-wide positions across chunks."""

    def __init__(self) -> None:
        self._entries = self._slots = self._topic_bytes = self._meta_bytes = 0
        self._reset()

    def _reset(self) -> None:
        self._names: list[str] = []
        self._group_ends = array("Q")
        self._topics: list[bytes] = []
        self._topic_ends = array("Q")
        self._slot_ends = array("Q")
        self._counts = array("I")
        self._meta_ends = array("Q")
        self._meta: list[bytes] = []
        self._values: list[bytes] = []
        self._epochs: list[bytes] = []
        self._chunk_slots = 0

    @staticmethod
    def start() -> bytes:
        """What the section begins with: the byte order its columns are written in."""
        return SECTION_ORDER.pack(NATIVE_ORDER)

    def add_group(self, name: str, entries: list[EntryImage]) -> None:
        """A group from the store's own arrays (entries with no offset left are skipped)."""
        entries = [entry for entry in entries if entry[1]]
        if not entries:
            return
        self._names.append(name)
        for topic, count, values, epochs, metadata, expire in entries:
            raw = topic.encode()
            self._topics.append(raw)
            self._topic_bytes += len(raw)
            self._topic_ends.append(self._topic_bytes)
            self._values.append(values.tobytes())
            self._epochs.append(epochs.tobytes())
            self._slots += len(epochs)
            self._chunk_slots += len(epochs)
            self._slot_ends.append(self._slots)
            self._counts.append(count)
            meta = encode_meta(metadata, expire)
            if meta:
                self._meta.append(meta)
                self._meta_bytes += len(meta)
            self._meta_ends.append(self._meta_bytes)
            self._entries += 1
        self._group_ends.append(self._entries)

    def add_columns(self, name: str, columns: Columns, group: int) -> None:
        """A group the store never took out of the loaded columns, copied straight across."""
        first, end = columns.group_ends[group], columns.group_ends[group + 1]
        self._names.append(name)
        for ends, shift_from, out, total in ((columns.topic_ends, columns.topic_ends[first], self._topic_ends,
                                              self._topic_bytes),
                                             (columns.slot_ends, columns.slot_ends[first], self._slot_ends,
                                              self._slots),
                                             (columns.meta_ends, columns.meta_ends[first], self._meta_ends,
                                              self._meta_bytes)):
            out.extend(value - shift_from + total for value in ends[first + 1 : end + 1])
        topic_first, topic_end = columns.topic_ends[first], columns.topic_ends[end]
        self._topics.append(bytes(columns.topics[topic_first:topic_end]))
        self._topic_bytes += topic_end - topic_first
        meta_first, meta_end = columns.meta_ends[first], columns.meta_ends[end]
        if meta_end > meta_first:
            self._meta.append(bytes(columns.meta[meta_first:meta_end]))
            self._meta_bytes += meta_end - meta_first
        slot_first, slot_end = columns.slot_ends[first], columns.slot_ends[end]
        values, epochs = columns.slot_bytes(slot_first, slot_end)
        if columns.swap:  # written in this machine's order, as the header says
            values, epochs = _native(values, "q"), _native(epochs, "i")
        self._values.append(bytes(values))
        self._epochs.append(bytes(epochs))
        self._slots += slot_end - slot_first
        self._chunk_slots += slot_end - slot_first
        self._counts.extend(columns.counts[first:end])
        self._entries += end - first
        self._group_ends.append(self._entries)

    def chunk(self) -> list[bytes]:
        """The groups added since the last chunk, as one chunk (nothing when there were none)."""
        if not self._names:
            return []
        text = "".join(self._names).encode()
        name_ends = array("I", accumulate(map(len, self._names)))
        topics, meta = b"".join(self._topics), b"".join(self._meta)
        parts = [_CHUNK.pack(len(self._names), len(self._counts), self._chunk_slots, len(text), len(topics),
                             len(meta)),
                 text, name_ends.tobytes(), self._group_ends.tobytes(), topics, self._topic_ends.tobytes(),
                 self._slot_ends.tobytes(), self._meta_ends.tobytes(), self._counts.tobytes(), meta,
                 *self._values, *self._epochs]
        self._reset()
        return parts

    @staticmethod
    def end() -> bytes:
        """What ends the section: a chunk of no groups."""
        return _CHUNK.pack(0, 0, 0, 0, 0, 0)


def _native(data: memoryview, code: str) -> memoryview:
    column = array(code)
    column.frombytes(data)
    column.byteswap()
    return memoryview(column).cast("B")
