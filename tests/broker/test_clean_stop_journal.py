"""A clean stop leaves the coordinator's segments complete and its journal empty (storage.wal).

So a reader of the data directory (the pipeline, an older kcoord) needs nothing from the
journal after a clean stop. The real router and group service over the real disk.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import trio

from broker.config import Config
from broker.context import BrokerContext
from broker.group_service import GroupService
from broker.handlers import groups
from broker.router import Router
from broker.slots import Slot
from protocol.codec import decode_response, encode_request
from protocol.records import iter_batches
from tests.support.journal import journal_entries


class OnePartition:
    def partition_exists(self, topic: str, partition: int) -> bool:
        return partition == 0

    def partitions_of(self, topic: str) -> range:
        return range(1)


async def test_a_clean_stop_checkpoints_the_journal_into_the_segments(tmp_path: Path) -> None:
    config = Config({"offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0})
    service = GroupService.open(config, tmp_path)
    router = Router(BrokerContext(config=config, node_id=0, host="127.0.0.1", port=9092, cluster_id="c"))
    service.coordinator.topics = OnePartition()
    groups.register(router, service)
    body: dict[str, Any] = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                            "group_instance_id": None, "topics": [{"name": "t", "partitions": [
                                {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
                                 "committed_metadata": ""}]}]}
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        slot = router.route(encode_request(8, 8, 1, body, "test")[4:], "127.0.0.1:1")
        assert isinstance(slot, Slot)
        deadline = time.monotonic() + 10
        while not slot.event.is_set():
            assert time.monotonic() < deadline, "the commit was never answered"
            await trio.sleep(0.001)
        assert slot.frame is not None
        reply = decode_response(8, 8, slot.frame[4:])[1]
        assert [p.error_code for t in reply.topics for p in t.partitions] == [0]
        assert journal_entries(tmp_path), "the commit went through the journal"
        nursery.cancel_scope.cancel()
    await service.close()
    assert journal_entries(tmp_path) == []
    segments = sorted((tmp_path / "__consumer_offsets-0").glob("*.log"))
    keys = [record.key for seg in segments for _, batch in iter_batches(seg.read_bytes()) for record in batch.records or []]
    assert any(key is not None and b"g" in key and b"t" in key for key in keys), "the commit is in the segments"
