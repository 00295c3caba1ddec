"""The coordinator's snapshot file: its state as of some log offsets, written crash-safely.

Start-up loads the snapshot and replays only the log after the offsets it covers; a
snapshot that is missing, old or damaged is set aside and the whole log replayed. The
log stays the source of truth: a snapshot is written only once every record it reflects
is durable, it names the log it was taken from (per partition, the batch just before its
covered offset), and deleting it is always safe.

One file, ``__consumer_offsets.snapshot`` in the data directory, replaced atomically
(``.tmp``, fsync, rename, fsync of the directory). Little-endian layout::

    magic           8 bytes  b"KCOSNAP" + format version
    partitions      u32      the coordinator log's partition count
    created_ms      i64      when the state was captured (the broker's clock)
    per partition:
      covered       i64      the first offset NOT reflected (replay starts here)
      batch_base    i64      base offset of the batch holding covered - 1 (-1: none)
      batch_crc     u32      that batch's CRC-32C
    payload         ...      the coordinator's state (``broker.coordinator.snapshot``)
    payload_length  u64
    checksum        u32      CRC-32C of every byte before it

What the payload says is the coordinator's business; this module only frames it, checks
it and says why a file cannot be used.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import crc32c

from storage.fs import FileSystem
from storage.layout import coordinator_snapshot_file, temp_file

__all__ = ["FORMAT", "PartitionMark", "Prefetch", "SnapshotHeader", "SnapshotUnusable", "SnapshotWriter", "read",
           "remove", "write"]

log = logging.getLogger("kcoord.storage")

#: Bumped whenever the layout of this file or of its payload changes: an older one is unusable.
FORMAT = 2
_MAGIC = b"KCOSNAP" + bytes((FORMAT,))
_HEAD = struct.Struct("<8sIq")
_MARK = struct.Struct("<qqI")
_LENGTH = struct.Struct("<Q")
_CHECKSUM = struct.Struct("<I")
_TRAILER_SIZE = _LENGTH.size + _CHECKSUM.size


class SnapshotUnusable(Exception):
    """The snapshot file cannot be used; the message says why (start-up replays the whole log)."""


@dataclass(frozen=True, slots=True)
class PartitionMark:
    """Where a snapshot stands in one partition of the log."""

    covered: int  # records below this offset are reflected; replay starts here
    batch_base: int = -1  # base offset of the batch holding covered - 1, -1 when covered is 0
    batch_crc: int = 0


@dataclass(frozen=True, slots=True)
class SnapshotHeader:
    created_ms: int
    marks: tuple[PartitionMark, ...]


class SnapshotWriter:
    """A snapshot being written, a part at a time, to ``.tmp``: nothing replaces the current
    snapshot until ``commit`` (blocking calls, for a worker thread)."""

    def __init__(self, fs: FileSystem, data_dir: Path, header: SnapshotHeader) -> None:
        self._fs = fs
        self._path = coordinator_snapshot_file(data_dir)
        self._tmp = temp_file(self._path)
        fs.unlink(self._tmp, missing_ok=True)  # a stale one from a crash
        self._file = fs.open(self._tmp, create=True)
        self.size = 0
        self._checksum = 0
        self._payload_start = 0
        try:
            self._put(_HEAD.pack(_MAGIC, len(header.marks), header.created_ms))
            self._put(b"".join(_MARK.pack(m.covered, m.batch_base, m.batch_crc) for m in header.marks))
        except BaseException:
            self.abort()
            raise
        self._payload_start = self.size

    def _put(self, data: bytes, summed: bool = True) -> None:
        if summed:
            self._checksum = crc32c.crc32c(data, self._checksum)
        self.size += len(data)
        view = memoryview(data)
        while view:
            view = view[self._file.write(view):]

    def write(self, parts: Iterable[bytes]) -> None:
        """More of the payload."""
        for part in parts:
            self._put(part)

    def commit(self) -> int:
        """Finish the file and make it the snapshot (the previous one goes); returns its size."""
        self._put(_LENGTH.pack(self.size - self._payload_start))
        self._put(_CHECKSUM.pack(self._checksum), summed=False)
        self._file.fsync()
        self._file.close()
        self._fs.rename(self._tmp, self._path)
        self._fs.fsync_directory(self._path.parent)
        return self.size

    def abort(self) -> None:
        """Give up: the current snapshot stays."""
        self._file.close()
        self._fs.unlink(self._tmp, missing_ok=True)


def write(fs: FileSystem, data_dir: Path, header: SnapshotHeader, payload: Iterable[bytes]) -> int:
    """Replace the snapshot with ``header`` and ``payload`` in one go; returns the file's size.

    Blocking. The caller has made every record the payload reflects durable first. A crash
    leaves the previous snapshot or this one, whole (or a stale ``.tmp``, removed next time).
    """
    writer = SnapshotWriter(fs, data_dir, header)
    try:
        writer.write(payload)
        return writer.commit()
    except BaseException:
        writer.abort()
        raise


def _file_bytes(fs: FileSystem, data_dir: Path) -> bytes | None:
    path = coordinator_snapshot_file(data_dir)
    return fs.read_bytes(path) if fs.exists(path) else None


class Prefetch:
    """The snapshot file's bytes, read on a thread while start-up opens the log.

    Reading a large snapshot is mostly the kernel copying pages, which holds no interpreter
    lock, while opening the log is mostly Python: on a second core the two overlap. ``read``
    takes the bytes (or the error reading them) as if it had read them itself. A file under
    ``min_bytes`` is read by ``result`` itself, in line: reading it takes little, and a
    buffer the C heap serves (not a mapping of its own) would land before the log's
    recovery buffers instead of after them, keeping their freed memory in the heap.
    """

    def __init__(self, fs: FileSystem, data_dir: Path, min_bytes: int = 0) -> None:
        self._fs = fs
        self._data_dir = data_dir
        self._future: Future[bytes | None] | None = None
        try:
            size = fs.stat(coordinator_snapshot_file(data_dir)).st_size
        except OSError:
            return  # none, or not readable: ``result`` finds out in line
        if size >= min_bytes:
            self._future = Future()
            threading.Thread(target=self._run, args=(self._future,), name="kcoord-snapshot-read", daemon=True).start()

    def _run(self, future: Future[bytes | None]) -> None:
        try:
            future.set_result(_file_bytes(self._fs, self._data_dir))
        except BaseException as exc:  # handed to the reader, which decides
            future.set_exception(exc)

    @property
    def threaded(self) -> bool:
        """Whether the file is being read on a thread (else ``result`` reads it)."""
        return self._future is not None

    def result(self) -> bytes | None:
        """The file's bytes, None if there is no snapshot; raises what reading raised.

        The thread's bytes are taken once (the caller keeps what it needs); a later call
        reads the file in line.
        """
        future, self._future = self._future, None
        if future is None:
            return _file_bytes(self._fs, self._data_dir)
        return future.result()


def read(fs: FileSystem, data_dir: Path, partitions: int,
         prefetch: Prefetch | None = None) -> tuple[SnapshotHeader, memoryview] | None:
    """The snapshot's header and payload; None when there is none.

    Raises ``SnapshotUnusable`` for a file that is cut short, damaged (checksum), of
    another format or for another partition count. ``OSError`` if it cannot be read.
    ``prefetch``: the file's bytes already being read (start-up).
    """
    found = _file_bytes(fs, data_dir) if prefetch is None else prefetch.result()
    if found is None:
        return None
    data = memoryview(found)
    marks_end = _HEAD.size + partitions * _MARK.size
    if len(data) < marks_end + _TRAILER_SIZE:
        raise SnapshotUnusable(f"{len(data)} bytes is too short for a snapshot")
    magic, count, created_ms = _HEAD.unpack_from(data, 0)
    if magic[:7] != _MAGIC[:7]:
        raise SnapshotUnusable("not a coordinator snapshot (bad magic)")
    (expected,) = _CHECKSUM.unpack_from(data, len(data) - _CHECKSUM.size)
    if crc32c.crc32c(data[: -_CHECKSUM.size]) != expected:
        raise SnapshotUnusable("checksum mismatch (damaged)")
    if magic != _MAGIC:
        raise SnapshotUnusable(f"format {magic[7]}, this kcoord reads format {FORMAT}")
    if count != partitions:
        raise SnapshotUnusable(f"taken with {count} partitions, the log has {partitions}")
    (payload_length,) = _LENGTH.unpack_from(data, len(data) - _TRAILER_SIZE)
    if marks_end + payload_length + _TRAILER_SIZE != len(data):
        raise SnapshotUnusable("payload length does not match the file")
    marks = tuple(PartitionMark(*_MARK.unpack_from(data, _HEAD.size + i * _MARK.size)) for i in range(count))
    return SnapshotHeader(created_ms, marks), data[marks_end : marks_end + payload_length]


def remove(fs: FileSystem, data_dir: Path) -> None:
    """Delete the snapshot (durably): start-up must not find it again."""
    path = coordinator_snapshot_file(data_dir)
    if fs.exists(path):
        fs.unlink(path, missing_ok=True)
        fs.fsync_directory(path.parent)
