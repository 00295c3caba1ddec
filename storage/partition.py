"""A partition log: a directory of segments with crash recovery, appends, fsync and reads.

Blocking file I/O only (sans-trio): the broker calls ``flush`` from a worker thread while
the event loop keeps appending, so the bookkeeping shared by the two sits behind a lock
and fsync itself runs outside it.

Recovery rules (ARCHITECTURE.md invariant 4): a torn or corrupt tail of the last segment
is cut off with a warning; damage anywhere else, or damage followed by a valid batch,
raises ``CorruptLogError`` because truncating there would silently drop acknowledged data.
Before scanning, recovery resolves a clean the cleaner did not finish (``storage.cleaner``),
so the segments it scans are either all the old ones or all the cleaned ones. Sealed
segments may have offset gaps (the cleaner removed records); offsets must still strictly
increase, and each segment must end exactly where the next one begins.
"""

from __future__ import annotations

import bisect
import functools
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from protocol.records import (
    MAGIC,
    TRANSACTIONAL_BIT,
    EncodedRecords,
    RecordBatch,
    RecordBatchError,
    build_records,
    decode_batch,
    encode_batch,
    encode_key_value_batch,
    peek_batch_header,
    rewrite_base_offset,
)
from storage.cleaner import (
    CleanOutput,
    CleanPolicy,
    CleanResult,
    clean_segments,
    commit_swap,
    discard_swap,
    discard_uncommitted,
    finish_swap,
    prepare_history,
    recover_interrupted_clean,
)
from storage.fs import REAL_FS, FileSystem
from storage.layout import log_start_file, parse_segment_name
from storage.segment import (
    CorruptLogError,
    Segment,
    SegmentView,
    later_valid_batch,
    scan_segment,
)
from storage.walker import walk_bytes, walk_file

__all__ = ["CorruptLogError", "OffsetOutOfRangeError", "PartitionLog", "RecoveryReport"]

log = logging.getLogger("kcoord.storage")

#: How many bytes ``read_batches`` pulls per read, so replay is not one syscall per batch.
_READ_CHUNK = 1 << 20


