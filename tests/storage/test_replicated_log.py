"""A partition log as a replication leader or follower keeps it: leader epochs stamped in
every batch (KIP-101), a leader's batches appended at the leader's offsets, a divergent
tail cut back, and a high watermark below which consumers read."""

from __future__ import annotations

from pathlib import Path

from protocol.records import build_records, encode_batch, peek_batch_header
from storage.partition import PartitionLog


def batch(base: int, count: int, epoch: int) -> bytes:
    records = build_records([(None, f"v{base + i}".encode()) for i in range(count)])
    return encode_batch(records, base_offset=base, base_timestamp=0, partition_leader_epoch=epoch)


def test_a_leader_stamps_its_epoch_and_answers_the_end_offset_of_each_epoch(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", 1 << 20)
    log.leader_epoch = 3
    log.append([(None, b"a"), (None, b"b")], 0)
    log.leader_epoch = 7
    log.append([(None, b"c")], 0)
    log.append_batch(batch(0, 2, -1))
    assert peek_batch_header(log.read_raw(0, 100)).partition_leader_epoch == 3
    assert [b.partition_leader_epoch for _, b in log.read_batches(0)] == [3, 7, 7]
    assert log.latest_epoch == 7
    assert log.end_offset_for_epoch(3) == (3, 2)
    assert log.end_offset_for_epoch(5) == (3, 2)  # no epoch 5 here: epoch 3 ends where 7 starts
    assert log.end_offset_for_epoch(7) == (7, 5)
    assert log.end_offset_for_epoch(9) == (7, 5)
    assert log.end_offset_for_epoch(1) == (-1, -1)
    log.close()
    reopened = PartitionLog.open(tmp_path / "p", 1 << 20)
    assert reopened.end_offset_for_epoch(3) == (3, 2)  # rebuilt from the batch headers
    reopened.close()


def test_a_follower_appends_the_leaders_batches_at_their_offsets_gaps_included(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", 1 << 20)
    raw = batch(0, 2, 1) + batch(2, 1, 1) + batch(10, 2, 2)  # the leader's cleaner left a gap
    assert log.append_replicated(raw) == 12
    assert log.append_replicated(batch(2, 1, 1)) == 12  # already here: skipped
    assert log.append_replicated(batch(12, 1, 2) + batch(13, 5, 2)[:30]) == 13  # a partial batch waits
    log.flush()
    log.close()
    reopened = PartitionLog.open(tmp_path / "p", 1 << 20)
    assert [o for o, _ in reopened.read_batches(0)] == [0, 2, 10, 12]
    assert reopened.next_offset == 13
    assert reopened.end_offset_for_epoch(1) == (1, 10)
    reopened.close()


def test_a_divergent_tail_is_cut_back_durably_and_the_log_goes_on_from_there(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", 200)  # small segments: the cut spans several
    log.append_replicated(b"".join(batch(i * 2, 2, 1 if i < 3 else 2) for i in range(8)))
    assert len(log.segments) > 2
    assert log.truncate_to(6) == 6
    assert log.latest_epoch == 1
    assert log.append_replicated(batch(6, 3, 4)) == 9
    log.flush()
    log.close()
    reopened = PartitionLog.open(tmp_path / "p", 200)
    assert [(o, b.partition_leader_epoch) for o, b in reopened.read_batches(0)] == [(0, 1), (2, 1), (4, 1), (6, 4)]
    assert reopened.truncate_to(5) == 4  # inside a batch: cut before it
    assert reopened.reset_to(40) == 40
    assert (reopened.log_start_offset, reopened.next_offset, reopened.latest_epoch) == (40, 40, -1)
    reopened.close()
    again = PartitionLog.open(tmp_path / "p", 200)
    assert (again.log_start_offset, again.next_offset) == (40, 40)
    again.close()


def test_a_cut_into_a_gapped_segment_leaves_a_contiguous_active_segment(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", 1 << 20)
    log.append_replicated(batch(0, 1, 1) + batch(5, 1, 1) + batch(6, 1, 1))
    log.truncate_to(6)
    log.append_replicated(batch(6, 2, 2))
    log.flush()
    log.close()
    reopened = PartitionLog.open(tmp_path / "p", 1 << 20)
    assert [o for o, _ in reopened.read_batches(0)] == [0, 5, 6]
    reopened.close()


def test_consumers_read_up_to_the_high_watermark_when_replication_keeps_one(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", 1 << 20)
    log.append([(None, b"a"), (None, b"b")], 0)
    assert log.high_watermark == 2
    log.set_high_watermark(1)
    assert log.high_watermark == 1
    log.truncate_to(0)
    assert log.high_watermark == 0
    log.close()
