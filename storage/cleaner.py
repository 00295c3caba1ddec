"""The log cleaner: Kafka-style compaction of a partition log's sealed segments.

Compaction keeps, for every key, only the record with the highest offset in the whole log
(the active segment included), so a log of updates shrinks to the state it describes while
``replay(log) == replay(compact(log))`` (ARCHITECTURE.md invariant 1). It is generic over
keys: it compares key bytes and never decodes them.

What survives in the sealed segments (the active, last segment is never rewritten):

- a record whose key's latest record is at a higher offset: dropped;
- a tombstone (null value) that is its key's latest record: kept while it is at most
  ``delete_retention_ms`` old (record timestamp against ``now_ms``), so a reader that is
  replaying the log sees the delete; dropped once older. Tombstones are never dropped while
  a sealed batch could not be read (a codec this code keeps opaque), because that batch
  might hold an older value the tombstone must keep hiding;
- a record with a null key: dropped (a compacted log has no use for it);
- control batches and batches with an opaque codec: copied verbatim;
- records of an aborted transaction: dropped, and never a key's latest record. A
  transaction's records count for their keys only once its COMMIT marker is read, as
  a read_committed consumer (or the group coordinator's replay) sees them. Nothing at or
  past the first offset of a transaction still open (the last stable offset) is
  cleaned: the segments from there on are left as they are.

Offsets never change. A filtered batch keeps its base offset, last offset delta, producer
fields and timestamps, and its records keep their offset deltas, so the batch covers
offsets that no longer hold a record; a batch left with no records is dropped, leaving a
gap. The last batch of each cleaned segment is always written (empty if need be), so the
segment still ends exactly where the next one begins and recovery can keep checking that
segments join up. Consecutive sealed segments are merged into one cleaned segment while
their input fits in ``segment_bytes``; a lone segment that would come out unchanged is
left alone, which makes a second clean of a clean log a no-op.

The cleaner is a function of segment views: given views of the sealed segments and of the
active segment's prefix (each with a private handle, so it reads without the log's lock)
and a ``CleanPolicy``, ``clean_segments`` writes the cleaned files and returns what
replaces what. It knows nothing of ``PartitionLog``: the log takes the views under its
lock, decides whether to go on, installs the new segments in memory and owns the retry
of a swap that failed half way (``storage.partition``).

Crash-safe swap protocol, per clean (each cleaned file is named after the base offset of
the first segment it replaces, ``{base:020d}.log``):

1. write every cleaned segment to ``{base:020d}.log.cleaned`` and fsync it; fsync the
   directory (every ``.cleaned`` name is now durable);
2. rename each ``.cleaned`` to ``{base:020d}.log.swap``; fsync the directory. This fsync
   is the commit point: before it the old segments are the log, after it the new ones;
3. the log swaps its in-memory segment list (under its lock);
4. ``finish_swap``: for each cleaned segment, delete the segments it replaces (or move them into
   ``history_dir/<partition directory name>/``), then rename ``.swap`` to ``.log``;
   fsync the history folder, then the directory (so a crash between the two leaves an
   original in both places, which recovery resolves, rather than in neither).

Recovery (``recover_interrupted_clean``, run when a log is opened, before segments are
scanned) decides from the leftovers alone:

- any ``.cleaned`` file left means step 2 did not finish (renames happen only after every
  ``.cleaned`` name is durable, and step 2's fsync makes all of them ``.swap``), so no old
  segment was touched yet: delete every ``.cleaned`` and ``.swap`` file -> the old state;
- only ``.swap`` files left means the clean committed: each ``.swap`` replaces every
  ``.log`` whose base offset lies in its offset range, then is renamed to ``.log`` -> the
  new state. Doing it again after another crash gives the same result.

Either way the log replays to the same key -> latest value map. ``history_dir`` must be on
the same filesystem as the log (files are moved with a rename); when a file of the same
name is already there it is the older original of a segment cleaned before, so the
replaced copy, itself a cleaned file, is deleted instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from protocol.records import (
    Record,
    RecordBatch,
    RecordBatchError,
    decode_batch,
    encode_batch,
    marker_of,
    peek_batch_header,
)
from storage.fs import File, FileSystem
from storage.layout import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    history_folder,
    parse_segment_name,
    parse_temp_name,
    segment_name,
)
from storage.segment import CorruptLogError, Segment, SegmentScan, SegmentView, scan_segment

__all__ = [
    "CleanOutput",
    "CleanPolicy",
    "CleanResult",
    "Replacement",
    "clean_segments",
    "commit_swap",
    "discard_swap",
    "discard_uncommitted",
    "finish_swap",
    "prepare_history",
    "recover_interrupted_clean",
]

log = logging.getLogger("kcoord.storage")

#: How many bytes the cleaner reads, and buffers before a write, at a time.
_IO_CHUNK = 1 << 20
#: Offsets in one segment stay within an int32 of its base (Kafka's index relies on it).
_MAX_SEGMENT_SPAN = 2**31 - 1
_COMPRESSION_MASK = 0x07


@dataclass(frozen=True, slots=True)
class CleanPolicy:
    """What a clean keeps: tombstones younger than ``delete_retention_ms`` at ``now_ms``;
    sealed segments merge while their input fits in ``segment_bytes``."""

    now_ms: int
    delete_retention_ms: int
    segment_bytes: int

    def __post_init__(self) -> None:
        if self.delete_retention_ms < 0:
            raise ValueError(f"delete_retention_ms must be >= 0, got {self.delete_retention_ms}")


@dataclass(frozen=True, slots=True)
class CleanResult:
    """What one clean did to the sealed part of the log (the active segment is not counted)."""

    segments_before: int
    segments_after: int
    records_before: int
    records_after: int
    bytes_before: int
    bytes_after: int
    tombstones_dropped: int
    #: The active segment's base when the clean began: every offset below it was cleaned.
    cleaned_up_to: int


@dataclass(slots=True)
class Replacement:
    """One cleaned segment, open under its final name, and the run of segments it replaces."""

    replaces: list[Segment]
    segment: Segment

    @property
    def final(self) -> Path:
        return self.segment.path

    @property
    def cleaned(self) -> Path:
        return self.final.with_name(self.final.name + CLEANED_SUFFIX)

    @property
    def swap(self) -> Path:
        return self.final.with_name(self.final.name + SWAP_SUFFIX)


@dataclass(slots=True)
class CleanOutput:
    """The cleaned files written by step 1 (not yet committed) and the clean's figures."""

    replacements: list[Replacement]
    result: CleanResult

    def close(self) -> None:
        """Close the cleaned segments (when they will not be installed)."""
        for item in self.replacements:
            item.segment.close()


