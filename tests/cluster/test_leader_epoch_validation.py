"""A consumer validates its position with the new leader after a leader change (KIP-320).

kafka-python 3.0.12, like the Java client and librdkafka, sends OffsetForLeaderEpoch to a
partition's new leader before fetching from it again: the epoch of the last record it read
must end at or after its position, or the log was truncated under it. A broker that does
not answer leaves the partition "awaiting validation" and the consumer never fetches it
again. Here the leader of a three-replica partition is killed with SIGKILL while a
consumer reads it; the records produced to the new leader must all reach the consumer,
each exactly once and in order (no reset to the earliest offset either).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.local import EtcdServer
from tests.support.cluster import Cluster, wait_for

pytestmark = pytest.mark.integration

TOPIC = "validated"
SETS: dict[str, object] = {
    "offsets.topic.replication.factor": 3,
    "replica.lag.time.max.ms": 2000,
    "broker.session.timeout.ms": 3000,
}


@pytest.fixture
def three_nodes(tmp_path: Path, etcd: EtcdServer) -> Iterator[Cluster]:
    running = Cluster(tmp_path, etcd, SETS)
    yield running
    for proc in running.nodes.values():
        if proc.proc is not None and proc.proc.poll() is None:
            proc.kill()


def leader_and_isr(cluster: Cluster) -> tuple[int, int, tuple[int, ...]]:
    """(leader, epoch, ISR) of the topic's partition 0; leader -1 when none."""
    image = cluster.image()
    leadership = image.leader_of((TOPIC, 0))
    if leadership is None:
        return -1, -1, ()
    return leadership.leader, leadership.epoch, tuple(image.isrs.get((TOPIC, 0), ()))


def led_in_sync(cluster: Cluster) -> tuple[int, int, tuple[int, ...]] | None:
    found = leader_and_isr(cluster)
    return found if found[0] > 0 and len(found[2]) == 3 else None


def led_by_another(cluster: Cluster, old: int) -> tuple[int, int, tuple[int, ...]] | None:
    found = leader_and_isr(cluster)
    return found if found[0] not in (-1, old) else None


def read_until(consumer: Any, got: list[bytes], count: int, what: str) -> None:
    def enough() -> bool:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(r.value for r in records)
        return len(got) >= count
    wait_for(enough, 25, what, interval=0)


def test_a_consumer_reads_on_from_the_new_leader_after_its_leader_is_killed(three_nodes: Cluster) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    cluster = three_nodes
    for node in (1, 2, 3):
        cluster.start(node)
    bootstrap = ",".join(p.bootstrap for p in cluster.nodes.values())
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 3)])
    finally:
        admin.close()
    led = wait_for(lambda: led_in_sync(cluster), 30, "the partition led, with three in-sync replicas")
    assert led is not None
    first, first_epoch, _ = led
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=20, retry_backoff_ms=100,
                             request_timeout_ms=5000, reconnect_backoff_max_ms=500)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                             retry_backoff_ms=100, reconnect_backoff_max_ms=500, request_timeout_ms=5000,
                             metadata_max_age_ms=1000)
    tp = TopicPartition(TOPIC, 0)
    try:
        for i in range(5):
            producer.send(TOPIC, b"before-%d" % i).get(timeout=30)
        consumer.assign([tp])
        got: list[bytes] = []
        read_until(consumer, got, 5, "the records written under the first leader")

        cluster.nodes[first].kill()
        led = wait_for(lambda: led_by_another(cluster, first), 30, "a new leader")
        assert led is not None
        _, second_epoch, _ = led
        assert second_epoch > first_epoch
        for i in range(5):
            producer.send(TOPIC, b"after-%d" % i).get(timeout=30)
        read_until(consumer, got, 10, "the records written under the new leader (the consumer must validate "
                   "its position with OffsetForLeaderEpoch first)")
        assert got == [b"before-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(5)]
        assert not consumer._subscription.assignment[tp].awaiting_validation
    finally:
        consumer.close()
        producer.close(timeout=5)
