"""Segment-file storage for kcoord: Kafka's on-disk layout, crash recovery, group commit, compaction.

Blocking file I/O throughout (every file operation through ``storage.fs``), except
``storage.group_commit`` and ``storage.maintenance``, which bridge the trio event loop to it.
"""

from storage.cleaner import CleanResult
from storage.coordinator_log import CoordinatorLog, PartitionCountError
from storage.partition import CorruptLogError, OffsetOutOfRangeError, PartitionLog, RecoveryReport

__all__ = [
    "CleanResult",
    "CoordinatorLog",
    "CorruptLogError",
    "OffsetOutOfRangeError",
    "PartitionCountError",
    "PartitionLog",
    "RecoveryReport",
]
