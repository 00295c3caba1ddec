"""The coordinator log's journal file: one fsync per group-commit round, whatever it touched.

A group-commit round used to fsync every ``__consumer_offsets`` partition written since the
last round, one file at a time; with groups spread over the partitions that is several fsyncs
for a handful of commits, and the disk runs them one after another. ``CoordinatorLog`` now
also hands every batch it appends to this journal (``add``): ``flush`` writes what was added
since the last flush in one write and fsyncs this one file. The partitions' segment files
are written as before, but fsynced only at a checkpoint (``CoordinatorLog.checkpoint``),
which then empties the journal (``reset``). At start-up ``read`` returns the entries, and
``CoordinatorLog`` lays each one back onto its partition if the partition's log ends before
it (a power cut lost the segment's unsynced tail); entries the log already holds are
skipped. So the journal is never the only copy of anything past a checkpoint's segments,
and the segments stay Kafka's own format for every other reader.

Layout: entries back to back, big-endian::

    length     u32  bytes after this field
    crc        u32  CRC-32C of the partition and the batch
    partition  u32
    batch           one record batch, exactly as written to the partition (offsets included)

A short or damaged entry ends the journal (a write torn by the crash): ``read`` keeps the
entries before it and cuts the file there.
"""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import crc32c

from storage.fs import File, FileSystem

__all__ = ["WriteAheadJournal"]

_HEAD = struct.Struct(">III")  # length, crc, partition
_PARTITION = struct.Struct(">I")


class WriteAheadJournal:
    """One append-only file of ``(partition, batch)`` entries, fsynced as a whole.

    ``add`` (on the event loop, under the coordinator log's lock) only buffers; ``flush``
    (wherever the group commit syncs) writes the buffer and fsyncs. Thread safety: the
    buffer is swapped under a lock, and flushes run one at a time.
    """

    __slots__ = ("_buffer", "_file", "_flush_lock", "_lock", "_size", "path")

    def __init__(self, fs: FileSystem, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._buffer: list[bytes] = []
        if fs.exists(self.path):
            self._file: File = fs.open(self.path)
        else:
            self._file = fs.open(self.path, create=True)
            fs.fsync_directory(self.path.parent)
        self._size = self._file.size()

    @property
    def size(self) -> int:
        """Bytes in the file, and waiting to be written to it."""
        return self._size

    @property
    def closed(self) -> bool:
        return self._file.closed

    def add(self, partition: int, batch: bytes) -> None:
        """Buffer one entry; durable once a ``flush`` that began after this returns."""
        tail = _PARTITION.pack(partition)
        crc = crc32c.crc32c(batch, crc32c.crc32c(tail))
        entry = _HEAD.pack(len(batch) + 8, crc, partition) + batch
        with self._lock:
            self._buffer.append(entry)
            self._size += len(entry)

    def flush(self) -> None:
        """Write what was added and fsync the file (blocking). ``OSError``: nothing after the
        last successful flush may be called durable (the broker stops on it)."""
        with self._flush_lock:
            with self._lock:
                pending, self._buffer = self._buffer, []
            if pending:
                view = memoryview(b"".join(pending))
                while view:
                    view = view[self._file.write(view):]
            self._file.fsync()

    def reset(self) -> None:
        """Empty the file durably: everything in it is now in fsynced segments."""
        with self._flush_lock, self._lock:
            self._buffer.clear()
            self._file.truncate(0)
            self._file.fsync()
            self._size = 0

    def read(self) -> list[tuple[int, bytes]]:
        """Every whole entry, in order; a torn or damaged tail is cut off the file."""
        with self._flush_lock, self._lock:
            data = self._file.pread(self._size, 0) if self._size else b""
            entries: list[tuple[int, bytes]] = []
            pos = 0
            while pos + _HEAD.size <= len(data):
                length, crc, partition = _HEAD.unpack_from(data, pos)
                end = pos + 4 + length
                if length < 8 or end > len(data):
                    break
                if crc32c.crc32c(data[pos + 12 : end], crc32c.crc32c(data[pos + 8 : pos + 12])) != crc:
                    break
                entries.append((partition, data[pos + 12 : end]))
                pos = end
            if pos != len(data):
                self._file.truncate(pos)
                self._file.fsync()
                self._size = pos
            return entries

    def close(self) -> None:
        self._file.close()
