"""Offset reset policies on the broker, with real clients against the real broker process.

docs/coordinator-rules.md#offset-reset-policies. A group config (set with
``kcoord groups config set``, or any admin client's IncrementalAlterConfigs on a GROUP
resource) makes the broker decide for every client of the group:

- ``kcoord.offset.out.of.range=nearest``: when retention deletes the records under a stopped
  group's committed offset, the group resumes at the new log start, whatever its clients'
  ``auto.offset.reset``; without it, each client does what it does on Kafka (latest skips to
  the end, none fails);
- ``kcoord.initial.offset=latest``: a new group starts at the end even if its clients say
  earliest, while partitions added later are still read from their first record.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from admin.client import RESOURCE_GROUP, AdminClient, CommittedOffset
from kcoord.cli import main as kcoord
from tests.support.broker_process import BrokerProcess
from tests.support.clients import (
    AiokafkaConsumer,
    ConfluentConsumer,
    ConsumerProtocolConsumer,
    ConsumerThread,
    KafkaPythonConsumer,
    create_topic,
    disjoint_cover,
    learn_partitions,
    wait_until,
)
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

HOUR = 3_600_000
#: Retention checked often, so a test waits a moment, not five minutes.
RETENTION = {"log.retention.check.interval.ms": 200, "group.initial.rebalance.delay.ms": 0}
OLD, NEW, COMMITTED = 30, 10, 10  # records written long ago, recently; the offset the group stopped at
PADDING = b"." * 200  # about four records per 1 KiB segment


# ---------------------------------------------------------------------- helpers


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient(broker.bootstrap, timeout=20)


def _log_range(broker: BrokerProcess, topic: str, partition: int = 0) -> tuple[int, int]:
    with _admin(broker) as admin:
        return admin.log_range([(topic, partition)])[(topic, partition)]


def _committed(broker: BrokerProcess, group: str, topic: str, partition: int = 0) -> tuple[int, str] | None:
    with _admin(broker) as admin:
        found = admin.fetch_offsets(group, [(topic, partition)]).get((topic, partition))
    return None if found is None else (found.offset, found.metadata)


def _produce(broker: BrokerProcess, topic: str, values: list[bytes], partition: int = 0,
             timestamp_ms: int | None = None) -> None:
    """One acknowledged batch per record, so small segments roll between them."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=0)
    try:
        for value in values:
            producer.send(topic, value=value, partition=partition, timestamp_ms=timestamp_ms).get(timeout=20)
    finally:
        producer.close()


def _set_group_config(group: str, *configs: str, bootstrap: str) -> None:
    args = ["groups", "config", "set", group, "--bootstrap-server", bootstrap, "--execute"]
    for config in configs:
        args += ["--config", config]
    assert kcoord(args) == 0


