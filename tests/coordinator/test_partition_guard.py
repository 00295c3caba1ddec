"""Partition expansion: groups consuming a grown topic get the new partitions' start offsets.

``partitions_added(topic, {new partition: log start offset}, now)`` is what the shell calls
when CreatePartitions grows a topic. With ``group.new.partitions.start=earliest`` every
group whose live members subscribe to the topic gets ordinary offset commit records for
the new partitions (never over an offset already committed); with ``latest`` nothing is
written and the client's own reset policy applies, as on Kafka.
"""

from __future__ import annotations

from typing import Any

import pytest

from broker.config import Config, ConfigError
from broker.coordinator import CoordinatorConfig
from protocol.consumer_offsets import OffsetKey, OffsetValue
from protocol.consumer_protocol import encode_subscription
from tests.coordinator.harness import Harness, S


def _sub(*topics: str, version: int = 0) -> bytes:
    fields: dict[str, Any] = {"topics": list(topics), "user_data": None}
    if version >= 1:
        fields.update(owned_partitions=[], generation_id=-1, rack_id=None)
    return encode_subscription(fields, version=version)


def _grow(h: Harness, topic: str, new_partitions: dict[int, int]) -> list[tuple[Any, Any]]:
    """Call the coordinator as the shell does; returns the records it wrote, decoded."""
    since = len(h.records)
    h.apply(h.coord.on_partitions_added(topic, new_partitions, h.now))
    return h.decoded_records(since)


def _committed(h: Harness, group: str, topic: str) -> dict[int, int]:
    return {p: v.offset for (t, p), v in h.coord.offsets.items_of(group) if t == topic}


