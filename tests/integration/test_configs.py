"""Config APIs, topic configs that change behaviour, and DeleteRecords, driven by real admin clients.

kafka-python's and confluent-kafka's admin clients describe and alter configs; librdkafka's
own tests 0011 (IncrementalAlterConfigs to turn on compaction, then a null key refused)
and 0081 (CreateTopics with compression.type) are replayed here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import ErrorCode
from protocol.records import Compression, Record, encode_batch, iter_batches
from tests.support.broker_process import BrokerProcess
from tests.support.clients import wait_until
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

TOPIC, BROKER = 2, 4
SOURCE_TOPIC, SOURCE_STATIC, SOURCE_DEFAULT = 1, 4, 5


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("configs") / "data", {
        "log.retention.hours": 2, "log.retention.check.interval.ms": 200, "group.initial.rebalance.delay.ms": 0,
    }).start()
    yield proc
    assert proc.stop() == 0, proc.log()


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wire_create(server: BrokerProcess, name: str, configs: dict[str, str], partitions: int = 1) -> Any:
    with WireClient(server.host, server.port) as client:
        body = client.request(19, 7, {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
            "configs": [{"name": k, "value": v} for k, v in configs.items()]}], "timeout_ms": 5000,
            "validate_only": False})
    return body.topics[0]


def wire_produce(server: BrokerProcess, topic: str, batch: bytes, version: int = 9, acks: int = -1) -> Any:
    with WireClient(server.host, server.port) as client:
        body = client.request(0, version, {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
                                           "topic_data": [{"name": topic, "partition_data": [
                                               {"index": 0, "records": batch}]}]})
    return body.responses[0].partition_responses[0]


def kp_admin(server: BrokerProcess) -> Any:
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)


def cf_admin(server: BrokerProcess) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": server.bootstrap})


# ---------------------------------------------------------------------- describe / alter


def test_kafka_python_describes_topic_and_broker_configs_with_sources(server: BrokerProcess) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType

    name = fresh("described")
    assert wire_create(server, name, {"cleanup.policy": "compact"}).error_code == 0
    admin = kp_admin(server)
    try:
        topic = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)], config_filter="all",
                                       include_synonyms=True)["topic"][name]
        broker = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "0")],
                                        config_filter="all")["broker"]["0"]
    finally:
        admin.close()
    assert len(topic) >= 36  # every Kafka topic config
    assert topic["cleanup.policy"]["value"] == "compact"
    # the broker-wide default of this broker (log.retention.hours=2) applies to the topic
    assert topic["retention.ms"]["value"] == "7200000"
    assert topic["compression.type"]["value"] == "producer"
    assert broker["log.retention.hours"]["value"] == "2"
    assert broker["num.partitions"]["value"] == "1"


def test_confluent_describes_and_incrementally_alters_topic_configs(server: BrokerProcess) -> None:
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        NewTopic,
        ResourceType,
    )

    name = fresh("altered")
    admin = cf_admin(server)
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    resource = ConfigResource(ResourceType.TOPIC, name)
    described = admin.describe_configs([resource])[resource].result(10)
    assert described["retention.ms"].value == "7200000"
    assert described["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert described["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    change = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ])
    admin.incremental_alter_configs([change])[change].result(10)
    described = admin.describe_configs([resource])[resource].result(10)
    assert described["retention.ms"].value == "60000"
    assert described["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert described["cleanup.policy"].value == "delete,compact"
    reset = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([reset])[reset].result(10)
    assert admin.describe_configs([resource])[resource].result(10)["retention.ms"].value == "7200000"
    bad = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match=r"INVALID_CONFIG|Invalid value soon"):
        admin.incremental_alter_configs([bad])[bad].result(10)


def test_kafka_python_alter_configs_legacy_replaces_overrides(server: BrokerProcess) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType

    name = fresh("legacy")
    assert wire_create(server, name, {"retention.bytes": "1000"}).error_code == 0
    admin = kp_admin(server)
    try:
        result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, {"retention.ms": "5000"})],
                                     incremental=False)
        assert result == {"topic": {name: "OK"}}
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])["topic"][name]
    finally:
        admin.close()
    assert described["retention.ms"]["value"] == "5000"
    # the client carried the other modified config over, as AlterConfigs replaces the set
    assert described["retention.bytes"]["value"] == "1000"


def test_broker_configs_cannot_change_at_run_time(server: BrokerProcess) -> None:
    with WireClient(server.host, server.port) as client:
        body = client.request(44, 1, {"resources": [{"resource_type": BROKER, "resource_name": "0", "configs": [
            {"name": "log.retention.hours", "config_operation": 0, "value": "1"}]}], "validate_only": False})
    (response,) = body.responses
    assert response.error_code == ErrorCode.INVALID_REQUEST
    assert "Cannot update these configs dynamically" in response.error_message


def test_retention_changed_after_creation_applies(server: BrokerProcess) -> None:
    name = fresh("shrink")
    assert wire_create(server, name, {"segment.bytes": "1024"}).error_code == 0
    for _ in range(30):
        batch = encode_batch([Record(key=b"k", value=b"x" * 200)], base_timestamp=1)
        assert wire_produce(server, name, batch).error_code == 0
    with WireClient(server.host, server.port) as client:
        body = client.request(44, 1, {"resources": [{"resource_type": TOPIC, "resource_name": name, "configs": [
            {"name": "retention.bytes", "config_operation": 0, "value": "2048"}]}], "validate_only": False})
        assert body.responses[0].error_code == 0

        def earliest() -> int:
            reply = client.request(2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": name, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                               "timestamp": -2}]}]})
            return int(reply.topics[0].partitions[0].offset)

        wait_until(lambda: earliest() > 0, 15, "retention to drop the oldest segments")


# ---------------------------------------------------------------------- configs that change produce


def test_librdkafka_0011_null_key_refused_after_compaction_is_turned_on(server: BrokerProcess) -> None:
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError

    name = fresh("compacted")
    admin = cf_admin(server)
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    compact = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([compact])[compact].result(10)

    producer = KafkaProducer(bootstrap_servers=server.bootstrap, retries=0)
    try:
        producer.send(name, key=b"k", value=b"kept").get(10)
        with pytest.raises(InvalidRecordError):
            producer.send(name, key=None, value=b"no key").get(10)
    finally:
        producer.close()

    errors: list[Any] = []
    confluent = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0})
    confluent.produce(name, value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    confluent.flush(10)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.INVALID_RECORD


def test_null_key_refusal_names_each_record_in_produce_v8_plus(server: BrokerProcess) -> None:
    name = fresh("perrecord")
    assert wire_create(server, name, {"cleanup.policy": "compact"}).error_code == 0
    batch = encode_batch([Record(offset_delta=i, key=None if i % 2 else b"k", value=b"v") for i in range(4)])
    v9 = wire_produce(server, name, batch, version=9)
    assert v9.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in v9.record_errors] == [1, 3]
    assert "Compacted topic cannot accept message without key" in v9.record_errors[0].batch_index_error_message
    v7 = wire_produce(server, name, batch, version=7)
    assert v7.error_code == ErrorCode.INVALID_RECORD  # no record errors before v8, same refusal


def test_librdkafka_0081_create_topics_with_compression_type_recompresses(server: BrokerProcess) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import NewTopic
    from kafka import KafkaProducer

    name = fresh("zstd")
    admin = cf_admin(server)
    admin.create_topics([NewTopic(name, 1, 1, config={
        "compression.type": "zstd", "max.message.bytes": "100000", "message.timestamp.type": "CreateTime",
        "segment.ms": "3600000", "preallocate": "false"})])[name].result(10)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, compression_type="gzip")
    try:
        for i in range(5):
            producer.send(name, key=b"k%d" % i, value=b"value %d" % i)
        producer.flush(10)
    finally:
        producer.close()
    with WireClient(server.host, server.port) as client:
        fetched = client.request(1, 11, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": name, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""})
    stored = fetched.responses[0].partitions[0].records
    assert {batch.compression for _, batch in iter_batches(stored)} == {Compression.ZSTD}
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": fresh("g"),
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([name])
        got: list[bytes] = []
        wait_until(lambda: _poll_into(consumer, got) >= 5, 30, "confluent to read the recompressed records")
    finally:
        consumer.close()
    assert got == [b"value %d" % i for i in range(5)]


def _poll_into(consumer: Any, into: list[bytes]) -> int:
    message = consumer.poll(0.5)
    if message is not None and message.error() is None:
        into.append(message.value())
    return len(into)


def test_unknown_topic_config_is_invalid_config(server: BrokerProcess) -> None:
    from confluent_kafka.admin import NewTopic

    name = fresh("unknown")
    admin = cf_admin(server)
    with pytest.raises(Exception, match=r"INVALID_CONFIG|Unknown topic config"):
        admin.create_topics([NewTopic(name, 1, 1, config={"no.such.config": "1"})])[name].result(10)


def test_max_message_bytes_and_min_insync_replicas(server: BrokerProcess) -> None:
    name = fresh("limits")
    assert wire_create(server, name, {"max.message.bytes": "200", "min.insync.replicas": "2"}).error_code == 0
    small = encode_batch([Record(key=b"k", value=b"v")])
    big = encode_batch([Record(key=b"k", value=b"v" * 500)])
    assert wire_produce(server, name, big, acks=1).error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert wire_produce(server, name, small, acks=-1).error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert wire_produce(server, name, small, acks=1).error_code == 0


# ---------------------------------------------------------------------- DeleteRecords


def test_delete_records_with_both_admin_clients(server: BrokerProcess, tmp_path: Path) -> None:
    from confluent_kafka import TopicPartition as CfPartition
    from kafka import TopicPartition as KpPartition

    name = fresh("trim")
    assert wire_create(server, name, {}).error_code == 0
    for i in range(10):
        assert wire_produce(server, name, encode_batch([Record(key=b"k", value=b"%d" % i)])).error_code == 0
    admin = cf_admin(server)
    (future,) = admin.delete_records([CfPartition(name, 0, 4)]).values()
    assert future.result(10).low_watermark == 4
    kp = kp_admin(server)
    try:
        result = kp.delete_records({KpPartition(name, 0): 7})
    finally:
        kp.close()
    assert result[KpPartition(name, 0)]["low_watermark"] == 7
    with WireClient(server.host, server.port) as client:
        reply = client.request(2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]})
        assert reply.topics[0].partitions[0].offset == 7
        body = client.request(21, 2, {"topics": [{"name": name, "partitions": [
            {"partition_index": 0, "offset": 99}, {"partition_index": 5, "offset": 1}]}], "timeout_ms": 1000})
    errors = [p.error_code for p in body.topics[0].partitions]
    assert errors == [ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


def test_delete_records_survives_a_restart_and_is_refused_on_compacted_topics(
    broker: BrokerProcess,
) -> None:
    assert wire_create(broker, "kept", {}).error_code == 0
    assert wire_create(broker, "compacted", {"cleanup.policy": "compact"}).error_code == 0
    for _ in range(5):
        assert wire_produce(broker, "kept", encode_batch([Record(key=b"k", value=b"v")])).error_code == 0
    with WireClient(broker.host, broker.port) as client:
        body = client.request(21, 2, {"topics": [
            {"name": "kept", "partitions": [{"partition_index": 0, "offset": -1}]},
            {"name": "compacted", "partitions": [{"partition_index": 0, "offset": 0}]}], "timeout_ms": 1000})
    assert body.topics[0].partitions[0].low_watermark == 5
    assert body.topics[1].partitions[0].error_code == ErrorCode.POLICY_VIOLATION
    broker.restart()
    with WireClient(broker.host, broker.port) as client:
        reply = client.request(2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "kept", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]})
    assert reply.topics[0].partitions[0].offset == 5
