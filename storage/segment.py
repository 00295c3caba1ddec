"""One segment file of a partition log: a batch index, blocking I/O, and judging its bytes.

A segment is ``{base_offset:020d}.log`` (names: ``storage.layout``), a plain concatenation
of v2 record batches, exactly as Kafka lays them out. This module knows how to read and
write one file and how to judge its bytes; the policy (truncate a torn tail or refuse to
start) lives in ``storage.partition`` because it depends on where the segment sits in the log.

Offsets inside a segment only ever grow. The active segment is written contiguously
(each batch starts where the previous one ended); a segment rewritten by the cleaner
(``storage.cleaner``) may skip offsets between batches, and its batches may cover offsets
that hold no record, exactly like a compacted Kafka segment.
"""

from __future__ import annotations

import bisect
import errno
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c

from protocol.records import HEADER_SIZE, LOG_OVERHEAD, MAGIC, MIN_BATCH_LENGTH, peek_batch_header
from storage.fs import Buffer, File, FileSystem
from storage.layout import segment_name
from storage.walker import walk_bytes

__all__ = [
    "CorruptLogError",
    "Segment",
    "SegmentScan",
    "SegmentView",
    "later_valid_batch",
    "scan_segment",
]

#: The magic byte sits this far into a batch header; forward scans key on it.
_MAGIC_OFFSET = 16
_CRC_COVERS_FROM = 21
#: Kafka keeps offsets within a segment inside an int32 of the base, so a header whose
#: base offset is further ahead than this is noise, not a batch that belongs here.
_MAX_OFFSET_JUMP = 2**31
_UINT32 = struct.Struct(">I")


class CorruptLogError(Exception):
    """The log is damaged somewhere a crash cannot explain; the broker must not start."""


# --- judging a segment's bytes --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentScan:
    """What recovery learned from one segment's bytes.

    ``offsets``/``positions`` describe the batches of the valid prefix (``valid_bytes``
    long); ``problem`` says why scanning stopped early, or is None if the whole file is good.
    ``batch_ends`` holds each batch's next offset when the segment has gaps between
    batches, and is None when batches are contiguous (the end is the next batch's base).
    """

    offsets: list[int]
    positions: list[int]
    next_offset: int
    valid_bytes: int
    problem: str | None
    batch_ends: list[int] | None = None


def scan_segment(data: bytes, base_offset: int, *, contiguous: bool = True) -> SegmentScan:
    """CRC-check and offset-check every batch, so recovery knows how far the log is good.

    The base offset sits outside the CRC, so the offsets are the only sign that it was
    damaged. With ``contiguous`` (the active segment, which only appends write) each batch
    must start exactly where the previous one ended; otherwise (a sealed segment, which the
    cleaner may have rewritten) offsets must strictly increase, so gaps are allowed but a
    batch that goes back or overlaps is not.
    """
    walk = walk_bytes(data)
    positions, offsets, deltas = walk.columns()
    ends: list[int] = []
    gapped = False
    expected = base_offset
    problem: str | None = None
    for pos, base, delta in zip(positions, offsets, deltas, strict=True):
        if base != expected:
            if contiguous:
                problem = f"batch at byte {pos} has base offset {base}, expected {expected}"
                break
            if base < expected:
                problem = f"batch at byte {pos} has base offset {base}, expected at least {expected}"
                break
            gapped = True
        if delta < 0:
            problem = f"batch at byte {pos} has negative last_offset_delta {delta}"
            break
        expected = base + delta + 1  # the batch's next offset
        ends.append(expected)
    else:
        problem = walk.describe_stop()
    valid = walk.valid_bytes  # the end of the last batch kept
    kept = len(ends)
    if kept < len(positions):  # an offset went wrong: the segment is good up to that batch
        valid = positions[kept]
        del positions[kept:], offsets[kept:]
    return SegmentScan(offsets, positions, expected, valid, problem, ends if gapped else None)


