"""One segment file of a partition log: naming, a batch index, blocking I/O and scanning.

A segment is ``{base_offset:020d}.log``, a plain concatenation of v2 record batches,
exactly as Kafka lays them out. This module knows how to read and write one file and
how to judge its bytes; the policy (truncate a torn tail or refuse to start) lives in
``storage.partition`` because it depends on where the segment sits in the log.

Offsets inside a segment only ever grow. The active segment is written contiguously
(each batch starts where the previous one ended); a segment rewritten by the cleaner
(``storage.cleaner``) may skip offsets between batches, and its batches may cover offsets
that hold no record, exactly like a compacted Kafka segment.
"""

from __future__ import annotations

import bisect
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c

from protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    peek_batch_header,
    scan_batches,
)

__all__ = [
    "CLEANED_SUFFIX",
    "SEGMENT_SUFFIX",
    "SWAP_SUFFIX",
    "CorruptLogError",
    "Segment",
    "SegmentScan",
    "SegmentView",
    "fsync_directory",
    "later_valid_batch",
    "parse_segment_name",
    "parse_temp_name",
    "scan_segment",
    "segment_name",
]

SEGMENT_SUFFIX = ".log"
#: Suffixes the cleaner appends to a segment name while it swaps segments (see storage.cleaner).
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
_TEMP_NAME = re.compile(r"^(\d{20})\.log(\.cleaned|\.swap)$")
#: The magic byte sits this far into a batch header; forward scans key on it.
_MAGIC_OFFSET = 16
_CRC_COVERS_FROM = 21
#: Kafka keeps offsets within a segment inside an int32 of the base, so a header whose
#: base offset is further ahead than this is noise, not a batch that belongs here.
_MAX_OFFSET_JUMP = 2**31
_UINT32 = struct.Struct(">I")


class CorruptLogError(Exception):
    """The log is damaged somewhere a crash cannot explain; the broker must not start."""


def segment_name(base_offset: int) -> str:
    """Kafka's file name for a segment: zero padded so names sort like offsets."""
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """Base offset encoded in a segment file name, or None for any other file."""
    match = _SEGMENT_NAME.match(name)
    return int(match.group(1)) if match else None


def parse_temp_name(name: str) -> tuple[int, str] | None:
    """``(base_offset, suffix)`` of a cleaner's ``.log.cleaned`` or ``.log.swap`` file, else None."""
    match = _TEMP_NAME.match(name)
    return (int(match.group(1)), match.group(2)) if match else None


