"""The data service under a cluster node's replication: acks=all waits for the ISR and is
refused below min.insync.replicas, and consumers read up to the high watermark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from broker.config import Config
from broker.data_service import DataService
from broker.replication import Settled
from broker.slots import Slot
from broker.topics import TopicCatalog
from protocol.api_keys import ApiKey
from protocol.codec import decode_request, decode_response, encode_request
from protocol.errors import ErrorCode
from protocol.records import build_records, encode_batch


class FakeReplication:
    def __init__(self, in_sync: int) -> None:
        self.isr = in_sync
        self.waiting: list[tuple[int, Settled]] = []

    def in_sync(self, topic: str, partition: int) -> int:
        return self.isr

    def appended(self, topic: str, partition: int, end_offset: int, settled: Settled | None) -> None:
        if settled is not None:
            self.waiting.append((end_offset, settled))


def service(tmp_path: Path, in_sync: int) -> tuple[DataService, FakeReplication]:
    catalog = TopicCatalog(tmp_path, Config({"min.insync.replicas": 2}))
    assert catalog.create("t", 1, -1, {})[0] is ErrorCode.NONE
    data = DataService(catalog, lambda: 0, durable=False)
    replication = FakeReplication(in_sync)
    data.replication = replication
    return data, replication


def produce(data: DataService, acks: int) -> Any:
    batch = encode_batch(build_records([(None, b"a"), (None, b"b")]), base_timestamp=0)
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}]}
    return data.produce(decode_request(encode_request(ApiKey.PRODUCE, 9, 1, body, "test")[4:]))


def error_of(slot: Slot) -> int:
    assert slot.frame is not None
    reply = decode_response(ApiKey.PRODUCE, 9, slot.frame[4:])[1]
    return int(reply.responses[0].partition_responses[0].error_code)


async def test_acks_all_is_answered_once_the_isr_has_the_records(tmp_path: Path) -> None:
    data, replication = service(tmp_path, in_sync=2)
    slot = produce(data, -1)
    assert isinstance(slot, Slot) and not slot.event.is_set()
    end, settled = replication.waiting.pop()
    assert end == 2
    settled(ErrorCode.NONE)
    assert slot.event.is_set() and error_of(slot) == 0


async def test_acks_all_is_answered_with_the_reason_the_isr_did_not_take_it(tmp_path: Path) -> None:
    data, replication = service(tmp_path, in_sync=2)
    slot = produce(data, -1)
    replication.waiting.pop()[1](ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert error_of(slot) == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_acks_all_below_min_insync_replicas_is_refused_before_the_append(tmp_path: Path) -> None:
    data, _ = service(tmp_path, in_sync=1)
    reply = produce(data, -1)
    assert reply["responses"][0]["partition_responses"][0]["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
    partition = data.catalog.partition("t", 0)
    assert partition is not None and partition.next_offset == 0
    assert produce(data, 1)["responses"][0]["partition_responses"][0]["error_code"] == 0  # acks=1 still goes


async def test_consumers_read_up_to_the_high_watermark(tmp_path: Path) -> None:
    data, _ = service(tmp_path, in_sync=2)
    produce(data, 1)
    produce(data, 1)
    partition = data.catalog.partition("t", 0)
    assert partition is not None
    partition.set_high_watermark(2)
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": "t", "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [],
            "rack_id": ""}
    reply = data.fetch(decode_request(encode_request(ApiKey.FETCH, 12, 2, body, "test")[4:]))
    assert isinstance(reply, dict)
    part = reply["responses"][0]["partitions"][0]
    assert part["high_watermark"] == 2
    assert part["records"] == partition.read_raw(0, 1 << 20, upto=2) and len(part["records"]) > 0
    assert partition.read_raw(0, 1 << 20, upto=2) != partition.read_raw(0, 1 << 20)
    await trio.sleep(0)
