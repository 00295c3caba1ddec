"""Coordinator-log history: segments the cleaner replaced, kept for a while for the pipeline.

With ``log.history.retention.ms`` set, the cleaner moves each segment it rewrites into
``DATA_DIR/history/__consumer_offsets-N/`` under its own name instead of deleting it
(see ``storage.cleaner``; paths from ``storage.layout``). A history file holds the original
records; the live log keeps a subset of them at the same offsets, so history and live
segments together, de-duplicated by (partition, offset), are the full commit history.

``prune_history`` drops a history segment once its newest record is older than the
retention; it reads only the batch headers (``storage.walker``), never the records.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from storage.fs import REAL_FS, FileSystem
from storage.layout import history_dir, parse_segment_name
from storage.walker import walk_file

__all__ = ["PruneResult", "history_dir_for", "newest_timestamp", "prune_history"]

log = logging.getLogger(__name__)


def history_dir_for(data_dir: Path, retention_ms: int) -> Path | None:
    """Where history lives for ``log.history.retention.ms``; None when history is off (0)."""
    if retention_ms == 0:
        return None
    return history_dir(data_dir)


@dataclass(frozen=True, slots=True)
class PruneResult:
    files_removed: int
    bytes_removed: int
    files_kept: int


def newest_timestamp(path: Path, fs: FileSystem = REAL_FS) -> int | None:
    """Largest batch ``max_timestamp`` in a segment file, from its headers; None if empty.

    Stops quietly at a torn tail: history files are whole segments the cleaner retired,
    so a short read only happens if the file is damaged, and then the headers read so far
    are the best answer (the file is judged by the records that can be read).
    """
    file = fs.open(path)
    try:
        timestamps = (header.max_timestamp for _, header in walk_file(file.pread, file.size()))
        return max(timestamps, default=None)
    finally:
        file.close()


def prune_history(history: Path, now_ms: int, retention_ms: int, fs: FileSystem = REAL_FS) -> PruneResult:
    """Delete history segments whose newest record is older than ``now - retention``.

    ``retention_ms < 0`` keeps history forever. A file with no readable batch is removed
    too: it holds nothing the pipeline could read.
    """
    if not fs.is_dir(history):
        return PruneResult(0, 0, 0)
    folders = sorted(history / name for name in fs.listdir(history) if fs.is_dir(history / name))
    if retention_ms < 0:
        kept = sum(1 for folder in folders for name in fs.listdir(folder) if parse_segment_name(name) is not None)
        return PruneResult(0, 0, kept)
    removed = kept = removed_bytes = 0
    cutoff = now_ms - retention_ms
    for folder in folders:
        touched = False
        for name in sorted(fs.listdir(folder)):
            if parse_segment_name(name) is None:
                continue
            path = folder / name
            newest = newest_timestamp(path, fs)
            if newest is not None and newest >= cutoff:
                kept += 1
                continue
            size = fs.stat(path).st_size
            fs.unlink(path, missing_ok=True)
            removed += 1
            removed_bytes += size
            touched = True
        if touched:
            fs.fsync_directory(folder)
    if removed:
        log.info("history: removed %d segments (%d bytes) older than %d ms", removed, removed_bytes, retention_ms)
    return PruneResult(removed, removed_bytes, kept)