def _topic_with_a_retention_victim(broker: BrokerProcess, topic: str, group: str) -> tuple[int, int]:
    """A topic whose first OLD records are long past retention, NEW recent ones after them, and
    ``group``'s committed offset COMMITTED among the old ones; returns the log (start, end)
    once retention (switched on last) has moved the start past the committed offset."""
    with _admin(broker) as admin:
        (created,) = admin.create_topics([(topic, 1, 1, {"segment.bytes": "1024"})])
        assert created.error == 0, created
        _produce(broker, topic, [b"old-%d:" % i + PADDING for i in range(OLD)], timestamp_ms=_now() - HOUR)
        _produce(broker, topic, [b"new-%d:" % i + PADDING for i in range(NEW)])
        admin.commit_offsets(group, {(topic, 0): CommittedOffset(COMMITTED)})
        admin.alter_configs(2, topic, {"retention.ms": str(HOUR // 2)}, [])
    wait_until(lambda: _log_range(broker, topic)[0] > COMMITTED, 30, "retention to pass the committed offset")
    return _log_range(broker, topic)


def _now() -> int:
    return int(time.time() * 1000)


def _values(records: list[tuple[int, int, bytes]]) -> list[bytes]:
    return [value.split(b":")[0] for _, _, value in records]


# ---------------------------------------------------------------------- nearest, kafka-python, latest


@pytest.mark.parametrize("policy", ["nearest", "none"])
def test_kafka_python_latest_group_whose_offset_retention_deleted(broker_factory: Any, policy: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from kafka import KafkaConsumer

    broker: BrokerProcess = broker_factory(RETENTION)
    _set_group_config("readers", f"kcoord.offset.out.of.range={policy}", bootstrap=broker.bootstrap)
    start, end = _topic_with_a_retention_victim(broker, "events", "readers")
    # The new start was committed, durably, before ListOffsets could show it.
    assert _committed(broker, "readers", "events") == ((start, "kcoord:nearest") if policy == "nearest"
                                                       else (COMMITTED, ""))

    consumer = KafkaConsumer("events", bootstrap_servers=broker.bootstrap, group_id="readers",
                             auto_offset_reset="latest", enable_auto_commit=False, session_timeout_ms=10000,
                             heartbeat_interval_ms=500)
    learn_partitions(consumer, ["events"])
    received: list[tuple[int, int, bytes]] = []

    def poll() -> None:
        for records in consumer.poll(timeout_ms=100).values():
            received.extend((r.partition, r.offset, r.value) for r in records)

    try:
        if policy == "nearest":
            wait_until(lambda: (poll(), len(received) >= end - start)[1], 30,
                       "every record that survived retention")
            # Every surviving record, from the new log start on: nothing lost.
            assert [offset for _, offset, _ in received] == list(range(start, end))
        else:
            from kafka import TopicPartition

            wait_until(lambda: (poll(), bool(consumer.assignment()))[1], 30, "the partition to be assigned")
            # As on Kafka: the committed offset is out of range, so latest jumps to the end.
            wait_until(lambda: (poll(), consumer.position(TopicPartition("events", 0)) == end)[1], 30,
                       "the consumer to reset to the log end")
            _produce(broker, "events", [b"after:"])
            wait_until(lambda: (poll(), bool(received))[1], 30, "the record written after the reset")
            assert _values(received) == [b"after"]  # every surviving record was skipped
    finally:
        consumer.close()

    if policy == "nearest":
        capsys.readouterr()
        assert kcoord(["groups", "describe", "readers", "--bootstrap-server", broker.bootstrap,
                       "--output", "json"]) == 0
        import json

        (row,) = json.loads(capsys.readouterr().out)["offsets"]
        assert (row["current_offset"], row["policy"]) == (start, "nearest")
        broker.wait_for_log(rf"group readers: the log start of events-0 moves to {start}, so kcoord committed "
                            rf"events-0={start} \(kcoord:nearest\)")


# ---------------------------------------------------------------------- nearest, confluent-kafka, none


@pytest.mark.parametrize("policy", ["nearest", "none"])
def test_confluent_group_without_a_reset_policy_whose_offset_retention_deleted(broker_factory: Any,
                                                                               policy: str) -> None:
    from confluent_kafka import Consumer, KafkaError

    broker: BrokerProcess = broker_factory(RETENTION)
    _set_group_config("strict", f"kcoord.offset.out.of.range={policy}", bootstrap=broker.bootstrap)
    start, end = _topic_with_a_retention_victim(broker, "ledger", "strict")

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "strict",
                         "auto.offset.reset": "error",  # librdkafka's name for Kafka's none
                         "enable.auto.commit": False, "session.timeout.ms": 10000,
                         "heartbeat.interval.ms": 500})
    consumer.subscribe(["ledger"])
    received: list[int] = []
    errors: list[int] = []
    try:
        def poll() -> None:
            message = consumer.poll(0.1)
            if message is None:
                return
            if message.error() is not None:
                errors.append(message.error().code())
            else:
                received.append(message.offset())

        if policy == "nearest":
            def read_all() -> bool:
                poll()
                return len(received) >= end - start

            wait_until(read_all, 30, "every record that survived retention")
            assert received == list(range(start, end)) and errors == []  # it keeps running
        else:
            def failed() -> bool:
                poll()
                return KafkaError._AUTO_OFFSET_RESET in errors

            wait_until(failed, 30, "the consumer to fail on the out-of-range offset")
            assert received == []  # as on Kafka: it stops with an error instead of reading
    finally:
        consumer.close()


# ---------------------------------------------------------------------- latest on start, and added partitions


CLIENTS: dict[str, tuple[type[ConsumerThread], dict[str, Any]]] = {
    "aiokafka": (AiokafkaConsumer, {"metadata_max_age_ms": 1000}),
    "kafka-python": (KafkaPythonConsumer, {"metadata_max_age_ms": 1000}),
    "confluent-kafka": (ConfluentConsumer, {}),
    "confluent-kafka-consumer-protocol": (ConsumerProtocolConsumer, {}),
}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_latest_on_start_with_earliest_clients_and_partitions_added_later(broker_factory: Any, client: str) -> None:
    """The group starts at the end although its clients say earliest; new partitions from their start."""
    broker: BrokerProcess = broker_factory({"group.initial.rebalance.delay.ms": 0})
    kind, options = CLIENTS[client]
    group = f"starters-{client}"
    create_topic(broker.bootstrap, "feed", 2)
    _set_group_config(group, "kcoord.initial.offset=latest", bootstrap=broker.bootstrap)  # before any member
    for p in (0, 1):
        _produce(broker, "feed", [b"old-%d" % i for i in range(10)], partition=p)
    consumers = [kind(broker.bootstrap, group, "feed", **options).start() for _ in range(2)]
    try:
        wait_until(lambda: disjoint_cover(consumers, 2), 60, "both partitions to be assigned")
        for p in (0, 1):
            # the broker's commit at the end, or a client's commit of the position it was given
            # there (when a rebalance revokes it, or on the auto-commit timer, which a busy machine
            # lets come first): clients saying earliest would have committed 0. The marker itself
            # is checked in tests/coordinator/test_reset_policies.py, where no client commits.
            assert _committed(broker, group, "feed", p) in {(10, "kcoord:latest_on_start"), (10, "")}
        for p in (0, 1):
            _produce(broker, "feed", [b"new-%d" % i for i in range(5)], partition=p)
        wait_until(lambda: sum(len(c.messages) for c in consumers) >= 10, 30, "the new records")

        with _admin(broker) as admin:
            assert admin.create_partitions({"feed": 4})[0].error == 0
        for p in (2, 3):  # at once: before any consumer knows the partitions exist
            _produce(broker, "feed", [b"early-%d" % i for i in range(5)], partition=p)
        wait_until(lambda: sum(1 for c in consumers for p, _, _ in c.messages if p in (2, 3)) >= 10, 60,
                   "the early records of the added partitions")
        got = sorted((p, o, v) for c in consumers for p, o, v in c.messages)
        assert [(p, o, v) for p, o, v in got if p in (0, 1)] == [
            (p, 10 + i, b"new-%d" % i) for p in (0, 1) for i in range(5)]  # no old record: started at the end
        assert [(p, o, v) for p, o, v in got if p in (2, 3)] == [
            (p, i, b"early-%d" % i) for p in (2, 3) for i in range(5)]  # added partitions: from their start
        assert _committed(broker, group, "feed", 2) is not None
    finally:
        for c in consumers:
            c.stop()


# ---------------------------------------------------------------------- group configs with confluent's admin


def test_group_configs_by_confluent_admin_are_read_back_survive_kill_9_and_apply_at_once(
        broker_factory: Any) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient as ConfluentAdmin
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        ResourceType,
    )

    broker: BrokerProcess = broker_factory({"group.initial.rebalance.delay.ms": 0})
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})

    def describe() -> dict[str, tuple[str, ConfigSource]]:
        (future,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, "durable")]).values()
        return {name: (entry.value, ConfigSource(entry.source)) for name, entry in future.result(timeout=20).items()}

    changes = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in (
        ("kcoord.offset.out.of.range", "nearest"), ("consumer.heartbeat.interval.ms", "6000"))]
    (future,) = admin.incremental_alter_configs(
        [ConfigResource(ResourceType.GROUP, "durable", incremental_configs=changes)]).values()
    future.result(timeout=20)
    expected = {
        "kcoord.offset.out.of.range": ("nearest", ConfigSource.GROUP_CONFIG),
        "consumer.heartbeat.interval.ms": ("6000", ConfigSource.GROUP_CONFIG),
        "consumer.session.timeout.ms": ("45000", ConfigSource.DEFAULT_CONFIG),
        "kcoord.initial.offset": ("none", ConfigSource.DEFAULT_CONFIG),
    }
    assert describe() == expected

    # In force without a restart: KIP-848 heartbeats carry the group's interval...
    create_topic(broker.bootstrap, "t", 1)
    with WireClient(broker.host, broker.port) as wire:
        joined = wire.request(68, 0, {"group_id": "durable", "member_id": "m-1", "member_epoch": 0,
                                      "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30000,
                                      "subscribed_topic_names": ["t"], "server_assignor": None,
                                      "topic_partitions": []})
        assert (joined.error_code, joined.heartbeat_interval_ms) == (0, 6000)
        left = wire.request(68, 0, {"group_id": "durable", "member_id": "m-1", "member_epoch": -1,
                                    "instance_id": None, "rack_id": None, "rebalance_timeout_ms": -1,
                                    "subscribed_topic_names": None, "server_assignor": None,
                                    "topic_partitions": None})
        assert left.error_code == 0
    # ...and DeleteRecords past the group's offset commits the new start first.
    _produce(broker, "t", [b"r%d" % i for i in range(10)])
    with _admin(broker) as ours:
        ours.commit_offsets("durable", {("t", 0): CommittedOffset(2)})
    (deleted,) = admin.delete_records([TopicPartition("t", 0, 6)]).values()
    assert deleted.result(timeout=20).low_watermark == 6
    assert _committed(broker, "durable", "t") == (6, "kcoord:nearest")

    broker.kill()  # kill -9: only what was fsynced before each reply survives
    broker.listen = f"{broker.host}:{broker.port}"
    broker.start()
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
    assert describe() == expected
    assert _committed(broker, "durable", "t") == (6, "kcoord:nearest")