# --- reading ---------------------------------------------------------------------------


def _batches(view: SegmentView) -> Iterator[tuple[bytes, RecordBatch]]:
    """``(raw, decoded)`` for every batch of the view, reading about a MiB per syscall."""
    positions = view.segment.positions
    index = 0
    while index < view.batch_count:
        begin = positions[index]
        stop = index + 1
        while stop < view.batch_count and view.batch_end(stop) - begin <= _IO_CHUNK:
            stop += 1
        chunk = view.read(begin, view.batch_end(stop - 1) - begin)
        for i in range(index, stop):
            raw = chunk[positions[i] - begin : view.batch_end(i) - begin]
            try:
                batch = decode_batch(raw)
            except RecordBatchError as exc:
                raise CorruptLogError(f"{view.segment.path}: batch at byte {positions[i]}: {exc}") from exc
            yield raw, batch
        index = stop


@dataclass(slots=True)
class _KeyMap:
    """Latest offset of every key, plus what the first pass learned about the sealed part."""

    latest: dict[bytes, int] = field(default_factory=dict)
    #: Records per sealed segment (by its base offset).
    sealed_records: dict[int, int] = field(default_factory=dict)
    #: A sealed batch whose records this code cannot read (snappy, lz4, zstd).
    opaque: bool = False
    #: producer id -> (first offset, marker offset) of its aborted transactions.
    aborted: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    #: First offset of the oldest transaction without a marker yet, if any.
    first_unstable: int | None = None

    def note(self, key: bytes, offset: int) -> None:
        if offset > self.latest.get(key, -1):
            self.latest[key] = offset

    def is_aborted(self, batch: RecordBatch) -> bool:
        ranges = self.aborted.get(batch.producer_id)
        return ranges is not None and any(first <= batch.base_offset <= last for first, last in ranges)


