"""Finding and reading segment files of a data directory, for the pipeline; plain Python.

Both the Spark data source (``pipeline.source``) and the plain-Python oracle
(``pipeline.history``) read segments through this module, so the rules below exist once:

- **Where the files are.** Live coordinator segments are
  ``DATA_DIR/__consumer_offsets-N/{base:020d}.log``; segments the cleaner replaced, when the
  broker keeps history (``log.history.retention.ms``), are moved unchanged to
  ``DATA_DIR/history/__consumer_offsets-N/`` under the same name. Topic data is
  ``DATA_DIR/<topic>-<p>/``. Every name comes from ``storage.layout``. Nothing else
  (``.cleaned``/``.swap`` files, the ``.lock``) is read, and nothing is ever written or
  locked: a running broker's directory is fine. Batches are framed and judged by the
  broker's own walker (``storage.walker``).
- **A segment being appended to.** A file is read as one snapshot of its bytes; reading
  stops quietly at the last complete, CRC-valid batch (a half-written batch at the end is
  the broker's next write in progress). Damage that is followed by a valid batch cannot be
  a write in progress, so it raises ``SegmentReadError`` naming the file and byte.
- **Which copy of a record counts.** History and live files hold the same record at the
  same offset; the union, one row per (coordinator partition, log offset), is the full
  history. Compaction only ever merges neighbouring segments and removes records, so the
  offset ranges of all the files of a partition are nested or disjoint, and of two files
  holding an offset the one with the narrower range is the older, fuller copy. The
  narrowest range wins; with equal ranges the history copy (the original) wins.
- **Transactions.** A record of a transactional batch counts only as its producer's next
  marker in the partition says (``pipeline.transactions``). The planner reads the
  markers of every file of a partition from the batch headers and the tiny control
  batches, and hands each segment the markers that end the transactions it holds, so a
  segment is still read on its own.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.transactions import OUTCOME_COLUMNS, Marker, MarkerLookup, markers_of_batch, outcome
from protocol.consumer_offsets import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_PARTITION_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    ConsumerGroupKey,
    GroupKey,
    OffsetKey,
    RecordKey,
    decode_consumer_group_value,
    decode_group_value,
    decode_key,
    decode_offset_value,
    partition_for,
)
from protocol.consumer_protocol import subscribed_topics
from protocol.errors import ProtocolError
from protocol.records import LOG_OVERHEAD, BatchHeader, RecordBatchError, iter_records
from storage.layout import (
    COORDINATOR_TOPIC,
    history_copy_of,
    history_dir,
    parse_partition_dir,
    parse_segment_name,
    partition_count_file,
)
from storage.segment import later_valid_batch
from storage.walker import scan_bytes, walk_file

__all__ = [
    "COLUMNS",
    "KINDS",
    "SegmentFile",
    "SegmentReadError",
    "TimeBounds",
    "coordinator_partition_count",
    "coordinator_segments",
    "decode_segment",
    "index_segment",
    "read_batch_headers",
    "record_row",
    "topic_segments",
]

_LENGTH_AT = struct.Struct(">qi")  # base_offset, batch_length
_CONTROL_BIT = 0x20
_TRANSACTIONAL_BIT = 0x10
_LOG_APPEND_TIME_BIT = 0x08

#: Row columns, in order; ``record_row`` returns tuples in this order.
COLUMNS = (
    "group", "topic", "partition", "offset", "leader_epoch", "metadata", "commit_timestamp",
    "expire_timestamp", "kind", "generation", "protocol_type", "protocol", "leader", "state",
    "member_count", "members", "subscribed_topics", "member_id", "assignment", "log_offset",
    "coordinator_partition", "segment", "record_timestamp", *OUTCOME_COLUMNS,
)
#: Consumer group (KIP-848) record kinds; each also comes as ``<kind>_tombstone``.
CONSUMER_GROUP_KINDS = {
    CONSUMER_GROUP_METADATA: "consumer_group_epoch",
    CONSUMER_GROUP_PARTITION_METADATA: "consumer_group_subscription",
    CONSUMER_GROUP_MEMBER_METADATA: "consumer_group_member",
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: "consumer_group_target_epoch",
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: "consumer_group_target",
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: "consumer_group_assignment",
}
KINDS = ("commit", "tombstone", "group_metadata", "group_tombstone",
         *(k for kind in CONSUMER_GROUP_KINDS.values() for k in (kind, f"{kind}_tombstone")))


class SegmentReadError(Exception):
    """A segment cannot be read: damage in the middle of a file, or an undecodable record."""


# --- discovery ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """One segment file to read, with the offset range it is the reader of.

    ``end`` is None for a partition's active (last live) segment, which keeps growing.
    ``inner`` are the ranges of narrower files of the same partition, merged and sorted:
    records at those offsets are read from there instead. ``inode``/``device`` identify the file that was
    planned, so a reader can follow it if the cleaner moves it into history meanwhile.
    ``min_timestamp``/``max_timestamp`` bound the batch timestamps (None: empty file).
    """

    path: str
    topic: str
    partition: int
    base_offset: int
    history: bool
    start: int
    end: int | None
    size: int
    inode: int
    device: int
    min_timestamp: int | None
    max_timestamp: int | None
    inner: tuple[tuple[int, int], ...] = field(default=())
    #: The markers (of any file of the partition) that end the transactions this file holds.
    markers: tuple[Marker, ...] = field(default=())

    def owns(self, offset: int) -> bool:
        """Whether the record at ``offset`` is to be read from this file."""
        if offset < self.start or (self.end is not None and offset >= self.end):
            return False
        if not self.inner:
            return True
        i = bisect.bisect_right(self.inner, (offset, 2**63)) - 1
        return i < 0 or offset >= self.inner[i][1]


@dataclass(frozen=True, slots=True)
class SegmentIndex:
    """What a walk over a file's batch headers found (no record is decoded)."""

    start: int | None
    end: int | None
    min_timestamp: int | None
    max_timestamp: int | None
    batches: int
    #: With ``transactions``: (last offset, producer id) of each transactional data batch.
    transactional: tuple[tuple[int, int], ...] = ()
    #: With ``transactions``: the end-transaction markers in the file.
    markers: tuple[Marker, ...] = ()