def test_kcoord_groups_config_dry_run_changes_nothing(broker: BrokerProcess,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--bootstrap-server", broker.bootstrap]
    assert kcoord(["groups", "config", "set", "g", "--config", "kcoord.initial.offset=earliest", *common]) == 0
    assert "Dry run: nothing changed" in capsys.readouterr().out
    with _admin(broker) as admin:
        values = {c.name: (c.value, c.source) for c in admin.describe_configs(RESOURCE_GROUP, "g")}
    assert values["kcoord.initial.offset"] == ("none", "DEFAULT_CONFIG")
    assert kcoord(["groups", "config", "set", "g", "--config", "kcoord.initial.offset=sometimes", *common]) == 2
    assert "String must be one of: earliest, latest, none" in capsys.readouterr().err


def test_start_up_moves_offsets_left_out_of_a_truncated_log(broker_factory: Any, tmp_path: Path) -> None:
    """A commit beyond the log end (a log recovery cut back) is clamped to the end at start-up."""
    broker: BrokerProcess = broker_factory({"kcoord.offset.out.of.range": "nearest"})
    create_topic(broker.bootstrap, "cut", 1)
    _produce(broker, "cut", [b"r%d" % i for i in range(8)])
    with _admin(broker) as admin:
        admin.commit_offsets("g", {("cut", 0): CommittedOffset(8)})
    broker.stop()
    segment = next((broker.data_dir / "cut-0").glob("*.log"))
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) // 2])  # a torn tail: recovery keeps the whole batches before it
    broker.listen = f"{broker.host}:{broker.port}"
    broker.start()
    _, end = _log_range(broker, "cut")
    assert end < 8
    assert _committed(broker, "g", "cut") == (end, "kcoord:nearest")


def test_a_stale_commit_into_a_recreated_topic_is_moved_to_its_end(broker_factory: Any) -> None:
    """The topic was deleted and created again; a client still at its old position commits it."""
    broker: BrokerProcess = broker_factory({"kcoord.offset.out.of.range": "nearest"})
    create_topic(broker.bootstrap, "again", 1)
    _produce(broker, "again", [b"r%d" % i for i in range(8)])
    with _admin(broker) as admin:
        admin.commit_offsets("g", {("again", 0): CommittedOffset(8)})
        assert admin.delete_topics(["again"])[0].error == 0
    assert _committed(broker, "g", "again") is None  # deleted with the topic, as Kafka does
    create_topic(broker.bootstrap, "again", 1)
    _produce(broker, "again", [b"s%d" % i for i in range(3)])
    with _admin(broker) as admin:
        admin.commit_offsets("g", {("again", 0): CommittedOffset(8)})  # accepted, as on Kafka...
    assert _committed(broker, "g", "again") == (3, "kcoord:nearest")  # ...then moved to the new end
