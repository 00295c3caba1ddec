"""A three-node cluster: topics and groups spread over the nodes, clients find everything
from one bootstrap address through Metadata and FindCoordinator alone."""

from __future__ import annotations

import pytest

from tests.support.clients import (
    AiokafkaConsumer,
    ConfluentConsumer,
    ConsumerThread,
    KafkaPythonConsumer,
    create_topic,
    disjoint_cover,
    sizes,
    wait_until,
)
from tests.support.cluster import Cluster

pytestmark = pytest.mark.integration

PARTITIONS = 6
RECORDS = 60


def produce(bootstrap: str, topic: str) -> dict[int, int]:
    """Records to every partition with acks=all; the log end offset each partition reached."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=10)
    futures = [producer.send(topic, f"r{i}".encode(), partition=i % PARTITIONS) for i in range(RECORDS)]
    producer.flush(30)
    ends: dict[int, int] = {}
    for future in futures:
        meta = future.get(10)
        ends[meta.partition] = max(ends.get(meta.partition, 0), meta.offset + 1)
    producer.close()
    return ends


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) or 0 for p in range(PARTITIONS)}
    finally:
        consumer.close()


def test_groups_of_three_client_libraries_on_three_coordinators_balance_and_commit(cluster: Cluster) -> None:
    for node in (1, 2, 3):
        cluster.start(node)
    cluster.wait_settled()
    bootstrap = cluster.nodes[1].bootstrap  # every client starts from node 1 alone
    create_topic(bootstrap, "orders", PARTITIONS)
    cluster.wait_settled()
    leaders = cluster.leaders("orders")
    assert set(leaders.values()) == {1, 2, 3}, f"the topic's partitions spread over the nodes: {leaders}"
    ends = produce(bootstrap, "orders")
    assert ends == dict.fromkeys(range(PARTITIONS), RECORDS // PARTITIONS)

    groups = {kind: cluster.group_on(node, kind) for kind, node in
              (("kafka-python", 1), ("confluent", 2), ("aiokafka", 3))}
    assert {cluster.coordinator_of(g) for g in groups.values()} == {1, 2, 3}
    kinds: dict[str, type[ConsumerThread]] = {"kafka-python": KafkaPythonConsumer, "confluent": ConfluentConsumer,
                                              "aiokafka": AiokafkaConsumer}
    members = {kind: [kinds[kind](bootstrap, group, "orders").start() for _ in range(2)]
               for kind, group in groups.items()}
    try:
        for kind, consumers in members.items():
            try:
                wait_until(lambda c=consumers: sizes(c) == [3, 3] and disjoint_cover(c, PARTITIONS), 60,
                           f"the {kind} group balanced over two members")
            except AssertionError as exc:
                coordinator = cluster.nodes[cluster.coordinator_of(groups[kind])]
                raise AssertionError(f"{exc}: {[c.assignments_seen for c in consumers]}, "
                                     f"errors {[c.error for c in consumers]}\n{coordinator.log()[-4000:]}") from None
            wait_until(lambda c=consumers: sum(len(m.messages) for m in c) >= RECORDS, 60,
                       f"the {kind} group read every record")
            wait_until(lambda g=groups[kind]: committed(bootstrap, g, "orders") == ends, 60,
                       f"the {kind} group committed every partition's end")
    finally:
        for consumers in members.values():
            for consumer in consumers:
                consumer.stop()
    status = cluster.status()
    assert status["controller"] in (1, 2, 3)
    assert [n["id"] for n in status["nodes"]] == [1, 2, 3]
