"""Online migration between the classic and the consumer protocol (KIP-848), sans-IO.

A classic group of the "consumer" protocol type becomes a consumer group when a
consumer-protocol member joins it; its classic members go on with JoinGroup, SyncGroup and
Heartbeat, and the coordinator computes their assignments. When the last consumer-protocol
member leaves, the group turns back into a classic group and rebalances.
"""

from __future__ import annotations

from typing import Any

from broker.coordinator.classic.group import ClassicGroup
from broker.coordinator.config import CoordinatorConfig
from broker.coordinator.modern.consumer.group import ConsumerGroup
from broker.coordinator.modern.topics import StaticImage
from protocol.consumer_protocol import decode_assignment, encode_assignment, encode_subscription
from protocol.errors import ErrorCode
from tests.coordinator.harness import ConsumerClient, Harness, consumer_group

E = ErrorCode
S6 = [("t", p) for p in range(6)]


def subscription(topics: list[str]) -> bytes:
    return encode_subscription({"topics": topics, "user_data": None}, version=0)


def harness(**config: Any) -> Harness:
    settings: dict[str, Any] = {"initial_rebalance_delay_ms": 0, "consumer_session_timeout_ms": 10_000,
                                "consumer_assignment_interval_ms": 0,
                                "consumer_heartbeat_interval_ms": 1_000}
    settings.update(config)
    h = Harness(CoordinatorConfig(**settings))
    h.coord.topics = StaticImage.of({"t": 6})
    return h


def classic_group(h: Harness, size: int = 2) -> list[str]:
    """A Stable classic group of eager "range" consumers holding all of t's partitions."""
    def assign(member: str) -> bytes:
        index = members.index(member)
        mine = [p for p in range(6) if p % size == index]
        return encode_assignment({"assigned_partitions": [{"topic": "t", "partitions": mine}], "user_data": None},
                                 version=0)

    members: list[str] = []
    ids = h.consumer_group("g", [subscription(["t"])] * size)
    members.extend(ids)
    leader = h.group("g").leader
    assert leader is not None
    # consumer_group gives empty assignments; give the members real ones with a second sync round.
    h.join("g", leader, protocols=[("range", subscription(["t"]))])
    for m in ids:
        if m != leader:
            h.join("g", m, protocols=[("range", subscription(["t"]))])
    h.run_join_phase("g")
    generation = h.generation("g")
    h.sync("g", leader, generation, assignments={m: assign(m) for m in ids})
    for m in ids:
        if m != leader:
            h.sync("g", m, generation)
    assert isinstance(h.coord.groups["g"], ClassicGroup)
    return ids


def test_a_consumer_protocol_member_upgrades_a_classic_group_and_classic_members_rejoin() -> None:
    h = harness()
    c1, _c2 = classic_group(h)
    generation = h.generation("g")
    new = ConsumerClient(h, "g", "k", topics=["t"])
    reply = new.heartbeat()
    assert reply["error_code"] == 0
    g = consumer_group(h, "g")
    assert g.members["k"].classic is None
    assert g.members[c1].classic is not None and g.members[c1].member_epoch == generation
    assert g.group_epoch == generation + 1
    # Classic members learn on their next heartbeat that they must rejoin.
    assert h.heartbeat("g", c1, generation) == E.REBALANCE_IN_PROGRESS
    # Eager members give everything up when they rejoin; they come back at the new epoch.
    t = h.join("g", c1, protocols=[("range", subscription(["t"]))])
    joined = h.reply(t)
    assert joined is not None and joined["error_code"] == 0
    assert joined["generation_id"] == g.group_epoch and joined["protocol_type"] == "consumer"
    synced = h.reply(h.sync("g", c1, joined["generation_id"], protocol_name="range"))
    assert synced is not None and synced["error_code"] == 0
    c1_partitions = {p for a in decode_assignment(synced["assignment"]).assigned_partitions for p in a.partitions}
    assert len(c1_partitions) == 2


def test_all_three_members_end_up_with_two_partitions_and_no_partition_twice() -> None:
    h = harness()
    c1, c2 = classic_group(h)
    k = ConsumerClient(h, "g", "k", topics=["t"])
    k.heartbeat()
    held: dict[str, set[int]] = {}
    for _ in range(6):
        g = consumer_group(h, "g")
        for member in (c1, c2):
            epoch = g.members[member].member_epoch
            if h.heartbeat("g", member, epoch) == E.REBALANCE_IN_PROGRESS:
                joined = h.reply(h.join("g", member, protocols=[("range", subscription(["t"]))]))
                assert joined is not None and joined["error_code"] == 0, joined
                synced = h.reply(h.sync("g", member, joined["generation_id"], protocol_name="range"))
                assert synced is not None and synced["error_code"] == 0, synced
                held[member] = {p for a in decode_assignment(synced["assignment"]).assigned_partitions
                                for p in a.partitions}
        k.heartbeat()
        held["k"] = {p for _, p in k.owned}
        claimed = [p for ps in held.values() for p in ps]
        assert len(claimed) == len(set(claimed)), held
    assert sorted(len(v) for v in held.values()) == [2, 2, 2]


