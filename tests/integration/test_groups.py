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

# Kafka's default initial delay is 3 s; a short one, as in real deployments, lets consumers
# that start together form one generation. (kafka-python consumers also learn their topic's
# partitions before joining: see learn_partitions in tests/support/clients.py.)
FAST = {"group.initial.rebalance.delay.ms": 1000}


def _balanced(consumers: list[ConsumerThread], each: int, partitions: int) -> bool:
    return sizes(consumers) == [each] * len(consumers) and disjoint_cover(consumers, partitions)


def _wait_balanced(broker: BrokerProcess, consumers: list[ConsumerThread], each: int, partitions: int,
                   timeout: float = 60) -> None:
    try:
        wait_until(lambda: _balanced(consumers, each, partitions), timeout, f"{each} partitions each")
    except AssertionError as exc:
        seen = [(c.kind, sorted(c.assignment), len(c.assignments_seen)) for c in consumers]
        raise AssertionError(f"{exc}; consumers: {seen}\nbroker log:\n{broker.log()}") from None


@pytest.mark.parametrize("kind", [KafkaPythonConsumer, ConfluentConsumer], ids=["kafka-python", "confluent"])
def test_group_of_three_shares_six_partitions_then_two_share_them(
    broker_factory: object, kind: type[ConsumerThread]
) -> None:
    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    create_topic(broker.bootstrap, "six", 6)
    consumers = [kind(broker.bootstrap, "trio-group", "six").start() for _ in range(3)]
    try:
        _wait_balanced(broker, consumers, 2, 6)
        consumers[0].stop()
        _wait_balanced(broker, consumers[1:], 3, 6)
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
        _wait_balanced(broker, consumers, 2, 6, timeout=90)
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


def _static(broker: BrokerProcess, instance: str, kind: str = "confluent") -> ConsumerThread:
    if kind == "kafka-python":
        return KafkaPythonConsumer(broker.bootstrap, "static-group", "static", group_instance_id=instance)
    if kind == "aiokafka":
        return AiokafkaConsumer(broker.bootstrap, "static-group", "static", group_instance_id=instance)
    return ConfluentConsumer(broker.bootstrap, "static-group", "static",
                             **{"group.instance.id": instance, "session.timeout.ms": 20000})


@pytest.mark.parametrize("kind", ["confluent", "kafka-python", "aiokafka"])
def test_static_member_restart_within_session_timeout_causes_no_rebalance(
    broker_factory: object, kind: str
) -> None:
    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    create_topic(broker.bootstrap, "static", 4)
    a, b = _static(broker, "instance-a", kind).start(), _static(broker, "instance-b", kind).start()
    try:
        _wait_balanced(broker, [a, b], 2, 4)
        seen_by_b = list(b.assignments_seen)
        a_assignment = set(a.assignment)
        a.stop(leave=False)  # static members do not leave on close
        restarted = _static(broker, "instance-a", kind).start()
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
        _wait_balanced(broker, [a, b], 2, 4)
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


def _join(client: WireClient, member_id: str, rebalance_timeout_ms: int = 1000) -> object:
    return client.request(11, 5, {
        "group_id": "parked", "session_timeout_ms": 6000, "rebalance_timeout_ms": rebalance_timeout_ms,
        "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x00"}]})


def _join_until_member(client: WireClient) -> object:
    reply = _join(client, "")
    assert reply.error_code == 79  # MEMBER_ID_REQUIRED
    return _join(client, reply.member_id)


def test_member_whose_connection_closes_while_parked_does_not_leak(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    first = WireClient(broker.host, broker.port)
    try:
        joined = _join_until_member(first)
        synced = first.request(14, 3, {"group_id": "parked", "generation_id": joined.generation_id,
                                       "member_id": joined.member_id, "group_instance_id": None,
                                       "assignments": [{"member_id": joined.member_id, "assignment": b""}]})
        assert synced.error_code == 0
        # A second member joins (and parks, waiting for the first to rejoin), then vanishes.
        second = WireClient(broker.host, broker.port)
        second_id = _join(second, "").member_id
        second.send(11, 5, {"group_id": "parked", "session_timeout_ms": 6000, "rebalance_timeout_ms": 1000,
                            "member_id": second_id, "group_instance_id": None, "protocol_type": "consumer",
                            "protocols": [{"name": "range", "metadata": b"\x00\x00"}]})
        broker.wait_for_log(f"adding new member {second_id}")
        second.close()
        # The first member rejoins; the join completes with both, but the second never syncs.
        rejoined = _join(first, joined.member_id)
        assert rejoined.error_code == 0 and len(rejoined.members) == 2
        first.request(14, 3, {"group_id": "parked", "generation_id": rejoined.generation_id,
                              "member_id": joined.member_id, "group_instance_id": None, "assignments": []})
        broker.wait_for_log(rf"removing members \['{second_id}'\] of group parked: no SyncGroup", timeout=15)
        final = _join(first, joined.member_id)
        assert final.error_code == 0
        assert [m.member_id for m in final.members] == [joined.member_id]
        described = first.request(15, 5, {"groups": ["parked"]}).groups[0]
        assert [m.member_id for m in described.members] == [joined.member_id]
    finally:
        first.close()
