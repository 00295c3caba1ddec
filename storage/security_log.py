"""The log of SCRAM credentials and ACLs: one partition, replayed whole at start-up.

Records are opaque key/value pairs here (``security.records`` gives them meaning); the
last record per key wins and a null value deletes, so compaction keeps exactly the
current state. Every change is one batch, fsynced before the change is answered (by the
broker's group commit, or by ``flush`` for the offline ``kcoord users add``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from storage.cleaner import CleanResult
from storage.fs import REAL_FS, FileSystem
from storage.layout import security_partition_dir
from storage.partition import PartitionLog

SEGMENT_BYTES = 16 * 1024 * 1024


class SecurityLog:
    def __init__(self, data_dir: Path, fs: FileSystem = REAL_FS, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.log = PartitionLog.open(security_partition_dir(data_dir), segment_bytes, fs=fs)

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