_INDEX_CACHE: dict[tuple[str, int, int, int, bool], SegmentIndex] = {}


def _min_timestamp(header: BatchHeader) -> int:
    """Lower bound of a batch's record timestamps.

    Coordinator records are written with timestamp delta 0 (by kcoord and by Kafka), so
    the base timestamp is every record's timestamp; with log-append time it is max_timestamp.
    """
    if header.attributes & _LOG_APPEND_TIME_BIT:
        return header.max_timestamp
    return min(header.base_timestamp, header.max_timestamp)


def index_segment(path: Path, transactions: bool = False) -> SegmentIndex:
    """Offset range and timestamp range of a file from its batch headers alone.

    Only headers are read (``storage.walker.walk_file``: many per ``pread`` while batches
    are small, one per ``pread`` once they are large), never the records. Results for an
    unchanged file (same inode, size and mtime) are cached: sealed and history files never
    change. With ``transactions`` the index also lists the transactional batches and the
    markers (a control batch is read whole: it holds one small record).
    """
    st = os.stat(path)
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, transactions)
    cached = _INDEX_CACHE.get(key)
    if cached is not None:
        return cached
    start = end = lo = hi = None
    batches = 0
    transactional: list[tuple[int, int]] = []
    markers: list[Marker] = []
    with open(path, "rb", buffering=0) as handle:
        fd = handle.fileno()
        for pos, header in walk_file(lambda length, offset: os.pread(fd, length, offset), st.st_size):
            if transactions and header.attributes & _TRANSACTIONAL_BIT:
                if header.attributes & _CONTROL_BIT:
                    markers.extend(_markers(path, pos, header, os.pread(fd, header.size, pos)))
                else:
                    transactional.append((header.last_offset, header.producer_id))
            if start is None:
                start = header.base_offset
            end = header.next_offset
            low = _min_timestamp(header)
            lo = low if lo is None else min(lo, low)
            hi = header.max_timestamp if hi is None else max(hi, header.max_timestamp)
            batches += 1
    result = SegmentIndex(start, end, lo, hi, batches, tuple(transactional), tuple(markers))
    if len(_INDEX_CACHE) > 100_000:
        _INDEX_CACHE.clear()
    _INDEX_CACHE[key] = result
    return result


