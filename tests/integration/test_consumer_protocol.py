"""KIP-848 consumer groups with real clients: librdkafka's ``group.protocol=consumer``, alone and
beside classic members of kafka-python and aiokafka, across a broker killed with -9."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.clients import (
    AiokafkaConsumer,
    ConsumerProtocolConsumer,
    ConsumerThread,
    KafkaPythonConsumer,
    assert_never_owned_twice,
    create_topic,
    wait_until,
)
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

# Short sessions and heartbeats so members come and go within a test's patience.
CONSUMER = {
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.session.timeout.ms": 10000,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.heartbeat.interval.ms": 500,
    "group.initial.rebalance.delay.ms": 500,
}


def sizes(consumers: list[ConsumerThread]) -> list[int]:
    return sorted(len(c.assignment) for c in consumers)


def wait_sizes(broker: BrokerProcess, consumers: list[ConsumerThread], expected: list[int],
               timeout: float = 60) -> None:
    def covered() -> bool:
        owned = [p for c in consumers for p in c.assignment]
        return sizes(consumers) == expected and len(owned) == len(set(owned)) == sum(expected)

    try:
        wait_until(covered, timeout, f"assignment sizes {expected}")
    except AssertionError as exc:
        seen = [(c.kind, sorted(c.assignment)) for c in consumers]
        raise AssertionError(f"{exc}; consumers: {seen}\nbroker log:\n{broker.log()[-20000:]}") from None


def group_type(broker: BrokerProcess, group: str) -> str:
    with WireClient(broker.host, broker.port) as client:
        reply = client.request(16, 5, {"states_filter": [], "types_filter": []})
    return next(g.group_type for g in reply.groups if g.group_id == group)


class Producing:
    """Keeps producing to every partition of a topic in a thread until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "message.timeout.ms": 60000, "retry.backoff.ms": 200})
        self.topic = topic
        self.partitions = partitions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0

    def __enter__(self) -> Producing:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in range(self.partitions):
                try:
                    self.producer.produce(self.topic, value=f"{self.sent}".encode(), partition=p)
                    self.sent += 1
                except BufferError:
                    pass
            self.producer.poll(0.05)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(30)


