"""LeaveGroup: single (v0-2) and batch (v3+) shapes, static removal, effects.

docs/coordinator-rules.md#leave-group.
"""

from __future__ import annotations

import pytest

from tests.coordinator.harness import E, Harness, S


@pytest.mark.parametrize("version", [0, 1, 2])
def test_v0_2_single_member(version: int) -> None:
    h = Harness()
    _a, _b, c = h.stable_group("g", 3)
    assert h.leave("g", c, version=version) == {"throttle_time_ms": 0, "error_code": 0}
    assert c not in h.group("g").members
    assert h.state("g") is S.PREPARING_REBALANCE


@pytest.mark.parametrize("version", [0, 1, 2])
def test_v0_2_member_error_becomes_top_level(version: int) -> None:
    h = Harness()
    h.stable_group("g", 2)
    assert h.leave("g", "nobody", version=version)["error_code"] == E.UNKNOWN_MEMBER_ID
    assert h.leave("unknown-group", "nobody", version=version)["error_code"] == E.UNKNOWN_MEMBER_ID
    assert h.leave("", "x", version=version)["error_code"] == E.INVALID_GROUP_ID
    assert h.state("g") is S.STABLE


@pytest.mark.parametrize("version", [3, 4, 5])
def test_v3_batch_with_per_member_errors(version: int) -> None:
    h = Harness()
    a, _s, c = h.stable_group("g", 3, instances=[None, "inst", None])
    reply = h.leave("g", version=version, members=[
        (a, None), ("nobody", None), ("", "inst"), ("", "ghost"), (c, "inst")])
    assert reply["error_code"] == 0
    assert [(m["member_id"], m["group_instance_id"], m["error_code"]) for m in reply["members"]] == [
        (a, None, E.NONE),
        ("nobody", None, E.UNKNOWN_MEMBER_ID),
        ("", "inst", E.NONE),
        ("", "ghost", E.UNKNOWN_MEMBER_ID),
        (c, "inst", E.UNKNOWN_MEMBER_ID),  # "inst" is gone by now
    ]
    g = h.group("g")
    assert list(g.members) == [c]
    assert g.static_members == {}


def test_static_member_removed_by_instance_id() -> None:
    h = Harness()
    s1, _s2 = h.stable_group("g", 2, instances=["i1", "i2"])
    reply = h.leave("g", members=[("", "i2")])
    assert reply["members"] == [{"member_id": "", "group_instance_id": "i2", "error_code": 0}]
    g = h.group("g")
    assert list(g.members) == [s1]
    assert g.static_members == {"i1": s1}
    assert g.state is S.PREPARING_REBALANCE


def test_fenced_member_leave() -> None:
    h = Harness()
    s1, _s2 = h.stable_group("g", 2, instances=["i1", "i2"])
    reply = h.leave("g", members=[(s1, "i2")])
    assert reply["members"][0]["error_code"] == E.FENCED_INSTANCE_ID
    assert h.state("g") is S.STABLE


def test_pending_member_leave() -> None:
    h = Harness()
    _a, _b = h.stable_group("g", 2)
    pending = h.reply(h.join("g"))["member_id"]
    assert pending in h.group("g").pending_members
    assert h.leave("g", pending)["members"][0]["error_code"] == E.NONE
    assert h.group("g").pending_members == {}
    assert h.state("g") is S.STABLE  # a pending member is not a member: no rebalance


def test_pending_member_leave_completes_the_join() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    ta = h.join("g", a)
    pending = h.reply(h.join("g"))["member_id"]
    tb = h.join("g", b)
    assert not h.answered(ta)
    h.leave("g", pending)
    assert h.reply(ta)["generation_id"] == 2
    assert h.reply(tb)["generation_id"] == 2


def test_unknown_group_v3() -> None:
    h = Harness()
    reply = h.leave("nope", members=[("m1", None), ("", "i")])
    assert reply["error_code"] == 0
    assert [(m["member_id"], m["group_instance_id"], m["error_code"]) for m in reply["members"]] == [
        ("m1", None, E.UNKNOWN_MEMBER_ID), ("", "i", E.UNKNOWN_MEMBER_ID)]
    assert "nope" not in h.coord.groups


def test_dead_group() -> None:
    h = Harness()
    a, _b = h.stable_group("g", 2)
    h.group("g").transition(S.DEAD, h.now)
    reply = h.leave("g", a)
    assert reply["error_code"] == E.COORDINATOR_NOT_AVAILABLE
    assert reply["members"] == []
    assert h.leave("g", a, version=1)["error_code"] == E.COORDINATOR_NOT_AVAILABLE


def test_empty_group_id_v3() -> None:
    reply = Harness().leave("", members=[("m", None)])
    assert reply["error_code"] == E.INVALID_GROUP_ID
    assert reply["members"] == []


def test_leave_in_stable_triggers_rebalance() -> None:
    h = Harness()
    a, b, c = h.stable_group("g", 3)
    h.leave("g", b)
    assert h.state("g") is S.PREPARING_REBALANCE
    ta = h.join("g", a)
    tc = h.join("g", c)
    assert h.reply(ta)["generation_id"] == h.reply(tc)["generation_id"] == 2
    assert [m["member_id"] for m in h.reply(ta)["members"]] == [a, c]


def test_leave_of_member_parked_in_join() -> None:
    h = Harness()
    a, b, c = h.stable_group("g", 3)
    ta = h.join("g", a)
    tb = h.join("g", b)
    h.leave("g", b)
    reply = h.reply(tb)
    assert reply["error_code"] == E.UNKNOWN_MEMBER_ID
    assert reply["member_id"] == ""
    assert not h.answered(ta)
    h.join("g", c)
    assert [m["member_id"] for m in h.reply(ta)["members"]] == [a, c]


def test_leave_in_completing_rebalance_triggers_rebalance() -> None:
    h = Harness()
    ta = h.join("g", version=3, client_id="a")
    tb = h.join("g", version=3, client_id="b")
    h.run_join_phase("g")
    a, b = h.reply(ta)["member_id"], h.reply(tb)["member_id"]
    sb = h.sync("g", b, 1)
    h.leave("g", a)
    assert h.error(sb) == E.REBALANCE_IN_PROGRESS
    assert h.state("g") is S.PREPARING_REBALANCE
    assert h.group("g").leader == b


def test_leave_in_preparing_rebalance_rechecks_the_join() -> None:
    h = Harness()
    a, b, c = h.stable_group("g", 3)
    ta = h.join("g", a)
    tb = h.join("g", b)
    h.leave("g", c)
    assert h.reply(ta)["generation_id"] == 2
    assert h.reply(tb)["generation_id"] == 2
