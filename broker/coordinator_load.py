"""The coordinator's state on disk: loaded from the snapshot and the log after it, and the snapshot written.

Blocking glue between the sans-IO coordinator (``broker.coordinator.snapshot`` says what a
snapshot holds) and storage (``storage.coordinator_snapshot`` frames the file,
``storage.coordinator_log`` replays the log). ``broker.group_service`` calls it at start-up
and from worker threads; the tests call it directly.

Loading: a snapshot that fits the log is loaded and only the log after its covered
offsets is replayed; one that is missing, old or damaged is deleted, with a log line, and
the whole log is replayed into a fresh coordinator. Either way the state is the replay
of the log: the snapshot is never the source of truth.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from broker.coordinator import GroupCoordinatorShard
from broker.coordinator.snapshot import restore, track_group_record
from protocol.consumer_offsets import is_offset_key
from protocol.records import EndTransactionMarker
from storage import coordinator_snapshot
from storage.coordinator_log import CoordinatorLog
from storage.coordinator_snapshot import (
    PartitionMark,
    Prefetch,
    SnapshotHeader,
    SnapshotUnusable,
    SnapshotWriter,
)
from storage.layout import COORDINATOR_TOPIC, coordinator_snapshot_file

__all__ = ["Loaded", "LogSyncFailed", "begin_snapshot", "collector_paused", "finish_snapshot", "load",
           "write_snapshot"]

log = logging.getLogger("kcoord.groups")


@dataclass
class Loaded:
    """A coordinator as start-up built it (``finish_load`` not yet called)."""

    shard: GroupCoordinatorShard
    #: The latest record of every group key, in log order (what the next snapshot writes).
    group_records: dict[bytes, bytes]
    #: The snapshot loaded, or None: the whole log was replayed.
    snapshot: SnapshotHeader | None
    #: Records replayed from the log (after the snapshot, or all of them).
    replayed: int


class TransactionalRecords:
    """Replay of what transactions wrote to ``__consumer_offsets``: pending offsets and their markers."""

    def __init__(self, coordinator: GroupCoordinatorShard, coordinator_log: CoordinatorLog) -> None:
        self.coordinator = coordinator
        self.partitions = coordinator_log.partitions

    def record(self, key: bytes, value: bytes | None, producer_id: int) -> None:
        self.coordinator.replay_transactional_bytes(key, value, producer_id)

    def marker(self, partition: int, producer_id: int, marker: EndTransactionMarker) -> None:
        self.coordinator.replay_marker(partition, self.partitions, producer_id, marker)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while start-up builds the coordinator's state.

    Loading makes objects that live as long as the broker (an offset-only group each, at
    least). With the collector on, every few hundred of them it walks the young ones and,
    as the heap grows, now and then all of them: about two thirds of the time of creating
    100,000 groups. Reference counting still frees what loading drops; the collector runs
    again afterwards.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load(coordinator_log: CoordinatorLog, new_shard: Callable[[], GroupCoordinatorShard], delete_retention_ms: int,
         now: int, prefetch: Prefetch | None = None) -> Loaded:
    """The snapshot and the log after it, or the whole log. ``prefetch``: the snapshot file
    already being read (``coordinator_snapshot.Prefetch``, started before the log opened)."""
    shard = new_shard()
    group_records: dict[bytes, bytes] = {}
    header = _load_snapshot(coordinator_log, shard, group_records, delete_retention_ms, now, prefetch)
    if header is None:
        shard = new_shard()  # whatever a failed load left in the first one
        group_records.clear()
    count = 0
    for key, value, _timestamp in coordinator_log.replay(
            None if header is None else [mark.covered for mark in header.marks],
            TransactionalRecords(shard, coordinator_log)):
        shard.replay_bytes(key, value)
        if not is_offset_key(key):
            track_group_record(group_records, key, value)
        count += 1
    return Loaded(shard, group_records, header, count)


def _load_snapshot(coordinator_log: CoordinatorLog, shard: GroupCoordinatorShard, group_records: dict[bytes, bytes],
                   delete_retention_ms: int, now: int, prefetch: Prefetch | None = None) -> SnapshotHeader | None:
    """Load the snapshot into ``shard``, or say why not (and delete it): None means replay the whole log."""
    path = coordinator_snapshot_file(coordinator_log.data_dir)
    try:
        found = coordinator_snapshot.read(coordinator_log.fs, coordinator_log.data_dir, coordinator_log.partitions,
                                          prefetch)
        if found is None:
            log.info("no coordinator snapshot: replaying the whole %s log", COORDINATOR_TOPIC)
            return None
        header, payload = found
        mismatch = _mismatch(coordinator_log, header, delete_retention_ms, now)
        if mismatch is not None:
            raise SnapshotUnusable(mismatch)
        try:
            group_records.update(restore(shard, payload))
        except Exception as exc:  # checksum-correct but unreadable: a bug, or another writer's payload
            raise SnapshotUnusable(f"its state cannot be loaded: {exc!r}") from exc
        return header
    except (SnapshotUnusable, OSError) as exc:
        log.warning("coordinator snapshot %s is unusable (%s): replaying the whole %s log", path, exc,
                    COORDINATOR_TOPIC)
    try:
        coordinator_snapshot.remove(coordinator_log.fs, coordinator_log.data_dir)
    except OSError as exc:
        log.warning("could not delete the unusable coordinator snapshot %s: %s", path, exc)
    return None


def _mismatch(coordinator_log: CoordinatorLog, header: SnapshotHeader, delete_retention_ms: int,
              now: int) -> str | None:
    """Why the snapshot does not fit this log, or None.

    It must cover offsets the log still holds, name the batch before them as the log has
    it (the same log, not a restored or rewritten one), and, when the log has grown since,
    be younger than delete.retention.ms: a tombstone written after the snapshot may be
    dropped by compaction after that long, and then the tail would no longer delete what
    the snapshot holds.
    """
    starts, ends = coordinator_log.start_offsets(), coordinator_log.end_offsets()
    grown = False
    for partition, mark in enumerate(header.marks):
        if not starts[partition] <= mark.covered <= ends[partition]:
            return (f"partition {partition}: it covers offsets below {mark.covered}, "
                    f"the log holds {starts[partition]} to {ends[partition]}")
        expected = None if mark.batch_base < 0 else (mark.batch_base, mark.batch_crc)
        if mark.covered > starts[partition] and coordinator_log.batch_before(partition, mark.covered) != expected:
            return f"partition {partition}: the batch before offset {mark.covered} is not the one it was taken after"
        grown = grown or mark.covered < ends[partition]
    age = now - header.created_ms
    if grown and not 0 <= age <= delete_retention_ms:
        return f"taken {age} ms ago, the log has grown since and delete.retention.ms is {delete_retention_ms}"
    return None


# ---------------------------------------------------------------------- writing


class LogSyncFailed(Exception):
    """The log's fsync failed while making a snapshot's records durable: a storage failure."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def begin_snapshot(coordinator_log: CoordinatorLog, covered: list[int], created_ms: int) -> SnapshotWriter:
    """The snapshot file begun, naming the batch each partition's covered offset follows (blocking)."""
    marks = []
    for partition, offset in enumerate(covered):
        before = coordinator_log.batch_before(partition, offset)
        marks.append(PartitionMark(offset) if before is None else PartitionMark(offset, *before))
    return SnapshotWriter(coordinator_log.fs, coordinator_log.data_dir, SnapshotHeader(created_ms, tuple(marks)))


def finish_snapshot(coordinator_log: CoordinatorLog, writer: SnapshotWriter) -> int:
    """The log durable up to everything the snapshot reflects, then the file in place (blocking).

    ``LogSyncFailed`` if the log's fsync fails (the broker stops on it); ``OSError`` if the
    snapshot file cannot be written (the previous one stays).
    """
    try:
        coordinator_log.sync()
    except OSError as exc:
        raise LogSyncFailed(exc) from exc
    return writer.commit()


def write_snapshot(coordinator_log: CoordinatorLog, payload: Iterable[list[bytes]], created_ms: int) -> int:
    """A whole snapshot in one blocking call, covering the log's current end; its size.

    The payload must be the state as of that end (nothing appended while it is made).
    """
    writer = begin_snapshot(coordinator_log, coordinator_log.end_offsets(), created_ms)
    try:
        for part in payload:
            writer.write(part)
        return finish_snapshot(coordinator_log, writer)
    except BaseException:
        writer.abort()
        raise
