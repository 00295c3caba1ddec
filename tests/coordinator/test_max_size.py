"""group.max.size (KIP-389, GroupMetadataManager.acceptJoiningMember).

docs/coordinator-rules.md#group-max-size.
"""

from __future__ import annotations

from tests.coordinator.harness import E, Harness, S


def _max(n: int) -> Harness:
    return Harness.with_config(max_size=n)


def test_error_code_is_81() -> None:
    assert E.GROUP_MAX_SIZE_REACHED == 81


def test_join_beyond_limit_in_stable_is_turned_away() -> None:
    h = _max(2)
    a, b = h.stable_group("g", 2)
    for version in (3, 5, 9):
        t = h.join("g", version=version, client_id="third")
        reply = h.reply(t)
        assert reply["error_code"] == E.GROUP_MAX_SIZE_REACHED
        assert reply["member_id"] == ""
        assert reply["generation_id"] == -1
    g = h.group("g")
    assert g.state is S.STABLE
    assert list(g.members) == [a, b]
    assert g.pending_members == {}
    # existing members are still accepted
    assert h.reply(h.join("g", b))["error_code"] == 0
    assert h.error(h.join("g", instance="static")) == E.GROUP_MAX_SIZE_REACHED


def test_join_beyond_limit_in_completing_rebalance() -> None:
    h = _max(1)
    t = h.join("g", version=3)
    h.run_join_phase("g")
    assert h.state("g") is S.COMPLETING_REBALANCE
    assert h.error(h.join("g", version=3)) == E.GROUP_MAX_SIZE_REACHED
    assert h.reply(h.join("g", h.reply(t)["member_id"], version=3))["error_code"] == 0


def test_empty_group_always_accepts() -> None:
    h = _max(1)
    # everyone gets a member id while the group is still Empty
    ids = [h.reply(h.join("g", client_id=f"c{i}"))["member_id"] for i in range(3)]
    assert h.state("g") is S.EMPTY
    assert len(h.group("g").pending_members) == 3
    first = h.join("g", ids[0])
    assert h.state("g") is S.PREPARING_REBALANCE
    second = h.reply(h.join("g", ids[1]))
    assert second["error_code"] == E.GROUP_MAX_SIZE_REACHED
    assert second["member_id"] == ""
    assert ids[1] not in h.group("g").pending_members  # turned away: removed
    h.run_join_phase("g")
    assert h.reply(first)["generation_id"] == 1


def test_join_storm_pre_v4() -> None:
    h = _max(3)
    tickets = [h.join("g", version=3, client_id=f"c{i}") for i in range(6)]
    accepted, rejected = tickets[:3], tickets[3:]
    for t in rejected:
        assert h.error(t) == E.GROUP_MAX_SIZE_REACHED
        assert h.reply(t)["member_id"] == ""
    assert not any(h.answered(t) for t in accepted)
    h.run_join_phase("g")
    assert [h.reply(t)["generation_id"] for t in accepted] == [1, 1, 1]
    assert h.group("g").size == 3
    assert h.reply(accepted[0])["members"] and len(h.reply(accepted[0])["members"]) == 3


def test_join_storm_kip394() -> None:
    h = _max(3)
    ids = [h.reply(h.join("g", client_id=f"c{i}"))["member_id"] for i in range(5)]
    tickets = [h.join("g", m) for m in ids]
    for t in tickets[3:]:
        assert h.error(t) == E.GROUP_MAX_SIZE_REACHED
    # late newcomers in the same PreparingRebalance are turned away before getting an id
    assert h.error(h.join("g", client_id="late")) == E.GROUP_MAX_SIZE_REACHED
    g = h.group("g")
    assert g.pending_members == {}
    assert list(g.members) == ids[:3]
    h.run_join_phase("g")
    assert all(h.reply(t)["generation_id"] == 1 for t in tickets[:3])


def test_awaiting_member_rejoin_accepted_when_full() -> None:
    h = _max(2)
    a, b = h.stable_group("g", 2)
    ta = h.join("g", a)
    ta2 = h.join("g", a)  # already awaiting: accepted
    assert h.error(ta) == E.REBALANCE_IN_PROGRESS  # superseded, not hanging
    assert not h.answered(ta2)
    h.join("g", b)
    assert h.reply(ta2)["generation_id"] == 2


def test_group_loaded_over_capacity_rebalances_and_turns_away_last_joiners() -> None:
    h = _max(10)
    members = h.stable_group("g", 4, session=60_000)
    r = h.replayed(config=_max(2).config)
    g = r.group("g")
    assert g.state is S.PREPARING_REBALANCE  # forced on load
    assert g.size == 4
    t0 = r.join("g", members[0])
    t1 = r.join("g", members[1])
    t2 = r.join("g", members[2])
    assert r.error(t2) == E.GROUP_MAX_SIZE_REACHED
    assert members[2] not in g.members
    assert not r.answered(t0)
    t3 = r.join("g", members[3])
    assert r.error(t3) == E.GROUP_MAX_SIZE_REACHED
    # the last two were removed, the two that rejoined are everyone: the join completes
    assert list(g.members) == members[:2]
    assert r.reply(t0)["generation_id"] == 2
    assert r.reply(t1)["generation_id"] == 2
    assert g.state is S.COMPLETING_REBALANCE


def test_group_loaded_over_capacity_drops_non_rejoiners_at_timeout() -> None:
    h = _max(10)
    members = h.stable_group("g", 3, session=60_000, rebalance=20_000)
    r = h.replayed(config=_max(2).config)
    t0 = r.join("g", members[0])
    r.advance(20_000)
    assert r.reply(t0)["generation_id"] == 2
    assert list(r.group("g").members) == members[:1]
