"""A coordinator request answered at once goes back to the connection as its reply's
frame; one whose reply waits for its records' sync gets a slot, set once they are durable."""

from __future__ import annotations

from pathlib import Path

import trio

from broker.config import Config
from broker.context import BrokerContext
from broker.group_service import GroupService
from broker.handlers import groups
from broker.router import Router
from broker.slots import Slot
from protocol.api_keys import ApiKey
from protocol.codec import decode_response, encode_request

PEER = "127.0.0.1:1"
JOIN = {"group_id": "g", "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000, "member_id": "",
        "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
COMMIT = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
    {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5}]}]}


async def test_answered_at_once_is_a_frame_and_a_durable_wait_is_a_slot(tmp_path: Path) -> None:
    config = Config({"offsets.topic.num.partitions": 1, "log.flush.policy": "durable"})
    service = GroupService.open(config, tmp_path)
    router = Router(BrokerContext(config=config, node_id=0, host="127.0.0.1", port=9092, cluster_id="c"))
    groups.register(router, service)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        # A first JoinGroup without a member id: MEMBER_ID_REQUIRED, nothing written.
        joined = router.route(encode_request(ApiKey.JOIN_GROUP, 5, 1, JOIN, "test")[4:], PEER)
        assert type(joined) is bytes
        _, body = decode_response(ApiKey.JOIN_GROUP, 5, joined[4:])
        assert body.error_code == 79 and body.member_id
        assert router.api_stats[ApiKey.JOIN_GROUP].latency.count == 1
        # A commit writes a record: its reply waits for the sync, in a slot.
        committed = router.route(encode_request(ApiKey.OFFSET_COMMIT, 8, 2, COMMIT, "test")[4:], PEER)
        assert isinstance(committed, Slot) and not committed.is_set()  # the sync runs on a task
        # A fetch routed before that sync writes nothing, but is not answered ahead of the
        # commit's durability: it waits too.
        fetched = router.route(encode_request(ApiKey.OFFSET_FETCH, 7, 3, {
            "group_id": "g", "topics": None, "require_stable": False}, "test")[4:], PEER)
        assert isinstance(fetched, Slot)
        with trio.fail_after(10):
            await committed.event.wait()
        assert committed.frame is not None
        _, body = decode_response(ApiKey.OFFSET_COMMIT, 8, committed.frame[4:])
        assert [p.error_code for t in body.topics for p in t.partitions] == [0]
        # Everything written is durable now: a fetch is answered at once, and sees the commit.
        fetched = router.route(encode_request(ApiKey.OFFSET_FETCH, 7, 4, {
            "group_id": "g", "topics": None, "require_stable": False}, "test")[4:], PEER)
        assert type(fetched) is bytes
        _, body = decode_response(ApiKey.OFFSET_FETCH, 7, fetched[4:])
        assert [(t.name, [p.committed_offset for p in t.partitions]) for t in body.topics] == [("t", [5])]
        nursery.cancel_scope.cancel()
    await service.close()
