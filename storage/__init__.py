"""Segment-file storage for kcoord: Kafka's on-disk layout, crash recovery, group commit."""

from storage.coordinator_log import CoordinatorLog, PartitionCountError
from storage.partition import CorruptLogError, OffsetOutOfRangeError, PartitionLog, RecoveryReport

__all__ = [
    "CoordinatorLog",
    "CorruptLogError",
    "OffsetOutOfRangeError",
    "PartitionCountError",
    "PartitionLog",
    "RecoveryReport",
]
