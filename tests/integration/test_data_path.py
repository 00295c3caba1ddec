"""A consumer app end to end with each real client: produce, consume in a group, resume."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from protocol.errors import ErrorCode
from protocol.records import build_records, encode_batch, iter_batches
from tests.support.broker_process import BrokerProcess
from tests.support.clients import create_topic, learn_partitions, wait_until
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

FAST = {"group.initial.rebalance.delay.ms": 1000}


def _produce_keyed(bootstrap: str, topic: str, start: int, count: int, **config: Any) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    failures: list[Any] = []
    for i in range(start, start + count):
        producer.produce(topic, key=f"key-{i % 17}".encode(), value=f"value-{i}".encode(),
                         on_delivery=lambda err, msg: failures.append(err) if err else None)
    assert producer.flush(30) == 0
    assert failures == []


# Each consumer reads until it has `want` messages or times out; returns (partition, offset, value).
Consume = Callable[[str, str, str, int], list[tuple[int, int, bytes]]]


def _kafka_python(bootstrap: str, group: str, topic: str, want: int) -> list[tuple[int, int, bytes]]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    got: list[tuple[int, int, bytes]] = []
    try:
        learn_partitions(consumer, [topic])
        deadline = time.monotonic() + 60
        while len(got) < want and time.monotonic() < deadline:
            for _, records in consumer.poll(timeout_ms=200).items():
                got.extend((r.partition, r.offset, r.value) for r in records)
        consumer.commit()
    finally:
        consumer.close()
    return got


def _confluent(bootstrap: str, group: str, topic: str, want: int) -> list[tuple[int, int, bytes]]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[tuple[int, int, bytes]] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < want and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append((message.partition(), message.offset(), message.value()))
        if got:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def _aiokafka(bootstrap: str, group: str, topic: str, want: int) -> list[tuple[int, int, bytes]]:
    from aiokafka import AIOKafkaConsumer

    async def main() -> list[tuple[int, int, bytes]]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        got: list[tuple[int, int, bytes]] = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < want and time.monotonic() < deadline:
                for _, records in (await consumer.getmany(timeout_ms=200)).items():
                    got.extend((r.partition, r.offset, r.value) for r in records)
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    return asyncio.run(main())


CLIENTS: dict[str, Consume] = {"kafka-python": _kafka_python, "confluent": _confluent, "aiokafka": _aiokafka}


def _in_partition_order(got: list[tuple[int, int, bytes]]) -> bool:
    by_partition: dict[int, list[int]] = {}
    for partition, offset, _ in got:
        by_partition.setdefault(partition, []).append(offset)
    return all(offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
               for offsets in by_partition.values())


@pytest.mark.parametrize("client", list(CLIENTS))
def test_consumer_app_end_to_end(broker_factory: object, client: str) -> None:
    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    consume = CLIENTS[client]
    create_topic(broker.bootstrap, "orders", 3)
    _produce_keyed(broker.bootstrap, "orders", 0, 300)

    first = consume(broker.bootstrap, "app", "orders", 300)
    assert sorted(v for _, _, v in first) == sorted(f"value-{i}".encode() for i in range(300))
    assert _in_partition_order(first)

    # A new consumer in the group resumes where the first committed: nothing is re-delivered.
    _produce_keyed(broker.bootstrap, "orders", 300, 30)
    second = consume(broker.bootstrap, "app", "orders", 30)
    assert sorted(v for _, _, v in second) == sorted(f"value-{i}".encode() for i in range(300, 330))

    broker.restart()
    _produce_keyed(broker.bootstrap, "orders", 330, 30)
    third = consume(broker.bootstrap, "app", "orders", 30)
    assert sorted(v for _, _, v in third) == sorted(f"value-{i}".encode() for i in range(330, 360))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_reach_every_client_intact(broker: BrokerProcess, codec: str) -> None:
    topic = f"compressed-{codec}"
    create_topic(broker.bootstrap, topic, 1)
    _produce_keyed(broker.bootstrap, topic, 0, 50, **{"compression.codec": codec, "linger.ms": 50})
    expected = sorted(f"value-{i}".encode() for i in range(50))
    for name in ("kafka-python", "aiokafka"):
        got = CLIENTS[name](broker.bootstrap, f"reader-{name}-{codec}", topic, 50)
        assert sorted(v for _, _, v in got) == expected, name
        assert _in_partition_order(got)


def test_idempotent_producer_survives_broker_restart_without_duplicates_or_gaps(broker: BrokerProcess) -> None:
    from confluent_kafka import Producer

    create_topic(broker.bootstrap, "exactly", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "linger.ms": 2, "message.timeout.ms": 60000, "retry.backoff.ms": 100})
    delivered: list[int] = []
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        (errors if err else delivered).append(err or int(msg.value()))

    for i in range(200):
        producer.produce("exactly", value=str(i).encode(), on_delivery=report)
        producer.poll(0)
        if i == 100:
            producer.flush(30)
            broker.restart()  # mid-stream: the producer reconnects and carries on
    assert producer.flush(60) == 0
    assert errors == []
    got = _kafka_python(broker.bootstrap, "checker", "exactly", 200)
    assert [int(v) for _, _, v in sorted(got)] == list(range(200))
    assert [o for _, o, _ in sorted(got)] == list(range(200))


def _produce_raw(client: WireClient, topic: str, records: bytes, acks: int = -1) -> Any:
    return client.request(0, 8, {"transactional_id": None, "acks": acks, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]}).responses[0].partition_responses[0]


def _fetch_request(topic: str, offset: int, max_wait_ms: int = 0, min_bytes: int = 0) -> dict[str, Any]:
    """A Fetch v11 body for partition 0 of ``topic`` from ``offset``."""
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
            "rack_id": "", "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}]}]}


def _list_offsets_request(topic: str, timestamp: int) -> dict[str, Any]:
    """A ListOffsets body for partition 0 of ``topic`` (-1 latest, -2 earliest, -3 max timestamp)."""
    return {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]}


def _create_with_configs(client: WireClient, topic: str, configs: dict[str, str]) -> None:
    """CreateTopics (one partition) with topic-level configs; must succeed."""
    created = client.request(19, 5, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                                  "assignments": [], "configs": [
                                                      {"name": k, "value": v} for k, v in configs.items()]}],
                                     "timeout_ms": 5000, "validate_only": False}).topics[0]
    assert created.error_code == 0


def test_bad_produce_and_fetch_input_gets_the_right_errors(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory({"auto.create.topics.enable": "false"})  # type: ignore[operator]
    create_topic(broker.bootstrap, "strict", 1)
    batch = encode_batch(build_records([(b"k", b"v")]), base_timestamp=int(time.time() * 1000))
    corrupt = bytearray(batch)
    corrupt[-1] ^= 0xFF
    old_magic = bytearray(batch)
    old_magic[16] = 1
    with WireClient(broker.host, broker.port) as client:
        assert _produce_raw(client, "strict", bytes(corrupt)).error_code == ErrorCode.CORRUPT_MESSAGE
        assert _produce_raw(client, "strict", bytes(old_magic)).error_code == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
        assert _produce_raw(client, "absent", batch).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        ok = _produce_raw(client, "strict", batch)
        assert (ok.error_code, ok.base_offset) == (0, 0)  # nothing bad was stored before it
        fetch = _fetch_request("strict", 5)
        beyond = client.request(1, 11, fetch).responses[0].partitions[0]
        assert (beyond.error_code, beyond.high_watermark) == (ErrorCode.OFFSET_OUT_OF_RANGE, 1)
        fetch["topics"][0]["partitions"][0]["fetch_offset"] = 0
        good = client.request(1, 11, fetch).responses[0].partitions[0]
        assert good.error_code == 0 and good.records == batch[:8] + good.records[8:] and len(good.records) == len(batch)
        listed = client.request(2, 5, _list_offsets_request("strict", -1))
        assert listed.topics[0].partitions[0].offset == 1


def test_fetch_long_poll_wakes_on_new_data(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "waiting", 1)
    batch = encode_batch(build_records([(None, b"hello")]), base_timestamp=int(time.time() * 1000))
    with WireClient(broker.host, broker.port, timeout=30) as reader, WireClient(broker.host, broker.port) as writer:
        cid = reader.send(1, 11, _fetch_request("waiting", 0, max_wait_ms=20000, min_bytes=1))
        started = time.monotonic()
        assert _produce_raw(writer, "waiting", batch, acks=1).error_code == 0
        answer = reader.receive(1, 11, cid).responses[0].partitions[0]
        assert time.monotonic() - started < 10  # woken by the produce, not by max_wait_ms
        assert answer.high_watermark == 1 and len(answer.records) == len(batch)


def test_fetch_that_waiting_cannot_help_is_answered_at_once(broker: BrokerProcess) -> None:
    """As Kafka does: an error the client must act on, or nothing asked for, is not held
    for max_wait_ms. The wait asked for (60 s) is far beyond the client's timeout (10 s),
    so a held reply fails the test."""
    create_topic(broker.bootstrap, "settled", 1)
    nothing_asked = dict(_fetch_request("settled", 0, max_wait_ms=60000, min_bytes=1), topics=[])
    with WireClient(broker.host, broker.port, timeout=10) as client:
        out_of_range = client.request(1, 11, _fetch_request("settled", 5, max_wait_ms=60000, min_bytes=1))
        assert out_of_range.responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        unknown = client.request(1, 11, _fetch_request("no-such-topic", 0, max_wait_ms=60000, min_bytes=1))
        assert unknown.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert client.request(1, 11, nothing_asked).responses == []
        # A fetch at the end of a healthy partition is still held until data arrives.
        cid = client.send(1, 11, _fetch_request("settled", 0, max_wait_ms=60000, min_bytes=1))
        with WireClient(broker.host, broker.port) as writer:
            batch = encode_batch(build_records([(None, b"late")]), base_timestamp=int(time.time() * 1000))
            assert _produce_raw(writer, "settled", batch, acks=1).error_code == 0
        assert client.receive(1, 11, cid).responses[0].partitions[0].high_watermark == 1


def test_acks_zero_gets_no_response_but_is_stored(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "fire", 1)
    batch = encode_batch(build_records([(None, b"x")]), base_timestamp=int(time.time() * 1000))
    with WireClient(broker.host, broker.port) as client:
        client.send(0, 8, {"transactional_id": None, "acks": 0, "timeout_ms": 5000, "topic_data": [
            {"name": "fire", "partition_data": [{"index": 0, "records": batch}]}]})
        # The next reply on this connection is the ListOffsets one: acks=0 produced none.
        body = _list_offsets_request("fire", -1)
        wait_until(lambda: client.request(2, 5, body).topics[0].partitions[0].offset == 1, 10, "the write")


def test_retention_deletes_old_segments_and_moves_the_log_start(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory({"log.retention.check.interval.ms": 100})  # type: ignore[operator]
    with WireClient(broker.host, broker.port) as client:
        _create_with_configs(client, "short", {"segment.bytes": "1024", "retention.bytes": "2048"})
        for _ in range(40):
            batch = encode_batch(build_records([(None, b"x" * 200)]), base_timestamp=int(time.time() * 1000))
            assert _produce_raw(client, "short", batch).error_code == 0

        def earliest() -> int:
            return int(client.request(2, 5, _list_offsets_request("short", -2)).topics[0].partitions[0].offset)

        def stored() -> int:
            return sum(f.stat().st_size for f in (broker.data_dir / "short-0").glob("*.log"))

        # Passes that ran while the records were still arriving leave more for the next one.
        wait_until(lambda: earliest() > 0 and stored() < 40 * 200, 15, "retention to move the log start")
        start = earliest()
        fetch = _fetch_request("short", 0)
        gone = client.request(1, 11, fetch).responses[0].partitions[0]
        assert gone.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and gone.log_start_offset >= start


def test_compacted_topic_keeps_the_latest_value_per_key(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory({  # type: ignore[operator]
        "log.retention.check.interval.ms": 100, "log.cleaner.min.cleanable.ratio": 0.0})
    with WireClient(broker.host, broker.port) as client:
        _create_with_configs(client, "table", {"segment.bytes": "1024", "cleanup.policy": "compact"})
        for round_no in range(20):
            for key in ("a", "b", "c"):
                batch = encode_batch(build_records([(key.encode(), f"{key}{round_no}".encode())]),
                                     base_timestamp=int(time.time() * 1000))
                assert _produce_raw(client, "table", batch).error_code == 0
        broker.wait_for_log("compacted table-0", timeout=15)
        fetch = _fetch_request("table", 0)
        records: list[tuple[int, bytes]] = []
        while True:
            part = client.request(1, 11, fetch).responses[0].partitions[0]
            batches = list(iter_batches(part.records or b""))
            if not batches:
                break
            for _, batch in batches:
                records.extend((batch.offset_of(r), r.value) for r in batch.records or [])
            fetch["topics"][0]["partitions"][0]["fetch_offset"] = batches[-1][1].next_offset
    # Older values of each key in sealed segments are gone; the newest of each survives,
    # at its original offset, and offsets still only grow.
    assert len(records) < 60
    assert [o for o, _ in records] == sorted({o for o, _ in records})
    latest = {value[:1]: value for _, value in records}
    assert latest == {b"a": b"a19", b"b": b"b19", b"c": b"c19"}
    assert records[-1][0] == 59


@pytest.mark.parametrize("version", [1, 4, 7])
def test_list_offsets_by_timestamp(broker: BrokerProcess, version: int) -> None:
    with WireClient(broker.host, broker.port) as client:
        _create_with_configs(client, "timed", {"segment.bytes": "1024"})
        base = 1_700_000_000_000
        for i in range(30):  # offset i has timestamp base + 1000 * i
            batch = encode_batch(build_records([(None, b"x" * 100)]), base_timestamp=base + 1000 * i)
            assert _produce_raw(client, "timed", batch).error_code == 0

        def lookup(timestamp: int) -> tuple[int, int]:
            part = client.request(2, version, _list_offsets_request("timed", timestamp)).topics[0].partitions[0]
            assert part.error_code == 0
            return int(part.timestamp), int(part.offset)

        assert lookup(base + 17_500) == (base + 18_000, 18)  # first record at or after
        assert lookup(base) == (base, 0)
        assert lookup(base + 29_000) == (base + 29_000, 29)
        assert lookup(base + 99_000) == (-1, -1)  # nothing that late
        assert lookup(-2)[1] == 0 and lookup(-1)[1] == 30
        if version >= 7:
            assert lookup(-3) == (base + 29_000, 29)  # max timestamp


def test_lag_from_the_admin_apis(broker: BrokerProcess) -> None:
    """Lag = high watermark - committed offset, read the way admin tools read it."""
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    create_topic(broker.bootstrap, "lagging", 2)
    _produce_keyed(broker.bootstrap, "lagging", 0, 100, partitioner="murmur2")
    with WireClient(broker.host, broker.port) as client:
        commit = {"group_id": "slow", "generation_id_or_member_epoch": -1, "member_id": "",
                  "group_instance_id": None, "topics": [{"name": "lagging", "partitions": [
                      {"partition_index": p, "committed_offset": 10, "committed_leader_epoch": -1,
                       "committed_metadata": ""} for p in (0, 1)]}]}
        assert all(p.error_code == 0 for t in client.request(8, 8, commit).topics for p in t.partitions)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    request = [ConsumerGroupTopicPartitions("slow", [TopicPartition("lagging", 0), TopicPartition("lagging", 1)])]
    committed = admin.list_consumer_group_offsets(request)["slow"].result(timeout=30).topic_partitions
    watermarks = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lag-probe"})
    try:
        lag = {tp.partition: watermarks.get_watermark_offsets(tp, timeout=10)[1] - tp.offset for tp in committed}
        ends = {p: watermarks.get_watermark_offsets(TopicPartition("lagging", p), timeout=10)[1] for p in (0, 1)}
    finally:
        watermarks.close()
    assert sum(ends.values()) == 100
    assert lag == {p: ends[p] - 10 for p in (0, 1)}
