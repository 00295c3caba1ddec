"""Partition expansion against the real broker: latest-reset consumers keep the first records.

A consumer with auto.offset.reset=latest learns of partitions added to its topic only at
its next metadata refresh and rebalance; a producer may write there first. On Kafka those
records are skipped. kcoord commits the new partitions' start offsets for every group
consuming the topic before CreatePartitions is answered (group.new.partitions.start=earliest,
the default), so the consumer starts them at offset 0. With ``latest`` nothing is committed
and the client's reset policy decides, as on Kafka.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from protocol.consumer_protocol import encode_subscription
from protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess
from tests.support.clients import ConfluentConsumer, create_topic, wait_until
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

FAST = {"group.initial.rebalance.delay.ms": 1000}
EARLY = 5  # records written to each new partition right after it is created


def _committed(broker: BrokerProcess, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
    with WireClient(broker.host, broker.port) as client:
        (fetched,) = client.request(9, 7, {"group_id": group, "require_stable": False, "topics": [
            {"name": topic, "partition_indexes": partitions}]}).topics
    return {p.partition_index: p.committed_offset for p in fetched.partitions}


def _grow(broker: BrokerProcess, topic: str, count: int) -> None:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_partitions({topic: count})
    finally:
        admin.close()


def _produce(broker: BrokerProcess, topic: str, partitions: list[int], values: list[str]) -> None:
    """Write ``values`` to each partition, in order; returns once all are acknowledged."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        futures = [producer.send(topic, value=f"{v}@{p}".encode(), partition=p)
                   for p in partitions for v in values]
        for future in futures:
            future.get(timeout=20)
    finally:
        producer.close()


class PolledConsumer:
    """An aiokafka consumer whose event loop runs only inside ``poll``: it acts only then.

    aiokafka rejoins its group and resets positions in tasks on its event loop; running
    that loop only while the test polls makes what happens between two polls (creating
    partitions, producing) certain to come before the consumer can see the new
    partitions: exactly the race the guard is about, made deterministic. (kafka-python
    runs its network loop in a thread of its own, so it cannot be held still this way.)
    """

    def __init__(self, broker: BrokerProcess, group: str, topic: str) -> None:
        from aiokafka import AIOKafkaConsumer

        self.topic = topic
        self.records: list[tuple[int, int, bytes]] = []
        async def started() -> Any:
            consumer = AIOKafkaConsumer(
                topic, bootstrap_servers=broker.bootstrap, group_id=group, auto_offset_reset="latest",
                metadata_max_age_ms=1000, session_timeout_ms=10000, heartbeat_interval_ms=500,
                enable_auto_commit=False,
            )
            await consumer.start()
            return consumer

        self.loop = asyncio.new_event_loop()
        self.consumer = self.loop.run_until_complete(started())

    def poll(self) -> None:
        batches = self.loop.run_until_complete(self.consumer.getmany(timeout_ms=100))
        for _, batch in batches.items():
            self.records.extend((r.partition, r.offset, r.value) for r in batch)

    def assigned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def position(self, partition: int) -> int:
        from aiokafka.structs import TopicPartition

        return int(self.loop.run_until_complete(self.consumer.position(TopicPartition(self.topic, partition))))

    def poll_until(self, condition: Any, timeout: float, what: str) -> None:
        def step() -> bool:
            self.poll()
            return bool(condition())

        wait_until(step, timeout, what)

    def of(self, partition: int) -> list[tuple[int, bytes]]:
        return [(offset, value) for p, offset, value in self.records if p == partition]

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.consumer.stop())
        finally:
            self.loop.close()


@contextmanager
def _explained(broker: BrokerProcess, consumer: Any) -> Iterator[None]:
    """A failed assertion carries what the consumer saw and the broker's log."""
    try:
        yield
    except AssertionError as exc:
        seen = getattr(consumer, "records", None) or getattr(consumer, "messages", None)
        raise AssertionError(f"{exc}\nconsumer records: {seen}\nbroker log:\n{broker.log()[-6000:]}") from exc


def _consuming(broker: BrokerProcess, group: str, topic: str) -> PolledConsumer:
    """A latest-reset consumer that owns partition 0 and has read a record from it."""
    consumer = PolledConsumer(broker, group, topic)
    try:
        with _explained(broker, consumer):
            consumer.poll_until(lambda: consumer.assigned() == {0}, 20, "partition 0 to be assigned")
            assert consumer.position(0) == 0
            _produce(broker, topic, [0], ["live"])
            consumer.poll_until(lambda: consumer.of(0) == [(0, b"live@0")], 10, "the record on partition 0")
    except BaseException:
        consumer.close()
        raise
    return consumer