def _build_key_map(sealed: list[SegmentView], active: SegmentView) -> _KeyMap:
    keys = _KeyMap()
    #: producer id -> (first offset, (key, offset) of its records) of its open transaction.
    open_txns: dict[int, tuple[int, list[tuple[bytes, int]]]] = {}
    for view in [*sealed, active]:
        is_sealed = view is not active
        for _, batch in _batches(view):
            if is_sealed:
                base = view.segment.base_offset
                keys.sealed_records[base] = keys.sealed_records.get(base, 0) + batch.records_count
            if batch.is_control:
                try:
                    marker = marker_of(batch)
                except RecordBatchError:
                    marker = None
                txn = open_txns.pop(batch.producer_id, None) if marker is not None else None
                if txn is not None and marker is not None:
                    if marker.commit:
                        for key, offset in txn[1]:
                            keys.note(key, offset)
                    else:
                        keys.aborted.setdefault(batch.producer_id, []).append((txn[0], batch.base_offset))
                continue
            if batch.records is None:
                keys.opaque = keys.opaque or is_sealed
                if batch.is_transactional:
                    open_txns.setdefault(batch.producer_id, (batch.base_offset, []))
                continue
            if batch.is_transactional:
                pending = open_txns.setdefault(batch.producer_id, (batch.base_offset, []))[1]
                pending.extend((record.key, batch.base_offset + record.offset_delta)
                               for record in batch.records if record.key is not None)
                continue
            for record in batch.records:
                if record.key is not None:
                    keys.note(record.key, batch.base_offset + record.offset_delta)
    if open_txns:
        keys.first_unstable = min(first for first, _ in open_txns.values())
    return keys


# --- writing ---------------------------------------------------------------------------


def _filtered(
    batch: RecordBatch, raw: bytes, keys: _KeyMap, policy: CleanPolicy, is_last: bool
) -> tuple[bytes | None, int, int]:
    """What to write for one batch: ``(bytes or None to drop, records kept, tombstones dropped)``.

    A batch keeps its offsets, producer fields and timestamps whatever is removed from it.
    """
    if batch.is_control or (batch.records is None and not batch.is_transactional):
        return raw, batch.records_count, 0
    if batch.is_transactional and keys.is_aborted(batch):
        kept_none: list[Record] = []
        if not is_last:
            return None, 0, 0
        return _rewritten(batch, kept_none), 0, 0
    if batch.records is None:
        return raw, batch.records_count, 0
    kept = []
    dropped_tombstones = 0
    for record in batch.records:
        if record.key is None or keys.latest.get(record.key) != batch.offset_of(record):
            continue
        if (
            record.value is None
            and not keys.opaque
            and policy.now_ms - batch.timestamp_of(record) > policy.delete_retention_ms
        ):
            dropped_tombstones += 1
            continue
        kept.append(record)
    if len(kept) == len(batch.records):
        return raw, len(kept), 0
    if not kept and not is_last:
        return None, 0, dropped_tombstones
    return _rewritten(batch, kept), len(kept), dropped_tombstones


def _rewritten(batch: RecordBatch, kept: list[Record]) -> bytes:
    """The batch with only ``kept`` records: same offsets, producer fields and timestamps."""
    attributes = batch.attributes if kept else batch.attributes & ~_COMPRESSION_MASK
    return encode_batch(
        kept,
        base_offset=batch.base_offset,
        base_timestamp=batch.base_timestamp,
        max_timestamp=batch.max_timestamp,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        partition_leader_epoch=batch.partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=batch.last_offset_delta,
    )


