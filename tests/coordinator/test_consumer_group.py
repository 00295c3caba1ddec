"""KIP-848 consumer groups, sans-IO: joining, reconciling, leaving, fencing and every error path.

Clients are modelled as librdkafka behaves (``ConsumerClient``): they keep what they are
given, give up what they lose and say so on their next heartbeat, and rejoin at epoch 0 when
fenced. Ownership is checked from the clients' side after every step: no partition is ever
held by two of them.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from broker.coordinator.config import CoordinatorConfig
from broker.coordinator.modern.consumer.group import ConsumerGroupState
from broker.coordinator.modern.consumer.member import MemberState
from broker.coordinator.modern.topics import StaticImage
from protocol.errors import ErrorCode
from tests.coordinator.harness import ConsumerClient, Harness, consumer_group, topic_id

E = ErrorCode
T = topic_id("t")


def harness(partitions: dict[str, int] | None = None, **config: Any) -> Harness:
    settings: dict[str, Any] = {"consumer_session_timeout_ms": 10_000, "consumer_heartbeat_interval_ms": 1_000,
                                "consumer_assignment_interval_ms": 0}
    settings.update(config)
    h = Harness(CoordinatorConfig(**settings))
    h.coord.topics = StaticImage.of(partitions if partitions is not None else {"t": 6})
    return h


def client(h: Harness, name: str, topics: list[str] | None = None, **kw: Any) -> ConsumerClient:
    return ConsumerClient(h, "g", name, topics=["t"] if topics is None and "regex" not in kw else topics, **kw)


def settle(clients: list[ConsumerClient], rounds: int = 10) -> None:
    """Heartbeat everyone until nothing changes, checking single ownership after each heartbeat."""
    for _ in range(rounds):
        before = [(c.epoch, frozenset(c.owned)) for c in clients]
        for c in clients:
            c.heartbeat()
            assert_single_owners(clients)
        if [(c.epoch, frozenset(c.owned)) for c in clients] == before:
            return
    raise AssertionError("the group never settled")


def assert_single_owners(clients: list[ConsumerClient]) -> None:
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for c in clients:
        for tp in c.owned:
            assert tp not in seen, f"{tp} owned by both {seen[tp]} and {c.member_id}"
            seen[tp] = c.member_id


def counts(clients: list[ConsumerClient]) -> list[int]:
    return sorted(len(c.owned) for c in clients)


# ---------------------------------------------------------------------- joining and balance


def test_the_first_member_gets_every_partition_at_epoch_1() -> None:
    h = harness()
    a = client(h, "a")
    reply = a.heartbeat()
    assert reply["error_code"] == 0 and reply["member_id"] == "a"
    assert reply["member_epoch"] == 1
    assert reply["heartbeat_interval_ms"] == 1_000
    assert a.owned == {(T, p) for p in range(6)}
    g = consumer_group(h, "g")
    assert (g.group_epoch, g.assignment_epoch, g.state) == (1, 1, ConsumerGroupState.STABLE)


def test_members_share_partitions_incrementally_and_never_own_the_same_one() -> None:
    h = harness()
    a, b, c = client(h, "a"), client(h, "b"), client(h, "c")
    a.heartbeat()
    b.heartbeat()
    # b may not take a's partitions before a gave them up.
    assert b.owned == set()
    assert consumer_group(h, "g").members["b"].state is MemberState.UNRELEASED_PARTITIONS
    settle([a, b])
    assert counts([a, b]) == [3, 3]
    kept_by_a = set(a.owned)
    c.heartbeat()
    settle([a, b, c])
    assert counts([a, b, c]) == [2, 2, 2]
    assert a.owned <= kept_by_a, "a keeps part of what it had and gains nothing new"
    assert consumer_group(h, "g").state is ConsumerGroupState.STABLE


def test_a_member_that_keeps_a_partition_is_never_asked_to_revoke_it() -> None:
    h = harness()
    members = [client(h, name) for name in "abc"]
    for m in members:
        m.heartbeat()
    settle(members)
    before = {m.member_id: set(m.owned) for m in members}
    for m in members:
        m.revoked.clear()
    members[0].leave()
    settle(members[1:])
    assert counts(members[1:]) == [3, 3]
    for m in members[1:]:
        assert m.owned >= before[m.member_id]
        assert m.revoked == [], "a member that keeps its partitions loses none of them on the way"


def test_the_response_carries_the_assignment_only_when_it_changed_or_was_asked_for() -> None:
    h = harness()
    a = client(h, "a")
    assert a.heartbeat()["assignment"] is not None
    assert a.heartbeat()["assignment"] is None
    assert a.heartbeat(full=True)["assignment"] is not None


def test_unchanged_heartbeats_write_nothing() -> None:
    h = harness()
    a = client(h, "a")
    a.heartbeat()
    before = len(h.records)
    a.heartbeat()
    a.heartbeat()
    assert len(h.records) == before


def test_a_subscription_change_bumps_the_epoch_and_reassigns() -> None:
    h = harness({"t": 2, "u": 2})
    a = client(h, "a")
    a.heartbeat()
    assert {tp[0] for tp in a.owned} == {T}
    a.topics = ["t", "u"]
    a.heartbeat(full=True)
    a.heartbeat()
    assert consumer_group(h, "g").group_epoch == 2
    assert a.owned == {(T, 0), (T, 1), (topic_id("u"), 0), (topic_id("u"), 1)}


def test_new_partitions_of_a_subscribed_topic_are_picked_up() -> None:
    h = harness({"t": 2})
    a = client(h, "a")
    a.heartbeat()
    image = h.coord.topics
    assert isinstance(image, StaticImage)
    image.set_partitions("t", 4)
    a.heartbeat()
    assert a.owned == {(T, p) for p in range(4)}


def test_a_topic_that_does_not_exist_yet_is_assigned_once_created() -> None:
    h = harness({})
    a = client(h, "a", topics=["later"])
    a.heartbeat()
    assert a.owned == set()
    image = h.coord.topics
    assert isinstance(image, StaticImage)
    image.set_partitions("later", 3)
    a.heartbeat()
    assert a.owned == {(topic_id("later"), p) for p in range(3)}


def test_a_regex_subscription_picks_up_matching_topics_created_later() -> None:
    h = harness({"orders-eu": 2, "payments": 2})
    a = client(h, "a", regex="orders-.*")
    a.heartbeat()
    assert {tp[0] for tp in a.owned} == {topic_id("orders-eu")}
    image = h.coord.topics
    assert isinstance(image, StaticImage)
    image.set_partitions("orders-us", 1)
    a.heartbeat()
    assert {tp[0] for tp in a.owned} == {topic_id("orders-eu"), topic_id("orders-us")}
    assert consumer_group(h, "g").is_subscribed_to_topic("orders-us")
    assert not consumer_group(h, "g").is_subscribed_to_topic("payments")


def test_the_range_assignor_when_a_member_asks_for_it() -> None:
    h = harness()
    a, b = client(h, "a", assignor="range"), client(h, "b", assignor="range")
    a.heartbeat()
    b.heartbeat()
    settle([a, b])
    assert a.owned == {(T, p) for p in (0, 1, 2)} and b.owned == {(T, p) for p in (3, 4, 5)}


# ---------------------------------------------------------------------- leaving, timeouts


def test_leave_with_epoch_minus_one_hands_partitions_to_the_others() -> None:
    h = harness()
    a, b = client(h, "a"), client(h, "b")
    a.heartbeat()
    b.heartbeat()
    settle([a, b])
    reply = a.leave()
    assert (reply["error_code"], reply["member_epoch"]) == (0, -1)
    assert "a" not in consumer_group(h, "g").members
    settle([b])
    assert len(b.owned) == 6


def test_a_member_that_stops_heartbeating_is_fenced_after_its_session_timeout() -> None:
    h = harness()
    a, b = client(h, "a"), client(h, "b")
    a.heartbeat()
    b.heartbeat()
    settle([a, b])
    for _ in range(12):
        h.advance(1_000)
        b.heartbeat()
    assert "a" not in consumer_group(h, "g").members
    assert len(b.owned) == 6
    assert a.heartbeat()["error_code"] == E.UNKNOWN_MEMBER_ID


def test_a_member_that_does_not_revoke_in_time_is_fenced_by_its_rebalance_timeout() -> None:
    h = harness()
    a = client(h, "a", rebalance=5_000)
    a.heartbeat()
    b = client(h, "b")
    b.heartbeat()
    # a heartbeats but keeps reporting every partition: it never revokes.
    for _ in range(6):
        h.advance(1_000)
        h.cg_heartbeat("g", "a", a.epoch, owned=a.owned_wire())
        b.heartbeat()
    assert "a" not in consumer_group(h, "g").members
    settle([b])
    assert len(b.owned) == 6


def test_an_empty_group_remains_until_its_offsets_go() -> None:
    h = harness()
    a = client(h, "a")
    a.heartbeat()
    a.leave()
    g = consumer_group(h, "g")
    assert g.state is ConsumerGroupState.EMPTY
    assert h.list_groups(version=5) == [
        {"group_id": "g", "protocol_type": "consumer", "group_state": "Empty", "group_type": "consumer"}]
    h.apply(h.coord.expire_offsets(h.now))
    assert "g" not in h.coord.groups


# ---------------------------------------------------------------------- static members


def test_a_static_member_restarting_within_its_session_gets_its_partitions_back_and_no_one_moves() -> None:
    h = harness()
    a = client(h, "a1", instance="A")
    b = client(h, "b", instance="B")
    a.heartbeat()
    b.heartbeat()
    settle([a, b])
    held_a, held_b = set(a.owned), set(b.owned)
    epoch = consumer_group(h, "g").group_epoch
    reply = a.leave(static=True)
    assert reply["member_epoch"] == -2
    b.heartbeat()
    assert b.owned == held_b, "the others keep exactly what they had"
    restarted = client(h, "a2", instance="A")
    restarted.heartbeat()
    assert restarted.owned == held_a
    assert consumer_group(h, "g").group_epoch == epoch, "no rebalance"
    assert "a1" not in consumer_group(h, "g").members


def test_a_second_live_member_with_the_same_instance_id_is_refused_unreleased() -> None:
    h = harness()
    client(h, "a1", instance="A").heartbeat()
    reply = client(h, "a2", instance="A").heartbeat()
    assert reply["error_code"] == E.UNRELEASED_INSTANCE_ID


def test_the_old_incarnation_of_a_replaced_static_member_is_fenced_by_instance_id() -> None:
    h = harness()
    old = client(h, "a1", instance="A")
    old.heartbeat()
    old.leave(static=True)
    client(h, "a2", instance="A").heartbeat()
    reply = h.cg_heartbeat("g", "a1", 1, instance="A", owned=[])
    assert reply["error_code"] == E.FENCED_INSTANCE_ID


def test_a_static_member_gone_past_its_session_is_fenced_and_its_partitions_move() -> None:
    h = harness()
    a, b = client(h, "a1", instance="A"), client(h, "b")
    a.heartbeat()
    b.heartbeat()
    settle([a, b])
    a.leave(static=True)
    for _ in range(12):
        h.advance(1_000)
        b.heartbeat()
    assert len(b.owned) == 6


# ---------------------------------------------------------------------- error paths


def test_a_greater_epoch_is_fenced() -> None:
    h = harness()
    a = client(h, "a")
    a.heartbeat()
    assert h.cg_heartbeat("g", "a", 9, owned=[])["error_code"] == E.FENCED_MEMBER_EPOCH


def test_a_smaller_epoch_is_fenced_unless_it_is_the_previous_one_and_owns_a_subset() -> None:
    h = harness()
    a = client(h, "a")
    a.heartbeat()
    b = client(h, "b")
    b.heartbeat()
    settle([a, b])
    g = consumer_group(h, "g")
    member = g.members["a"]
    # The previous epoch with a subset of the assignment: a response that got lost.
    lost = h.cg_heartbeat("g", "a", member.previous_member_epoch, owned=a.owned_wire())
    assert lost["error_code"] == 0
    stale = h.cg_heartbeat("g", "a", member.previous_member_epoch,
                           owned=[{"topic_id": T, "partitions": list(range(6))}])
    assert stale["error_code"] == E.FENCED_MEMBER_EPOCH


def test_unknown_member_and_unknown_group() -> None:
    h = harness()
    assert h.cg_heartbeat("nosuch", "m", 3, owned=[])["error_code"] == E.GROUP_ID_NOT_FOUND
    client(h, "a").heartbeat()
    assert h.cg_heartbeat("g", "zz", 1, owned=[])["error_code"] == E.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize(("fields", "message"), [
    ({"member_id": ""}, "MemberId can't be empty."),
    ({"group_id": "  "}, "GroupId can't be empty."),
    ({"rebalance": -1}, "RebalanceTimeoutMs must be provided in first request."),
    ({"owned": None}, "TopicPartitions must be empty when (re-)joining."),
    ({"owned": [{"topic_id": T, "partitions": [0]}]}, "TopicPartitions must be empty when (re-)joining."),
    ({"topics": None}, "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    ({"epoch": -3}, "MemberEpoch is invalid."),
    ({"instance": " "}, "InstanceId can't be empty."),
])
def test_invalid_requests(fields: dict[str, Any], message: str) -> None:
    h = harness()
    request: dict[str, Any] = {"group_id": "g", "member_id": "m", "epoch": 0, "rebalance": 30_000,
                               "topics": ["t"], "owned": []}
    request.update(fields)
    reply = h.cg_heartbeat(request.pop("group_id"), request.pop("member_id"), request.pop("epoch"), **request)
    assert (reply["error_code"], reply["error_message"]) == (E.INVALID_REQUEST, message)
    assert h.records == []


def test_a_static_leave_needs_an_instance_id() -> None:
    h = harness()
    client(h, "a").heartbeat()
    reply = h.cg_heartbeat("g", "a", -2)
    assert (reply["error_code"], reply["error_message"]) == (E.INVALID_REQUEST, "InstanceId can't be null.")


def test_an_unknown_assignor_is_refused_with_the_supported_ones() -> None:
    h = harness()
    reply = h.cg_heartbeat("g", "a", 0, rebalance=30_000, topics=["t"], owned=[], assignor="sticky")
    assert reply["error_code"] == E.UNSUPPORTED_ASSIGNOR
    assert "uniform, range" in reply["error_message"]


def test_an_invalid_regex_is_refused() -> None:
    h = harness()
    reply = h.cg_heartbeat("g", "a", 0, rebalance=30_000, regex="orders-(", owned=[])
    assert reply["error_code"] == E.INVALID_REGULAR_EXPRESSION


def test_the_group_max_size_turns_away_new_members_only() -> None:
    h = harness(consumer_max_size=2)
    a, b = client(h, "a"), client(h, "b")
    a.heartbeat()
    b.heartbeat()
    assert client(h, "c").heartbeat()["error_code"] == E.GROUP_MAX_SIZE_REACHED
    assert a.heartbeat()["error_code"] == 0


def test_v0_lets_the_coordinator_choose_the_member_id() -> None:
    h = harness()
    reply = h.cg_heartbeat("g", "", 0, rebalance=30_000, topics=["t"], owned=[], version=0)
    assert reply["error_code"] == 0
    uuid.UUID(reply["member_id"])
    v1 = h.cg_heartbeat("g", "", 0, rebalance=30_000, topics=["t"], owned=[], version=1)
    assert (v1["error_code"], v1["error_message"]) == (E.INVALID_REQUEST, "MemberId can't be empty.")


# ---------------------------------------------------------------------- offsets with member epochs


def commit(h: Harness, member: str, epoch: int, version: int = 9) -> ErrorCode:
    result = h.commit("g", {("t", 0): 5}, member_id=member, generation=epoch, version=version)
    return result[("t", 0)]


def test_commits_are_checked_against_the_member_epoch() -> None:
    h = harness()
    a = client(h, "a")
    a.heartbeat()
    assert commit(h, "a", a.epoch) == E.NONE
    assert commit(h, "a", a.epoch - 1) == E.STALE_MEMBER_EPOCH
    assert commit(h, "zz", a.epoch) == E.UNKNOWN_MEMBER_ID


def test_a_consumer_protocol_member_must_commit_with_version_9() -> None:
    h = harness()
    a = client(h, "a")
    a.heartbeat()
    assert commit(h, "a", a.epoch, version=8) == E.UNSUPPORTED_VERSION


def test_an_admin_commit_to_a_group_with_members_is_refused_and_to_an_empty_one_accepted() -> None:
    h = harness()
    a = client(h, "a")
    a.heartbeat()
    assert commit(h, "", -1) == E.UNKNOWN_MEMBER_ID
    a.leave()
    assert commit(h, "", -1) == E.NONE


def test_commit_v9_to_an_unknown_group_with_an_epoch_is_group_id_not_found() -> None:
    h = harness()
    assert h.commit("none", {("t", 0): 1}, member_id="m", generation=3, version=9)[("t", 0)] \
        == E.GROUP_ID_NOT_FOUND
    assert h.commit("none", {("t", 0): 1}, member_id="m", generation=3, version=8)[("t", 0)] \
        == E.ILLEGAL_GENERATION


def test_offset_fetch_v9_checks_member_and_epoch() -> None:
    h = harness()
    a = client(h, "a")
    a.heartbeat()
    commit(h, "a", a.epoch)

    def fetch(member: str | None, epoch: int) -> dict[str, Any]:
        reply = h.fetch_raw({"groups": [{"group_id": "g", "member_id": member, "member_epoch": epoch,
                                         "topics": [{"name": "t", "partition_indexes": [0]}]}],
                             "require_stable": False}, 9)
        return dict(reply["groups"][0])

    assert fetch("a", a.epoch)["topics"][0]["partitions"][0]["committed_offset"] == 5
    assert fetch("a", a.epoch + 1)["error_code"] == E.STALE_MEMBER_EPOCH
    assert fetch("nobody", a.epoch)["error_code"] == E.UNKNOWN_MEMBER_ID
    assert fetch(None, -1)["error_code"] == 0


# ---------------------------------------------------------------------- admin APIs on consumer groups


def test_list_groups_v5_reports_and_filters_by_type() -> None:
    h = harness()
    client(h, "a").heartbeat()
    h.commit("simple", {("t", 0): 1})
    listed = {g["group_id"]: g for g in h.list_groups(version=5)}
    assert listed["g"]["group_type"] == "consumer" and listed["g"]["group_state"] == "Stable"
    assert listed["simple"]["group_type"] == "classic"
    from protocol.messages import ListGroupsRequest

    reply = h.request_now(ListGroupsRequest, 5, {"states_filter": [], "types_filter": ["consumer"]})
    assert [g["group_id"] for g in reply["groups"]] == ["g"]
    reply = h.request_now(ListGroupsRequest, 5, {"states_filter": ["stable"], "types_filter": []})
    assert [g["group_id"] for g in reply["groups"]] == ["g"]


def test_describe_groups_answers_dead_for_a_consumer_group_as_kafka_does() -> None:
    h = harness()
    client(h, "a").heartbeat()
    assert h.describe("g")[0]["group_state"] == "Dead"


def test_consumer_group_describe() -> None:
    h = harness()
    a, b = client(h, "a"), client(h, "b")
    a.heartbeat()
    b.heartbeat()
    from protocol.messages import ConsumerGroupDescribeRequest

    reply = h.request_now(ConsumerGroupDescribeRequest, 0, {"group_ids": ["g", "nosuch"],
                                                            "include_authorized_operations": False})
    g, missing = reply["groups"]
    assert (g["group_state"], g["group_epoch"], g["assignment_epoch"], g["assignor_name"]) == (
        "Reconciling", 2, 2, "uniform")
    members = {m["member_id"]: m for m in g["members"]}
    assert members["b"]["assignment"]["topic_partitions"] == []
    target = members["b"]["target_assignment"]["topic_partitions"]
    assert target[0]["topic_name"] == "t" and len(target[0]["partitions"]) == 3
    assert missing["error_code"] == E.GROUP_ID_NOT_FOUND


def test_delete_groups_refuses_a_consumer_group_with_members_and_deletes_an_empty_one() -> None:
    h = harness()
    a = client(h, "a")
    a.heartbeat()
    commit(h, "a", a.epoch)
    assert h.delete_groups("g") == {"g": E.NON_EMPTY_GROUP}
    a.leave()
    assert h.delete_groups("g") == {"g": E.NONE}
    assert "g" not in h.coord.groups
    assert not h.coord.offsets.has_group("g")
    assert h.replayed().coord.groups.get("g") is None


def test_offset_delete_refuses_subscribed_topics_of_a_consumer_group() -> None:
    h = harness({"t": 6, "u": 1})
    a = client(h, "a")
    a.heartbeat()
    h.commit("g", {("u", 0): 1}, member_id="a", generation=a.epoch, version=9)
    commit(h, "a", a.epoch)
    from protocol.messages import OffsetDeleteRequest

    reply = h.request_now(OffsetDeleteRequest, 0, {"group_id": "g", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0}]},
        {"name": "u", "partitions": [{"partition_index": 0}]}]})
    codes = {t["name"]: t["partitions"][0]["error_code"] for t in reply["topics"]}
    assert codes == {"t": E.GROUP_SUBSCRIBED_TO_TOPIC, "u": E.NONE}


# ---------------------------------------------------------------------- durability


def test_a_restart_replays_the_group_exactly_and_members_carry_on() -> None:
    h = harness()
    a, b, c = client(h, "a"), client(h, "b"), client(h, "c")
    for m in (a, b):
        m.heartbeat()
    settle([a, b])
    c.heartbeat()  # mid-reconciliation
    a.heartbeat()
    restarted = h.replayed()
    restarted.coord.topics = h.coord.topics
    live, loaded = consumer_group(h, "g"), consumer_group(restarted, "g")
    assert loaded.members == live.members
    assert loaded.target_assignment == live.target_assignment
    assert (loaded.group_epoch, loaded.assignment_epoch, loaded.subscription_metadata) == (
        live.group_epoch, live.assignment_epoch, live.subscription_metadata)
    assert loaded.partition_epochs == live.partition_epochs
    for m in (a, b, c):
        m.h = restarted
    settle([a, b, c])
    assert counts([a, b, c]) == [2, 2, 2]