def _markers(path: Path | str, pos: int, header: BatchHeader, raw: bytes | memoryview) -> list[Marker]:
    """The markers of the control batch at byte ``pos`` of ``path``."""
    try:
        return list(markers_of_batch(header, raw))
    except RecordBatchError as exc:
        raise SegmentReadError(f"{path}: control batch at byte {pos}: {exc}") from None


def coordinator_partition_count(data_dir: Path) -> int | None:
    """``offsets.topic.num.partitions`` as recorded in the data directory, if it is there."""
    try:
        count = json.loads(partition_count_file(data_dir).read_text())["partitions"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return int(count) if isinstance(count, int) and count > 0 else None


def _partition_dirs(root: Path, coordinator: bool) -> list[tuple[str, int, Path]]:
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        parsed = parse_partition_dir(entry.name)
        if parsed is None or not entry.is_dir():
            continue
        topic, partition = parsed
        if (topic == COORDINATOR_TOPIC) == coordinator:
            found.append((topic, partition, entry))
    return sorted(found, key=lambda item: (item[0], item[1]))


def _segment_paths(directory: Path) -> list[tuple[int, Path]]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    paths = [(base, directory / name) for name in names if (base := parse_segment_name(name)) is not None]
    return sorted(paths)


def _planned(path: Path, topic: str, partition: int, base: int, history: bool,
             active: bool, transactions: bool = False) -> tuple[SegmentFile, SegmentIndex] | None:
    try:
        st = os.stat(path)
        index = index_segment(path, transactions)
    except FileNotFoundError:
        return None  # the cleaner replaced it while we listed; its records are elsewhere
    start = index.start if index.start is not None else base
    end = None if active else (index.end if index.end is not None else base)
    return SegmentFile(
        str(path), topic, partition, base, history, min(start, base), end, st.st_size,
        st.st_ino, st.st_dev, index.min_timestamp, index.max_timestamp,
    ), index


def coordinator_segments(data_dir: Path, partitions: set[int] | None = None) -> list[SegmentFile]:
    """Every live and history segment of the coordinator log, each with the range it owns.

    ``partitions`` restricts the result to those coordinator partitions.
    """
    data_dir = Path(data_dir)
    files: dict[int, list[tuple[SegmentFile, SegmentIndex]]] = {}
    for history, root in ((False, data_dir), (True, history_dir(data_dir))):
        for topic, partition, directory in _partition_dirs(root, coordinator=True):
            if partitions is not None and partition not in partitions:
                continue
            paths = _segment_paths(directory)
            for i, (base, path) in enumerate(paths):
                planned = _planned(path, topic, partition, base, history,
                                   active=not history and i == len(paths) - 1, transactions=True)
                if planned is not None:
                    files.setdefault(partition, []).append(planned)
    result: list[SegmentFile] = []
    for partition in sorted(files):
        result.extend(_with_inner_ranges(_with_markers(files[partition])))
    return result


def _with_markers(planned: list[tuple[SegmentFile, SegmentIndex]]) -> list[SegmentFile]:
    """Each segment of one partition with the markers that end its transactional batches.

    Markers are looked up among those of every file of the partition: a transaction's
    marker is often in a later segment than its records.
    """
    lookup = MarkerLookup(marker for _, index in planned for marker in index.markers)
    out = []
    for segment, index in planned:
        ends = {end for last, producer_id in index.transactional
                if (end := lookup.after(producer_id, last)) is not None}
        out.append(dataclasses.replace(segment, markers=tuple(sorted(ends))))
    return out


def _span(segment: SegmentFile) -> tuple[int, int]:
    return segment.start, segment.end if segment.end is not None else 2**63


def _narrower(inner: SegmentFile, outer: SegmentFile) -> bool:
    """Whether ``inner`` is read instead of ``outer`` for the offsets the two share."""
    (a, b), (c, d) = _span(inner), _span(outer)
    if not (c <= a and b <= d) or a >= b:
        return False
    if (a, b) != (c, d):
        return True
    return inner.history and not outer.history


def _with_inner_ranges(segments: list[SegmentFile]) -> list[SegmentFile]:
    """Each segment with the merged ranges of the narrower files nested in it.

    Files are visited in start order, so each segment only looks at the files that start
    inside its own range: the work is the sum of nesting, not the square of the file count.
    """
    ordered = sorted(segments, key=_span)
    starts = [segment.start for segment in ordered]
    out = []
    for outer in segments:
        lo_outer, hi_outer = _span(outer)
        spans = []
        for j in range(bisect.bisect_left(starts, lo_outer), len(ordered)):
            other = ordered[j]
            if other.start >= hi_outer:
                break
            if other is not outer and _narrower(other, outer):
                spans.append(_span(other))
        merged: list[tuple[int, int]] = []
        for lo, hi in spans:
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        out.append(dataclasses.replace(outer, inner=tuple(merged)))
    return out


def topic_segments(data_dir: Path, topics: set[str] | None = None) -> list[SegmentFile]:
    """The segments of every topic partition stored in the data directory."""
    result = []
    for topic, partition, directory in _partition_dirs(Path(data_dir), coordinator=False):
        if topics is not None and topic not in topics:
            continue
        paths = _segment_paths(directory)
        for i, (base, path) in enumerate(paths):
            planned = _planned(path, topic, partition, base, False, active=i == len(paths) - 1)
            if planned is not None:
                result.append(planned[0])
    return result


def partitions_of_groups(data_dir: Path, groups: set[str]) -> set[int] | None:
    """The coordinator partitions holding ``groups``; None when the count is unknown."""
    count = coordinator_partition_count(data_dir)
    if count is None:
        return None
    return {partition_for(group, count) for group in groups}


# --- reading ------------------------------------------------------------------------------


def _resolve(segment: SegmentFile) -> Path | None:
    """The file to read for a planned segment, following it if the cleaner moved it.

    The planned file itself (same inode) if it is still there; else, for a live segment,
    the same file moved into the history directory; else the live file that now covers the
    planned range (the cleaner merged it away and history is off: its surviving records
    are there). None when a history file was pruned meanwhile.
    """
    path = Path(segment.path)
    candidates = [path]
    if not segment.history:
        candidates.append(history_copy_of(path))
    for candidate in candidates:
        try:
            st = os.stat(candidate)
        except FileNotFoundError:
            continue
        if (st.st_ino, st.st_dev) == (segment.inode, segment.device):
            return candidate
    if segment.history:
        return None
    covering = [p for base, p in _segment_paths(path.parent) if base <= segment.start]
    return covering[-1] if covering else None


def read_batch_headers(path: Path, data: bytes | None = None) -> list[tuple[int, BatchHeader]]:
    """``(position, header)`` of every complete, CRC-valid batch of a file, in order.

    Stops at a torn or in-progress tail; raises ``SegmentReadError`` when damage is
    followed by a valid batch (that is corruption, not a write in progress).
    """
    if data is None:
        data = Path(path).read_bytes()
    found, valid = scan_bytes(data)
    if valid < len(data):
        next_offset = found[-1][1].next_offset if found else _first_base(path, data)
        later = later_valid_batch(data, valid, next_offset)
        if later is not None:
            raise SegmentReadError(
                f"{path}: damaged batch at byte {valid} is followed by a valid batch at byte "
                f"{later}; this is corruption, not a write in progress"
            )
    return found


def _first_base(path: Path, data: bytes) -> int:
    base = parse_segment_name(Path(path).name)
    if base is not None:
        return base
    return _LENGTH_AT.unpack_from(data)[0] if len(data) >= LOG_OVERHEAD else 0


@dataclass(frozen=True, slots=True)
class TimeBounds:
    """Record-timestamp bounds a reader may skip batches by (inclusive; None: open)."""

    low: int | None = None
    high: int | None = None

    def admits(self, timestamp: int) -> bool:
        return (self.low is None or timestamp >= self.low) and (self.high is None or timestamp <= self.high)

    def may_hold(self, min_timestamp: int | None, max_timestamp: int | None) -> bool:
        """Whether a batch or file with these timestamp bounds can hold an admitted record."""
        if min_timestamp is None or max_timestamp is None:
            return False
        if self.low is not None and max_timestamp < self.low:
            return False
        return not (self.high is not None and min_timestamp > self.high)


def decode_segment(
    segment: SegmentFile,
    *,
    groups: frozenset[str] | None = None,
    times: TimeBounds | None = None,
) -> Iterator[tuple[Any, ...]]:
    """The rows (``COLUMNS`` order) of the records this segment owns, in log order.

    ``groups`` and ``times`` drop rows early: a batch outside the time bounds is never
    decoded, and a record of another group is dropped after its key is read.
    """
    path = _resolve(segment)
    if path is None:
        return
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    view = memoryview(data)
    name = str(path)
    partition = segment.partition
    markers = MarkerLookup(segment.markers)
    for pos, header in read_batch_headers(path, data):
        if header.attributes & _CONTROL_BIT:
            continue
        if times is not None and not times.may_hold(_min_timestamp(header), header.max_timestamp):
            continue
        if segment.end is not None and header.base_offset >= segment.end:
            break
        # A transactional batch written after planning has no marker known yet: still open.
        producer_id = header.producer_id if header.attributes & _TRANSACTIONAL_BIT else None
        marker = markers.after(producer_id, header.last_offset) if producer_id is not None else None
        try:
            records = iter_records(view[pos : pos + header.size], verify_crc=False)
        except RecordBatchError as exc:
            raise SegmentReadError(f"{name}: batch at byte {pos}: {exc}") from None
        for log_offset, timestamp, key, value in records:
            if key is None or not segment.owns(log_offset):
                continue
            if times is not None and not times.admits(timestamp):
                continue
            try:
                row = record_row(key, value, groups)
            except (ProtocolError, ValueError) as exc:
                raise SegmentReadError(f"{name}: record at offset {log_offset}: {exc}") from None
            if row is None:
                continue
            if producer_id is None:  # the common case, kept free of a call per row
                yield (*row, log_offset, partition, name, timestamp, None, None, None, timestamp)
            else:
                yield (*row, log_offset, partition, name, timestamp,
                       *outcome(row[_KIND], timestamp, producer_id, marker))


_KIND = COLUMNS.index("kind")
#: Decoded keys by their bytes: a log repeats the same (group, topic, partition) keys over
#: and over, and a dictionary lookup is far cheaper than decoding the key again.
_KEYS: dict[bytes, RecordKey] = {}
_KEY_CACHE_SIZE = 200_000
_NO_OFFSET_VALUE = (None,) * 5
_NO_GROUP_VALUE = (None,) * 10
_MEMBER_STATES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS"}


def record_row(key: bytes, value: bytes | None, groups: frozenset[str] | None = None) -> tuple[Any, ...] | None:
    """The decoded columns of one ``__consumer_offsets`` record, up to ``assignment``.

    None for record types this coordinator does not use (share and streams groups) and for
    groups outside ``groups``.
    """
    decoded = _KEYS.get(key)
    if decoded is None:
        decoded = decode_key(key)
        if len(_KEYS) >= _KEY_CACHE_SIZE:
            _KEYS.clear()
        _KEYS[key] = decoded
    if isinstance(decoded, OffsetKey):
        if groups is not None and decoded.group not in groups:
            return None
        head: tuple[Any, ...] = (decoded.group, decoded.topic, decoded.partition)
        if value is None:
            return (*head, *_NO_OFFSET_VALUE, "tombstone", *_NO_GROUP_VALUE)
        v = decode_offset_value(value)
        return (*head, v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp,
                "commit", *_NO_GROUP_VALUE)
    if isinstance(decoded, GroupKey):
        if groups is not None and decoded.group not in groups:
            return None
        group_head: tuple[Any, ...] = (decoded.group, None, None, *_NO_OFFSET_VALUE)
        if value is None:
            return (*group_head, "group_tombstone", None, None, None, None, "Dead", None, None, None, None, None)
        body = decode_group_value(value)
        consumer = body["protocol_type"] == "consumer"
        members = []
        union: set[str] | None = set() if consumer else None
        for member in body["members"]:
            topics = subscribed_topics(member["subscription"]) if consumer else None
            if union is not None and topics is not None:
                union |= topics
            members.append({
                "member_id": member["member_id"],
                "group_instance_id": member["group_instance_id"],
                "client_id": member["client_id"],
                "client_host": member["client_host"],
                "subscribed_topics": sorted(topics) if topics is not None else None,
            })
        state = "Stable" if members else "Empty"
        return (*group_head, "group_metadata", body["generation"], body["protocol_type"], body["protocol"],
                body["leader"], state, len(members), members,
                sorted(union) if union is not None else None, None, None)
    if isinstance(decoded, ConsumerGroupKey):
        if groups is not None and decoded.group not in groups:
            return None
        return _consumer_group_row(decoded, value)
    return None


def _assignment_rows(topic_partitions: Any) -> list[dict[str, Any]]:
    return [{"topic_id": str(tp["topic_id"]), "partitions": sorted(tp["partitions"])} for tp in topic_partitions]


def _consumer_group_row(key: ConsumerGroupKey, value: bytes | None) -> tuple[Any, ...]:
    """A KIP-848 consumer group record: its kind, the group or member it is about, and its content."""
    kind = CONSUMER_GROUP_KINDS[key.kind]
    head: tuple[Any, ...] = (key.group, None, None, *_NO_OFFSET_VALUE)
    if value is None:
        return (*head, f"{kind}_tombstone", None, "consumer", None, None, None, None, None, None,
                key.member_id, None)
    body = decode_consumer_group_value(key.kind, value)
    generation = state = protocol = None
    members = topics = assignment = None
    if key.kind == CONSUMER_GROUP_METADATA:
        generation = body["epoch"]
    elif key.kind == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        generation = body["assignment_epoch"]
    elif key.kind == CONSUMER_GROUP_PARTITION_METADATA:
        topics = sorted(t["topic_name"] for t in body["topics"])
    elif key.kind == CONSUMER_GROUP_MEMBER_METADATA:
        topics = sorted(body["subscribed_topic_names"])
        protocol = body["server_assignor"]
        members = [{"member_id": key.member_id, "group_instance_id": body["instance_id"],
                    "client_id": body["client_id"], "client_host": body["client_host"],
                    "subscribed_topics": topics}]
    elif key.kind == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        assignment = _assignment_rows(body["topic_partitions"])
    else:
        generation = body["member_epoch"]
        state = _MEMBER_STATES.get(body["state"], "UNKNOWN")
        assignment = _assignment_rows(body["assigned_partitions"])
    return (*head, kind, generation, "consumer", protocol, None, state,
            None if members is None else len(members), members, topics, key.member_id, assignment)
