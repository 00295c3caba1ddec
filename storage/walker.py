"""Walking the batch headers of a segment: the one loop over Kafka's batch framing.

A segment file (live or in history), or a buffer read from one, is a run of v2 record
batches of ``12 + batch_length`` bytes each. ``BatchWalk`` yields ``(position, header)`` for
every batch of the longest well-framed prefix and remembers where, and why, it stopped.
It reads either bytes already in memory or a file through ``pread``:

- with ``verify_crc`` it checks each batch's CRC-32C, which needs the whole batch: recovery
  and the pipeline reader judge a file this way (``walk_bytes``);
- without, it reads headers only, a chunk at a time while batches are small and one
  header at a time once they are large: the cheap pass that finds a segment's newest
  timestamp or offset range (``walk_file``).

Recovery, compaction's swap check, history pruning, the time index and the pipeline all
walk through here, so a batch is judged well framed by one rule everywhere.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

import crc32c

from protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    BatchHeader,
    peek_batch_header,
)

__all__ = ["DEFAULT_CHUNK", "BatchWalk", "scan_bytes", "walk_bytes", "walk_file"]

#: Bytes read per ``pread`` while headers are close together.
DEFAULT_CHUNK = 64 << 10
#: The CRC covers everything from the attributes (byte 21) to the end of the batch.
_CRC_FROM = 21
#: A header's first fields, up to last_offset_delta: what judging a batch needs.
_FRAME = struct.Struct(">qiibIhi")

Pread = Callable[[int, int], bytes]  # (length, offset) -> up to length bytes


class BatchWalk:
    """One pass over the batches of a buffer or a file; iterate it once.

    After (or during) iteration ``valid_bytes`` is the end of the last good batch, and
    ``describe_stop()`` says why the walk ended before ``size``, if it did.
    """

    __slots__ = ("_bad", "_data", "_pread", "_stop", "chunk", "size", "start", "valid_bytes", "verify_crc")

    def __init__(
        self,
        *,
        data: bytes | bytearray | memoryview | None = None,
        pread: Pread | None = None,
        size: int | None = None,
        start: int = 0,
        verify_crc: bool = True,
        chunk: int = DEFAULT_CHUNK,
    ) -> None:
        if (data is None) == (pread is None):
            raise ValueError("walk either data or a file (pread), not both")
        if data is not None:
            size = len(data) if size is None else min(size, len(data))
        elif size is None:
            raise ValueError("a file walk needs the file's size")
        self._data = data
        self._pread = pread
        self.size: int = size
        self.start = start
        self.verify_crc = verify_crc
        self.chunk = max(chunk, HEADER_SIZE)
        self.valid_bytes = start
        self._stop: str | None = None
        self._bad: BatchHeader | None = None

    def __iter__(self) -> Iterator[tuple[int, BatchHeader]]:
        size, verify, chunk, pread = self.size, self.verify_crc, self.chunk, self._pread
        pos = self.start
        self.valid_bytes = pos
        self._stop = self._bad = None
        if self._data is not None:
            view, base = memoryview(self._data), 0
        else:
            view, base = memoryview(b""), pos
        big = False  # the last batch was larger than a chunk: read the next header alone
        while size - pos >= HEADER_SIZE:
            at = pos - base
            if len(view) - at < HEADER_SIZE:
                assert pread is not None  # an in-memory walk holds every byte up to size
                view = memoryview(pread(HEADER_SIZE if big else min(chunk, size - pos), pos))
                base, at = pos, 0
                if len(view) < HEADER_SIZE:
                    self._stop = "short"
                    break
            header = peek_batch_header(view, at)
            if header.magic != MAGIC:
                self._stop, self._bad = "magic", header
                break
            if header.batch_length < MIN_BATCH_LENGTH:
                self._stop, self._bad = "length", header
                break
            end = pos + LOG_OVERHEAD + header.batch_length
            if end > size:
                self._stop, self._bad = "overrun", header
                break
            big = end - pos > chunk
            if verify:
                if end - base > len(view):
                    assert pread is not None
                    view = memoryview(pread(max(end - pos, min(chunk, size - pos)), pos))
                    base, at = pos, 0
                    if len(view) < end - pos:
                        self._stop, self._bad = "overrun", header
                        break
                if crc32c.crc32c(view[at + _CRC_FROM : end - base]) != header.crc:
                    self._stop, self._bad = "crc", header
                    break
            self.valid_bytes = end
            yield pos, header
            pos = end
        else:
            if pos < size:
                self._stop = "short"

    def headers(self) -> list[tuple[int, BatchHeader]]:
        """Walk to the end; every ``(position, header)`` of the valid prefix."""
        return list(self)

    def columns(self) -> tuple[list[int], list[int], list[int]]:
        """Walk to the end, like ``headers``, but keep only each good batch's position, base
        offset and last offset delta.

        Recovery scans every batch of every segment this way. Held in memory and CRC-checked,
        the batches are taken by a plain loop, with no header built and no generator step
        per batch: it takes only batches that iterating would take, and where it stops
        (``start`` moves there), iterating judges the batch there (and so says why the walk
        ends).
        """
        positions: list[int] = []
        bases: list[int] = []
        deltas: list[int] = []
        data = self._data
        if data is not None and self.verify_crc:
            view = memoryview(data)
            size, pos = self.size, self.start
            unpack, crc = _FRAME.unpack_from, crc32c.crc32c
            while size - pos >= HEADER_SIZE:
                base, length, _, magic, expected_crc, _, delta = unpack(view, pos)
                end = pos + LOG_OVERHEAD + length
                if magic != MAGIC or length < MIN_BATCH_LENGTH or end > size \
                        or crc(view[pos + _CRC_FROM : end]) != expected_crc:
                    break
                positions.append(pos)
                bases.append(base)
                deltas.append(delta)
                pos = end
            self.start = pos
        for pos, header in self:
            positions.append(pos)
            bases.append(header.base_offset)
            deltas.append(header.last_offset_delta)
        return positions, bases, deltas

    def describe_stop(self) -> str | None:
        """Why the walk ended before ``size`` (for a log line or an error), or None."""
        if self._stop is None:
            return None
        pos = self.valid_bytes
        rest = self.size - pos
        if self._data is not None and _all_zero(self._data, pos, self.size):
            return f"{rest} zero bytes at byte {pos} (preallocated or unwritten tail)"
        bad = self._bad
        if self._stop == "short" or bad is None:
            return f"only {rest} bytes at byte {pos}, short of a {HEADER_SIZE}-byte batch header"
        if self._stop == "magic":
            return f"bad magic {bad.magic} at byte {pos}"
        if self._stop == "length":
            return f"batch_length {bad.batch_length} too small at byte {pos}"
        if self._stop == "overrun":
            return f"batch at byte {pos} claims {bad.size} bytes but only {rest} remain"
        return f"CRC mismatch in batch at byte {pos}"


def _all_zero(data: bytes | bytearray | memoryview, start: int, stop: int) -> bool:
    if isinstance(data, memoryview):  # only on the error path: copying the rest is fine
        data, start, stop = bytes(data[start:stop]), 0, stop - start
    return data.count(0, start, stop) == stop - start


def walk_bytes(data: bytes | bytearray | memoryview, *, verify_crc: bool = True, start: int = 0) -> BatchWalk:
    """Walk batches held in memory, CRC-checking each unless told not to."""
    return BatchWalk(data=data, verify_crc=verify_crc, start=start)


def walk_file(pread: Pread, size: int, *, verify_crc: bool = False, chunk: int = DEFAULT_CHUNK) -> BatchWalk:
    """Walk the first ``size`` bytes of a file through ``pread`` (headers only by default)."""
    return BatchWalk(pread=pread, size=size, verify_crc=verify_crc, chunk=chunk)


def scan_bytes(
    data: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> tuple[list[tuple[int, BatchHeader]], int]:
    """``([(position, header), ...], valid_bytes)`` of the valid prefix of ``data``."""
    walk = walk_bytes(data, verify_crc=verify_crc)
    return walk.headers(), walk.valid_bytes
