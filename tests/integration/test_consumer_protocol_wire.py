"""KIP-848 consumer groups frame by frame against the real broker process.

ConsumerGroupHeartbeat, ConsumerGroupDescribe and OffsetCommit/OffsetFetch v9 are sent
by hand, so every error path can be reached on purpose. Each test pins the error code
Kafka 4 answers with: the request checks of GroupCoordinatorService
(throwIfConsumerGroupHeartbeatRequestIsInvalid), the member and epoch checks of
GroupMetadataManager.consumerGroupHeartbeat, and the offset checks of
ConsumerGroup.validateOffsetCommit and validateOffsetFetch. A refused heartbeat changes
nothing, so most tests also show the group carrying on as before.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess
from tests.support.clients import wait_until
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

E = ErrorCode
METADATA, OFFSET_COMMIT, OFFSET_FETCH, CREATE_TOPICS = 3, 8, 9, 19
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69

Offsets = dict[tuple[str, int], int]


def create_topics(client: WireClient, **partitions: int) -> dict[str, uuid.UUID]:
    """Create the topics (name=partition count); their ids, as Metadata v12 reports them."""
    created = client.request(CREATE_TOPICS, 7, {
        "topics": [{"name": name, "num_partitions": count, "replication_factor": 1, "assignments": [],
                    "configs": []} for name, count in partitions.items()],
        "timeout_ms": 5000, "validate_only": False})
    assert [(t.name, t.error_code) for t in created.topics] == [(name, 0) for name in partitions]
    metadata = client.request(METADATA, 12, {
        "topics": [{"name": name, "topic_id": uuid.UUID(int=0)} for name in partitions],
        "allow_auto_topic_creation": False})
    ids = {t.name: t.topic_id for t in metadata.topics}
    assert ids == {t.name: t.topic_id for t in created.topics}
    return ids


class Member:
    """One consumer-protocol member driven by hand.

    It remembers the epoch and partitions its last successful heartbeat gave it, reports
    those partitions as owned on every heartbeat (so revocations are acknowledged at
    once), and leaves anything unchanged null, as a real consumer's partial heartbeat does.
    """

    def __init__(self, client: WireClient, group: str, topics: list[str], instance_id: str | None = None) -> None:
        self.client = client
        self.group = group
        self.topics = topics
        self.instance_id = instance_id
        self.member_id = str(uuid.uuid4())  # v1: the client makes up its own member id (KIP-1082)
        self.epoch = 0
        self.owned: dict[uuid.UUID, list[int]] = {}

    def send(self, version: int = 1, **fields: Any) -> Any:
        """One raw heartbeat: the member's ids and epoch, ``fields`` on top; remembers nothing."""
        body = {"group_id": self.group, "member_id": self.member_id, "member_epoch": self.epoch,
                "instance_id": self.instance_id, "rack_id": None, "rebalance_timeout_ms": -1,
                "subscribed_topic_names": None, "subscribed_topic_regex": None, "server_assignor": None,
                "topic_partitions": None}
        body.update(fields)
        return self.client.request(CONSUMER_GROUP_HEARTBEAT, version, body)

    def join(self, version: int = 1, **fields: Any) -> Any:
        """The full first heartbeat: epoch 0, a rebalance timeout, the subscription, nothing owned."""
        join = {"member_epoch": 0, "rebalance_timeout_ms": 30000, "subscribed_topic_names": self.topics,
                "topic_partitions": []}
        return self._take(self.send(version, **{**join, **fields}))

    def heartbeat(self, **fields: Any) -> Any:
        owned = [{"topic_id": topic_id, "partitions": partitions} for topic_id, partitions in self.owned.items()]
        return self._take(self.send(**{"topic_partitions": owned, **fields}))

    def heartbeat_until(self, condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
        """Heartbeat (bounded) until ``condition`` holds; every heartbeat must succeed."""
        def step() -> bool:
            reply = self.heartbeat()
            assert reply.error_code == 0, reply
            return condition()

        wait_until(step, timeout, what)

    def _take(self, reply: Any) -> Any:
        if reply.error_code == 0:
            self.member_id = reply.member_id
            self.epoch = reply.member_epoch
            if reply.assignment is not None:
                self.owned = {tp.topic_id: sorted(tp.partitions) for tp in reply.assignment.topic_partitions}
        return reply


def assert_refused(reply: Any, error: ErrorCode) -> None:
    """Kafka answers a refused heartbeat with the error alone: no member id, epoch 0, no assignment."""
    assert (reply.error_code, reply.member_id, reply.member_epoch, reply.assignment) == (error, None, 0, None), \
        f"expected {error.name}, got {reply}"
    assert reply.error_message


def commit(client: WireClient, version: int, group: str, member_id: str, epoch: int, offsets: Offsets) -> Offsets:
    """OffsetCommit at ``version``; the error code of each (topic, partition)."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                             "committed_leader_epoch": -1, "committed_metadata": ""})
    reply = client.request(OFFSET_COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": epoch, "member_id": member_id,
        "group_instance_id": None, "topics": [{"name": name, "partitions": ps} for name, ps in topics.items()]})
    return {(t.name, p.partition_index): p.error_code for t in reply.topics for p in t.partitions}


def fetch(client: WireClient, group: str, member_id: str | None, epoch: int) -> tuple[int, Offsets]:
    """OffsetFetch v9 of every committed offset: (the group's error code, the offsets)."""
    reply = client.request(OFFSET_FETCH, 9, {
        "groups": [{"group_id": group, "member_id": member_id, "member_epoch": epoch, "topics": None}],
        "require_stable": False})
    (fetched,) = reply.groups
    assert fetched.group_id == group
    return fetched.error_code, {(t.name, p.partition_index): p.committed_offset
                                for t in fetched.topics for p in t.partitions}


def describe(client: WireClient, group: str) -> Any:
    reply = client.request(CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [group], "include_authorized_operations": False})
    (described,) = reply.groups
    return described


def all_ok(offsets: Offsets) -> Offsets:
    return {key: 0 for key in offsets}


# ---------------------------------------------------------------------- the baseline


def test_a_member_joins_heartbeats_commits_and_leaves(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as client:
        ids = create_topics(client, orders=3)
        member = Member(client, "happy", ["orders"])

        joined = member.join()
        assert (joined.error_code, joined.error_message) == (0, None)
        assert joined.member_id == member.member_id, "v1 keeps the member id the client chose"
        assert joined.member_epoch == 1, "the new group's first epoch"
        assert joined.heartbeat_interval_ms == 5000, "group.consumer.heartbeat.interval.ms"
        assert member.owned == {ids["orders"]: [0, 1, 2]}, "the assignment names topics by their Metadata id"

        again = member.heartbeat()
        assert (again.error_code, again.member_epoch, again.assignment) == (0, 1, None), \
            "an unchanged assignment is not sent again to a partial heartbeat"

        offsets = {("orders", p): 10 + p for p in range(3)}
        assert commit(client, 9, "happy", member.member_id, 1, offsets) == all_ok(offsets)
        assert fetch(client, "happy", member.member_id, 1) == (0, offsets)

        group = describe(client, "happy")
        assert (group.error_code, group.group_state, group.group_epoch, group.assignment_epoch,
                group.assignor_name) == (0, "Stable", 1, 1, "uniform")
        (described,) = group.members
        assert (described.member_id, described.member_epoch, described.client_id,
                list(described.subscribed_topic_names)) == (member.member_id, 1, "kcoord-test", ["orders"])
        assert [(tp.topic_id, tp.topic_name, sorted(tp.partitions))
                for tp in described.assignment.topic_partitions] == [(ids["orders"], "orders", [0, 1, 2])]

        left = member.send(member_epoch=-1)
        assert (left.error_code, left.member_id, left.member_epoch) == (0, member.member_id, -1)
        group = describe(client, "happy")
        assert (group.error_code, group.group_state, group.group_epoch, list(group.members)) == (0, "Empty", 2, [])
        assert fetch(client, "happy", None, -1) == (0, offsets), "the offsets outlive the member"


def test_v0_lets_the_coordinator_choose_the_member_id(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as client:
        create_topics(client, orders=1)
        member = Member(client, "v0", ["orders"])
        member.member_id = ""
        joined = member.join(version=0)
        assert (joined.error_code, joined.member_epoch) == (0, 1)
        assert joined.member_id, "v0: an empty member id at epoch 0 gets one from the coordinator"
        assert member.send(version=0).error_code == 0


# ---------------------------------------------------------------------- member epochs


def test_a_heartbeat_with_a_greater_member_epoch_is_fenced_and_changes_nothing(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as client:
        create_topics(client, orders=2)
        member = Member(client, "fenced", ["orders"])
        assert member.join().member_epoch == 1

        assert_refused(member.heartbeat(member_epoch=2), E.FENCED_MEMBER_EPOCH)

        (described,) = describe(client, "fenced").members
        assert (described.member_id, described.member_epoch) == (member.member_id, 1)
        assert member.heartbeat().error_code == 0, "the member carries on at its real epoch"


def _member_at_epoch_2(client: WireClient, group: str) -> tuple[Member, dict[str, uuid.UUID]]:
    """A member that joined at epoch 1 and then subscribed to one more topic, which moved it to epoch 2."""
    ids = create_topics(client, orders=2, refunds=2)
    member = Member(client, group, ["orders"])
    assert member.join().member_epoch == 1
    assert member.heartbeat(subscribed_topic_names=["orders", "refunds"]).error_code == 0
    member.heartbeat_until(lambda: member.epoch == 2, "the member to reach epoch 2")
    assert member.owned == {ids["orders"]: [0, 1], ids["refunds"]: [0, 1]}
    return member, ids


def test_a_smaller_member_epoch_is_fenced_unless_it_is_the_previous_one_owning_a_subset(
        broker: BrokerProcess) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid: the previous epoch is forgiven (the reply
    that moved the member on may have been lost) only if what it owns is part of its assignment."""
    with WireClient(broker.host, broker.port) as client:
        member, ids = _member_at_epoch_2(client, "smaller")

        assert_refused(member.send(member_epoch=1, topic_partitions=None), E.FENCED_MEMBER_EPOCH)
        stray = [{"topic_id": uuid.uuid4(), "partitions": [0]}]
        assert_refused(member.send(member_epoch=1, topic_partitions=stray), E.FENCED_MEMBER_EPOCH)

        subset = [{"topic_id": ids["orders"], "partitions": [0, 1]}]
        forgiven = member.send(member_epoch=1, topic_partitions=subset)
        assert (forgiven.error_code, forgiven.member_epoch) == (0, 2)


def test_commits_and_fetches_at_a_stale_member_epoch_are_refused(broker: BrokerProcess) -> None:
    """ConsumerGroup.validateOffsetCommit / validateOffsetFetch: a consumer-protocol member must
    give exactly its current epoch, else STALE_MEMBER_EPOCH (ILLEGAL_GENERATION is for classic members)."""
    with WireClient(broker.host, broker.port) as client:
        member, _ = _member_at_epoch_2(client, "stale")
        mid = member.member_id

        assert commit(client, 9, "stale", mid, 1, {("orders", 0): 99}) == {("orders", 0): E.STALE_MEMBER_EPOCH}
        assert commit(client, 9, "stale", mid, 3, {("orders", 1): 99}) == {("orders", 1): E.STALE_MEMBER_EPOCH}
        assert fetch(client, "stale", mid, 1) == (E.STALE_MEMBER_EPOCH, {})
        assert fetch(client, "stale", mid, 3) == (E.STALE_MEMBER_EPOCH, {})
        assert fetch(client, "stale", mid, 2) == (0, {}), "the refused commits stored nothing"

        assert commit(client, 9, "stale", mid, 2, {("orders", 0): 5}) == {("orders", 0): 0}
        assert fetch(client, "stale", mid, 2) == (0, {("orders", 0): 5})


def test_a_heartbeat_from_a_member_the_group_does_not_have_is_unknown_member_id(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as client:
        create_topics(client, orders=1)
        member = Member(client, "known", ["orders"])
        assert member.join().error_code == 0

        stranger = Member(client, "known", ["orders"])
        stranger.epoch = 1
        assert_refused(stranger.heartbeat(), E.UNKNOWN_MEMBER_ID)

        assert member.send(member_epoch=-1).error_code == 0
        assert_refused(member.heartbeat(), E.UNKNOWN_MEMBER_ID)  # gone members stay gone
        assert describe(client, "known").group_state == "Empty", "the group itself remains"

        nowhere = Member(client, "no-such-group", ["orders"])
        nowhere.epoch = 1
        assert_refused(nowhere.heartbeat(), E.GROUP_ID_NOT_FOUND)  # no group at all: a different error


# ---------------------------------------------------------------------- static members


def test_a_second_live_member_with_the_same_instance_id_is_unreleased(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as client:
        create_topics(client, orders=2)
        first = Member(client, "static", ["orders"], instance_id="instance-1")
        assert first.join().error_code == 0
        second = Member(client, "static", ["orders"], instance_id="instance-1")

        assert_refused(second.join(), E.UNRELEASED_INSTANCE_ID)
        assert [m.member_id for m in describe(client, "static").members] == [first.member_id]
        assert first.heartbeat().error_code == 0

        # A static member stepping out for a restart (epoch -2) releases its instance id:
        # the next incarnation takes its place and its partitions, and the old one is fenced.
        stepped_out = first.send(member_epoch=-2)
        assert (stepped_out.error_code, stepped_out.member_epoch) == (0, -2)
        rejoined = second.join()
        assert (rejoined.error_code, rejoined.member_epoch) == (0, first.epoch)
        assert second.owned == first.owned
        assert [m.member_id for m in describe(client, "static").members] == [second.member_id]
        assert_refused(first.send(member_epoch=first.epoch), E.FENCED_INSTANCE_ID)


# Kafka's getOrMaybeSubscribeStaticConsumerGroupMember does not look at the member id when an
# epoch-0 join names an instance id someone holds: the holder must be at epoch -2
# (throwIfInstanceIdIsUnreleased), and then the joiner replaces it, even when it is the same
# member id coming back (docs/coordinator-rules.md#consumer-static-members).


def test_an_active_static_member_rejoining_with_its_own_member_id_is_unreleased(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as client:
        create_topics(client, orders=2)
        member = Member(client, "static-again", ["orders"], instance_id="instance-1")
        assert member.join().error_code == 0
        assert_refused(member.join(), E.UNRELEASED_INSTANCE_ID)


def test_a_static_member_back_from_epoch_minus_2_with_its_own_member_id_gets_its_place_back(
        broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as client:
        create_topics(client, orders=2)
        member = Member(client, "static-back", ["orders"], instance_id="instance-1")
        assert member.join().error_code == 0
        epoch, owned = member.epoch, dict(member.owned)
        assert member.send(member_epoch=-2).error_code == 0

        back = member.join()
        assert (back.error_code, back.member_epoch) == (0, epoch)
        assert member.owned == owned


# ---------------------------------------------------------------------- what the broker is configured to allow


def test_an_assignor_the_broker_does_not_offer_is_unsupported(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory({"group.consumer.assignors": "uniform"})
    with WireClient(broker.host, broker.port) as client:
        create_topics(client, orders=1)
        member = Member(client, "assignors", ["orders"])

        refused = member.join(server_assignor="range")
        assert_refused(refused, E.UNSUPPORTED_ASSIGNOR)
        assert "uniform" in refused.error_message, "the reply names the assignors on offer"
        assert_refused(member.join(server_assignor="no-such-assignor"), E.UNSUPPORTED_ASSIGNOR)
        assert describe(client, "assignors").error_code == E.GROUP_ID_NOT_FOUND, "nothing was created"

        assert member.join(server_assignor="uniform").error_code == 0
        assert_refused(member.heartbeat(server_assignor="range"), E.UNSUPPORTED_ASSIGNOR)
        assert describe(client, "assignors").assignor_name == "uniform"


def test_a_full_group_turns_away_new_members_but_not_its_own(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory({"group.consumer.max.size": 2})
    with WireClient(broker.host, broker.port) as client:
        create_topics(client, orders=4)
        first, second, third = (Member(client, "full", ["orders"]) for _ in range(3))
        assert first.join().error_code == 0
        assert second.join().error_code == 0

        assert_refused(third.join(), E.GROUP_MAX_SIZE_REACHED)
        assert first.heartbeat().error_code == 0
        assert second.heartbeat().error_code == 0
        assert len(describe(client, "full").members) == 2

        assert first.send(member_epoch=-1).error_code == 0
        assert third.join().error_code == 0, "a place came free"


# ---------------------------------------------------------------------- offset commits below v9


def test_a_consumer_protocol_member_committing_below_v9_is_unsupported_version(broker: BrokerProcess) -> None:
    """A classic-style commit carrying a consumer-protocol member's id: Kafka wants v9 or above.
    Versions 2 to 8 are the older ones Kafka 4 still serves (KIP-896 removed v0 and v1)."""
    with WireClient(broker.host, broker.port) as client:
        create_topics(client, orders=1)
        member = Member(client, "old-commit", ["orders"])
        assert member.join().error_code == 0

        for version in range(2, 9):
            errors = commit(client, version, "old-commit", member.member_id, member.epoch, {("orders", 0): version})
            assert errors == {("orders", 0): E.UNSUPPORTED_VERSION}, f"OffsetCommit v{version}"
        assert fetch(client, "old-commit", member.member_id, member.epoch) == (0, {}), "none was stored"

        assert commit(client, 9, "old-commit", member.member_id, member.epoch, {("orders", 0): 9}) == {("orders", 0): 0}


# ---------------------------------------------------------------------- malformed heartbeats

_STRAY_PARTITION = [{"topic_id": uuid.UUID(int=7), "partitions": [0]}]
_INVALID = {
    "v1 join without a member id": (1, {"member_id": ""}, "MemberId can't be empty."),
    "v1 join with a blank member id": (1, {"member_id": "  "}, "MemberId can't be empty."),
    "v0 heartbeat without a member id": (0, {"member_id": "", "member_epoch": 1}, "MemberId can't be empty."),
    "leave without a member id": (1, {"member_id": "", "member_epoch": -1}, "MemberId can't be empty."),
    "empty group id": (1, {"group_id": ""}, "GroupId can't be empty."),
    "empty instance id": (1, {"instance_id": ""}, "InstanceId can't be empty."),
    "empty rack id": (1, {"rack_id": ""}, "RackId can't be empty."),
    "join without a rebalance timeout": (1, {"rebalance_timeout_ms": -1},
                                         "RebalanceTimeoutMs must be provided in first request."),
    "join with owned partitions unset": (1, {"topic_partitions": None},
                                         "TopicPartitions must be empty when (re-)joining."),
    "join owning partitions": (1, {"topic_partitions": _STRAY_PARTITION},
                               "TopicPartitions must be empty when (re-)joining."),
    "join without a subscription": (1, {"subscribed_topic_names": None, "subscribed_topic_regex": None},
                                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                                    "when (re-)joining."),
    "static leave without an instance id": (1, {"member_epoch": -2}, "InstanceId can't be null."),
    "epoch below -2": (1, {"member_epoch": -3}, "MemberEpoch is invalid."),
}


@pytest.mark.parametrize("case", list(_INVALID))
def test_a_malformed_heartbeat_is_invalid_request_and_the_connection_stays_usable(
        broker: BrokerProcess, case: str) -> None:
    version, fields, message = _INVALID[case]
    with WireClient(broker.host, broker.port) as client:
        create_topics(client, orders=1)
        member = Member(client, "invalid", ["orders"])
        base = {"member_epoch": 0, "rebalance_timeout_ms": 30000, "subscribed_topic_names": ["orders"],
                "topic_partitions": []}

        refused = member.send(version, **{**base, **fields})
        assert_refused(refused, E.INVALID_REQUEST)
        assert refused.error_message == message
        assert describe(client, "invalid").error_code == E.GROUP_ID_NOT_FOUND, "nothing was created"

        joined = member.join()  # the same connection, still in step
        assert (joined.error_code, joined.member_epoch) == (0, 1)
