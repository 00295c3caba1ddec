"""A kafka-python 3.0.12 client bug, pinned against the real broker: a group leader whose
``poll()`` times out during a rejoin started by new metadata never applies the assignment it
computed, never heartbeats again, and never rejoins after the broker expires it.

``ConsumerCoordinator.need_rejoin()`` is true while the metadata the leader assigned from
(``_assignment_snapshot``) differs from the current one. ``BaseCoordinator.join_group_async``
loops ``while self.need_rejoin()`` and, when the poll's timer runs out, leaves its JoinGroup/
SyncGroup task in flight for the next poll to collect. But that task, as leader, runs
``_perform_assignment``, which sets ``_assignment_snapshot = _metadata_snapshot``: from then on
``need_rejoin()`` is false, no poll enters ``join_group_async`` again, the finished task's
SyncGroup answer is never read, the member stays REBALANCING (so the heartbeat loop stays
off), and its assignment is the previous generation's. The Java client's
``AbstractCoordinator.rejoinNeededOrPending()`` is ``rejoinNeeded || joinFuture != null`` for
this reason. The broker's answers are Kafka's: the group is Stable with the leader's
assignment, then the member is removed when its session expires.

The usual trigger is the first join: the consumer joins before the metadata of the topic it
subscribed to has arrived, assigns nothing, and rejoins once the metadata comes. A topic that
gains partitions does the same later. Here the topic is created, then grown, after the first
generation, so the rejoin is certain, and a ``poll(timeout_ms=0)`` times out before the
JoinGroup answer comes back.

docs/cluster.md (Known client issues) has the workarounds pinned here: a stranded consumer
recovers by unsubscribing and subscribing again, and one that learns its topics' partitions
before its first poll has no first-join rejoin to strand.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.clients import create_topic, learn_partitions, wait_until
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

SETS = {"group.initial.rebalance.delay.ms": 0, "auto.create.topics.enable": False}
SESSION_MS = 6000  # group.min.session.timeout.ms: the expiry comes as soon as the broker allows


def consumer(broker: BrokerProcess, group: str, topic: str) -> Any:
    from kafka import KafkaConsumer

    return KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
                         session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500, metadata_max_age_ms=500)


def described(broker: BrokerProcess, group: str) -> tuple[str, list[list[int]]]:
    """The group's state and each member's assigned partitions, as the broker answers DescribeGroups."""
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

    with WireClient(broker.host, broker.port) as client:
        answer = client.request(15, 5, {"groups": [group]}).groups[0]
    assigned = []
    for member in answer.members:
        decoded = ConsumerProtocolAssignment.decode(member.member_assignment) if member.member_assignment else None
        assigned.append(sorted(tp.partition for tp in decoded.partitions()) if decoded else [])
    return answer.group_state, assigned


def poll_until(client: Any, condition: Any, timeout: float, what: str, timeout_ms: int) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        client.poll(timeout_ms=timeout_ms)


def grow(broker: BrokerProcess, topic: str, partitions: int) -> None:
    """Create the topic, or give it more partitions: either way its consumers' metadata changes."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions

    if partitions == 1:
        create_topic(broker.bootstrap, topic, 1)
        return
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_partitions({topic: NewPartitions(partitions)})
    finally:
        admin.close()


def test_a_leader_whose_poll_times_out_in_a_metadata_rejoin_never_applies_its_assignment(
    broker_factory: object,
) -> None:
    from kafka.structs import MemberState

    broker: BrokerProcess = broker_factory(SETS)  # type: ignore[operator]
    client = consumer(broker, "stranded", "late")
    coordinator = client._coordinator
    try:
        # Generation 1: the topic does not exist yet, so the leader assigns nothing.
        poll_until(client, lambda: coordinator.state is MemberState.STABLE, 30, "generation 1", timeout_ms=200)
        assert described(broker, "stranded") == ("Stable", [[]])

        # The topic appears (or grows): the client's metadata changes and it must rejoin. One
        # poll starts that join and times out at once; the join goes on in the client's IO
        # thread. That poll may, rarely, still collect the answer: then the topic grows again.
        for partitions in range(1, 4):
            before = client.assignment()
            grow(broker, "late", partitions)
            wait_until(coordinator.need_rejoin, 30, "the client to see the new metadata")
            client.poll(timeout_ms=0)
            settled = ("Stable", [list(range(partitions))])
            wait_until(lambda: described(broker, "stranded") == settled, 30,  # noqa: B023 (used at once)
                       "the broker to complete the next generation with the leader's assignment")
            if coordinator.state is MemberState.REBALANCING and client.assignment() == before:
                break
        else:
            pytest.fail("every poll collected its join: the client bug did not show")

        # The client never applies it, and no longer asks to: it stays REBALANCING with its old
        # assignment, sends no heartbeat, until the broker removes it for its session...
        assert not coordinator.need_rejoin()
        poll_until(client, lambda: described(broker, "stranded") == ("Empty", []), SESSION_MS / 1000 + 30,
                   "the broker to expire the silent member", timeout_ms=200)
        # ... and after that too: nothing it polls for tells it.
        for _ in range(10):
            client.poll(timeout_ms=200)
        assert client.assignment() == before
        assert coordinator.state is MemberState.REBALANCING
        assert described(broker, "stranded") == ("Empty", [])

        # Leaving and subscribing again starts a fresh join, which the polls then drive.
        client.unsubscribe()
        client.subscribe(["late"])
        poll_until(client, lambda: client.assignment() and coordinator.state is MemberState.STABLE, 30,
                   "the consumer to join again", timeout_ms=200)
        assert described(broker, "stranded") == ("Stable", [sorted(tp.partition for tp in client.assignment())])
    finally:
        client.close()


def test_a_consumer_that_learns_its_partitions_before_joining_is_assigned_without_a_metadata_rejoin(
    broker_factory: object,
) -> None:
    """The workaround for the first join: the leader's first assignment already covers the
    topic, so there is no metadata rejoin to strand."""
    broker: BrokerProcess = broker_factory(SETS)  # type: ignore[operator]
    create_topic(broker.bootstrap, "early", 3)
    client = consumer(broker, "learned", "early")
    try:
        learn_partitions(client, ["early"])
        poll_until(client, lambda: len(client.assignment()) == 3, 30, "the assignment", timeout_ms=100)
        assert client._coordinator._assignment_snapshot == {"early": {0, 1, 2}}
        assert not client._coordinator.need_rejoin()
        assert described(broker, "learned") == ("Stable", [[0, 1, 2]])
    finally:
        client.close()
