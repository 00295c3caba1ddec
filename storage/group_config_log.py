"""The log of the groups' own configs (GROUP config resources): one partition, replayed whole at start-up.

Kafka keeps group configs as records of its metadata log; kcoord keeps them in a small log
of their own on the same segment engine, ``__kcoord_group_configs-0``, so that
``__consumer_offsets`` holds only Kafka's own record types and stays readable by Kafka's
tools. Records are opaque key/value pairs here (``broker.coordinator.group_configs`` gives
them meaning); the last record per key wins and a null value clears it. Every change is one
batch, fsynced before the change is answered (the broker's group commit).
"""

from __future__ import annotations

from pathlib import Path

from storage.fs import REAL_FS, FileSystem
from storage.keyed_state_log import SEGMENT_BYTES, KeyedStateLog
from storage.layout import group_configs_partition_dir


class GroupConfigLog(KeyedStateLog):
    def __init__(self, data_dir: Path, fs: FileSystem = REAL_FS, segment_bytes: int = SEGMENT_BYTES) -> None:
        super().__init__(group_configs_partition_dir(data_dir), fs, segment_bytes)
