"""offsets.commit.timeout.ms: an OffsetCommit not durable in time is answered REQUEST_TIMED_OUT.

The real router and group service over a real coordinator log; the fault-injecting
filesystem holds the coordinator log's fsync open so the test decides when it ends, and
trio's MockClock decides when the timeout passes.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import trio
import trio.testing

from broker.config import Config
from broker.context import BrokerContext
from broker.group_service import GroupService
from broker.handlers import groups
from broker.router import Router
from broker.slots import Slot
from protocol.codec import decode_response, encode_request
from protocol.errors import ErrorCode
from storage.faultfs import FaultyFileSystem
from tests.support.group_commit import eventually


def commit_body(offset: int, partitions: list[int]) -> dict[str, Any]:
    return {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [
                {"partition_index": p, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": ""} for p in partitions]}]}


class TwoPartitions:
    def partition_exists(self, topic: str, partition: int) -> bool:
        return partition < 2

    def partitions_of(self, topic: str) -> range:
        return range(2)


def route(router: Router, api_key: int, version: int, body: dict[str, Any], correlation_id: int) -> Slot:
    outcome = router.route(encode_request(api_key, version, correlation_id, body, "test")[4:], "127.0.0.1:1")
    assert isinstance(outcome, Slot)
    return outcome


def decoded(slot: Slot, api_key: int, version: int) -> Any:
    assert slot.frame is not None
    return decode_response(api_key, version, slot.frame[4:])[1]


async def test_a_commit_not_durable_within_the_timeout_is_answered_request_timed_out(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    fs = FaultyFileSystem()
    held = threading.Event()
    release = threading.Event()

    def hold(_path: str) -> None:
        held.set()
        assert release.wait(timeout=30)

    config = Config({"offsets.topic.num.partitions": 1, "offsets.commit.timeout.ms": 5000,
                     "group.initial.rebalance.delay.ms": 0})
    service = GroupService.open(config, tmp_path, fs)
    router = Router(BrokerContext(config=config, node_id=0, host="127.0.0.1", port=9092, cluster_id="c"))
    service.coordinator.topics = TwoPartitions()  # partition 9 is unknown
    groups.register(router, service)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        fs.before("fsync", hold, path="__consumer_offsets.journal", times=None)
        stuck = route(router, 8, 8, commit_body(42, [0, 1, 9]), 1)
        await eventually(held.is_set)
        reading = route(router, 9, 7, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}],
                                       "require_stable": False}, 2)
        mock_clock.jump(4.99)
        await trio.testing.wait_all_tasks_blocked()
        assert not stuck.event.is_set() and not reading.event.is_set()
        mock_clock.jump(0.02)
        await eventually(stuck.event.is_set)
        reply = decoded(stuck, 8, 8)
        codes = {p.partition_index: p.error_code for t in reply.topics for p in t.partitions}
        assert codes == {0: ErrorCode.REQUEST_TIMED_OUT, 1: ErrorCode.REQUEST_TIMED_OUT,
                         9: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}, "a refused partition keeps its own error"
        assert service.commit.timeouts == 1
        assert not reading.event.is_set(), "a read behind the stuck write still waits for durability"
        release.set()
        fs.clear()
        await eventually(reading.event.is_set)
        assert [p.committed_offset for t in decoded(reading, 9, 7).topics for p in t.partitions] == [42]
        after = route(router, 8, 8, commit_body(43, [0]), 3)
        await eventually(after.event.is_set)
        assert [p.error_code for t in decoded(after, 8, 8).topics for p in t.partitions] == [0]
        nursery.cancel_scope.cancel()
    await service.close()