def test_latest_reset_consumer_reads_new_partitions_from_their_first_record(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory(FAST, extra_args=["--request-log"])
    create_topic(broker.bootstrap, "grown", 1)
    consumer = _consuming(broker, "readers", "grown")
    try:
        with _explained(broker, consumer):
            _grow(broker, "grown", 3)
            # Committed before CreatePartitions was answered; nothing has rebalanced yet.
            assert _committed(broker, "readers", "grown", [0, 1, 2]) == {0: -1, 1: 0, 2: 0}
            early = [f"early-{i}" for i in range(EARLY)]
            _produce(broker, "grown", [1, 2], early)

            consumer.poll_until(lambda: all(len(consumer.of(p)) == EARLY for p in (1, 2)), 30,
                                "every early record of partitions 1 and 2")
            for p in (1, 2):
                assert consumer.of(p) == [(i, f"{v}@{p}".encode()) for i, v in enumerate(early)]
            assert consumer.assigned() == {0, 1, 2}
    finally:
        consumer.close()
    broker.restart()  # the guard's commits were durable log records
    assert _committed(broker, "readers", "grown", [1, 2]) == {1: 0, 2: 0}


def test_with_latest_nothing_is_committed_and_the_client_policy_skips(broker_factory: Any) -> None:
    # The request log shows, should this ever time out, which group request went unanswered.
    broker: BrokerProcess = broker_factory({**FAST, "group.new.partitions.start": "latest"},
                                           extra_args=["--request-log"])
    create_topic(broker.bootstrap, "grown", 1)
    consumer = _consuming(broker, "readers", "grown")
    try:
        with _explained(broker, consumer):
            _grow(broker, "grown", 2)
            assert _committed(broker, "readers", "grown", [1]) == {1: -1}
            _produce(broker, "grown", [1], [f"early-{i}" for i in range(EARLY)])

            # Kafka's behaviour: the consumer resets to the end it sees when it gets the partition.
            consumer.poll_until(lambda: consumer.assigned() == {0, 1}, 30, "partition 1 to be assigned")
            assert consumer.position(1) == EARLY
            _produce(broker, "grown", [1], ["late"])
            consumer.poll_until(lambda: consumer.of(1), 10, "the late record")
            assert consumer.of(1) == [(EARLY, b"late@1")]
    finally:
        consumer.close()


def test_confluent_consumer_in_its_own_thread_gets_the_first_records(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory(FAST)
    create_topic(broker.bootstrap, "grown", 1)
    consumer = ConfluentConsumer(broker.bootstrap, "c-readers", "grown", **{
        "auto.offset.reset": "latest", "topic.metadata.refresh.interval.ms": 1000}).start()
    try:
        with _explained(broker, consumer):
            wait_until(lambda: consumer.assignment == {0}, 20, "partition 0 to be assigned")
            # librdkafka resets partition 0 in the background: write until a record arrives.

            def write_and_read() -> bool:
                _produce(broker, "grown", [0], ["live"])
                try:
                    wait_until(lambda: bool(consumer.messages), 0.5, "a record on partition 0")
                except AssertionError:
                    return False
                return True

            wait_until(write_and_read, 20, "the consumer to read partition 0")

            _grow(broker, "grown", 3)
            early = [f"early-{i}" for i in range(EARLY)]
            _produce(broker, "grown", [1, 2], early)
            wait_until(lambda: sum(1 for p, _, _ in consumer.messages if p in (1, 2)) >= 2 * EARLY, 30,
                       "every early record of partitions 1 and 2")
            for p in (1, 2):
                got = [(o, v) for q, o, v in consumer.messages if q == p]
                assert got == [(i, f"{v}@{p}".encode()) for i, v in enumerate(early)]
    finally:
        consumer.stop()


def test_guard_is_keyed_on_subscriptions_and_waits_for_durability(broker_factory: Any) -> None:
    """Raw wire: a member parked in JoinGroup is enough; validate_only and other groups get nothing."""
    broker: BrokerProcess = broker_factory({"group.initial.rebalance.delay.ms": 0})
    create_topic(broker.bootstrap, "grown", 1)
    with WireClient(broker.host, broker.port) as client:
        for group, topic in (("readers", "grown"), ("others", "elsewhere")):
            joined = client.request(11, 3, {
                "group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
                "member_id": "", "protocol_type": "consumer", "protocols": [
                    {"name": "range", "metadata": encode_subscription({"topics": [topic], "user_data": None}, 0)}]})
            assert joined.error_code == 0

        def grow(count: int, validate_only: bool) -> Any:
            return client.request(37, 3, {"topics": [{"name": "grown", "count": count, "assignments": None}],
                                          "timeout_ms": 5000, "validate_only": validate_only}).results[0]

        assert grow(3, validate_only=True).error_code == 0
        assert _committed(broker, "readers", "grown", [1, 2]) == {1: -1, 2: -1}
        assert grow(3, validate_only=False).error_code == 0
        assert _committed(broker, "readers", "grown", [1, 2]) == {1: 0, 2: 0}
        assert _committed(broker, "others", "grown", [1, 2]) == {1: -1, 2: -1}
        assert grow(3, validate_only=False).error_code == ErrorCode.INVALID_PARTITIONS
    broker.wait_for_log(r"topic grown grew: committed the start offsets of new partitions \[1, 2\] for group readers")
