"""The ``__consumer_offsets`` log: one ``PartitionLog`` per partition, with numbered appends.

Groups map to partitions the way Kafka maps them (Java ``String.hashCode``), so one
partition stays the unit of ownership if the coordinator is ever split across nodes.
``append`` is cheap and never waits for the disk; ``sync`` (run in a worker thread)
fsyncs everything written so far in one go and reports the sequence number that is now
durable (a ``storage.journal.Journal``), which is what lets many requests share one fsync
(ARCHITECTURE.md invariant 2). ``compact_all`` (also for a worker thread) runs the log
cleaner over every partition.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from protocol.consumer_offsets import partition_for
from protocol.records import RecordBatchError, iter_records
from storage.cleaner import CleanResult
from storage.fs import REAL_FS, FileSystem
from storage.journal import Journal
from storage.layout import (
    COORDINATOR_TOPIC,
    coordinator_partition_dir,
    parse_partition_dir,
    partition_count_file,
)
from storage.partition import CorruptLogError, PartitionLog
from storage.walker import walk_bytes

REPLAY_CHUNK = 8 << 20  # bytes of whole batches read per step at start-up

__all__ = ["TOPIC", "CoordinatorLog", "PartitionCountError"]

log = logging.getLogger("kcoord.storage")

TOPIC = COORDINATOR_TOPIC


class PartitionCountError(Exception):
    """The data directory was written with another partition count.

    Changing it would move groups to other partitions and hide their committed offsets,
    so (as in Kafka) the count is fixed once the log exists.
    """


class CoordinatorLog:
    """``data_dir/__consumer_offsets-{p}`` partition logs, opened (and recovered) at start-up.

    A partition's directory is created on its first append. Thread safety: ``append`` from
    the event loop and ``sync`` or ``compact_all`` from worker threads may overlap; syncs
    serialise. ``history_dir`` is handed to every partition log (see ``storage.cleaner``),
    and so is ``fs``.
    """

    def __init__(
        self,
        data_dir: Path,
        partitions: int,
        segment_bytes: int,
        *,
        history_dir: Path | None = None,
        fs: FileSystem = REAL_FS,
    ) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be positive, got {partitions}")
        self.fs = fs
        self.data_dir = Path(data_dir)
        self.partitions = partitions
        self.segment_bytes = segment_bytes
        self.history_dir = Path(history_dir) if history_dir is not None else None
        self._lock = threading.Lock()
        self._journal = Journal()
        self._logs: dict[int, PartitionLog] = {}
        self._closed = False
        fs.make_dirs(self.data_dir)
        self._check_partition_count()
        try:
            for p in sorted(self._existing_partitions()):
                self._logs[p] = self._open_partition(p)
        except BaseException:
            self.close()
            raise

    # --- layout -----------------------------------------------------------------------

    def _open_partition(self, partition: int) -> PartitionLog:
        return PartitionLog.open(
            coordinator_partition_dir(self.data_dir, partition), self.segment_bytes,
            history_dir=self.history_dir, fs=self.fs,
        )

    def _existing_partitions(self) -> set[int]:
        found = set()
        for name in self.fs.listdir(self.data_dir):
            parsed = parse_partition_dir(name)
            if parsed is not None and parsed[0] == TOPIC and self.fs.is_dir(self.data_dir / name):
                found.add(parsed[1])
        return found

    def _check_partition_count(self) -> None:
        """Refuse a changed count; record the count on first use (atomically, durably)."""
        meta = partition_count_file(self.data_dir)
        if self.fs.exists(meta):
            try:
                stored = json.loads(self.fs.read_bytes(meta))["partitions"]
            except (ValueError, KeyError, TypeError) as exc:
                raise CorruptLogError(f"{meta}: unreadable metadata: {exc}") from exc
            if stored != self.partitions:
                raise PartitionCountError(
                    f"{self.data_dir} holds {TOPIC} with {stored} partitions but "
                    f"{self.partitions} are configured; the partition count cannot change "
                    f"once the log exists (set offsets.topic.num.partitions={stored})"
                )
            return
        stray = sorted(p for p in self._existing_partitions() if p >= self.partitions)
        if stray:
            raise PartitionCountError(
                f"{self.data_dir} has {TOPIC} partition directories {stray} but only "
                f"{self.partitions} partitions are configured and {meta.name} is missing"
            )
        self.fs.write_atomically(meta, json.dumps({"partitions": self.partitions}).encode())

    # --- writing ----------------------------------------------------------------------

    @property
    def written_seq(self) -> int:
        """Number of appends so far; ``sync`` makes a prefix of them durable."""
        return self._journal.written_seq

    @property
    def durable_seq(self) -> int:
        """Every append numbered up to this one is fsynced."""
        return self._journal.durable_seq

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions)

    def partition_log(self, partition: int) -> PartitionLog | None:
        """The open log of a partition, or None before its first append."""
        return self._logs.get(partition)

    def append(
        self, group_id: str, records: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int
    ) -> int:
        """Write ``records`` as one batch to the group's partition; returns its seq.

        Not durable until a ``sync`` returns a seq at least this large. An ``OSError`` means
        the write failed (the partition's file is cut back to before it).
        """
        partition = partition_for(group_id, self.partitions)
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.data_dir}: {TOPIC} log is closed")
            plog = self._logs.get(partition)
            if plog is None:
                plog = self._open_partition(partition)
                self._logs[partition] = plog
            plog.append(records, timestamp_ms)
            return self._journal.mark(plog)

    def sync(self) -> int:
        """fsync every partition written since the last sync; returns the durable seq."""
        return self._journal.sync()

    # --- compaction -------------------------------------------------------------------

    def dirty_ratio(self) -> float:
        """The highest dirty ratio over the partitions: whether a clean is worth running."""
        with self._lock:
            logs = list(self._logs.values())
        return max((plog.dirty_ratio() for plog in logs), default=0.0)

    def compact_all(
        self, now_ms: int, delete_retention_ms: int, *, min_dirty_ratio: float = 0.0
    ) -> dict[int, CleanResult]:
        """Clean every partition whose dirty ratio is at least ``min_dirty_ratio``.

        Blocking file I/O for a worker thread; appends and syncs carry on meanwhile.
        Returns the result per cleaned partition; if any partition failed, the others are
        still cleaned and the first error is raised at the end. Replay afterwards gives the same state
        (tombstones older than ``delete_retention_ms`` are gone, as are their keys).
        """
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.data_dir}: {TOPIC} log is closed")
            logs = sorted(self._logs.items())
        results: dict[int, CleanResult] = {}
        failure: BaseException | None = None
        for partition, plog in logs:
            if min_dirty_ratio > 0 and plog.dirty_ratio() < min_dirty_ratio:
                continue
            try:
                results[partition] = plog.compact(now_ms, delete_retention_ms)
            except Exception as exc:  # one bad partition must not stop the others being cleaned
                log.error("%s: clean failed: %s", plog.directory, exc)
                failure = failure or exc
        if failure is not None:
            raise failure
        return results

    # --- reading ----------------------------------------------------------------------

    def replay(self) -> Iterator[tuple[bytes, bytes | None, int]]:
        """Yield ``(key, value, timestamp)`` for every record, partition by partition.

        Within a partition records come in offset order, which is all replay needs: a
        group's records all live in one partition. A None value is a tombstone. Recovery
        checked every batch's framing and CRC when the log was opened; ``iter_records``
        checks each CRC again as it decodes.
        """
        for partition in sorted(self._logs):
            yield from self._replay_log(self._logs[partition])

    def replay_partition(self, partition: int) -> Iterator[tuple[bytes, bytes | None, int]]:
        """``replay`` of one partition (a cluster node loading a partition it now leads)."""
        plog = self._logs.get(partition)
        if plog is not None:
            yield from self._replay_log(plog)

    def _replay_log(self, plog: PartitionLog) -> Iterator[tuple[bytes, bytes | None, int]]:
        offset = plog.log_start_offset
        end = plog.next_offset
        while offset < end:
            chunk = plog.read_raw(offset, REPLAY_CHUNK)
            if not chunk:
                break
            for pos, header in walk_bytes(chunk, verify_crc=False):
                raw = memoryview(chunk)[pos : pos + header.size]
                try:
                    records = iter_records(raw)
                    for record_offset, timestamp, key, value in records:
                        if key is None:
                            raise CorruptLogError(
                                f"{plog.directory}: record at offset {record_offset} has no key"
                            )
                        yield key, value, timestamp
                except RecordBatchError as exc:
                    raise CorruptLogError(
                        f"{plog.directory}: batch at offset {header.base_offset} cannot be replayed: {exc}"
                    ) from None
                offset = header.base_offset + header.last_offset_delta + 1

    # --- partitions that come and go (a cluster node) ---------------------------------

    def open_partition(self, partition: int) -> PartitionLog:
        """Open (and recover) a partition's directory, e.g. one just copied from another node."""
        with self._lock:
            plog = self._logs.get(partition)
            if plog is None:
                plog = self._logs[partition] = self._open_partition(partition)
            return plog

    def drop_partition(self, partition: int) -> None:
        """Close a partition and delete its directory: another node holds it now."""
        with self._lock:
            plog = self._logs.pop(partition, None)
        if plog is not None:
            plog.close()
        directory = coordinator_partition_dir(self.data_dir, partition)
        if self.fs.exists(directory):
            self.fs.remove_tree(directory)
            self.fs.fsync_directory(self.data_dir)

    def close(self) -> None:
        """Close every partition log (without fsync: ``sync`` first to keep writes)."""
        with self._lock:
            self._closed = True
            for plog in self._logs.values():
                plog.close()