def test_the_group_goes_back_to_classic_when_the_last_consumer_protocol_member_leaves() -> None:
    h = harness()
    c1, c2 = classic_group(h)
    k = ConsumerClient(h, "g", "k", topics=["t"])
    k.heartbeat()
    epoch = consumer_group(h, "g").group_epoch
    k.leave()
    g = h.coord.groups["g"]
    assert isinstance(g, ClassicGroup)
    assert set(g.members) == {c1, c2}
    assert g.generation == epoch and g.protocol_type == "consumer" and g.protocol == "range"
    assert g.state.wire_name == "PreparingRebalance"
    # The tallies a join reads are those of the members the downgrade brought back.
    assert g.protocol_support == {"range": 2} and g.awaiting_joins == 0
    # The classic members rebalance the classic way from here.
    assert h.heartbeat("g", c1, epoch) == E.REBALANCE_IN_PROGRESS
    h.join("g", c1, protocols=[("range", subscription(["t"]))])
    h.join("g", c2, protocols=[("range", subscription(["t"]))])
    h.run_join_phase("g")
    assert h.state("g").wire_name == "CompletingRebalance"  # type: ignore[union-attr]
    restarted = h.replayed()
    assert isinstance(restarted.coord.groups["g"], ClassicGroup)


def test_no_upgrade_when_the_policy_forbids_it() -> None:
    h = harness(migration_policy="downgrade")
    classic_group(h)
    reply = ConsumerClient(h, "g", "k", topics=["t"]).heartbeat()
    assert reply["error_code"] == E.GROUP_ID_NOT_FOUND
    assert isinstance(h.coord.groups["g"], ClassicGroup)


def test_no_downgrade_when_the_policy_forbids_it() -> None:
    h = harness(migration_policy="upgrade")
    classic_group(h)
    k = ConsumerClient(h, "g", "k", topics=["t"])
    k.heartbeat()
    k.leave()
    assert isinstance(h.coord.groups["g"], ConsumerGroup)


def test_an_empty_classic_group_is_replaced_and_keeps_its_offsets() -> None:
    h = harness()
    h.commit("g", {("t", 0): 7})
    ConsumerClient(h, "g", "k", topics=["t"]).heartbeat()
    assert isinstance(h.coord.groups["g"], ConsumerGroup)
    assert h.fetch("g", {"t": [0]})["topics"][0]["partitions"][0]["committed_offset"] == 7


def test_a_classic_group_of_another_protocol_type_is_not_a_consumer_group() -> None:
    h = harness()
    h.consumer_group("g", [b"whatever"] * 2, protocol_type="connect")
    assert ConsumerClient(h, "g", "k", topics=["t"]).heartbeat()["error_code"] == E.GROUP_ID_NOT_FOUND


def test_classic_requests_for_members_a_consumer_group_does_not_know() -> None:
    h = harness()
    ConsumerClient(h, "g", "k", topics=["t"]).heartbeat()
    assert h.heartbeat("g", "nobody", 1) == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", "k", 1) == E.UNKNOWN_MEMBER_ID, "k speaks the consumer protocol"
    left = h.leave("g", members=[("nobody", None)])
    assert left["members"][0]["error_code"] == E.UNKNOWN_MEMBER_ID


def test_a_new_classic_member_of_a_consumer_group_gets_its_member_id_first() -> None:
    h = harness()
    ConsumerClient(h, "g", "k", topics=["t"]).heartbeat()
    first = h.reply(h.join("g", "", protocols=[("range", subscription(["t"]))]))
    assert first is not None and first["error_code"] == E.MEMBER_ID_REQUIRED
    member = first["member_id"]
    joined = h.reply(h.join("g", member, protocols=[("range", subscription(["t"]))]))
    assert joined is not None and joined["error_code"] == 0
    assert consumer_group(h, "g").members[member].classic is not None
    assert h.reply(h.join("g", "", protocols=[("bogus", b"x")], protocol_type="connect"))["error_code"] \
        == E.INCONSISTENT_GROUP_PROTOCOL  # type: ignore[index]


def test_a_classic_member_that_never_syncs_is_fenced() -> None:
    h = harness()
    k = ConsumerClient(h, "g", "k", topics=["t"])
    k.heartbeat()
    member = h.reply(h.join("g", "", protocols=[("range", subscription(["t"]))]))["member_id"]  # type: ignore[index]
    h.join("g", member, rebalance=5_000, protocols=[("range", subscription(["t"]))])
    for _ in range(7):
        h.advance(1_000)
        k.heartbeat()
    assert member not in h.coord.groups["g"].members
