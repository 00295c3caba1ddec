"""The log of the groups' own configs (GROUP config resources): one partition, replayed whole at start-up.

Kafka keeps group configs as records of its metadata log; kcoord keeps them in a small log
of their own on the same segment engine, ``__kcoord_group_configs-0``, so that
``__consumer_offsets`` holds only Kafka's own record types and stays readable by Kafka's
tools. Records are opaque key/value pairs here (``broker.coordinator.group_configs`` gives
them meaning); the last record per key wins and a null value clears it. Every change is one
batch, fsynced before the change is answered (the broker's group commit).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from storage.fs import REAL_FS, FileSystem
from storage.layout import group_configs_partition_dir
from storage.partition import PartitionLog

SEGMENT_BYTES = 16 * 1024 * 1024


class GroupConfigLog:
    def __init__(self, data_dir: Path, fs: FileSystem = REAL_FS, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.log = PartitionLog.open(group_configs_partition_dir(data_dir), segment_bytes, fs=fs)

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

    def close(self) -> None:
        self.log.close()