class _SegmentWriter:
    """Appends batches to a new file in big writes and keeps the index recovery would build."""

    def __init__(self, fs: FileSystem, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.file: File = fs.open(path, create=True)
        self.buffer = bytearray()
        self.size = 0
        self.offsets: list[int] = []
        self.positions: list[int] = []
        self.ends: list[int] = []
        self.next_offset = base_offset
        self.gapped = False

    def add(self, data: bytes) -> None:
        header = peek_batch_header(data)
        self.gapped = self.gapped or header.base_offset != self.next_offset
        self.offsets.append(header.base_offset)
        self.positions.append(self.size)
        self.ends.append(header.next_offset)
        self.next_offset = header.next_offset
        self.size += len(data)
        self.buffer += data
        if len(self.buffer) >= _IO_CHUNK:
            self._drain()

    def _drain(self) -> None:
        view = memoryview(self.buffer)
        try:
            while view:
                written = self.file.write(view)
                view = view[written:]
        finally:
            view.release()
        self.buffer.clear()

    def finish(self) -> SegmentScan:
        """Write what is buffered and fsync; the scan is what recovery would find."""
        self._drain()
        self.file.fsync()
        return SegmentScan(
            self.offsets, self.positions, self.next_offset, self.size, None,
            self.ends if self.gapped else None,
        )


@dataclass(slots=True)
class _GroupOutcome:
    replacement: Replacement | None  # None: the group came out unchanged and was left alone
    records: int
    size: int
    tombstones_dropped: int


def _plan_groups(sealed: list[SegmentView], segment_bytes: int) -> list[list[SegmentView]]:
    """Runs of consecutive sealed segments to merge: input within ``segment_bytes`` and an
    int32 offset span, as Kafka groups them. An empty segment stays on its own."""
    groups: list[list[SegmentView]] = []
    for view in sealed:
        if groups and view.batch_count and groups[-1][-1].batch_count:
            group = groups[-1]
            size = sum(v.size for v in group) + view.size
            span = view.segment.next_offset - group[0].segment.base_offset
            if size <= segment_bytes and span <= _MAX_SEGMENT_SPAN:
                group.append(view)
                continue
        groups.append([view])
    return groups


def _clean_group(
    fs: FileSystem, group: list[SegmentView], directory: Path, keys: _KeyMap, policy: CleanPolicy
) -> _GroupOutcome:
    """Write one group's survivors to ``.cleaned``, or leave an unchanged lone segment alone."""
    first = group[0].segment
    if not any(view.batch_count for view in group):
        return _GroupOutcome(None, 0, sum(v.size for v in group), 0)
    final = directory / segment_name(first.base_offset)
    writer = _SegmentWriter(fs, final.with_name(final.name + CLEANED_SUFFIX), first.base_offset)
    try:
        changed = len(group) > 1
        records = tombstones = 0
        last_view = max(i for i, view in enumerate(group) if view.batch_count)
        for i, view in enumerate(group):
            for index, (raw, batch) in enumerate(_batches(view)):
                is_last = i == last_view and index == view.batch_count - 1
                data, kept, dropped = _filtered(batch, raw, keys, policy, is_last)
                records += kept
                tombstones += dropped
                changed = changed or data is not raw
                if data is not None:
                    writer.add(data)
        if not changed:
            writer.file.close()
            fs.unlink(writer.path)
            return _GroupOutcome(None, records, group[0].size, 0)
        scan = writer.finish()
        if scan.next_offset != group[-1].segment.next_offset:
            raise RuntimeError(
                f"{final}: cleaned segment ends at {scan.next_offset}, not {group[-1].segment.next_offset}"
            )
        segment = Segment.adopt(final, first.base_offset, writer.file, scan)
        return _GroupOutcome(Replacement([view.segment for view in group], segment), records,
                             scan.valid_bytes, tombstones)
    except BaseException:
        writer.file.close()
        try:
            fs.unlink(writer.path, missing_ok=True)
        except OSError:
            log.warning("%s: could not remove %s after a failed clean", directory, writer.path.name)
        raise


def clean_segments(
    fs: FileSystem, directory: Path, sealed: list[SegmentView], active: SegmentView, policy: CleanPolicy
) -> CleanOutput:
    """Step 1: write the cleaned segments of ``sealed`` as durable ``.cleaned`` files.

    ``active`` is read only for the latest offset of each key. Nothing is committed: the
    caller commits with ``commit_swap`` or throws the files away with ``discard_swap``. If
    writing fails, the files written so far are removed before the error is raised.
    """
    keys = _build_key_map(sealed, active)
    cleaned_up_to = active.segment.base_offset
    unstable = keys.first_unstable
    if unstable is not None:
        # Kafka cleans only below the first unstable offset: an open transaction may still abort.
        stable = [view for view in sealed if view.segment.next_offset <= unstable]
        if len(stable) < len(sealed):
            cleaned_up_to = sealed[len(stable)].segment.base_offset
        sealed = stable
    replacements: list[Replacement] = []
    records_after = bytes_after = tombstones = segments_after = 0
    try:
        for group in _plan_groups(sealed, policy.segment_bytes):
            outcome = _clean_group(fs, group, directory, keys, policy)
            records_after += outcome.records
            bytes_after += outcome.size
            tombstones += outcome.tombstones_dropped
            segments_after += 1
            if outcome.replacement is not None:
                replacements.append(outcome.replacement)
        if replacements:
            fs.fsync_directory(directory)  # every .cleaned name is now durable
    except BaseException:
        output = CleanOutput(replacements, _empty_result(cleaned_up_to))
        try:
            discard_swap(fs, directory, output)
        except OSError:
            log.warning("%s: could not remove the files of a failed clean", directory)
        raise
    result = CleanResult(
        segments_before=len(sealed),
        segments_after=segments_after,
        records_before=sum(keys.sealed_records.get(view.segment.base_offset, 0) for view in sealed),
        records_after=records_after,
        bytes_before=sum(view.size for view in sealed),
        bytes_after=bytes_after,
        tombstones_dropped=tombstones,
        cleaned_up_to=cleaned_up_to,
    )
    return CleanOutput(replacements, result)


def _empty_result(cleaned_up_to: int) -> CleanResult:
    return CleanResult(0, 0, 0, 0, 0, 0, 0, cleaned_up_to)


# --- the swap --------------------------------------------------------------------------


def commit_swap(fs: FileSystem, directory: Path, output: CleanOutput) -> None:
    """Step 2: rename every ``.cleaned`` to ``.swap`` and fsync the directory: the commit point."""
    for item in output.replacements:
        fs.rename(item.cleaned, item.swap)
    fs.fsync_directory(directory)


def discard_swap(fs: FileSystem, directory: Path, output: CleanOutput) -> None:
    """Throw away an uncommitted clean's files; the old segments stay the log."""
    output.close()
    paths = [path for item in output.replacements for path in (item.cleaned, item.swap)]
    _discard(fs, directory, paths)


def discard_uncommitted(fs: FileSystem, directory: Path) -> int:
    """Remove every ``.cleaned`` file of ``directory``: what a clean left before its commit point.

    Only a clean in progress has such files, so between cleans they are leftovers.
    """
    paths = [
        directory / name for name in fs.listdir(directory)
        if (parsed := parse_temp_name(name)) is not None and parsed[1] == CLEANED_SUFFIX
    ]
    if paths:
        _discard(fs, directory, paths)
    return len(paths)


def _discard(fs: FileSystem, directory: Path, paths: list[Path]) -> None:
    for path in paths:
        fs.unlink(path, missing_ok=True)
    fs.fsync_directory(directory)


def prepare_history(fs: FileSystem, directory: Path, history_dir: Path | None) -> Path | None:
    """``history_dir/<partition dir name>``, created durably; refuses another filesystem."""
    if history_dir is None:
        return None
    folder = history_folder(history_dir, directory)
    fs.make_dirs(folder)
    if fs.stat(folder).st_dev != fs.stat(directory).st_dev:
        raise ValueError(f"history directory {folder} must be on the same filesystem as {directory}")
    return folder


def _retire(fs: FileSystem, path: Path, history: Path | None) -> None:
    """Delete a replaced segment file, or move it into the history folder; idempotent."""
    if not fs.exists(path):
        return
    if history is None:
        fs.unlink(path)
        return
    target = history / path.name
    if fs.exists(target):
        fs.unlink(path)  # the history already holds the original this cleaned file came from
    else:
        fs.rename(path, target)


def finish_swap(fs: FileSystem, directory: Path, output: CleanOutput, history: Path | None) -> None:
    """Step 4: retire the replaced segments and give each cleaned one its final name.

    Idempotent, so a failed finish can simply run again.
    """
    for item in output.replacements:
        for old in item.replaces:
            _retire(fs, old.path, history)
        if fs.exists(item.swap):
            fs.rename(item.swap, item.final)
    _fsync_after_retiring(fs, directory, history)


def _fsync_after_retiring(fs: FileSystem, directory: Path, history: Path | None) -> None:
    """The history folder first: until the live directory's fsync the originals are still
    there too, so a crash in between leaves a copy in both places, never in neither."""
    if history is not None:
        fs.fsync_directory(history)
    fs.fsync_directory(directory)


def recover_interrupted_clean(fs: FileSystem, directory: Path, history_dir: Path | None) -> tuple[int, int]:
    """Resolve a clean a crash interrupted: ``(swaps completed, files removed)``.

    See the module docstring for why the leftovers alone decide old state or new.
    """
    names = fs.listdir(directory)
    temps = sorted(
        (parsed, directory / name)
        for name in names
        if (parsed := parse_temp_name(name)) is not None and fs.is_file(directory / name)
    )
    if not temps:
        return 0, 0
    if any(suffix == CLEANED_SUFFIX for (_, suffix), _ in temps):
        log.warning(
            "%s: removing %d files of a clean that did not commit: %s",
            directory, len(temps), ", ".join(path.name for _, path in temps),
        )
        _discard(fs, directory, [path for _, path in temps])
        return 0, len(temps)
    history = prepare_history(fs, directory, history_dir)
    segments = sorted(
        (base, directory / name)
        for name in names
        if (base := parse_segment_name(name)) is not None and fs.is_file(directory / name)
    )
    for (base, _), swap in temps:
        scan = scan_segment(fs.read_bytes(swap), base, contiguous=False)
        if scan.problem is not None or not scan.offsets:
            raise CorruptLogError(f"{swap}: cleaned segment is invalid ({scan.problem or 'no batches'})")
        replaced = [path for start, path in segments if base <= start < scan.next_offset]
        log.warning(
            "%s: completing an interrupted clean: %s replaces %s",
            directory, swap.name, ", ".join(path.name for path in replaced) or "nothing left",
        )
        for path in replaced:
            _retire(fs, path, history)
        fs.rename(swap, directory / segment_name(base))
    _fsync_after_retiring(fs, directory, history)
    return len(temps), 0