def fsync_directory(directory: Path) -> None:
    """Make created, renamed or removed directory entries durable (a file fsync is not enough)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    found, valid = scan_batches(data)
    offsets: list[int] = []
    positions: list[int] = []
    ends: list[int] = []
    gapped = False
    expected = base_offset
    problem: str | None = None
    for pos, header in found:
        if contiguous and header.base_offset != expected:
            problem = f"batch at byte {pos} has base offset {header.base_offset}, expected {expected}"
        elif header.base_offset < expected:
            problem = (
                f"batch at byte {pos} has base offset {header.base_offset}, "
                f"expected at least {expected}"
            )
        elif header.last_offset_delta < 0:
            problem = f"batch at byte {pos} has negative last_offset_delta {header.last_offset_delta}"
        if problem is not None:
            valid = pos
            break
        gapped = gapped or header.base_offset != expected
        offsets.append(header.base_offset)
        positions.append(pos)
        ends.append(header.next_offset)
        expected = header.next_offset
    else:
        if valid < len(data):
            problem = _describe_stop(data, valid)
    return SegmentScan(offsets, positions, expected, valid, problem, ends if gapped else None)


def _describe_stop(data: bytes, pos: int) -> str:
    """Human reason why ``scan_batches`` stopped at ``pos``, for the log line or error."""
    rest = len(data) - pos
    if data.count(0, pos) == rest:
        return f"{rest} zero bytes at byte {pos} (preallocated or unwritten tail)"
    if rest < HEADER_SIZE:
        return f"only {rest} bytes at byte {pos}, short of a {HEADER_SIZE}-byte batch header"
    header = peek_batch_header(data, pos)
    if header.magic != MAGIC:
        return f"bad magic {header.magic} at byte {pos}"
    if header.batch_length < MIN_BATCH_LENGTH:
        return f"batch_length {header.batch_length} too small at byte {pos}"
    if pos + header.size > len(data):
        return f"batch at byte {pos} claims {header.size} bytes but only {rest} remain"
    return f"CRC mismatch in batch at byte {pos}"


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
    iterating over it; its descriptor is closed when the last reference goes away.
    """

    __slots__ = (
        "_fd", "base_offset", "batch_ends", "next_offset", "offsets", "path", "positions", "size",
    )

    def __init__(
        self,
        path: Path,
        base_offset: int,
        fd: int,
        size: int,
        offsets: list[int],
        positions: list[int],
        next_offset: int,
        batch_ends: list[int] | None = None,
    ) -> None:
        self.path = path
        self.base_offset = base_offset
        self._fd = fd
        self.size = size
        self.offsets = offsets
        self.positions = positions
        self.next_offset = next_offset
        self.batch_ends = batch_ends

    @classmethod
    def create(cls, directory: Path, base_offset: int) -> Segment:
        """A new empty segment; the caller fsyncs the directory to make the name durable."""
        path = directory / segment_name(base_offset)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        return cls(path, base_offset, fd, 0, [], [], base_offset)

    @classmethod
    def open(cls, path: Path, base_offset: int, scan: SegmentScan, *, file: Path | None = None) -> Segment:
        """Open a recovered file whose first ``scan.valid_bytes`` are known good.

        ``file`` is where the bytes are now, when that is not yet ``path`` (a cleaned
        segment still named ``.swap``); the descriptor follows the file through the rename.
        """
        fd = os.open(file or path, os.O_RDWR | os.O_APPEND)
        ends = list(scan.batch_ends) if scan.batch_ends is not None else None
        return cls(
            path, base_offset, fd, scan.valid_bytes, list(scan.offsets), list(scan.positions),
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

    def append(self, data: bytes, base_offset: int, next_offset: int) -> int:
        """Write one whole batch with one ``os.write``; returns its position.

        If the write fails or comes up short the file is cut back, so a later append never
        lands behind half a batch (which recovery would take for mid-log corruption).
        """
        pos = self.size
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
        except BaseException:
            os.ftruncate(self._fd, pos)
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
        data = os.pread(self._fd, length, pos)
        if len(data) != length:
            raise OSError(f"{self.path}: wanted {length} bytes at {pos}, file gave {len(data)}")
        return data

    def truncate(self, size: int) -> None:
        """Cut the file to ``size`` bytes and make the cut durable."""
        os.ftruncate(self._fd, size)
        os.fsync(self._fd)

    def view(self) -> SegmentView:
        """The batches written so far plus a private descriptor to read them with.

        The cleaner reads through it without the log's lock, so ``close`` (or a replaced
        segment being dropped) cannot pull the descriptor from under it.
        """
        if self._fd < 0:
            raise ValueError(f"{self.path}: segment is closed")
        return SegmentView(self, os.dup(self._fd), self.batch_count, self.size)

    def fsync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        # Replaced segments are dropped rather than closed (a reader may still hold one).
        try:
            self.close()
        except (OSError, AttributeError, TypeError):
            pass


@dataclass(frozen=True, slots=True)
class SegmentView:
    """A fixed prefix of a segment (``batch_count`` batches, ``size`` bytes) and an fd to read it."""

    segment: Segment
    fd: int
    batch_count: int
    size: int

    def batch_end(self, index: int) -> int:
        """File position just past batch ``index`` of the prefix."""
        return self.segment.positions[index + 1] if index + 1 < self.batch_count else self.size

    def read(self, pos: int, length: int) -> bytes:
        data = os.pread(self.fd, length, pos)
        if len(data) != length:
            raise OSError(f"{self.segment.path}: wanted {length} bytes at {pos}, file gave {len(data)}")
        return data

    def close(self) -> None:
        os.close(self.fd)
