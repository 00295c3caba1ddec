"""Heartbeat: errors by state, liveness and session expiry.

docs/coordinator-rules.md#heartbeat-and-session-timeout.
"""

from __future__ import annotations

import pytest

from tests.coordinator.harness import E, Harness, S


def test_empty_group_id() -> None:
    assert Harness().heartbeat("", "m", 0) == E.INVALID_GROUP_ID


def test_unknown_group() -> None:
    h = Harness()
    assert h.heartbeat("nope", "m", 0) == E.UNKNOWN_MEMBER_ID
    assert "nope" not in h.coord.groups


def test_empty_group() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 1})
    assert h.heartbeat("g", "", 0) == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", "m", -1) == E.UNKNOWN_MEMBER_ID


def test_dead_group() -> None:
    h = Harness()
    a, _b = h.stable_group("g", 2)
    h.group("g").transition(S.DEAD, h.now)
    assert h.heartbeat("g", a, 1) == E.COORDINATOR_NOT_AVAILABLE
    assert h.heartbeat("g", "nobody", 7) == E.COORDINATOR_NOT_AVAILABLE


def test_validation_order() -> None:
    h = Harness()
    s, d = h.stable_group("g", 2, instances=["i", None])
    assert h.heartbeat("g", "nobody", 99) == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", d, 99, instance="i") == E.FENCED_INSTANCE_ID
    assert h.heartbeat("g", s, 99, instance="other") == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", s, 0, instance="i") == E.ILLEGAL_GENERATION
    assert h.heartbeat("g", d, 2) == E.ILLEGAL_GENERATION
    assert h.heartbeat("g", s, 1, instance="i") == E.NONE
    assert h.heartbeat("g", d, 1) == E.NONE


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_states(version: int) -> None:
    h = Harness()
    ta = h.join("g", version=3, client_id="a")
    tb = h.join("g", version=3, client_id="b")
    h.run_join_phase("g")
    a, b = h.reply(ta)["member_id"], h.reply(tb)["member_id"]
    assert h.state("g") is S.COMPLETING_REBALANCE
    assert h.heartbeat("g", b, 1, version=version) == E.NONE
    h.sync("g", a, 1, assignments={})
    assert h.state("g") is S.STABLE
    assert h.heartbeat("g", b, 1, version=version) == E.NONE
    h.join("g", a, version=3)
    assert h.state("g") is S.PREPARING_REBALANCE
    assert h.heartbeat("g", b, 1, version=version) == E.REBALANCE_IN_PROGRESS
    assert h.heartbeat("g", b, 0, version=version) == E.ILLEGAL_GENERATION


def test_session_expiry_in_stable() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2, session=10_000)
    synced = h.now
    h.advance(5000)
    assert h.heartbeat("g", a, 1) == E.NONE
    h.advance_to(synced + 9_999)
    assert h.state("g") is S.STABLE
    h.advance(1)
    g = h.group("g")
    assert list(g.members) == [a]
    assert g.state is S.PREPARING_REBALANCE
    assert h.heartbeat("g", b, 1) == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", a, 1) == E.REBALANCE_IN_PROGRESS


def test_session_expiry_of_the_leader_moves_leadership() -> None:
    h = Harness()
    _a, b = h.stable_group("g", 2, session=10_000)
    h.advance(6000)
    h.heartbeat("g", b, 1)
    h.advance(4000)
    g = h.group("g")
    assert list(g.members) == [b]
    assert g.leader == b


def test_session_expiry_during_rebalance_completes_the_join() -> None:
    h = Harness()
    a, b, c = h.stable_group("g", 3, session=10_000, rebalance=60_000)
    h.advance(5000)
    assert h.heartbeat("g", c, 1) == E.NONE
    ta = h.join("g", a)
    tb = h.join("g", b)
    h.advance(4999)
    assert not h.answered(ta)
    assert h.heartbeat("g", c, 1) == E.REBALANCE_IN_PROGRESS  # refreshes c's timer
    h.advance(9_999)
    assert not h.answered(ta)
    h.advance(1)  # c's session expires, long before the 60 s rebalance timeout
    assert h.reply(ta)["generation_id"] == 2
    assert h.reply(tb)["generation_id"] == 2
    assert list(h.group("g").members) == [a, b]


def test_members_parked_in_join_are_alive() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2, session=10_000, rebalance=60_000)
    ta = h.join("g", a)
    for _ in range(5):
        h.advance(9000)
        assert h.heartbeat("g", b, 1) == E.REBALANCE_IN_PROGRESS
    assert a in h.group("g").members  # 45 s parked, no heartbeat
    assert not h.answered(ta)


def test_heartbeats_keep_a_member_alive_across_many_session_timeouts() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2, session=10_000)
    for _ in range(20):
        h.advance(9_000)
        assert h.heartbeat("g", a, 1) == E.NONE
        assert h.heartbeat("g", b, 1) == E.NONE
    assert h.state("g") is S.STABLE
    assert h.group("g").size == 2
    assert h.generation("g") == 1


def test_offset_commit_refreshes_session_in_stable() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2, session=10_000)
    for _ in range(5):
        h.advance(9_000)
        assert h.heartbeat("g", a, 1) == E.NONE
        assert h.commit("g", {("t", 0): 1}, member_id=b, generation=1) == {("t", 0): E.NONE}
    assert h.state("g") is S.STABLE


def test_join_reply_restarts_session_timer() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2, session=10_000, rebalance=60_000)
    h.advance(9_000)
    h.heartbeat("g", b, 1)
    h.join("g", a)  # a parked, its old timer expires meanwhile
    h.advance(6_000)
    h.heartbeat("g", b, 1)
    h.advance(5_000)
    h.join("g", b)  # completes at t=20000
    done = h.now
    h.advance(9_999)
    assert h.group("g").size == 2
    h.advance(1)
    assert h.now == done + 10_000
    assert h.group("g").size == 0