def test_three_consumer_protocol_members_share_six_partitions_incrementally(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory(CONSUMER)
    create_topic(broker.bootstrap, "six", 6)
    members = [ConsumerProtocolConsumer(broker.bootstrap, "g848", "six").start() for _ in range(3)]
    try:
        wait_sizes(broker, members, [2, 2, 2])
        assert group_type(broker, "g848") == "consumer"
        kept = {id(m): set(m.owned) for m in members[1:]}
        for m in members[1:]:
            m.revocations.clear()
        members[0].stop()
        wait_sizes(broker, members[1:], [3, 3])
        for m in members[1:]:
            assert m.owned >= kept[id(m)]
            assert m.revocations == [], "a member that keeps its partitions gets no revoke callback"
        assert_never_owned_twice(members)
    finally:
        for m in members[1:]:
            m.stop()


def test_a_static_member_restarts_within_its_session_and_gets_the_same_partitions(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory(CONSUMER)
    create_topic(broker.bootstrap, "stat", 4)
    first = ConsumerProtocolConsumer(broker.bootstrap, "gstatic", "stat", **{"group.instance.id": "one"}).start()
    other = ConsumerProtocolConsumer(broker.bootstrap, "gstatic", "stat", **{"group.instance.id": "two"}).start()
    try:
        wait_sizes(broker, [first, other], [2, 2])
        before = set(first.owned)
        other.ownership.clear()
        first.stop()
        again = ConsumerProtocolConsumer(broker.bootstrap, "gstatic", "stat",
                                         **{"group.instance.id": "one"}).start()
        wait_until(lambda: again.owned == before, 30, "the restarted static member's partitions")
        assert other.ownership == [], "the other member saw no rebalance"
        again.stop()
    finally:
        other.stop()


def test_a_regex_subscription_picks_up_a_topic_created_later(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory(CONSUMER)
    create_topic(broker.bootstrap, "orders-eu", 2)
    create_topic(broker.bootstrap, "payments", 2)
    member = ConsumerProtocolConsumer(broker.bootstrap, "gregex", "^orders-.*").start()
    try:
        wait_until(lambda: {t for t, _ in member.owned} == {"orders-eu"}, 30, "orders-eu assigned")
        create_topic(broker.bootstrap, "orders-us", 3)
        wait_until(lambda: {t for t, _ in member.owned} == {"orders-eu", "orders-us"} and len(member.owned) == 5,
                   60, "orders-us picked up")
    finally:
        member.stop()


@pytest.mark.parametrize("classic", [[KafkaPythonConsumer, KafkaPythonConsumer],
                                     [KafkaPythonConsumer, AiokafkaConsumer]],
                         ids=["kafka-python", "kafka-python+aiokafka"])
def test_a_mixed_group_upgrades_balances_and_goes_back_to_classic(
        broker_factory: Any, classic: list[type[ConsumerThread]]) -> None:
    broker: BrokerProcess = broker_factory(CONSUMER)
    create_topic(broker.bootstrap, "mixed", 6)
    old = [kind(broker.bootstrap, "gmixed", "mixed").start() for kind in classic]
    try:
        wait_sizes(broker, old, [3, 3])
        assert group_type(broker, "gmixed") == "classic"
        new = ConsumerProtocolConsumer(broker.bootstrap, "gmixed", "mixed").start()
        wait_sizes(broker, [*old, new], [2, 2, 2], timeout=90)
        assert group_type(broker, "gmixed") == "consumer"
        broker.wait_for_log("classic group gmixed upgraded to a consumer group")
        new.stop()
        broker.wait_for_log("consumer group gmixed downgraded to a classic group")
        wait_sizes(broker, old, [3, 3], timeout=90)
        assert group_type(broker, "gmixed") == "classic"
    finally:
        for c in old:
            c.stop()


def test_members_carry_on_after_a_kill_9_during_reconciliation(broker_factory: Any, tmp_path: Any) -> None:
    broker: BrokerProcess = broker_factory(CONSUMER, extra_args=["--log-level", "DEBUG"])
    create_topic(broker.bootstrap, "crash", 6)
    members = [ConsumerProtocolConsumer(broker.bootstrap, "gcrash", "crash").start() for _ in range(2)]
    with Producing(broker.bootstrap, "crash", 6):
        try:
            wait_sizes(broker, members, [3, 3])
            members.append(ConsumerProtocolConsumer(broker.bootstrap, "gcrash", "crash").start())
            # The coordinator logs each reconciliation step at DEBUG: kill it in the middle of one.
            broker.wait_for_log("consumer group gcrash: member .* is (UNREVOKED|UNRELEASED)_PARTITIONS")
            broker.kill()
            broker.listen = f"{broker.host}:{broker.port}"
            broker.start()
            wait_sizes(broker, members, [2, 2, 2], timeout=90)
            wait_until(lambda: all(len(m.received) > 0 for m in members), 60, "every member reads records")
        finally:
            for m in members:
                m.stop()
    assert_never_owned_twice(members)


def test_kcoord_groups_describe_shows_the_type_member_epochs_and_target_beside_current(broker_factory: Any) -> None:
    from tests.integration.test_admin_cli import kcoord, kcoord_json

    broker: BrokerProcess = broker_factory(CONSUMER)
    create_topic(broker.bootstrap, "desc", 4)
    members = [ConsumerProtocolConsumer(broker.bootstrap, "gdesc", "desc").start() for _ in range(2)]
    try:
        wait_sizes(broker, members, [2, 2])
        document = kcoord_json(broker, "groups", "describe", "gdesc", "--members")
        assert document["type"] == "consumer" and document["state"] == "Stable"
        assert document["group_epoch"] == document["assignment_epoch"] >= 2
        for member in document["members"]:
            assert member["member_epoch"] == document["group_epoch"]
            assert member["assignment"] == member["target_assignment"] and len(member["assignment"]) == 2
        table = kcoord(broker, "groups", "describe", "gdesc", "--members").stdout
        assert "type consumer (KIP-848), assignor uniform" in table
        assert "MEMBER-EPOCH" in table and "TARGET-ASSIGNMENT" in table
        listed = {g["group"]: g for g in kcoord_json(broker, "groups", "list")["groups"]}
        assert listed["gdesc"]["type"] == "consumer" and listed["gdesc"]["state"] == "Stable"
    finally:
        for m in members:
            m.stop()