class OffsetOutOfRangeError(Exception):
    """A read asked for an offset outside [log_start_offset, next_offset]."""


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What ``PartitionLog.open`` found, for the start-up log line and for tests."""

    segments: int
    batches: int
    truncated_bytes: int
    truncated_file: Path | None = None
    #: ``.swap`` files of an interrupted clean that recovery put in place (new state).
    swaps_completed: int = 0
    #: ``.cleaned``/``.swap`` files of an uncommitted clean that recovery deleted (old state).
    temp_files_removed: int = 0


class PartitionLog:
    """One partition: segment files ``{base_offset:020d}.log`` in ``directory``.

    Opening runs recovery. The last segment is the active one; ``append`` rolls to a new
    segment once the active one would grow past ``segment_bytes``. ``history_dir``, when
    set, is where replaced segment files go instead of being deleted (see
    ``storage.cleaner``); recovery needs it too, since it may finish an interrupted clean.
    Every file operation goes through ``fs``.
    """

    def __init__(
        self, directory: Path, segment_bytes: int, *, history_dir: Path | None = None, fs: FileSystem = REAL_FS,
        journaled: bool = False,
    ) -> None:
        if segment_bytes < 1:
            raise ValueError(f"segment_bytes must be positive, got {segment_bytes}")
        self.fs = fs
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.history_dir = Path(history_dir) if history_dir is not None else None
        # _lock guards the segment list, the indexes and _dirty; _flush_lock keeps close()
        # from closing fds a flush is still fsyncing, without making appends wait for disk.
        # _clean_lock lets one cleaner run at a time without ever blocking appends.
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._clean_lock = threading.Lock()
        self._newest: dict[Path, tuple[int, int]] = {}  # sealed segment -> (size, newest timestamp)
        self._dirty: set[Segment] = set()
        self._closed = False
        self._segments: list[Segment] = []
        #: Offsets below this were covered by the last clean (in memory only: after a
        #: restart everything sealed counts as dirty once).
        self._cleaned_up_to = 0
        #: Disk work a failed clean left behind (finish a committed swap, or delete
        #: uncommitted files); the next clean retries it before doing anything else.
        self._cleaner_retry: Callable[[], object] | None = None
        #: A log start offset DeleteRecords moved past the first segment's base (persisted in
        #: ``log-start-offset``); the segment below it goes when all of it is below.
        self._start_floor = 0
        #: The epoch stamped into every batch this log appends as a leader (-1: leave the
        #: batch's own); a cluster node sets it while it leads the partition (KIP-101).
        self.leader_epoch = -1
        #: (epoch, start offset) of each leader epoch in the log, oldest first: Kafka's
        #: LeaderEpochFileCache, built from the batch headers when first asked for.
        self._epochs: list[tuple[int, int]] | None = None
        #: The replicated high watermark, when a replication leader or follower keeps one;
        #: None: every appended record is readable (one replica).
        self._high_watermark: int | None = None
        #: Called with every batch ``append`` and ``append_batch`` write (under _lock), and
        #: before ``truncate_to`` and ``reset_to`` cut anything: a coordinator log's journal
        #: (``storage.wal``) takes the batches and checkpoints before a cut.
        self.on_write: Callable[[bytes], None] | None = None
        self.before_cut: Callable[[], None] | None = None
        #: With ``journaled`` (a coordinator log's partition, opened before its journal is read),
        #: damage in the last segment followed by valid batches is cut like a torn tail, and
        #: ``cut_before_valid`` says at which offset: the journal must then hold the batches
        #: from there on, which ``CoordinatorLog`` checks.
        self._journaled = journaled
        self.cut_before_valid: int | None = None
        self.recovery = self._recover()
        self._start_floor = self._read_start_floor()
        self._cleaned_up_to = self.log_start_offset

    @classmethod
    def open(
        cls, directory: Path, segment_bytes: int, *, history_dir: Path | None = None, fs: FileSystem = REAL_FS,
        journaled: bool = False,
    ) -> PartitionLog:
        """Open (creating if needed) and recover the log in ``directory``."""
        return cls(directory, segment_bytes, history_dir=history_dir, fs=fs, journaled=journaled)

    # --- recovery ---------------------------------------------------------------------

    def _recover(self) -> RecoveryReport:
        """Scan every segment, cut a torn tail, build the index; raise on real corruption."""
        fs = self.fs
        fs.make_dirs(self.directory)
        swaps, removed = recover_interrupted_clean(fs, self.directory, self.history_dir)
        found = sorted(
            (base, self.directory / name)
            for name in fs.listdir(self.directory)
            if (base := parse_segment_name(name)) is not None and fs.is_file(self.directory / name)
        )
        if not found:
            self._segments.append(Segment.create(fs, self.directory, 0))
            fs.fsync_directory(self.directory)
            return RecoveryReport(1, 0, 0, None, swaps, removed)
        try:
            report = self._recover_segments(found)
            return RecoveryReport(
                report.segments, report.batches, report.truncated_bytes, report.truncated_file,
                swaps, removed,
            )
        except BaseException:
            for segment in self._segments:
                segment.close()
            self._segments.clear()
            raise

    def _recover_segments(self, found: list[tuple[int, Path]]) -> RecoveryReport:
        batches = 0
        truncated = 0
        truncated_file: Path | None = None
        expected: int | None = None
        for i, (base, path) in enumerate(found):
            is_last = i == len(found) - 1
            if expected is not None and base != expected:
                raise CorruptLogError(
                    f"{path}: segment starts at offset {base} but the previous segment "
                    f"ends at offset {expected} (missing or overlapping segment)"
                )
            data = self.fs.read_bytes(path)
            # Only the cleaner leaves gaps, and it never rewrites the active segment, so the
            # last segment stays strictly contiguous (a damaged base offset there is caught).
            scan = scan_segment(data, base, contiguous=is_last)
            if scan.problem is not None:
                if not is_last:
                    raise CorruptLogError(
                        f"{path}: invalid data in a non-last segment at byte {scan.valid_bytes} "
                        f"of {len(data)}: {scan.problem}"
                    )
                later = later_valid_batch(data, scan.valid_bytes, scan.next_offset)
                if later is not None and self._journaled:
                    # Written since the last checkpoint and never fsynced: the disk may have
                    # kept a later page and lost an earlier one. The journal holds them all.
                    log.warning("%s: corrupt data at byte %d (%s) followed by a valid batch at byte %d; "
                                "cutting there, for the journal to fill in", path, scan.valid_bytes,
                                scan.problem, later)
                    self.cut_before_valid = scan.next_offset
                elif later is not None:
                    raise CorruptLogError(
                        f"{path}: corrupt data at byte {scan.valid_bytes} ({scan.problem}) is "
                        f"followed by a valid batch at byte {later}; this is not a torn tail"
                    )
            segment = Segment.open(self.fs, path, base, scan)
            self._segments.append(segment)
            if scan.valid_bytes < len(data):
                truncated = len(data) - scan.valid_bytes
                truncated_file = path
                log.warning(
                    "%s: torn tail, truncating at byte %d and dropping %d bytes (%s)",
                    path, scan.valid_bytes, truncated, scan.problem,
                )
                segment.truncate(scan.valid_bytes)
            batches += segment.batch_count
            expected = scan.next_offset
        return RecoveryReport(len(found), batches, truncated, truncated_file)

    # --- properties -------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return min(max(self._segments[0].base_offset, self._start_floor), self._segments[-1].next_offset)

    def _read_start_floor(self) -> int:
        path = log_start_file(self.directory)
        if not self.fs.exists(path):
            return 0
        text = self.fs.read_bytes(path).decode("ascii", "replace").strip()
        if not text.isdigit():
            raise CorruptLogError(f"{path}: expected a log start offset, found {text[:40]!r}")
        return int(text)

    def advance_log_start(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (Kafka's DeleteRecords); the new start.

        The offset is made durable first (``log-start-offset``, replaced atomically), then
        sealed segments that lie wholly below it are deleted. An offset at or below the
        current start changes nothing; the caller checks it is not past the log end.
        """
        with self._clean_lock:
            with self._lock:
                if self._closed:
                    raise ValueError(f"{self.directory}: log is closed")
                if offset <= self.log_start_offset:
                    return self.log_start_offset
                if offset > self.next_offset:
                    raise OffsetOutOfRangeError(f"offset {offset} is past the log end {self.next_offset}")
            self.fs.write_atomically(log_start_file(self.directory), f"{offset}\n".encode())
            with self._lock:
                self._start_floor = offset
                doomed = [s for s in self._segments[:-1] if s.next_offset <= offset]
                gone = {id(segment) for segment in doomed}
                self._segments = [s for s in self._segments if id(s) not in gone]
            for segment in doomed:
                self.fs.unlink(segment.path, missing_ok=True)
                self._newest.pop(segment.path, None)
            if doomed:
                self.fs.fsync_directory(self.directory)
            log.info("%s: log start offset moved to %d (%d segments deleted)",
                     self.directory.name, self.log_start_offset, len(doomed))
            return self.log_start_offset

    @property
    def next_offset(self) -> int:
        """Log end offset: the offset the next appended record gets."""
        return self._segments[-1].next_offset

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(segment.size for segment in self._segments)

    @property
    def segments(self) -> list[Path]:
        """Segment files, oldest first; the last one is active."""
        with self._lock:
            return [segment.path for segment in self._segments]

    # --- writing ----------------------------------------------------------------------

    def append(
        self, records: Sequence[tuple[bytes | None, bytes | None]] | EncodedRecords, timestamp_ms: int, *,
        producer_id: int = -1, producer_epoch: int = -1, transactional: bool = False,
    ) -> tuple[int, int]:
        """Append all ``records`` as ONE batch (a crash keeps all or none of them).

        A transactional batch carries its producer id and epoch (the coordinator's offset
        commits inside a transaction). Not fsynced; returns ``(base_offset, next_offset)``.
        """
        if not records:
            raise ValueError("cannot append an empty batch")
        with self._lock:
            base = self._active_for_write().next_offset
            if producer_id == -1 and not transactional:
                data = encode_key_value_batch(records, base_offset=base, base_timestamp=timestamp_ms,
                                              partition_leader_epoch=self.leader_epoch)
            elif isinstance(records, EncodedRecords):
                raise ValueError("a transactional batch is appended from its (key, value) pairs")
            else:
                data = encode_batch(build_records(records), base_offset=base, base_timestamp=timestamp_ms,
                                    producer_id=producer_id, producer_epoch=producer_epoch,
                                    attributes=TRANSACTIONAL_BIT if transactional else 0,
                                    partition_leader_epoch=self.leader_epoch)
            self._note_epoch(self.leader_epoch, base)
            return self._write(data, base, base + len(records))

    def append_batch(self, batch: bytes) -> tuple[int, int]:
        """Append a batch encoded elsewhere (a producer's), giving it the next offsets.

        The caller has validated it (CRC included); only the framing is rechecked here,
        because a wrong length would corrupt the file for every batch after it.
        """
        header = peek_batch_header(batch)
        if header.magic != MAGIC or header.size != len(batch):
            raise RecordBatchError(f"not one v2 batch: header says {header.size} bytes, got {len(batch)}")
        if header.last_offset_delta < 0:
            raise RecordBatchError(f"batch has no offsets (last_offset_delta {header.last_offset_delta})")
        with self._lock:
            base = self._active_for_write().next_offset
            epoch = self.leader_epoch if self.leader_epoch >= 0 else None
            data = rewrite_base_offset(batch, base, partition_leader_epoch=epoch)
            self._note_epoch(header.partition_leader_epoch if epoch is None else epoch, base)
            return self._write(data, base, base + header.last_offset_delta + 1)

    def _active_for_write(self) -> Segment:
        if self._closed:
            raise ValueError(f"{self.directory}: log is closed")
        return self._segments[-1]

    def _write(self, data: bytes, base: int, next_offset: int) -> tuple[int, int]:
        """Roll if the batch would overflow the active segment, then write it. Holds _lock."""
        active = self._segments[-1]
        if active.size > 0 and active.size + len(data) > self.segment_bytes:
            active = self._roll()
        active.append(data, base, next_offset)
        self._dirty.add(active)
        if self.on_write is not None:
            self.on_write(data)
        return base, next_offset

    def _roll(self) -> Segment:
        """Seal the active segment (fsynced, so only the last segment can ever be torn)."""
        old = self._segments[-1]
        old.fsync()
        self._dirty.discard(old)
        new = Segment.create(self.fs, self.directory, old.next_offset)
        try:
            self.fs.fsync_directory(self.directory)
        except BaseException:
            new.close()
            self.fs.unlink(new.path, missing_ok=True)
            raise
        self._segments.append(new)
        return new

    def flush(self) -> None:
        """fsync every segment written since the last flush; callable from a worker thread.

        Appends that race with it are left for the next flush. If fsync fails the segments
        stay dirty, but the broker should treat that as fatal: Linux may already have
        dropped the unwritten pages.
        """
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    raise ValueError(f"{self.directory}: log is closed")
                dirty = list(self._dirty)
                self._dirty.clear()
            try:
                for segment in dirty:
                    segment.fsync()
            except BaseException:
                with self._lock:
                    self._dirty.update(dirty)
                raise

    def close(self) -> None:
        """Close every file; does not fsync (call ``flush`` first to keep unsynced data)."""
        with self._flush_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            for segment in self._segments:
                segment.close()

    # --- replication (a cluster node's leader or follower) --------------------------------

    @property
    def high_watermark(self) -> int:
        """The offset below which records are replicated to the ISR: what consumers may read."""
        end = self.next_offset
        return end if self._high_watermark is None else min(self._high_watermark, end)

    @property
    def replicated_high_watermark(self) -> int | None:
        """The high watermark replication last set (None: never set since the log opened)."""
        return self._high_watermark

    def set_high_watermark(self, offset: int | None) -> None:
        """Set by replication (None: no replication, the log end is the high watermark)."""
        self._high_watermark = offset

    def append_replicated(self, raw: bytes) -> int:
        """Append a leader's batches with the leader's offsets and epochs; returns the new log end.

        Batches that end at or below the log end are skipped (already here); a partial batch
        at the end (the leader cut its reply at the size limit) is left for the next fetch. A
        batch after a gap (the leader's cleaner removed records) seals the segment holding it,
        since only sealed segments may have gaps.
        """
        with self._lock:
            for pos, header in walk_bytes(raw):
                active = self._active_for_write()
                if header.next_offset <= active.next_offset:
                    continue
                if header.base_offset < active.next_offset:
                    raise CorruptLogError(f"{self.directory}: replicated batch at offset {header.base_offset} "
                                          f"overlaps the log end {active.next_offset}")
                data = bytes(raw[pos : pos + header.size])
                gap = header.base_offset > active.next_offset
                if active.size > 0 and active.size + len(data) > self.segment_bytes:
                    active = self._roll()
                    gap = header.base_offset > active.next_offset
                if gap and active.batch_ends is None:
                    active.batch_ends = [*active.offsets[1:], active.next_offset]
                self._note_epoch(header.partition_leader_epoch, header.base_offset)
                active.append(data, header.base_offset, header.next_offset)
                self._dirty.add(active)
                if gap:
                    self._roll()
            return self._segments[-1].next_offset

    def truncate_to(self, offset: int) -> int:
        """Cut the log back to ``offset`` (a follower's divergent tail, KIP-101); the new log end.

        An offset inside a batch cuts before that batch. Segments wholly past the cut go;
        the cut is durable before this returns. Below the log start, the log becomes empty
        at ``offset`` (``reset_to``).
        """
        if self.before_cut is not None and offset < self.next_offset:
            self.before_cut()
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.directory}: log is closed")
            if offset >= self.next_offset:
                return self.next_offset
            if offset < self.log_start_offset:
                doomed_all = True
            else:
                doomed_all = False
                keep = [s for s in self._segments if s.base_offset < offset] or self._segments[:1]
                doomed = self._segments[len(keep):]
                last = keep[-1]
                index = last.locate(offset)  # a cut inside a batch falls before it
                cut = last.positions[index] if index < last.batch_count else last.size
                new_end = last.offsets[index] if index < last.batch_count else last.next_offset
                last.truncate(cut)
                del last.offsets[index:]
                del last.positions[index:]
                if last.batch_ends is not None:
                    del last.batch_ends[index:]
                last.size = cut
                last.next_offset = max(new_end, last.base_offset)
                self._segments = keep
                self._dirty.difference_update(doomed)
                for segment in doomed:  # readers holding one keep reading it, as after retention
                    self.fs.unlink(segment.path, missing_ok=True)
                    self._newest.pop(segment.path, None)
                if last.batch_ends is not None:
                    self._roll()  # only sealed segments may have gaps: the active one starts here
                if self._epochs is not None:
                    self._epochs = [(e, start) for e, start in self._epochs if start < last.next_offset]
                if self._high_watermark is not None:
                    self._high_watermark = min(self._high_watermark, last.next_offset)
        if doomed_all:
            return self.reset_to(offset)
        self.fs.fsync_directory(self.directory)
        log.info("%s: truncated to offset %d", self.directory.name, self.next_offset)
        return self.next_offset

    def reset_to(self, offset: int) -> int:
        """Delete every record and start the log empty at ``offset`` (a follower that is
        behind the leader's log start, as Kafka's truncateFullyAndStartAt)."""
        if self.before_cut is not None:
            self.before_cut()
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.directory}: log is closed")
            doomed = list(self._segments)
            for segment in doomed:
                self.fs.unlink(segment.path, missing_ok=True)
                self._newest.pop(segment.path, None)
                self._dirty.discard(segment)
            self.fs.unlink(log_start_file(self.directory), missing_ok=True)
            self._start_floor = 0
            self._segments = [Segment.create(self.fs, self.directory, offset)]
            self.fs.fsync_directory(self.directory)
            self._epochs = []
            self._cleaned_up_to = offset
            if self._high_watermark is not None:
                self._high_watermark = offset
        log.info("%s: emptied, starting at offset %d", self.directory.name, offset)
        return offset

    def _note_epoch(self, epoch: int, base: int) -> None:
        """A batch of ``epoch`` at ``base`` is being appended. Holds _lock."""
        epochs = self._epochs
        if epochs is not None and epoch >= 0 and (not epochs or epoch > epochs[-1][0]):
            epochs.append((epoch, base))

    def _epoch_cache(self) -> list[tuple[int, int]]:
        """(epoch, start offset) pairs, built from the batch headers on first use. Holds _lock."""
        if self._epochs is None:
            epochs: list[tuple[int, int]] = []
            for segment in self._segments:
                for _, header in walk_file(segment.file.pread, segment.size):
                    epoch = header.partition_leader_epoch
                    if epoch >= 0 and (not epochs or epoch > epochs[-1][0]):
                        epochs.append((epoch, header.base_offset))
            self._epochs = epochs
        return self._epochs

    @property
    def first_epoch(self) -> tuple[int, int] | None:
        """(the oldest epoch a batch still carries, its start offset); None when none does."""
        with self._lock:
            epochs = self._epoch_cache()
            return epochs[0] if epochs else None

    @property
    def latest_epoch(self) -> int:
        """The epoch of the last batch that carries one (-1: none)."""
        with self._lock:
            epochs = self._epoch_cache()
            return epochs[-1][0] if epochs else -1

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's LeaderEpochFileCache.endOffsetFor: ``(largest epoch <= epoch, its end offset)``.

        The end offset of an epoch is where the next epoch starts, or the log end for the
        latest one; (-1, -1) when the log knows no epoch that old.
        """
        with self._lock:
            epochs = self._epoch_cache()
            end = self._segments[-1].next_offset
            if not epochs or epoch < epochs[0][0]:
                return -1, -1
            if epoch >= epochs[-1][0]:
                return epochs[-1][0], end
            index = bisect.bisect_right([e for e, _ in epochs], epoch)
            return epochs[index - 1][0], epochs[index][1]

    # --- compaction -------------------------------------------------------------------

    def enforce_retention(self, now_ms: int, retention_ms: int, retention_bytes: int) -> int:
        """Delete whole sealed segments, oldest first, as Kafka's delete policy does.

        A segment goes when its newest record is more than ``retention_ms`` old, or while
        the log would still hold at least ``retention_bytes`` without it (-1 disables
        either rule). The active segment is never deleted. Returns how many went; the log
        start offset moves to the first segment kept. Readers already holding a deleted
        segment keep reading it: its file is unlinked, and closed when they let go.
        """
        with self._clean_lock:
            doomed = self._past_retention(now_ms, retention_ms, retention_bytes)
            if not doomed:
                return 0
            with self._lock:
                gone = {id(segment) for segment in doomed}
                self._segments = [s for s in self._segments if id(s) not in gone]
            for segment in doomed:
                self.fs.unlink(segment.path, missing_ok=True)
                self._newest.pop(segment.path, None)
            self.fs.fsync_directory(self.directory)
            log.info("%s: retention deleted %d segments; log starts at offset %d",
                     self.directory.name, len(doomed), self.log_start_offset)
            return len(doomed)

    def retention_start(self, now_ms: int, retention_ms: int, retention_bytes: int) -> int | None:
        """Where ``enforce_retention`` would move the log start now; None if it would delete nothing.

        For a caller that must act before the start moves (the group coordinator commits its
        ``nearest`` offsets first): ``advance_log_start`` with this offset then removes
        exactly the segments retention would have removed.
        """
        with self._clean_lock:
            doomed = self._past_retention(now_ms, retention_ms, retention_bytes)
        return doomed[-1].next_offset if doomed else None

    def _past_retention(self, now_ms: int, retention_ms: int, retention_bytes: int) -> list[Segment]:
        """The sealed segments retention deletes, oldest first (the caller holds the clean lock)."""
        with self._lock:
            if self._closed:
                return []
            sealed = list(self._segments[:-1])
            total = sum(segment.size for segment in self._segments)
        doomed: list[Segment] = []
        for segment in sealed:
            too_old = retention_ms >= 0 and now_ms - self._newest_timestamp(segment) > retention_ms
            too_big = retention_bytes >= 0 and total - segment.size >= retention_bytes
            if not (too_old or too_big):
                break
            doomed.append(segment)
            total -= segment.size
        return doomed

    def segments_from_timestamp(self, timestamp: int) -> Iterator[int]:
        """Base offsets of the segments that may hold a record at or after ``timestamp``.

        A segment-level time index: sealed segments whose newest batch is older than
        ``timestamp`` are skipped without reading their records (their newest timestamp is
        cached); the active segment is always a candidate.
        """
        with self._lock:
            segments = list(self._segments)
        for i, segment in enumerate(segments):
            if i == len(segments) - 1 or self._newest_timestamp(segment) >= timestamp:
                yield segment.base_offset

    def _newest_timestamp(self, segment: Segment) -> int:
        """The largest batch max_timestamp of a sealed (immutable) segment, cached."""
        cached = self._newest.get(segment.path)
        if cached is not None and cached[0] == segment.size:
            return cached[1]
        newest = max((header.max_timestamp for _, header in walk_file(segment.file.pread, segment.size)),
                     default=-1)
        self._newest[segment.path] = (segment.size, newest)
        return newest

    def compact(self, now_ms: int, delete_retention_ms: int) -> CleanResult:
        """Compact the sealed segments (``storage.cleaner``) and swap them in; appends carry on.

        Cleans of one log run one at a time. Replaced segment files go to ``history_dir``
        when the log was opened with one. A failure before the commit point leaves the old
        segments; one after it leaves the new ones in memory, and the next clean first
        finishes the swap on disk.
        """
        policy = CleanPolicy(now_ms, delete_retention_ms, self.segment_bytes)
        fs, directory = self.fs, self.directory
        with self._clean_lock:
            if self._cleaner_retry is not None:
                self._cleaner_retry()
                self._cleaner_retry = None
            sealed, active = self._cleaner_views()
            try:
                history = prepare_history(fs, directory, self.history_dir) if sealed else None
                output = clean_segments(fs, directory, sealed, active, policy)
            except BaseException:
                # Whatever .cleaned files it could not remove go before the next clean.
                self._cleaner_retry = functools.partial(discard_uncommitted, fs, directory)
                raise
            finally:
                for view in [*sealed, active]:
                    view.close()
            if output.replacements:
                self._swap(output, history)
            return output.result

    def _swap(self, output: CleanOutput, history: Path | None) -> None:
        """Commit the cleaned files, install them in memory, then finish the swap on disk."""
        fs, directory = self.fs, self.directory
        try:
            with self._lock:
                if self._closed:
                    raise ValueError(f"{directory}: log closed during a clean")
            commit_swap(fs, directory, output)
        except BaseException:
            undo = functools.partial(discard_swap, fs, directory, output)
            try:
                undo()
            except OSError:
                log.exception("%s: could not remove the files of a failed clean", directory)
                self._cleaner_retry = undo
            raise
        if not self._install_cleaned(output):
            output.close()
        try:
            finish_swap(fs, directory, output, history)
        except BaseException:
            self._cleaner_retry = functools.partial(finish_swap, fs, directory, output, history)
            raise
        result = output.result
        log.info(
            "%s: cleaned offsets below %d: %d -> %d segments, %d -> %d records, %d -> %d bytes",
            directory, result.cleaned_up_to, result.segments_before, result.segments_after,
            result.records_before, result.records_after, result.bytes_before, result.bytes_after,
        )

    def dirty_ratio(self) -> float:
        """Share of sealed bytes written since the last clean: Kafka's cleanable ratio.

        The broker compares it with ``log.cleaner.min.cleanable.ratio``; the active
        segment never counts, since the cleaner cannot touch it.
        """
        with self._lock:
            sealed = self._segments[:-1]
            total = sum(segment.size for segment in sealed)
            dirty = sum(segment.size for segment in sealed if segment.base_offset >= self._cleaned_up_to)
        return dirty / total if total else 0.0

    def _cleaner_views(self) -> tuple[list[SegmentView], SegmentView]:
        """For the cleaner: views of the sealed segments and of the active segment's prefix.

        Taken under the lock so the active prefix is consistent; sealed segments never
        change, and each view has its own fd, so the cleaner reads them without the lock.
        """
        views: list[SegmentView] = []
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.directory}: log is closed")
            try:
                for segment in self._segments:
                    views.append(segment.view())
            except BaseException:
                for view in views:
                    view.close()
                raise
        return views[:-1], views[-1]

    def _install_cleaned(self, output: CleanOutput) -> bool:
        """Put cleaned segments in place of the runs they replace; the only step under the lock.

        Returns False (installing nothing) if the log was closed meanwhile.
        """
        with self._lock:
            if self._closed:
                return False
            by_first = {id(item.replaces[0]): item for item in output.replacements}
            segments: list[Segment] = []
            i = 0
            while i < len(self._segments):
                item = by_first.pop(id(self._segments[i]), None)
                if item is None:
                    segments.append(self._segments[i])
                    i += 1
                    continue
                old = item.replaces
                if self._segments[i : i + len(old)] != old:  # Segment compares by identity
                    raise RuntimeError(f"{self.directory}: segments changed under the cleaner")
                segments.append(item.segment)
                i += len(old)
            if by_first:
                raise RuntimeError(f"{self.directory}: cleaned segments no longer in the log")
            self._segments = segments
            self._cleaned_up_to = max(self._cleaned_up_to, output.result.cleaned_up_to)
            return True

    # --- reading ----------------------------------------------------------------------

    def _snapshot(self, start_offset: int) -> list[tuple[Segment, int, int]]:
        """(segment, first batch index, batch count) to read, fixed at call time."""
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.directory}: log is closed")
            bases = [segment.base_offset for segment in self._segments]
            first = max(bisect.bisect_right(bases, start_offset) - 1, 0)
            plan: list[tuple[Segment, int, int]] = []
            for i, segment in enumerate(self._segments[first:]):
                index = segment.locate(start_offset) if i == 0 else 0
                if index < segment.batch_count:
                    plan.append((segment, index, segment.batch_count))
            return plan

    def read_batches(self, start_offset: int = 0) -> Iterator[tuple[int, RecordBatch]]:
        """Yield ``(base_offset, batch)`` from the batch holding ``start_offset`` to the end.

        Offsets below the log start begin at the log start (replay reads from 0). Batches
        appended while iterating may or may not be included; nothing is rescanned.
        """
        for segment, index, count in self._snapshot(start_offset):
            while index < count:
                begin = segment.positions[index]
                stop = index + 1
                while stop < count and segment.batch_end(stop) - begin <= _READ_CHUNK:
                    stop += 1
                chunk = segment.read(begin, segment.batch_end(stop - 1) - begin)
                for i in range(index, stop):
                    pos = segment.positions[i]
                    raw = chunk[pos - begin : segment.batch_end(i) - begin]
                    try:
                        batch = decode_batch(raw)
                    except RecordBatchError as exc:
                        raise CorruptLogError(f"{segment.path}: batch at byte {pos}: {exc}") from exc
                    yield batch.base_offset, batch
                index = stop

    def read_raw(self, start_offset: int, max_bytes: int, upto: int | None = None) -> bytes:
        """Whole raw batches from the one holding ``start_offset``, up to ``max_bytes``.

        Kafka fetch semantics: at least one batch even if it alone exceeds ``max_bytes``,
        and never past the end of one segment (the client simply fetches again). Returns
        b"" at the log end; raises ``OffsetOutOfRangeError`` outside the log. ``upto`` leaves
        out batches that start at or after it: the high watermark for consumers, the last
        stable offset (a batch boundary, at most the high watermark) for read_committed ones.
        """
        with self._lock:
            if not self.log_start_offset <= start_offset <= self.next_offset:
                raise OffsetOutOfRangeError(
                    f"offset {start_offset} outside [{self.log_start_offset}, {self.next_offset}]"
                )
        for segment, index, count in self._snapshot(start_offset):
            begin = segment.positions[index]
            stop = index + 1
            if upto is not None and segment.offsets[index] >= upto:
                return b""
            while stop < count and segment.batch_end(stop) - begin <= max_bytes and (
                    upto is None or segment.offsets[stop] < upto):
                stop += 1
            return segment.read(begin, segment.batch_end(stop - 1) - begin)
        return b""
