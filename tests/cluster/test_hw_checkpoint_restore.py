"""A replica that opens its log again starts its high watermark at the saved one, capped at
its log end (Kafka's replication-offset-checkpoint): a restarted leader serves up to it at
once, before any follower has fetched, and never past it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cluster.model import Assignment, ClusterImage, Keys, Leadership, NodeInfo, encode_isr
from cluster.replicator import Replicator
from storage.fs import REAL_FS
from storage.hw_checkpoint import HighWatermarkCheckpoint
from storage.partition import PartitionLog

KEYS = Keys("test")
TP = ("t", 0)


class FakeNode:
    """What the replicator uses of a cluster node, with no etcd and no sockets."""

    def __init__(self, data_dir: Path, plog: PartitionLog, me: int = 1) -> None:
        self.config: dict[str, Any] = {"replica.lag.time.max.ms": 2000, "min.insync.replicas": 1,
                                       "log.flush.policy": "durable",
                                       "replica.high.watermark.checkpoint.interval.ms": 5000}
        self.data_dir = data_dir
        self.fs = REAL_FS
        self.node_id = me
        self.keys = KEYS
        self.catalog = None
        self.now = 100.0
        self.plog = plog
        self.image = ClusterImage(KEYS)
        for node in (1, 2, 3):
            self.image.apply(KEYS.node(node), NodeInfo(node, {"PLAINTEXT": ("127.0.0.1", 9000 + node)}).encode(), 1)
        self.image.apply(KEYS.assignment(*TP), Assignment((1, 2, 3)).encode(), 2)
        self.image.apply(KEYS.isr(*TP), encode_isr((1, 2, 3)), 3)
        self.image.apply(KEYS.leader(*TP), Leadership.encode(1), 4)
        self.broker = SimpleNamespace(data=SimpleNamespace(forget_producers=lambda plog: None,
                                                           readable_moved=lambda: None))

    def clock(self) -> float:
        return self.now

    def _local_log(self, tp: tuple[str, int]) -> PartitionLog | None:
        return self.plog if tp == TP else None


def log_with(path: Path, records: int) -> PartitionLog:
    plog = PartitionLog.open(path, 1 << 20)
    for i in range(records):
        plog.append([(b"k", str(i).encode())], 0)
    return plog


def test_a_restarted_leader_serves_up_to_its_saved_high_watermark_before_any_follower_fetches(
        tmp_path: Path) -> None:
    plog = log_with(tmp_path / "t-0", 10)
    HighWatermarkCheckpoint(tmp_path).write({TP: 6})
    replicator = Replicator(FakeNode(tmp_path, plog))
    replicator.lead(TP, 4, plog, serving_before=False)
    # Followers 2 and 3 are in the ISR and have not fetched: records 6..9 are not exposed,
    # records 0..5 are, at once.
    assert plog.high_watermark == 6
    assert replicator.leaders[TP].high_watermark == 6


def test_without_a_checkpoint_a_restarted_leader_waits_for_its_followers(tmp_path: Path) -> None:
    plog = log_with(tmp_path / "t-0", 10)
    replicator = Replicator(FakeNode(tmp_path, plog))
    replicator.lead(TP, 4, plog, serving_before=False)
    assert plog.high_watermark == 0


def test_a_saved_high_watermark_past_the_log_end_is_capped_at_it(tmp_path: Path) -> None:
    plog = log_with(tmp_path / "t-0", 4)  # the tail past 4 was never flushed before the crash
    HighWatermarkCheckpoint(tmp_path).write({TP: 9})
    replicator = Replicator(FakeNode(tmp_path, plog))
    replicator.restore_high_watermark(TP, plog)
    assert plog.high_watermark == 4


def test_the_leader_saves_the_high_watermark_its_followers_moved(tmp_path: Path) -> None:
    plog = log_with(tmp_path / "t-0", 10)
    node = FakeNode(tmp_path, plog)
    replicator = Replicator(node)
    replicator.lead(TP, 4, plog, serving_before=False)
    state = replicator.leaders[TP]
    state.on_fetch(2, 10, plog.next_offset, node.now)
    state.on_fetch(3, 8, plog.next_offset, node.now)
    replicator._advance(TP, state, plog)
    assert plog.high_watermark == 8
    replicator.save_high_watermarks()
    assert HighWatermarkCheckpoint(tmp_path).read() == {TP: 8}
    # The next start of this replica, as a follower or a leader, begins there.
    reopened = PartitionLog.open(tmp_path / "t-0", 1 << 20)
    Replicator(FakeNode(tmp_path, reopened)).restore_high_watermark(TP, reopened)
    assert reopened.high_watermark == 8


def test_a_partition_this_node_no_longer_holds_leaves_the_checkpoint(tmp_path: Path) -> None:
    plog = log_with(tmp_path / "t-0", 3)
    HighWatermarkCheckpoint(tmp_path).write({TP: 2, ("gone", 0): 5})
    node = FakeNode(tmp_path, plog)
    node.image.apply(KEYS.assignment("gone", 0), Assignment((2, 3)).encode(), 5)
    Replicator(node).save_high_watermarks()
    assert HighWatermarkCheckpoint(tmp_path).read() == {TP: 2}


def test_a_partition_reassigned_to_this_node_alone_serves_its_whole_log(tmp_path: Path) -> None:
    plog = log_with(tmp_path / "t-0", 10)
    plog.set_high_watermark(7)  # what it had as a follower
    node = FakeNode(tmp_path, plog)
    node.image.apply(KEYS.assignment(*TP), Assignment((1,)).encode(), 6)
    Replicator(node).lead(TP, 7, plog, serving_before=False)
    assert plog.high_watermark == 10
