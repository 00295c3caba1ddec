"""Real client applications ride through a broker crash (SIGKILL) and restart.

A consumer application keeps running while the broker is killed and started again on the
same address: it reconnects on its own, keeps its group, consumes what is produced after
the restart, and its auto-committed offsets reach the end of the log. Nothing produced
is lost, and nothing committed before the crash is consumed again.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.clients import (
    AiokafkaConsumer,
    ConfluentConsumer,
    ConsumerThread,
    KafkaPythonConsumer,
    create_topic,
    wait_until,
)

pytestmark = pytest.mark.integration

PARTITIONS = 3

AUTO_COMMIT: dict[str, tuple[type[ConsumerThread], dict[str, Any]]] = {
    "kafka-python": (KafkaPythonConsumer, {"enable_auto_commit": True, "auto_commit_interval_ms": 200}),
    "confluent": (ConfluentConsumer, {"enable.auto.commit": True, "auto.commit.interval.ms": 200,
                                      "reconnect.backoff.max.ms": 1000}),
    "aiokafka": (AiokafkaConsumer, {"enable_auto_commit": True, "auto_commit_interval_ms": 200}),
}


def _produce(bootstrap: str, topic: str, values: range) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=10)
    try:
        futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in values]
        for future in futures:
            future.get(timeout=30)
    finally:
        producer.close()


def _committed(bootstrap: str, group: str) -> dict[int, int]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {tp.partition: meta.offset for tp, meta in admin.list_group_offsets(group)[group].items()}
    finally:
        admin.close()


def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        consumer.close()


def _values(consumer: ConsumerThread) -> list[bytes]:
    return [value for _, _, value in list(consumer.messages)]


@pytest.mark.parametrize("client", list(AUTO_COMMIT))
def test_consumer_app_rides_through_sigkill_and_restart(broker_factory: object, client: str) -> None:
    broker: BrokerProcess = broker_factory({"group.initial.rebalance.delay.ms": 1000})  # type: ignore[operator]
    create_topic(broker.bootstrap, "events", PARTITIONS)
    _produce(broker.bootstrap, "events", range(200))
    kind, options = AUTO_COMMIT[client]
    consumer = kind(broker.bootstrap, "survivors", "events", **options).start()
    try:
        wait_until(lambda: len(set(_values(consumer))) == 200, 60, "the first 200 records")
        wait_until(lambda: _committed(broker.bootstrap, "survivors") == _end_offsets(broker.bootstrap, "events"),
                   30, "auto-commits to reach the end of the log")
        before_crash = len(consumer.messages)

        broker.kill()
        broker.listen = f"{broker.host}:{broker.port}"
        broker.start()

        _produce(broker.bootstrap, "events", range(200, 300))
        wait_until(lambda: len(set(_values(consumer))) == 300, 90, "the records produced after the restart")
        wait_until(lambda: _committed(broker.bootstrap, "survivors") == _end_offsets(broker.bootstrap, "events"),
                   60, "auto-commits after the restart to reach the end of the log")
        assert sum(_end_offsets(broker.bootstrap, "events").values()) == 300, "nothing produced was lost"
        # Everything consumed before the crash was committed, so none of it came again.
        after = _values(consumer)[before_crash:]
        assert not set(after) & {b"v%d" % i for i in range(200)}
        assert sorted(set(after)) == sorted(b"v%d" % i for i in range(200, 300))
    finally:
        consumer.stop()
