"""Consumer groups formed by real client libraries against the real broker process."""

from __future__ import annotations

import pytest

from tests.support.broker_process import BrokerProcess
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
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

FAST = {"group.initial.rebalance.delay.ms": 0}


def _balanced(consumers: list[ConsumerThread], each: int, partitions: int) -> bool:
    return sizes(consumers) == [each] * len(consumers) and disjoint_cover(consumers, partitions)


@pytest.mark.parametrize("kind", [KafkaPythonConsumer, ConfluentConsumer], ids=["kafka-python", "confluent"])
def test_group_of_three_shares_six_partitions_then_two_share_them(
    broker_factory: object, kind: type[ConsumerThread]
) -> None:
    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    create_topic(broker.bootstrap, "six", 6)
    consumers = [kind(broker.bootstrap, "trio-group", "six").start() for _ in range(3)]
    try:
        wait_until(lambda: _balanced(consumers, 2, 6), 60, "2 partitions each")
        consumers[0].stop()
        wait_until(lambda: _balanced(consumers[1:], 3, 6), 60, "3 partitions each after one left")
    finally:
        for c in consumers[1:]:
            c.stop()


def test_mixed_client_group_balances_with_roundrobin(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    create_topic(broker.bootstrap, "mixed", 6)
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    consumers: list[ConsumerThread] = [
        KafkaPythonConsumer(broker.bootstrap, "mixed-group", "mixed",
                            partition_assignment_strategy=[RoundRobinPartitionAssignor]).start(),
        ConfluentConsumer(broker.bootstrap, "mixed-group", "mixed",
                          **{"partition.assignment.strategy": "roundrobin"}).start(),
        AiokafkaConsumer(broker.bootstrap, "mixed-group", "mixed",
                         partition_assignment_strategy=_aiokafka_roundrobin()).start(),
    ]
    try:
        wait_until(lambda: _balanced(consumers, 2, 6), 90, "the mixed group to balance")
        with WireClient(broker.host, broker.port) as client:
            described = client.request(15, 5, {"groups": ["mixed-group"]}).groups[0]
        assert (described.group_state, described.protocol_type, described.protocol_data) == (
            "Stable", "consumer", "roundrobin")
        assert len(described.members) == 3
    finally:
        for c in consumers:
            c.stop()


def _aiokafka_roundrobin() -> tuple[object, ...]:
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    return (RoundRobinPartitionAssignor,)


def _produce_one_per_partition(broker: BrokerProcess, topic: str, partitions: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        for p in range(partitions):
            producer.send(topic, value=f"after-restart-{p}".encode(), partition=p).get(timeout=30)
    finally:
        producer.close()


def _static(broker: BrokerProcess, instance: str) -> ConfluentConsumer:
    return ConfluentConsumer(broker.bootstrap, "static-group", "static",
                             **{"group.instance.id": instance, "session.timeout.ms": 20000})


def test_static_member_restart_within_session_timeout_causes_no_rebalance(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    create_topic(broker.bootstrap, "static", 4)
    a, b = _static(broker, "instance-a").start(), _static(broker, "instance-b").start()
    try:
        wait_until(lambda: _balanced([a, b], 2, 4), 60, "static group to balance")
        seen_by_b = list(b.assignments_seen)
        a_assignment = set(a.assignment)
        a.stop(leave=False)  # static members do not leave on close
        restarted = _static(broker, "instance-a").start()
        wait_until(lambda: restarted.assignment == a_assignment, 30, "restarted member to get its partitions")
        assert b.assignments_seen == seen_by_b, "the other member saw a rebalance"
        broker.wait_for_log(r"static member .* of group static-group replaced by")
        restarted.stop(leave=False)
    finally:
        b.stop(leave=False)


def test_broker_restart_keeps_static_group_generation_and_assignment(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    create_topic(broker.bootstrap, "static", 4)
    a, b = _static(broker, "instance-a").start(), _static(broker, "instance-b").start()
    try:
        wait_until(lambda: _balanced([a, b], 2, 4), 60, "static group to balance")
        with WireClient(broker.host, broker.port) as client:
            before = client.request(15, 5, {"groups": ["static-group"]}).groups[0]
        seen = (list(a.assignments_seen), list(b.assignments_seen))
        broker.restart()
        with WireClient(broker.host, broker.port) as client:
            after = client.request(15, 5, {"groups": ["static-group"]}).groups[0]
        assert after.group_state == "Stable"
        assert [(m.member_id, m.group_instance_id, m.member_assignment) for m in after.members] == [
            (m.member_id, m.group_instance_id, m.member_assignment) for m in before.members
        ]
        # The members reconnect and carry on: what is produced now reaches its owner.
        restart_log_lines = len(broker.log().splitlines())
        _produce_one_per_partition(broker, "static", 4)
        wait_until(lambda: len(a.messages) + len(b.messages) == 4, 60, "post-restart messages consumed")
        assert {p for p, _, _ in a.messages} == a.assignment
        assert {p for p, _, _ in b.messages} == b.assignment
        after_restart = "\n".join(broker.log().splitlines()[restart_log_lines:])
        assert "preparing to rebalance" not in after_restart
        assert (list(a.assignments_seen), list(b.assignments_seen)) == seen
        with WireClient(broker.host, broker.port) as client:
            again = client.request(15, 5, {"groups": ["static-group"]}).groups[0]
        assert again.group_state == "Stable"
        assert [m.member_id for m in again.members] == [m.member_id for m in before.members]
    finally:
        a.stop(leave=False)
        b.stop(leave=False)
