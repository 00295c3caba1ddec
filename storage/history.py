"""Coordinator-log history: segments the cleaner replaced, kept for a while for the pipeline.

With ``log.history.retention.ms`` set, the cleaner moves each segment it rewrites into
``DATA_DIR/history/__consumer_offsets-N/`` under its own name instead of deleting it
(see ``storage.cleaner``). A history file holds the original records; the live log keeps a
subset of them at the same offsets, so history and live segments together, de-duplicated
by (partition, offset), are the full commit history.

``prune_history`` drops a history segment once its newest record is older than the
retention; it reads only the batch headers, never the records.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from protocol.records import HEADER_SIZE, LOG_OVERHEAD, RecordBatchError, peek_batch_header
from storage.segment import fsync_directory, parse_segment_name

__all__ = ["HISTORY_DIR_NAME", "PruneResult", "history_dir_for", "newest_timestamp", "prune_history"]

log = logging.getLogger(__name__)

HISTORY_DIR_NAME = "history"


def history_dir_for(data_dir: Path, retention_ms: int) -> Path | None:
    """Where history lives for ``log.history.retention.ms``; None when history is off (0)."""
    if retention_ms == 0:
        return None
    return Path(data_dir) / HISTORY_DIR_NAME


@dataclass(frozen=True, slots=True)
class PruneResult:
    files_removed: int
    bytes_removed: int
    files_kept: int


def newest_timestamp(path: Path) -> int | None:
    """Largest batch ``max_timestamp`` in a segment file, from its headers; None if empty.

    Stops quietly at a torn tail: history files are whole segments the cleaner retired,
    so a short read only happens if the file is damaged, and then the headers read so far
    are the best answer (the file is judged by the records that can be read).
    """
    newest: int | None = None
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        pos = 0
        while pos + HEADER_SIZE <= size:
            file.seek(pos)
            head = file.read(HEADER_SIZE)
            try:
                header = peek_batch_header(head)
            except RecordBatchError:
                break
            if header.batch_length <= 0 or pos + LOG_OVERHEAD + header.batch_length > size:
                break
            if newest is None or header.max_timestamp > newest:
                newest = header.max_timestamp
            pos += LOG_OVERHEAD + header.batch_length
    return newest


def prune_history(history_dir: Path, now_ms: int, retention_ms: int) -> PruneResult:
    """Delete history segments whose newest record is older than ``now - retention``.

    ``retention_ms < 0`` keeps history forever. A file with no readable batch is removed
    too: it holds nothing the pipeline could read.
    """
    removed = kept = removed_bytes = 0
    if retention_ms < 0 or not history_dir.is_dir():
        return PruneResult(0, 0, sum(1 for _ in history_dir.glob("*/*.log")) if history_dir.is_dir() else 0)
    cutoff = now_ms - retention_ms
    for folder in sorted(p for p in history_dir.iterdir() if p.is_dir()):
        touched = False
        for path in sorted(folder.iterdir()):
            if parse_segment_name(path.name) is None:
                continue
            newest = newest_timestamp(path)
            if newest is not None and newest >= cutoff:
                kept += 1
                continue
            size = path.stat().st_size
            path.unlink(missing_ok=True)
            removed += 1
            removed_bytes += size
            touched = True
        if touched:
            fsync_directory(folder)
    if removed:
        log.info("history: removed %d segments (%d bytes) older than %d ms", removed, removed_bytes, retention_ms)
    return PruneResult(removed, removed_bytes, kept)
