"""The log of SCRAM credentials and ACLs: one partition, replayed whole at start-up.

Records are opaque key/value pairs here (``security.records`` gives them meaning); the
last record per key wins and a null value deletes, so compaction keeps exactly the
current state. Every change is one batch, fsynced before the change is answered (by the
broker's group commit, or by ``flush`` for the offline ``kcoord users add``).
"""

from __future__ import annotations

from pathlib import Path

from storage.fs import REAL_FS, FileSystem
from storage.keyed_state_log import SEGMENT_BYTES, KeyedStateLog
from storage.layout import security_partition_dir


class SecurityLog(KeyedStateLog):
    def __init__(self, data_dir: Path, fs: FileSystem = REAL_FS, segment_bytes: int = SEGMENT_BYTES) -> None:
        super().__init__(security_partition_dir(data_dir), fs, segment_bytes)