def _valid_batch_at(data: bytes, pos: int, min_base_offset: int) -> bool:
    """Whether a well-framed, CRC-valid batch that could follow ``min_base_offset`` starts at pos."""
    if pos < 0 or len(data) - pos < HEADER_SIZE:
        return False
    header = peek_batch_header(data, pos)
    if header.magic != MAGIC or header.batch_length < MIN_BATCH_LENGTH:
        return False
    stop = pos + LOG_OVERHEAD + header.batch_length
    if stop > len(data) or header.last_offset_delta < 0:
        return False
    if not min_base_offset <= header.base_offset < min_base_offset + _MAX_OFFSET_JUMP:
        return False
    return crc32c.crc32c(memoryview(data)[pos + _CRC_COVERS_FROM : stop]) == header.crc


def later_valid_batch(data: bytes, bad_pos: int, min_base_offset: int) -> int | None:
    """Position of a valid batch after the bad one at ``bad_pos``, or None.

    This tells a torn tail (nothing good follows: safe to cut) from damage in the middle
    of the log (acknowledged batches follow: cutting would silently lose them). It tries
    the spot the bad header points at, then every later position whose magic byte and
    base offset look right; only those pay for a full check, so the scan is one linear
    pass. Batches must not go back in offsets, which also keeps a batch that a
    producer stored inside a record value from passing for a log batch.
    """
    if data.count(0, bad_pos) == len(data) - bad_pos:
        return None  # a preallocated, never written tail: the common torn case, decided fast
    if len(data) - bad_pos >= HEADER_SIZE:
        claimed = peek_batch_header(data, bad_pos)
        if claimed.batch_length >= MIN_BATCH_LENGTH and _valid_batch_at(
            data, bad_pos + LOG_OVERHEAD + claimed.batch_length, min_base_offset
        ):
            return bad_pos + LOG_OVERHEAD + claimed.batch_length
    for match in _candidates(min_base_offset).finditer(data, bad_pos + 1):
        if _valid_batch_at(data, match.start(), min_base_offset):
            return match.start()
    return None


def _candidates(min_base_offset: int) -> re.Pattern[bytes]:
    """Positions whose base offset's high word and magic byte fit; the regex engine does the walk.

    A plausible base offset lies in ``[min, min + 2**31)``, so its top four bytes take at
    most two values; together with the magic byte that rules out nearly all record data
    before any Python code runs.
    """
    highs = sorted({min_base_offset >> 32, (min_base_offset + _MAX_OFFSET_JUMP - 1) >> 32})
    words = b"|".join(re.escape(_UINT32.pack(high)) for high in highs if high < 2**31)
    return re.compile(
        rb"(?=(?:" + words + rb").{%d}" % (_MAGIC_OFFSET - 4) + re.escape(bytes([MAGIC])) + rb")",
        re.DOTALL,
    )


# --- one open segment file ------------------------------------------------------------


