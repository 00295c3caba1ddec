"""A cluster node that comes to lead a ``__consumer_offsets`` partition loads its transactional
offset commits as a single node's start-up does: pending until their producer's marker, made
visible by COMMIT, dropped by ABORT, and still pending when no marker came yet."""

from __future__ import annotations

from pathlib import Path

from broker.coordinator import GroupCoordinatorShard
from broker.coordinator.records import OffsetCommitRecord, encode
from cluster.node import _partition_events, _replayed
from protocol.consumer_offsets import OffsetValue, partition_for
from protocol.records import EndTransactionMarker
from storage.coordinator_log import CoordinatorLog

PARTITIONS = 4
GROUP = "g"
COMMITTED, ABORTED, PENDING = 7, 8, 9


def offset(group: str, partition: int, value: int) -> tuple[bytes, bytes | None]:
    return encode(OffsetCommitRecord(group, "t", partition, OffsetValue(value, -1, "", 1, -1)))


def test_pending_offsets_wait_for_their_marker_and_aborted_ones_never_show(tmp_path: Path) -> None:
    log = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    partition = partition_for(GROUP, PARTITIONS)
    log.append(GROUP, [offset(GROUP, 0, 1), offset(GROUP, 1, 1), offset(GROUP, 2, 1)], 1)
    log.append(GROUP, [offset(GROUP, 0, COMMITTED)], 2, producer_id=100, producer_epoch=0)
    log.append(GROUP, [offset(GROUP, 1, ABORTED)], 3, producer_id=200, producer_epoch=0)
    log.append(GROUP, [offset(GROUP, 2, PENDING)], 4, producer_id=300, producer_epoch=0)
    log.append_marker(partition, 100, 0, EndTransactionMarker(True, 5), 5)
    log.append_marker(partition, 200, 0, EndTransactionMarker(False, 5), 6)

    shard = GroupCoordinatorShard()
    events = _partition_events(log, partition)
    records = _replayed(events, shard.replay_transactional_bytes,
                        lambda producer_id, marker: shard.replay_marker(partition, PARTITIONS, producer_id, marker))
    shard.load_groups(records, 10)
    log.close()

    def committed(p: int) -> int | None:
        found = shard.offsets.get(GROUP, "t", p)
        return None if found is None else found.offset

    assert committed(0) == COMMITTED
    assert committed(1) == 1  # the aborted transaction's offset never became the committed one
    assert committed(2) == 1  # no marker yet: still pending
    pending = shard.offset_manager.pending
    assert pending.has_pending(GROUP, "t", 2) and not pending.has_pending(GROUP, "t", 1)


def test_unloading_a_group_forgets_its_pending_offsets(tmp_path: Path) -> None:
    log = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    partition = partition_for(GROUP, PARTITIONS)
    log.append(GROUP, [offset(GROUP, 2, PENDING)], 4, producer_id=300, producer_epoch=0)
    shard = GroupCoordinatorShard()
    events = _partition_events(log, partition)
    shard.load_groups(_replayed(events, shard.replay_transactional_bytes, lambda *_: None), 10)
    log.close()
    assert shard.offset_manager.pending.has_pending(GROUP, "t", 2)
    shard.unload_groups([GROUP])
    assert not shard.offset_manager.pending.any_open()
