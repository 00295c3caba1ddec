"""A small compacted log of key/value state on the segment engine (security, group configs)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from storage.cleaner import CleanResult
from storage.fs import REAL_FS, FileSystem
from storage.partition import PartitionLog

SEGMENT_BYTES = 16 * 1024 * 1024


class KeyedStateLog:
    """One partition of opaque key/value records replayed whole at start-up: the last record
    per key wins, a null value deletes, so compaction keeps exactly the current state."""

    def __init__(self, directory: Path, fs: FileSystem = REAL_FS, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.log = PartitionLog.open(directory, segment_bytes, fs=fs)

    def replay(self) -> Iterator[tuple[bytes, bytes | None]]:
        """Every record in log order (keys are never null in this log)."""
        for _, batch in self.log.read_batches(0):
            for record in batch.records or ():
                if record.key is not None:
                    yield bytes(record.key), None if record.value is None else bytes(record.value)

    def append(self, records: Sequence[tuple[bytes, bytes | None]], now_ms: int) -> None:
        """One batch, not yet fsynced."""
        self.log.append(list(records), now_ms)

    def flush(self) -> None:
        self.log.flush()

    @property
    def closed(self) -> bool:
        return self.log.closed

    def compact(self, now_ms: int, delete_retention_ms: int) -> CleanResult:
        return self.log.compact(now_ms, delete_retention_ms)

    def close(self) -> None:
        self.log.close()
