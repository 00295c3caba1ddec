"""A follower whose last epoch its new leader does not know, with real partition logs and
no network (``cluster.replicator.Replicator.serve_fetch`` and the follower's ``_on_fetched``).

The case: a replica that has just become leader with an empty log (its
predecessor wrote a record no other replica had acknowledged, then handed the partition
back to it) is fetched from by a follower whose log holds that record. The follower must
cut it and catch up, so that the high watermark, and every write waiting for the ISR,
moves; before, it fetched past the leader's end forever without being counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cluster.replica import Fetched
from cluster.replication import LeaderState
from cluster.replicator import Replicator
from protocol.errors import ErrorCode
from storage.partition import PartitionLog
from tests.cluster.test_hw_checkpoint_restore import TP, FakeNode

OLD_EPOCH, NEW_EPOCH = 5, 9


class Part(dict[str, Any]):
    """One partition of a follower's Fetch, read as the decoded request is (attributes and get)."""

    def __getattr__(self, name: str) -> Any:
        return self[name]


def follower_fetch(plog: PartitionLog) -> Part:
    return Part(partition=0, fetch_offset=plog.next_offset, current_leader_epoch=NEW_EPOCH,
                last_fetched_epoch=plog.latest_epoch, partition_max_bytes=1 << 20)


def as_received(entry: dict[str, Any]) -> Fetched:
    """The answer as ``cluster.replica.ReplicaClient`` hands it over: a diverging epoch that
    equals the wire field's defaults (-1, -1) is not sent, so it is not one."""
    diverging = entry.get("diverging_epoch")
    found = None
    if diverging is not None and (diverging["epoch"] >= 0 or diverging["end_offset"] >= 0):
        found = (diverging["epoch"], diverging["end_offset"])
    return Fetched(entry["error_code"], entry["high_watermark"], entry["log_start_offset"],
                   bytes(entry["records"] or b""), found)


async def test_a_follower_holding_a_record_the_new_empty_leader_lacks_cuts_it_and_joins_the_high_watermark(
        tmp_path: Path) -> None:
    leader_log = PartitionLog.open(tmp_path / "leader" / "t-0", 1 << 20)
    follower_log = PartitionLog.open(tmp_path / "follower" / "t-0", 1 << 20)
    follower_log.leader_epoch = OLD_EPOCH
    follower_log.append([(b"k", b"never acknowledged")], 0)
    follower_log.leader_epoch = -1
    leader_node = FakeNode(tmp_path / "leader", leader_log, me=1)
    leading = Replicator(leader_node)  # type: ignore[arg-type]
    state = LeaderState.begin(1, NEW_EPOCH, (1, 2), (1, 2), leader_log.next_offset, 0, leader_node.now)
    leading.leaders[TP] = state
    following = Replicator(FakeNode(tmp_path / "follower", follower_log, me=2))  # type: ignore[arg-type]

    # The new leader writes a record; it waits for the ISR (the follower).
    leader_log.leader_epoch = NEW_EPOCH
    leader_log.append([(b"k", b"acknowledged once the ISR has it")], 0)
    settled: list[ErrorCode] = []
    state.wait(leader_log.next_offset, settled.append)

    for _ in range(5):
        entry = leading.serve_fetch(TP, follower_fetch(follower_log), 2, leader_log)
        await following._on_fetched(TP, follower_log, as_received(entry))
        leader_node.now += 0.1
        if settled:
            break
    assert settled == [ErrorCode.NONE], "the write waiting for the ISR was released"
    assert state.high_watermark == leader_log.next_offset == follower_log.next_offset == 1
    assert [r.value for r in _records(follower_log)] == [b"acknowledged once the ISR has it"]


def _records(plog: PartitionLog) -> list[Any]:
    from protocol.records.batch import iter_batches

    return [record for _, batch in iter_batches(plog.read_raw(0, 1 << 20)) for record in batch.records or ()]
