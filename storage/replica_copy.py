"""A partition's log copied from its leader, batch by batch, keeping the leader's offsets.

A cluster node taking over a partition fetches its log as a replica would (Fetch with its
replica id) into a staging directory, ``replica-copies/<topic>-<partition>/``. Batches keep
the offsets the leader gave them, gaps left by the leader's cleaner included, so the
copy's segments may have gaps anywhere; ``PartitionLog`` accepts gaps only in sealed
segments, which is why the copy stays apart until it is complete. ``install`` then seals
it: the segments move into the partition's directory, followed by an empty active segment
at the copy's end, and the log opens (and is recovered) as any other.

A copy survives a restart: reopening scans what was written (a torn last batch is cut,
the leader still has it) and the fetch resumes at ``next_offset``. ``sync`` makes what was
written durable; the node syncs before asking for more, so every fetch offset it sends
is durable on its side, and a leader that hands over after seeing that offset loses
nothing. ``copy.json`` records which topic (by id) and which leader epoch the copy came
from; a copy from another topic incarnation or another leader is discarded.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from protocol.records.header import peek_batch_header
from storage.fs import REAL_FS, File, FileSystem
from storage.layout import log_start_file, parse_segment_name, segment_name
from storage.segment import scan_segment
from storage.walker import walk_bytes

log = logging.getLogger("kcoord.storage")

COPY_FILE = "copy.json"


@dataclass(frozen=True, slots=True)
class CopySource:
    """Where a copy comes from: the topic incarnation and the leader epoch."""

    topic_id: str
    leader_epoch: int


class LogCopy:
    """The staging copy of one partition's log."""

    def __init__(self, directory: Path, segment_bytes: int, fs: FileSystem = REAL_FS) -> None:
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.fs = fs
        self.source: CopySource | None = None
        self.start_offset = 0  # the leader's log start offset when the copy began
        self.next_offset = 0  # where the next fetch starts
        self._segments: list[tuple[int, int]] = []  # (base offset, size) of each file, oldest first
        self._active: File | None = None
        self._dirty = False
        self._open()

    # ---------------------------------------------------------------- opening

    def _open(self) -> None:
        fs = self.fs
        if not fs.exists(self.directory / COPY_FILE):
            return
        meta = json.loads(fs.read_bytes(self.directory / COPY_FILE))
        self.source = CopySource(str(meta["topic_id"]), int(meta["leader_epoch"]))
        self.start_offset = self.next_offset = int(meta["start_offset"])
        bases = sorted(b for name in fs.listdir(self.directory) if (b := parse_segment_name(name)) is not None)
        for base in bases:
            path = self.directory / segment_name(base)
            data = fs.read_bytes(path)
            scan = scan_segment(data, base, contiguous=False)
            if scan.valid_bytes < len(data):
                file = fs.open(path)
                file.truncate(scan.valid_bytes)
                file.fsync()
                file.close()
            self._segments.append((base, scan.valid_bytes))
            self.next_offset = max(self.next_offset, scan.next_offset)

    @property
    def started(self) -> bool:
        return self.source is not None

    def begin(self, source: CopySource, start_offset: int) -> None:
        """Start (or restart) an empty copy at the leader's log start offset."""
        self.discard()
        self.fs.make_dirs(self.directory)
        self.fs.write_atomically(self.directory / COPY_FILE, json.dumps({
            "topic_id": source.topic_id, "leader_epoch": source.leader_epoch, "start_offset": start_offset,
        }).encode())
        self.source = source
        self.start_offset = self.next_offset = start_offset

    def discard(self) -> None:
        """Forget the copy and its files."""
        self.close()
        if self.fs.exists(self.directory):
            self.fs.remove_tree(self.directory)
        self.source = None
        self._segments = []
        self.start_offset = self.next_offset = 0

    # ---------------------------------------------------------------- copying

    def append(self, raw: bytes) -> int:
        """Append the whole batches of a fetch response's ``records``; returns how many.

        Batches at or below ``next_offset`` (already copied) are skipped; a partial batch at
        the end (the leader cut the response at its size limit) is left for the next fetch.
        """
        if self.source is None:
            raise ValueError(f"{self.directory}: the copy has not begun")
        count = 0
        walk = walk_bytes(raw)
        for pos, header in walk:
            if header.next_offset <= self.next_offset:
                continue
            if header.base_offset < self.next_offset and self._written:
                raise ValueError(f"{self.directory}: batch at offset {header.base_offset} overlaps the copy's "
                                 f"end {self.next_offset}")
            self._write(bytes(raw[pos : pos + header.size]), header.base_offset, header.next_offset)
            count += 1
        return count

    @property
    def _written(self) -> bool:
        return any(size for _, size in self._segments)

    def skip_to(self, offset: int) -> None:
        """The leader holds no batch at all below ``offset`` (its log end): the copy starts there."""
        if not self._written and offset > self.next_offset:
            self.start_offset = self.next_offset = offset

    def _write(self, batch: bytes, base_offset: int, next_offset: int) -> None:
        if not self._written:
            # The first batch may begin below the leader's log start (which lies inside it).
            self.close()
            self._segments = []
            self._roll(min(base_offset, self.start_offset))
        elif self._segments[-1][1] + len(batch) > self.segment_bytes:
            self._roll(self.next_offset)
        elif self._active is None:  # reopened after a restart: go on writing the last file
            self._active = self.fs.open(self.directory / segment_name(self._segments[-1][0]))
        assert self._active is not None
        view = memoryview(batch)
        while view:
            written = self._active.write(view)
            view = view[written:]
        base, size = self._segments[-1]
        self._segments[-1] = (base, size + len(batch))
        self.next_offset = next_offset
        self._dirty = True

    def _roll(self, base: int) -> None:
        """Seal the segment being written (fsynced) and start one at ``base``."""
        if self._active is not None:
            self._active.fsync()
            self._active.close()
            self._active = None
        self._segments.append((base, 0))
        path = self.directory / segment_name(base)
        self._active = self.fs.open(path, create=True)
        self.fs.fsync_directory(self.directory)

    def sync(self) -> None:
        """Make everything appended durable (blocking: a worker thread's job)."""
        if self._active is not None and self._dirty:
            self._active.fsync()
        self._dirty = False

    def close(self) -> None:
        if self._active is not None:
            self._active.close()
            self._active = None

    # ---------------------------------------------------------------- installing

    def install(self, target: Path) -> None:
        """Turn the copy into the partition's log directory ``target`` (replacing it).

        Every copied segment becomes a sealed one; an empty active segment at the copy's
        end follows; the leader's log start offset is kept when it lies inside the first
        segment. The copy's directory is gone afterwards.
        """
        fs = self.fs
        self.sync()
        self.close()
        if fs.exists(target):
            fs.remove_tree(target)
        fs.make_dirs(target)
        for base, size in self._segments:
            if size == 0:
                continue
            source = self.directory / segment_name(base)
            fs.rename(source, target / segment_name(base))
        active = fs.open(target / segment_name(self.next_offset), create=True)
        active.fsync()
        active.close()
        written = [base for base, size in self._segments if size > 0]
        first = written[0] if written else self.next_offset
        if self.start_offset > first:
            fs.write_atomically(log_start_file(target), f"{self.start_offset}\n".encode())
        fs.fsync_directory(target)
        fs.fsync_directory(target.parent)
        fs.remove_tree(self.directory)
        log.info("installed the copy of %s: offsets %d to %d", target.name, self.start_offset, self.next_offset)
        self.source = None
        self._segments = []


def first_batch_offset(raw: bytes) -> int | None:
    """The base offset of the first batch in ``raw``, or None when it holds none."""
    if len(raw) < 61:
        return None
    return int(peek_batch_header(raw).base_offset)
