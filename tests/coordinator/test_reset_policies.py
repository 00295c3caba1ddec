"""Offset reset policies decided on the broker (docs/coordinator-rules.md#offset-reset-policies).

``kcoord.offset.out.of.range=nearest`` moves a group's committed offset that falls out of its
log back into it; ``kcoord.initial.offset=earliest|latest`` commits where a group starts on a
partition it has no offset for, in the same effects as the reply that assigns it (so the
shell releases that reply only once the commit is durable). Each is an ordinary offset
commit record whose metadata names the policy.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from broker.coordinator import CoordinatorConfig, GroupCoordinatorShard
from broker.coordinator.group_configs import (
    GroupConfigError,
    GroupConfigs,
    decode_record,
    encode_record,
)
from broker.coordinator.modern.topics import StaticImage
from broker.coordinator.records import OffsetCommitRecord
from broker.coordinator.reset_policies import policy_of
from protocol.consumer_offsets import OffsetKey
from protocol.consumer_protocol import encode_assignment, encode_subscription
from tests.coordinator.harness import ConsumerClient, Harness, S


class Logs:
    """The log bounds a test decides: (start, end) per partition."""

    def __init__(self, bounds: dict[tuple[str, int], tuple[int, int]]) -> None:
        self.bounds = dict(bounds)

    def log_bounds(self, topic: str, partition: int) -> tuple[int, int] | None:
        return self.bounds.get((topic, partition))


def harness(bounds: dict[tuple[str, int], tuple[int, int]] | None = None, **config: Any) -> tuple[Harness, Logs]:
    settings: dict[str, Any] = {"consumer_session_timeout_ms": 45_000, "consumer_heartbeat_interval_ms": 5_000,
                                "consumer_assignment_interval_ms": 0, "initial_rebalance_delay_ms": 0}
    settings.update(config)
    h = Harness(CoordinatorConfig(**settings))
    logs = Logs(bounds or {("t", p): (0, 100) for p in range(3)})
    h.coord.log_bounds = logs
    return h, logs


def set_configs(h: Harness, group: str, **configs: str) -> None:
    """What the shell does for an IncrementalAlterConfigs on a GROUP resource."""
    names = {k.replace("_", "."): v for k, v in configs.items()}
    h.coord.replay_group_config(group, h.coord.group_configs.validated(group, names))
    h.apply(h.coord.on_group_config_changed(group, h.now))


NEAREST = {"kcoord.offset.out.of.range": "nearest"}


def offset_records(h: Harness, since: int) -> list[tuple[OffsetKey, Any]]:
    return [(k, v) for k, v in h.decoded_records(since) if isinstance(k, OffsetKey)]


def committed(h: Harness, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    return {tp: (v.offset, v.metadata) for tp, v in h.coord.offsets.items_of(group)}


def nearest_group(h: Harness, group: str) -> None:
    h.coord.replay_group_config(group, h.coord.group_configs.validated(group, NEAREST))


# ---------------------------------------------------------------------- nearest: the log start moves


def test_a_log_start_moving_past_a_nearest_groups_offset_commits_the_new_start() -> None:
    h, _ = harness()
    nearest_group(h, "behind")
    nearest_group(h, "ahead")
    h.commit("behind", {("t", 0): 10, ("t", 1): 10})
    h.commit("ahead", {("t", 0): 60})
    h.commit("plain", {("t", 0): 10})  # no policy: left to its clients, as on Kafka

    since = len(h.records)
    fx = h.apply(h.coord.before_log_start_moves("t", 0, 50, h.now))

    assert list(fx.records) == ["behind"]  # one batch, for the one group whose offset falls out
    (key, value), = offset_records(h, since)
    assert key == OffsetKey("behind", "t", 0)
    assert (value.offset, value.metadata, value.leader_epoch) == (50, "kcoord:nearest", -1)
    assert committed(h, "behind") == {("t", 0): (50, "kcoord:nearest"), ("t", 1): (10, "")}
    assert committed(h, "ahead") == {("t", 0): (60, "")}
    assert committed(h, "plain") == {("t", 0): (10, "")}


def test_an_offset_at_the_new_start_is_left_alone() -> None:
    h, _ = harness()
    nearest_group(h, "g")
    h.commit("g", {("t", 0): 50})
    assert h.apply(h.coord.before_log_start_moves("t", 0, 50, h.now)).records == {}


def test_the_broker_default_applies_to_groups_without_their_own_config() -> None:
    h, _ = harness(offset_out_of_range="nearest")
    h.commit("g", {("t", 0): 3})
    set_configs(h, "opted-out", kcoord_offset_out_of_range="none")
    h.commit("opted-out", {("t", 0): 3})
    h.apply(h.coord.before_log_start_moves("t", 0, 7, h.now))
    assert committed(h, "g") == {("t", 0): (7, "kcoord:nearest")}
    assert committed(h, "opted-out") == {("t", 0): (3, "")}


def test_the_policy_commit_is_what_offset_fetch_answers() -> None:
    h, _ = harness()
    nearest_group(h, "g")
    h.commit("g", {("t", 0): 3})
    h.apply(h.coord.before_log_start_moves("t", 0, 40, h.now))
    (topic,) = h.fetch("g", {"t": [0]})["topics"]
    assert [(p["committed_offset"], p["metadata"]) for p in topic["partitions"]] == [(40, "kcoord:nearest")]


# ---------------------------------------------------------------------- nearest: commits out of the log


@pytest.mark.parametrize(("offset", "moved_to"), [(500, 100), (2, 20), (20, None), (100, None), (57, None)])
def test_a_commit_outside_the_log_is_followed_by_the_nearest_bound(offset: int, moved_to: int | None) -> None:
    h, _ = harness({("t", 0): (20, 100)})
    nearest_group(h, "g")
    since = len(h.records)
    assert h.commit("g", {("t", 0): offset}) == {("t", 0): 0}
    written = [(v.offset, v.metadata) for _, v in offset_records(h, since)]
    if moved_to is None:
        assert written == [(offset, "")]
    else:
        # The client's commit, then the policy's, in the batch the reply waits for.
        assert written == [(offset, ""), (moved_to, "kcoord:nearest")]
    assert committed(h, "g")[("t", 0)][0] == (offset if moved_to is None else moved_to)


def test_commits_of_groups_without_nearest_are_kept_as_given() -> None:
    h, _ = harness({("t", 0): (20, 100)})
    h.commit("g", {("t", 0): 500})
    assert committed(h, "g") == {("t", 0): (500, "")}


def test_unknown_partitions_are_not_touched() -> None:
    h, _ = harness({("t", 0): (20, 100)}, require_known_topic=False)
    nearest_group(h, "g")
    h.commit("g", {("other", 0): 5})
    assert committed(h, "g") == {("other", 0): (5, "")}


def test_setting_nearest_moves_offsets_already_out_of_the_log_at_once() -> None:
    h, logs = harness()
    h.commit("g", {("t", 0): 5, ("t", 1): 500, ("t", 2): 50})
    logs.bounds[("t", 0)] = (30, 100)
    set_configs(h, "g", kcoord_offset_out_of_range="nearest")
    assert committed(h, "g") == {("t", 0): (30, "kcoord:nearest"), ("t", 1): (100, "kcoord:nearest"),
                                 ("t", 2): (50, "")}


def test_the_start_up_sweep_catches_truncated_logs_and_missed_moves() -> None:
    h, logs = harness(offset_out_of_range="nearest")
    h.commit("g", {("t", 0): 80, ("t", 1): 5})
    # A restart: recovery cut t-0 back to 60, and t-1's start moved to 10 but its commit was lost.
    logs.bounds[("t", 0)] = (0, 60)
    logs.bounds[("t", 1)] = (10, 100)
    after = h.replayed()
    after.coord.log_bounds = logs
    after.apply(after.coord.enforce_offset_policies(after.now))
    assert committed(after, "g") == {("t", 0): (60, "kcoord:nearest"), ("t", 1): (10, "kcoord:nearest")}


# ---------------------------------------------------------------------- initial offsets: classic groups


def _sub(*topics: str) -> bytes:
    return encode_subscription({"topics": list(topics), "user_data": None}, version=0)


def _assign(*partitions: tuple[str, int]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    return encode_assignment({"assigned_partitions": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
                              "user_data": None}, version=0)


def _classic_group(h: Harness, group: str, assignment: dict[int, list[tuple[str, int]]]) -> tuple[list[str], int]:
    """Members join; the leader syncs ``assignment`` (by member index); returns (members, sync ticket)."""
    members = [h.new_member(group, client_id=f"c{i}", protocols=[("range", _sub("t"))])[0]
               for i in range(len(assignment))]
    h.run_join_phase(group)
    generation = h.generation(group)
    leader = h.group(group).leader
    assert leader is not None
    for m in members:
        if m != leader:
            h.sync(group, m, generation)
    ticket = h.sync(group, leader, generation, assignments={
        m: _assign(*assignment[i]) for i, m in enumerate(members)})
    assert h.state(group) is S.STABLE
    return members, ticket


@pytest.mark.parametrize(("policy", "offset"), [("earliest", 20), ("latest", 90)])
def test_the_leaders_sync_commits_where_the_group_starts_before_any_member_hears_its_assignment(
        policy: str, offset: int) -> None:
    h, _ = harness({("t", 0): (20, 90), ("t", 1): (20, 90), ("t", 2): (20, 90)})
    set_configs(h, "g", kcoord_initial_offset=policy)
    h.commit("g", {("t", 2): 33})  # already has an offset: never overwritten
    _, ticket = _classic_group(h, "g", {0: [("t", 0), ("t", 1)], 1: [("t", 2)]})
    fx = h.last
    # The commits are in the effects that carry the SyncGroup replies: the shell releases
    # those replies only once the commits are durable.
    assert fx.reply_for(ticket) is not None
    assert [(r.topic, r.partition, r.value.offset if r.value else None, r.value.metadata if r.value else None)
            for r in fx.records["g"] if isinstance(r, OffsetCommitRecord)] == [
        ("t", 0, offset, f"kcoord:{policy}_on_start"), ("t", 1, offset, f"kcoord:{policy}_on_start")]
    assert committed(h, "g")[("t", 2)] == (33, "")


def test_without_an_initial_policy_nothing_is_committed() -> None:
    h, _ = harness()
    _classic_group(h, "g", {0: [("t", 0)]})
    assert committed(h, "g") == {}


def test_the_initial_policy_applies_to_partitions_assigned_later_too() -> None:
    h, logs = harness(initial_offset="latest")
    members, _ = _classic_group(h, "g", {0: [("t", 0)]})
    assert committed(h, "g") == {("t", 0): (100, "kcoord:latest_on_start")}
    h.commit("g", {("t", 0): 100}, member_id=members[0], generation=h.generation("g"))
    logs.bounds[("t", 0)] = (0, 150)
    # A rebalance that assigns t-1 as well: only t-1 (no offset) gets one.
    h.new_member("g", client_id="c1", protocols=[("range", _sub("t"))])
    h.join("g", members[0], protocols=[("range", _sub("t"))])
    h.run_join_phase("g")
    generation = h.generation("g")
    leader = h.group("g").leader
    assert leader is not None
    others = [m for m in h.group("g").members if m != leader]
    for m in others:
        h.sync("g", m, generation)
    h.sync("g", leader, generation, assignments={leader: _assign(("t", 0)), others[0]: _assign(("t", 1))})
    assert committed(h, "g") == {("t", 0): (100, ""), ("t", 1): (100, "kcoord:latest_on_start")}


def test_groups_of_other_protocol_types_and_unreadable_assignments_are_left_alone() -> None:
    h, _ = harness(initial_offset="earliest")
    m, _ = h.new_member("connect", protocol_type="connect")
    h.run_join_phase("connect")
    h.sync("connect", m, h.generation("connect"), protocol_type="connect", assignments={m: _assign(("t", 0))})
    m2, _ = h.new_member("garbled", protocols=[("range", _sub("t"))])
    h.run_join_phase("garbled")
    h.sync("garbled", m2, h.generation("garbled"), assignments={m2: b"\x00"})
    assert committed(h, "connect") == {} and committed(h, "garbled") == {}


# ---------------------------------------------------------------------- initial offsets: consumer groups


def _consumer_harness(**config: Any) -> tuple[Harness, Logs]:
    h, logs = harness({("t", p): (5, 70) for p in range(3)}, **config)
    h.coord.topics = StaticImage.of({"t": 3})
    return h, logs


def test_a_consumer_group_heartbeat_assigning_partitions_commits_their_start_first() -> None:
    h, _ = _consumer_harness()
    set_configs(h, "g", kcoord_initial_offset="earliest")
    a = ConsumerClient(h, "g", "a", topics=["t"])
    reply = a.heartbeat()
    assert reply["assignment"] is not None and len(a.owned) == 3
    # In the effects of the very heartbeat whose reply carries the assignment.
    assert sorted((r.partition, r.value.offset if r.value else None) for r in h.last.records["g"]
                  if isinstance(r, OffsetCommitRecord)) == [(0, 5), (1, 5), (2, 5)]
    assert committed(h, "g") == {("t", p): (5, "kcoord:earliest_on_start") for p in range(3)}


def test_a_deferred_target_assignment_commits_on_its_timer() -> None:
    h, _ = _consumer_harness(consumer_assignment_interval_ms=1_000, initial_offset="latest")
    a = ConsumerClient(h, "g", "a", topics=["t"])
    a.heartbeat()
    assert committed(h, "g") == {("t", p): (70, "kcoord:latest_on_start") for p in range(3)}
    b = ConsumerClient(h, "g", "b", topics=["t"])
    b.heartbeat()  # the next target waits for the interval
    h.advance(1_000)  # computed by the timer: nothing new to commit, every partition has an offset
    assert all(metadata == "kcoord:latest_on_start" for _, metadata in committed(h, "g").values())


def test_latest_on_start_and_the_expansion_guard_are_safe_latest() -> None:
    """A group starts at the end, but partitions added while it consumes start at their beginning."""
    h, logs = _consumer_harness(initial_offset="latest")
    image = StaticImage.of({"t": 3})
    h.coord.topics = image
    a = ConsumerClient(h, "g", "a", topics=["t"])
    a.heartbeat()
    assert {p: v for (_, p), v in committed(h, "g").items()} == {p: (70, "kcoord:latest_on_start") for p in range(3)}
    image.set_partitions("t", 4)
    logs.bounds[("t", 3)] = (0, 0)
    h.apply(h.coord.on_partitions_added("t", {3: 0}, h.now))
    logs.bounds[("t", 3)] = (0, 8)  # producers wrote there before the group's next heartbeat
    a.heartbeat()
    assert len(a.owned) == 4
    assert committed(h, "g")[("t", 3)] == (0, "kcoord:new_partitions")


# ---------------------------------------------------------------------- Kafka's own group configs


def test_a_groups_heartbeat_interval_and_session_timeout_apply_from_its_next_heartbeat() -> None:
    h, _ = _consumer_harness()
    a = ConsumerClient(h, "g", "a", topics=["t"])
    assert a.heartbeat()["heartbeat_interval_ms"] == 5_000
    set_configs(h, "g", consumer_heartbeat_interval_ms="7000", consumer_session_timeout_ms="50000")
    assert a.heartbeat()["heartbeat_interval_ms"] == 7_000
    h.advance(49_000)
    assert "a" in h.coord.groups["g"].members
    h.advance(1_000)
    assert "a" not in h.coord.groups["g"].members  # fenced at the group's own session timeout


def test_other_groups_keep_the_broker_values() -> None:
    h, _ = _consumer_harness()
    set_configs(h, "g", consumer_heartbeat_interval_ms="7000")
    assert ConsumerClient(h, "other", "b", topics=["t"]).heartbeat()["heartbeat_interval_ms"] == 5_000


# ---------------------------------------------------------------------- validation and records


@pytest.mark.parametrize(("change", "message"), [
    ({"group.id": "x"}, "Unknown group config name: group.id"),
    ({"kcoord.offset.out.of.range": "latest"}, "String must be one of: nearest, none"),
    ({"kcoord.initial.offset": "safe"}, "String must be one of: earliest, latest, none"),
    ({"consumer.session.timeout.ms": "ten"}, "Not a number of type INT"),
    ({"consumer.session.timeout.ms": "0"}, "Value must be at least 1"),
    ({"consumer.session.timeout.ms": "44999"},
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ({"consumer.session.timeout.ms": "60001"},
     "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"),
    ({"consumer.heartbeat.interval.ms": "4999"},
     "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms"),
    ({"consumer.heartbeat.interval.ms": "15001"},
     "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
])
def test_invalid_group_configs_are_refused_with_kafkas_message(change: dict[str, str], message: str) -> None:
    with pytest.raises(GroupConfigError, match=re.escape(message)):
        GroupConfigs(CoordinatorConfig()).validated("g", change)


def test_the_session_timeout_must_exceed_the_heartbeat_interval() -> None:
    configs = GroupConfigs(CoordinatorConfig(consumer_min_session_timeout_ms=1_000,
                                             consumer_min_heartbeat_interval_ms=1_000))
    with pytest.raises(GroupConfigError, match=re.escape("must be greater than consumer.heartbeat.interval.ms")):
        configs.validated("g", {"consumer.session.timeout.ms": "5000"})
    assert configs.validated("g", {"consumer.session.timeout.ms": " 5001 "}) == {"consumer.session.timeout.ms": "5001"}


def test_group_config_records_round_trip_and_replay_to_the_same_values() -> None:
    configs = {"kcoord.initial.offset": "latest", "consumer.session.timeout.ms": "50000"}
    assert decode_record(*encode_record("g", configs)) == ("g", configs)
    assert decode_record(*encode_record("g", {})) == ("g", None)
    shard = GroupCoordinatorShard(CoordinatorConfig())
    shard.replay_group_config(*decode_record(*encode_record("g", configs)))
    assert shard.group_configs.initial_offset("g") == "latest"
    assert shard.group_configs.session_timeout_ms("g") == 50_000
    assert shard.group_configs.initial_offset("other") == "none"
    shard.replay_group_config("g", None)
    assert shard.group_configs.overrides == {} and not shard.group_configs.any_initial_policy


def test_policy_commits_replay_to_the_same_state() -> None:
    h, _ = harness(offset_out_of_range="nearest", initial_offset="earliest")
    _classic_group(h, "g", {0: [("t", 0), ("t", 1)]})
    h.commit("other", {("t", 0): 1})
    h.apply(h.coord.before_log_start_moves("t", 0, 9, h.now))
    assert h.replayed().coord.offsets.snapshot() == h.coord.offsets.snapshot()


def test_policy_of_names_the_policy_of_a_broker_commit_only() -> None:
    assert policy_of("kcoord:nearest") == "nearest"
    assert policy_of("kcoord:latest_on_start") == "latest_on_start"
    assert policy_of("") is None and policy_of(None) is None and policy_of("app v3") is None
