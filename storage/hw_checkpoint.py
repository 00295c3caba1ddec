"""The high watermark of every replicated partition a cluster node holds, saved to disk.

Kafka's ReplicaManager writes its ``replication-offset-checkpoint`` every
``replica.high.watermark.checkpoint.interval.ms`` and at a clean shutdown
(``ReplicaManager.checkpointHighWatermarks``), in the format of Kafka's OffsetCheckpointFile:
a version line (0), a count line, then one ``topic partition offset`` line per partition.
When a replica opens its log again, its high watermark starts at the smaller of the saved
one and its log end (``Partition.createLogIfNotExists``), so a restarted leader neither
shows records past what the ISR had nor hides, until its followers fetch, what it had.

The file is replaced whole (temp file, fsync, rename, fsync of the directory), so a crash
leaves the previous checkpoint or the new one. A file that cannot be read counts as empty:
the high watermarks then start at the log start, as if there were no checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from storage.fs import REAL_FS, FileSystem
from storage.layout import replication_checkpoint_file

log = logging.getLogger("kcoord.storage")

VERSION = 0

TopicPartition = tuple[str, int]


def encode(high_watermarks: Mapping[TopicPartition, int]) -> bytes:
    lines = [str(VERSION), str(len(high_watermarks))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(high_watermarks.items())]
    return ("\n".join(lines) + "\n").encode()


def decode(raw: bytes) -> dict[TopicPartition, int]:
    """The checkpoint's entries; ValueError when it is not a checkpoint this version reads."""
    lines = raw.decode().splitlines()
    if len(lines) < 2 or lines[0].strip() != str(VERSION):
        raise ValueError(f"not a version {VERSION} checkpoint")
    count = int(lines[1])
    entries = lines[2:]
    if len(entries) != count:
        raise ValueError(f"{len(entries)} entries, the header says {count}")
    out: dict[TopicPartition, int] = {}
    for line in entries:
        topic, partition, offset = line.rsplit(" ", 2)
        out[(topic, int(partition))] = int(offset)
    return out


class HighWatermarkCheckpoint:
    """A node's ``replication-offset-checkpoint`` (Kafka's HighWatermarkCheckpoint)."""

    def __init__(self, data_dir: Path, fs: FileSystem = REAL_FS) -> None:
        self.path = replication_checkpoint_file(data_dir)
        self.fs = fs
        self._written: dict[TopicPartition, int] | None = None

    def read(self) -> dict[TopicPartition, int]:
        """What the last checkpoint saved (empty when there is none, or it cannot be read)."""
        if not self.fs.exists(self.path):
            return {}
        try:
            found = decode(self.fs.read_bytes(self.path))
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            log.warning("%s cannot be read (%s): high watermarks start at the log start", self.path, exc)
            return {}
        self._written = dict(found)
        return found

    def write(self, high_watermarks: Mapping[TopicPartition, int]) -> bool:
        """Save ``high_watermarks`` durably, unless they are what the file already holds; True if written."""
        current = dict(high_watermarks)
        if current == self._written:
            return False
        self.fs.write_atomically(self.path, encode(current))
        self._written = current
        return True