def _fetched(h: Harness, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
    (fetched,) = h.fetch(group, {topic: partitions})["topics"]
    return {p["partition_index"]: p["committed_offset"] for p in fetched["partitions"]}


def test_subscribed_stable_group_gets_commits_for_exactly_the_new_partitions() -> None:
    h = Harness()
    h.consumer_group("app", [_sub("orders"), _sub("orders")])
    h.commit("app", {("orders", 0): 17}, member_id=h.group("app").leader or "", generation=h.generation("app"))

    written = _grow(h, "orders", {1: 0, 2: 0, 3: 0})

    assert written == [
        (OffsetKey("app", "orders", p), OffsetValue(offset=0, leader_epoch=-1, metadata="kcoord:new_partitions",
                                                    commit_timestamp=h.now, expire_timestamp=-1))
        for p in (1, 2, 3)
    ]
    assert list(h.last.records) == ["app"]  # one batch for the group
    assert _committed(h, "app", "orders") == {0: 17, 1: 0, 2: 0, 3: 0}
    assert _fetched(h, "app", "orders", [0, 1, 2, 3, 4]) == {0: 17, 1: 0, 2: 0, 3: 0, 4: -1}
    assert h.state("app") is S.STABLE  # no rebalance: membership is the clients' business


def test_the_start_offset_given_is_the_one_committed() -> None:
    h = Harness()
    h.consumer_group("app", [_sub("orders")])
    _grow(h, "orders", {4: 12, 5: 0})
    assert _committed(h, "app", "orders") == {4: 12, 5: 0}


def test_groups_that_do_not_consume_the_topic_get_nothing() -> None:
    h = Harness()
    h.consumer_group("other-topic", [_sub("payments")])
    h.consumer_group("connect", [_sub("orders")], protocol_type="connect")
    h.consumer_group("unreadable", [b"\x00"])
    h.commit("simple", {("orders", 0): 5})  # offsets only, no members
    h.consumer_group("left", [_sub("orders")])
    (member,) = h.group("left").members
    h.leave("left", member)
    assert h.state("left") is S.EMPTY

    assert _grow(h, "orders", {1: 0}) == []
    assert h.last.records == {}
    assert _committed(h, "simple", "orders") == {0: 5}
    for group in ("other-topic", "connect", "unreadable", "left"):
        assert _committed(h, group, "orders") == {}, group


def test_one_subscribed_member_is_enough() -> None:
    h = Harness()
    h.consumer_group("app", [_sub("payments"), _sub("payments", "orders", version=3)])
    _grow(h, "orders", {1: 0})
    assert _committed(h, "app", "orders") == {1: 0}
    assert _committed(h, "app", "payments") == {}


def test_offsets_already_committed_are_not_overwritten() -> None:
    h = Harness()
    members = h.consumer_group("app", [_sub("orders")])
    generation = h.generation("app")
    # A member that already saw partition 2 (e.g. the metadata reached it first) committed it.
    h.commit("app", {("orders", 2): 40}, member_id=members[0], generation=generation)

    written = _grow(h, "orders", {1: 0, 2: 0})

    assert [k for k, _ in written] == [OffsetKey("app", "orders", 1)]
    assert _committed(h, "app", "orders") == {1: 0, 2: 40}
    # A second notice for the same partitions (nothing new to commit) writes nothing.
    assert _grow(h, "orders", {1: 0, 2: 0}) == []


@pytest.mark.parametrize("version", [0, 1, 3])
def test_groups_mid_rebalance_are_covered(version: int) -> None:
    h = Harness()
    # Generation 0, still in the initial delayed join: no protocol selected yet.
    h.new_member("joining", protocols=[("range", _sub("orders", version=version)), ("roundrobin", _sub("orders"))])
    assert h.state("joining") is S.PREPARING_REBALANCE and h.group("joining").protocol is None
    # Joined, waiting for the leader's assignment.
    h.new_member("syncing", protocols=[("range", _sub("orders", version=version))])
    h.run_join_phase("syncing")
    assert h.state("syncing") is S.COMPLETING_REBALANCE

    _grow(h, "orders", {1: 0})

    assert _committed(h, "joining", "orders") == {1: 0}
    assert _committed(h, "syncing", "orders") == {1: 0}


def test_static_member_that_is_away_still_counts() -> None:
    h = Harness()
    h.stable_group("static", 1, instances=["i-1"], protocols=[("range", _sub("orders"))])
    # The instance went away without leaving; until its session times out it is a member.
    _grow(h, "orders", {1: 0})
    assert _committed(h, "static", "orders") == {1: 0}


def test_latest_commits_nothing() -> None:
    h = Harness.with_config(new_partitions_start="latest")
    h.consumer_group("app", [_sub("orders")])
    assert _grow(h, "orders", {1: 0, 2: 0}) == []
    assert h.last.records == {}
    assert _fetched(h, "app", "orders", [1, 2]) == {1: -1, 2: -1}


def test_earliest_is_the_default() -> None:
    assert CoordinatorConfig().new_partitions_start == "earliest"
    assert CoordinatorConfig.from_config(Config()).new_partitions_start == "earliest"
    chosen = CoordinatorConfig.from_config(Config({"group.new.partitions.start": "latest"}))
    assert chosen.new_partitions_start == "latest"
    with pytest.raises(ConfigError, match=r"group\.new\.partitions\.start"):
        Config({"group.new.partitions.start": "none"})


def test_replay_after_restart_equals_live_state() -> None:
    h = Harness()
    members = h.consumer_group("app", [_sub("orders")])
    h.commit("app", {("orders", 0): 9}, member_id=members[0], generation=h.generation("app"))
    h.consumer_group("bystander", [_sub("payments")])
    _grow(h, "orders", {1: 0, 2: 3})

    restarted = h.replayed()

    assert restarted.coord.offsets.snapshot() == h.coord.offsets.snapshot()
    assert _fetched(restarted, "app", "orders", [0, 1, 2]) == {0: 9, 1: 0, 2: 3}
    assert _committed(restarted, "bystander", "orders") == {}


def test_guard_commits_behave_like_member_commits_afterwards() -> None:
    h = Harness()
    members = h.consumer_group("app", [_sub("orders")])
    _grow(h, "orders", {1: 0})
    # The consumer moves on from the guard's offset like from any other commit.
    assert h.commit("app", {("orders", 1): 25}, member_id=members[0],
                    generation=h.generation("app")) == {("orders", 1): 0}
    assert _committed(h, "app", "orders") == {1: 25}
    # The topic stays subscribed, so its offsets do not expire while the group is Stable
    # (expiry run as if members had kept heartbeating past the retention period).
    h.apply(h.coord.expire_offsets(h.now + h.config.offsets_retention_ms + 1))
    assert _committed(h, "app", "orders") == {1: 25}