class Segment:
    """An open segment file plus the offsets and positions of its batches.

    The index lives in memory (rebuilt at recovery, extended on append) so reads find a
    batch with a bisect instead of rescanning the file. Not thread-safe by itself: the
    owning ``PartitionLog`` serialises access, except ``fsync`` which may run anywhere.
    ``batch_ends`` is None while batches are contiguous; a cleaned segment keeps each
    batch's next offset there so a read that starts in a gap skips to the next batch.

    A segment the cleaner replaced is not closed explicitly, because a reader may still be
    iterating over it; its file is closed when the last reference goes away.
    """

    __slots__ = (
        "base_offset", "batch_ends", "file", "next_offset", "offsets", "path", "positions", "size",
    )

    def __init__(
        self,
        path: Path,
        base_offset: int,
        file: File,
        size: int,
        offsets: list[int],
        positions: list[int],
        next_offset: int,
        batch_ends: list[int] | None = None,
    ) -> None:
        self.path = path
        self.base_offset = base_offset
        self.file = file
        self.size = size
        self.offsets = offsets
        self.positions = positions
        self.next_offset = next_offset
        self.batch_ends = batch_ends

    @classmethod
    def create(cls, fs: FileSystem, directory: Path, base_offset: int) -> Segment:
        """A new empty segment; the caller fsyncs the directory to make the name durable."""
        path = directory / segment_name(base_offset)
        return cls(path, base_offset, fs.open(path, create=True), 0, [], [], base_offset)

    @classmethod
    def open(cls, fs: FileSystem, path: Path, base_offset: int, scan: SegmentScan) -> Segment:
        """Open a recovered file whose first ``scan.valid_bytes`` are known good."""
        return cls.adopt(path, base_offset, fs.open(path), scan)

    @classmethod
    def adopt(cls, path: Path, base_offset: int, file: File, scan: SegmentScan) -> Segment:
        """A segment over an already open ``file`` (the cleaner's, still named ``.cleaned``).

        ``path`` is the name the file will have; the handle follows it through renames.
        """
        ends = list(scan.batch_ends) if scan.batch_ends is not None else None
        return cls(
            path, base_offset, file, scan.valid_bytes, list(scan.offsets), list(scan.positions),
            scan.next_offset, ends,
        )

    @property
    def batch_count(self) -> int:
        return len(self.offsets)

    def batch_end(self, index: int) -> int:
        """File position just past batch ``index``."""
        return self.positions[index + 1] if index + 1 < len(self.positions) else self.size

    def locate(self, offset: int) -> int:
        """Index of the batch holding ``offset`` (or of the first batch after it).

        Returns ``batch_count`` when ``offset`` is at or past the segment's end.
        """
        if offset >= self.next_offset:
            return len(self.offsets)
        index = bisect.bisect_right(self.offsets, offset) - 1
        if index < 0:
            return 0
        if self.batch_ends is not None and self.batch_ends[index] <= offset:
            return index + 1  # offset falls in a gap the cleaner left after this batch
        return index

    def append(self, data: Buffer, base_offset: int, next_offset: int) -> int:
        """Write one whole batch with one write call; returns its position.

        If the write fails or comes up short the file is cut back, so a later append never
        lands behind half a batch (which recovery would take for mid-log corruption).
        """
        pos = self.size
        try:
            written = self.file.write(data)
            if written != len(data):
                raise OSError(errno.EIO, f"short write: {written} of {len(data)} bytes", str(self.path))
        except BaseException:
            self.file.truncate(pos)
            raise
        # Index before size: a reader in another thread computes a batch's end from the next
        # position, or from ``size`` only while no next position exists yet.
        self.offsets.append(base_offset)
        self.positions.append(pos)
        if self.batch_ends is not None:
            self.batch_ends.append(next_offset)
        self.next_offset = next_offset
        self.size = pos + len(data)
        return pos

    def read(self, pos: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``pos``; a short read means the file changed under us."""
        data = self.file.pread(length, pos)
        if len(data) != length:
            raise OSError(f"{self.path}: wanted {length} bytes at {pos}, file gave {len(data)}")
        return data

    def truncate(self, size: int) -> None:
        """Cut the file to ``size`` bytes and make the cut durable."""
        self.file.truncate(size)
        self.file.fsync()

    def view(self) -> SegmentView:
        """The batches written so far plus a private handle to read them with.

        The cleaner reads through it without the log's lock, so ``close`` (or a replaced
        segment being dropped) cannot pull the file from under it.
        """
        if self.file.closed:
            raise ValueError(f"{self.path}: segment is closed")
        return SegmentView(self, self.file.dup(), self.batch_count, self.size)

    def fsync(self) -> None:
        self.file.fsync()

    def close(self) -> None:
        self.file.close()


@dataclass(frozen=True, slots=True)
class SegmentView:
    """A fixed prefix of a segment (``batch_count`` batches, ``size`` bytes) and a handle to read it."""

    segment: Segment
    file: File
    batch_count: int
    size: int

    def batch_end(self, index: int) -> int:
        """File position just past batch ``index`` of the prefix."""
        return self.segment.positions[index + 1] if index + 1 < self.batch_count else self.size

    def read(self, pos: int, length: int) -> bytes:
        data = self.file.pread(length, pos)
        if len(data) != length:
            raise OSError(f"{self.segment.path}: wanted {length} bytes at {pos}, file gave {len(data)}")
        return data

    def close(self) -> None:
        self.file.close()
