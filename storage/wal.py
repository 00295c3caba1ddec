"""The coordinator log's journal file: one fsync per group-commit round, whatever it touched.

A group-commit round used to fsync every ``__consumer_offsets`` partition written since the
last round, one file at a time; with groups spread over the partitions that is several fsyncs
for a handful of commits, and the disk runs them one after another. ``CoordinatorLog`` now
also hands every batch it appends to this journal (``add``): ``flush`` writes what was added
since the last flush in one write and syncs this one file. The partitions' segment files
are written as before, but fsynced only at a checkpoint (``CoordinatorLog.checkpoint``),
which then starts the journal over (``reset``). At start-up ``read`` returns the entries,
and ``CoordinatorLog`` lays each one back onto its partition if the partition's log ends
before it (a power cut lost the segment's unsynced tail); entries the log already holds
are skipped. So the journal is never the only copy of anything past a checkpoint's
segments, and the segments stay Kafka's own format for every other reader.

The file is written in place, never appended to: its space is allocated ahead (zeros
written and synced, growing by doubling up to ``GROW_MAX`` at a time), so a flush changes
no file size and ``fdatasync`` has no metadata to commit, about half the cost of an
appending write and fsync. A reset does not cut the file: it starts a new *generation*,
and entries of an older one that are still on disk end the journal when read. Layout,
big-endian:

    offset 0 and 512   header slots: magic "KCJ1", generation u64, CRC-32C of both (u32);
                       generation g is written to slot g % 2, so a torn header write leaves
                       the other slot, and the highest valid generation is the journal's
    offset 4096        entries back to back:
        length      u32  bytes after this field
        crc         u32  CRC-32C of the generation, the partition and the batch
        generation  u32  the header's generation (its low 32 bits) when written
        partition   u32
        batch            one record batch, exactly as written to the partition

Reading stops at the first entry that is short, damaged, or of another generation: a
write torn by a crash, or what an earlier generation left behind.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from pathlib import Path

import crc32c

from storage.fs import File, FileSystem

__all__ = ["DATA_START", "GROW_MAX", "WriteAheadJournal"]

MAGIC = b"KCJ1"
_HEADER = struct.Struct(">4sQI")  # magic, generation, crc
HEADER_SLOTS = (0, 512)
DATA_START = 4096
_ENTRY = struct.Struct(">IIII")  # length, crc, generation, partition
_LENGTH_CRC = struct.Struct(">II")  # an entry's first half; the CRC covers the second and the batch
_TAIL = struct.Struct(">II")  # generation, partition
_ENTRY_AFTER_LENGTH = _ENTRY.size - 4
GROW_MIN = 64 << 10
GROW_MAX = 8 << 20
READ_CHUNK = 8 << 20
_ZEROS = bytes(1 << 20)


def _header(generation: int) -> bytes:
    crc = crc32c.crc32c(MAGIC + generation.to_bytes(8, "big"))
    return _HEADER.pack(MAGIC, generation, crc)


class WriteAheadJournal:
    """One preallocated file of ``(partition, batch)`` entries, synced as a whole.

    ``add`` (on the event loop, under the coordinator log's lock) only buffers; ``flush``
    (wherever the group commit syncs) writes the buffer and syncs. Thread safety: the
    buffer is swapped under a lock, and flushes, resets and reads run one at a time.
    """

    __slots__ = ("_allocated", "_buffer", "_file", "_flush_lock", "_generation", "_lock", "_position", "_size",
                 "path")

    def __init__(self, fs: FileSystem, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._buffer: list[bytes] = []
        self._size = 0  # bytes of entries in this generation, written or buffered
        self._position = DATA_START  # where the next flush writes
        if fs.exists(self.path):
            self._file: File = fs.open(self.path, append=False)
            self._allocated = self._file.size()
            self._generation = self._read_generation()
        else:
            self._file = fs.open(self.path, create=True, append=False)
            fs.fsync_directory(self.path.parent)
            self._allocated = 0
            self._generation = 0
        if self._generation == 0:  # new, or no valid header: the first generation
            self._grow(DATA_START + GROW_MIN)
            self._start_generation(1)

    @property
    def size(self) -> int:
        """Bytes of entries since the last reset, written or waiting to be."""
        return self._size

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def closed(self) -> bool:
        return self._file.closed

    def fileno(self) -> int | None:
        """The file's descriptor (None: a modelled file system, or closed)."""
        return self._file.fileno()

    def add(self, partition: int, batch: bytes) -> None:
        """Buffer one entry; durable once a ``flush`` that began after this returns."""
        with self._lock:
            tail = _TAIL.pack(self._generation & 0xFFFFFFFF, partition)
            self._buffer += (_LENGTH_CRC.pack(len(batch) + _ENTRY_AFTER_LENGTH,
                                              crc32c.crc32c(batch, crc32c.crc32c(tail))), tail, batch)
            self._size += _ENTRY.size + len(batch)

    def flush(self) -> None:
        """Write what was added and sync the file (blocking). ``OSError``: nothing after the
        last successful flush may be called durable (the broker stops on it)."""
        with self._flush_lock:
            self._write_out()
            self._file.datasync()

    def write_out(self) -> int | None:
        """Write what was added, without syncing; returns the file descriptor whose
        ``fdatasync`` makes it durable (``storage.aio``), or None if the file system gives
        none (then ``flush``). ValueError once closed; ``OSError`` as for ``flush``."""
        with self._flush_lock:
            self._write_out()
            return self._file.fileno()

    def _write_out(self) -> None:
        if self._file.closed:
            raise ValueError(f"{self.path}: journal is closed")
        with self._lock:
            pending, self._buffer = self._buffer, []
        if pending:
            data = memoryview(b"".join(pending))
            end = self._position + len(data)
            if end > self._allocated:
                self._grow(end)
            self._write_at(data, self._position)
            self._position = end

    def reset(self) -> None:
        """Start a new, empty generation durably: everything before it is in fsynced segments."""
        with self._flush_lock, self._lock:
            self._buffer.clear()
            self._start_generation(self._generation + 1)
            self._position = DATA_START
            self._size = 0

    def read(self, each: Callable[[int, memoryview], None]) -> int:
        """Call ``each(partition, batch)`` for every entry of the current generation, in order,
        reading ``READ_CHUNK`` bytes at a time (a full journal is never all in memory; the
        batch is a view into the chunk). Returns how many; the next flush writes after them."""
        with self._flush_lock, self._lock:
            generation = self._generation & 0xFFFFFFFF
            consumed = 0  # bytes of whole entries so far, from DATA_START
            chunk = memoryview(b"")
            chunk_at = DATA_START  # the file offset of chunk[0]
            count = 0

            def holding(pos: int, need: int) -> int:
                """``chunk`` re-read from the entry at ``pos`` if it lacks ``need`` bytes there; the entry's
                new index in it (or -1 where the file ends first)."""
                nonlocal chunk, chunk_at
                if pos + need <= len(chunk):
                    return pos
                start = DATA_START + consumed
                if start + need > self._allocated:
                    return -1
                chunk = memoryview(self._file.pread(min(max(READ_CHUNK, need), self._allocated - start), start))
                chunk_at = start
                return 0 if need <= len(chunk) else -1

            while True:
                pos = holding(DATA_START + consumed - chunk_at, _ENTRY.size)
                if pos < 0:
                    break
                length, crc, entry_generation, partition = _ENTRY.unpack_from(chunk, pos)
                if length < _ENTRY_AFTER_LENGTH or entry_generation != generation:
                    break
                pos = holding(pos, 4 + length)
                if pos < 0:
                    break
                end = pos + 4 + length
                if crc32c.crc32c(chunk[pos + 8 : end]) != crc:
                    break
                each(partition, chunk[pos + _ENTRY.size : end])
                consumed += 4 + length
                count += 1
            self._position = DATA_START + consumed
            self._size = consumed
            return count

    def close(self) -> None:
        """Close the file once a flush that is running has ended (a later one raises ValueError)."""
        with self._flush_lock:
            self._file.close()

    # --- the file's space and header ----------------------------------------------------------------

    def _read_generation(self) -> int:
        """The highest generation in a valid header slot; 0 if neither is valid."""
        found = 0
        for slot in HEADER_SLOTS:
            raw = self._file.pread(_HEADER.size, slot)
            if len(raw) < _HEADER.size:
                continue
            magic, generation, crc = _HEADER.unpack(raw)
            if magic == MAGIC and crc32c.crc32c(raw[:12]) == crc:
                found = max(found, generation)
        return found

    def _start_generation(self, generation: int) -> None:
        self._write_at(memoryview(_header(generation)), HEADER_SLOTS[generation % 2])
        self._file.datasync()
        self._generation = generation

    def _grow(self, end: int) -> None:
        """Write zeros up to at least ``end`` (doubling, at most GROW_MAX at a time); the
        caller's sync makes them durable with the new size."""
        target = max(end, self._allocated + min(max(self._allocated, GROW_MIN), GROW_MAX))
        position = self._allocated
        while position < target:
            chunk = min(len(_ZEROS), target - position)
            self._write_at(memoryview(_ZEROS)[:chunk], position)
            position += chunk
        self._allocated = target

    def _write_at(self, data: memoryview, offset: int) -> None:
        while data:
            written = self._file.pwrite(data, offset)
            data = data[written:]
            offset += written
