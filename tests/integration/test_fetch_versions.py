"""Fetch over the wire at every version a client may pick: v12 names topics, v13+ names
them by id (KIP-516), v15+ carries a follower's id in ``replica_state`` (KIP-903)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import build_records, encode_batch
from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration


def request(client: WireClient, key: int, version: int, body: dict[str, Any]) -> Any:
    return client.receive(key, version, client.send(key, version, body))


def fetch_body(topic: str, topic_id: uuid.UUID | None, offset: int = 0, **extra: Any) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}], **extra}


@pytest.fixture
def client_and_topic(broker: BrokerProcess) -> Any:
    host, _, port = broker.bootstrap.rpartition(":")
    with WireClient(host, int(port)) as client:
        created = request(client, ApiKey.CREATE_TOPICS, 5, {"topics": [{
            "name": "by-id", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
            "timeout_ms": 5000, "validate_only": False})
        assert created.topics[0].error_code == 0
        batch = encode_batch(build_records([(b"k", b"v%d" % i) for i in range(3)]), base_timestamp=int(time.time() * 1000))
        produced = request(client, ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
                                                        "topic_data": [{"name": "by-id", "partition_data": [
                                                            {"index": 0, "records": batch}]}]})
        assert produced.responses[0].partition_responses[0].error_code == 0
        metadata = request(client, ApiKey.METADATA, 12, {"topics": [{"name": "by-id", "topic_id": uuid.UUID(int=0)}],
                                                         "allow_auto_topic_creation": False,
                                                         "include_topic_authorized_operations": False})
        yield client, metadata.topics[0].topic_id


def test_the_broker_advertises_fetch_up_to_v17(client_and_topic: Any) -> None:
    client, _ = client_and_topic
    versions = request(client, ApiKey.API_VERSIONS, 0, {})
    fetch = next(a for a in versions.api_keys if a.api_key == ApiKey.FETCH)
    assert (fetch.min_version, fetch.max_version) == (4, 17)


@pytest.mark.parametrize("version", [12, 13, 15, 16, 17])
def test_a_consumer_fetch_reads_by_name_or_by_id(client_and_topic: Any, version: int) -> None:
    client, topic_id = client_and_topic
    reply = request(client, ApiKey.FETCH, version, fetch_body("by-id", topic_id))
    [topic] = reply.responses
    if version >= 13:
        assert topic.topic_id == topic_id
    else:
        assert topic.topic == "by-id"
    [part] = topic.partitions
    assert part.error_code == 0 and part.high_watermark == 3 and part.records


@pytest.mark.parametrize("version", [13, 15])
def test_an_unknown_topic_id_is_unknown_topic_id_and_the_known_ones_are_answered(
        client_and_topic: Any, version: int) -> None:
    client, topic_id = client_and_topic
    stranger = uuid.uuid4()
    body = fetch_body("by-id", topic_id)
    body["topics"].append({"topic": "", "topic_id": stranger, "partitions": [{
        "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
        "log_start_offset": -1, "partition_max_bytes": 1 << 20}]})
    reply = request(client, ApiKey.FETCH, version, body)
    by_id = {t.topic_id: t.partitions[0] for t in reply.responses}
    assert by_id[topic_id].error_code == 0 and by_id[topic_id].records
    assert by_id[stranger].error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_a_long_poll_by_topic_id_answers_with_the_id(client_and_topic: Any) -> None:
    client, topic_id = client_and_topic
    body = fetch_body("by-id", topic_id, offset=3, max_wait_ms=200, min_bytes=1)
    reply = request(client, ApiKey.FETCH, 15, body)
    [topic] = reply.responses
    assert topic.topic_id == topic_id and topic.partitions[0].error_code == 0
    assert not topic.partitions[0].records


def test_a_replica_client_fetches_at_the_highest_version_both_sides_speak(
        broker: BrokerProcess, client_and_topic: Any) -> None:
    import trio

    from cluster.replica import FETCH_VERSIONS, ReplicaClient

    _, topic_id = client_and_topic
    host, _, port = broker.bootstrap.rpartition(":")

    async def fetch() -> tuple[int, Any]:
        client = ReplicaClient(host, int(port), replica_id=7, replica_epoch=3)
        try:
            fetched = await client.fetch("by-id", 0, 0, -1, topic_id=topic_id)
            assert client.fetch_version is not None
            return client.fetch_version, fetched
        finally:
            await client.aclose()

    version, fetched = trio.run(fetch)
    assert version == FETCH_VERSIONS[1] == 17
    assert fetched.error == 0 and fetched.high_watermark == 3 and fetched.records
