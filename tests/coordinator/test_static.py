"""Static membership (KIP-345): instance ids, replacement, fencing, restart
(docs/coordinator-rules.md#static-membership)."""

from __future__ import annotations

import pytest

from tests.coordinator.harness import E, Harness, S

BOTH = (("range", b"r"), ("roundrobin", b"rr"))


def test_unknown_instance_id_is_added_and_rebalances() -> None:
    h = Harness()
    (_a,) = h.stable_group("g", 1)
    t = h.join("g", instance="inst", client_id="c")
    assert not h.answered(t)
    g = h.group("g")
    assert g.state is S.PREPARING_REBALANCE
    assert g.static_members == {"inst": "inst-2"}
    assert "inst-2" in g.members


def _static_group(h: Harness, **kw: object) -> tuple[str, str]:
    s1, s2 = h.stable_group("g", 2, instances=["i1", "i2"], **kw)  # type: ignore[arg-type]
    assert h.group("g").leader == s1
    return s1, s2


@pytest.mark.parametrize("version", [5, 6, 7, 8])
def test_follower_replaced_in_stable_without_rebalance(version: int) -> None:
    h = Harness()
    s1, s2 = _static_group(h)
    before = len(h.records)
    t = h.join("g", instance="i2", version=version)
    reply = h.reply(t)
    new = reply["member_id"]
    assert new != s2 and new.startswith("i2-")
    assert reply["error_code"] == 0
    assert reply["generation_id"] == 1
    assert reply["leader"] == s1
    assert reply["members"] == []
    assert reply["skip_assignment"] is False
    g = h.group("g")
    assert g.state is S.STABLE
    assert g.generation == 1
    assert list(g.members) == [s1, new]
    assert g.static_members == {"i1": s1, "i2": new}
    assert g.members[new].assignment == b"assign-" + s2.encode()  # keeps its assignment
    (record,) = h.group_records("g", before)
    assert record.generation == 1
    assert [(m.member_id, m.group_instance_id, m.assignment) for m in record.members] == [
        (s1, "i1", b"assign-" + s1.encode()), (new, "i2", b"assign-" + s2.encode())]
    assert record.leader == s1
    # the new id syncs in Stable and gets the current assignment
    assert h.reply(h.sync("g", new, 1, instance="i2"))["assignment"] == b"assign-" + s2.encode()


def test_old_member_id_is_fenced_after_replacement() -> None:
    h = Harness()
    _s1, s2 = _static_group(h)
    new = h.reply(h.join("g", instance="i2"))["member_id"]
    assert h.heartbeat("g", s2, 1, instance="i2") == E.FENCED_INSTANCE_ID
    assert h.error(h.sync("g", s2, 1, instance="i2")) == E.FENCED_INSTANCE_ID
    assert h.commit("g", {("t", 0): 1}, member_id=s2, generation=1, instance="i2") == {
        ("t", 0): E.FENCED_INSTANCE_ID}
    assert h.error(h.join("g", s2, instance="i2")) == E.FENCED_INSTANCE_ID
    assert h.leave("g", members=[(s2, "i2")])["members"][0]["error_code"] == E.FENCED_INSTANCE_ID
    assert h.heartbeat("g", new, 1, instance="i2") == E.NONE
    assert h.state("g") is S.STABLE


@pytest.mark.parametrize("version", [5, 8])
def test_leader_replaced_before_v9_gets_old_leader_id(version: int) -> None:
    h = Harness()
    s1, _s2 = _static_group(h)
    reply = h.reply(h.join("g", instance="i1", version=version))
    new = reply["member_id"]
    assert reply["leader"] == s1  # the OLD leader id: the new leader must not run the assignor
    assert reply["members"] == []
    assert reply["skip_assignment"] is False
    assert reply["generation_id"] == 1
    g = h.group("g")
    assert g.leader == new
    assert g.state is S.STABLE


def test_leader_replaced_at_v9_gets_skip_assignment() -> None:
    h = Harness()
    _s1, s2 = _static_group(h)
    reply = h.reply(h.join("g", instance="i1", version=9))
    new = reply["member_id"]
    assert reply["leader"] == new
    assert reply["skip_assignment"] is True
    assert [(m["member_id"], m["group_instance_id"]) for m in reply["members"]] == [(new, "i1"), (s2, "i2")]
    assert reply["generation_id"] == 1
    assert reply["protocol_name"] == "range"
    assert reply["protocol_type"] == "consumer"
    assert h.state("g") is S.STABLE


def test_follower_replaced_at_v9() -> None:
    h = Harness()
    s1, _s2 = _static_group(h)
    reply = h.reply(h.join("g", instance="i2", version=9))
    assert reply["leader"] == s1
    assert reply["skip_assignment"] is False
    assert reply["members"] == []


def test_replacement_with_changed_selected_protocol_rebalances() -> None:
    h = Harness()
    s1, _s2 = h.stable_group("g", 2, instances=["i1", "i2"], protocols=BOTH)
    g = h.group("g")
    assert g.protocol == "range"
    t = h.join("g", instance="i2", protocols=(("roundrobin", b"rr"),))
    assert not h.answered(t)
    assert g.state is S.PREPARING_REBALANCE
    new = g.static_members["i2"]
    h.join("g", s1, instance="i1", protocols=BOTH)
    reply = h.reply(t)
    assert reply["member_id"] == new
    assert reply["generation_id"] == 2
    assert reply["protocol_name"] == "roundrobin"


def test_replacement_with_unchanged_selected_protocol_does_not_rebalance() -> None:
    h = Harness()
    _s1, _s2 = h.stable_group("g", 2, instances=["i1", "i2"])
    t = h.join("g", instance="i2", protocols=(("range", b"other-metadata"),))
    assert h.reply(t)["generation_id"] == 1
    assert h.state("g") is S.STABLE


def test_replacement_in_completing_rebalance_forces_rebalance() -> None:
    h = Harness()
    t1 = h.join("g", instance="i1", client_id="a")
    t2 = h.join("g", instance="i2", client_id="b")
    h.run_join_phase("g")
    s1, s2 = h.reply(t1)["member_id"], h.reply(t2)["member_id"]
    parked_sync = h.sync("g", s2, 1, instance="i2")
    assert not h.answered(parked_sync)
    t = h.join("g", instance="i2")
    assert h.error(parked_sync) == E.FENCED_INSTANCE_ID
    assert not h.answered(t)
    g = h.group("g")
    assert g.state is S.PREPARING_REBALANCE
    new = g.static_members["i2"]
    h.join("g", s1, instance="i1")
    assert h.reply(t)["generation_id"] == 2
    assert h.reply(t)["member_id"] == new


def test_parked_join_of_old_id_is_fenced() -> None:
    h = Harness()
    s1, s2 = _static_group(h)
    old = h.join("g", s2, instance="i2", protocols=(("range", b"v2"),))  # starts a rebalance
    assert not h.answered(old)
    assert h.state("g") is S.PREPARING_REBALANCE
    t = h.join("g", instance="i2", protocols=(("range", b"v2"),))
    reply = h.reply(old)
    assert reply["error_code"] == E.FENCED_INSTANCE_ID
    assert reply["member_id"] == s2
    assert not h.answered(t)
    assert h.state("g") is S.PREPARING_REBALANCE  # waits with everyone else
    h.join("g", s1, instance="i1")
    assert h.reply(t)["generation_id"] == 2
    assert h.reply(t)["member_id"] == h.group("g").static_members["i2"]


def test_known_instance_with_wrong_member_id() -> None:
    h = Harness()
    _s1, s2 = _static_group(h)
    assert h.error(h.join("g", "i2-999", instance="i2")) == E.FENCED_INSTANCE_ID
    assert h.error(h.join("g", s2, instance="unknown")) == E.UNKNOWN_MEMBER_ID


def test_static_members_survive_restart_and_rejoin_without_rebalance() -> None:
    h = Harness()
    s1, s2 = _static_group(h)
    r = h.replayed()
    g = r.group("g")
    assert g.state is S.STABLE
    assert g.generation == 1
    assert g.leader == s1
    assert g.static_members == {"i1": s1, "i2": s2}
    assert {m: x.assignment for m, x in g.members.items()} == {
        s1: b"assign-" + s1.encode(), s2: b"assign-" + s2.encode()}
    before = len(r.records)
    reply = r.reply(r.join("g", instance="i2"))
    assert reply["error_code"] == 0
    assert reply["generation_id"] == 1
    assert reply["leader"] == s1
    assert g.state is S.STABLE
    new = reply["member_id"]
    assert r.group_records("g", before)[0].members[1].member_id == new
    assert r.heartbeat("g", s1, 1, instance="i1") == E.NONE
    assert r.reply(r.sync("g", new, 1, instance="i2"))["assignment"] == b"assign-" + s2.encode()
    # and again after a second restart
    r2 = r.replayed()
    assert r2.group("g").static_members == {"i1": s1, "i2": new}


def test_static_member_rejoining_with_its_id_after_restart() -> None:
    h = Harness()
    _s1, s2 = _static_group(h)
    r = h.replayed()
    reply = r.reply(r.join("g", s2, instance="i2", protocols=(("range", b"range-meta"),)))
    assert reply["error_code"] == 0
    assert reply["generation_id"] == 1
    assert r.state("g") is S.STABLE


def test_dynamic_members_loaded_from_log_expire_after_session_timeout() -> None:
    h = Harness()
    _a, _b = h.stable_group("g", 2, session=10_000)
    r = h.replayed()
    assert r.state("g") is S.STABLE
    r.advance(9_999)
    assert r.state("g") is S.STABLE
    before = len(r.records)
    r.advance(1)
    g = r.group("g")
    assert g.members == {}
    assert g.state is S.EMPTY
    assert g.generation == 2
    (record,) = r.group_records("g", before)
    assert record.members == []


def test_loaded_member_that_heartbeats_stays() -> None:
    h = Harness()
    a, _b = h.stable_group("g", 2, session=10_000)
    r = h.replayed()
    r.advance(9_000)
    assert r.heartbeat("g", a, 1) == E.NONE
    r.advance(1_000)  # b expired, a alive
    g = r.group("g")
    assert list(g.members) == [a]
    assert g.state is S.PREPARING_REBALANCE
    t = r.join("g", a)
    assert r.reply(t)["generation_id"] == 2
    assert r.reply(t)["leader"] == a


def test_static_member_removed_when_its_session_expires() -> None:
    h = Harness()
    s1, _s2 = _static_group(h)
    h.advance(5000)
    assert h.heartbeat("g", s1, 1, instance="i1") == E.NONE
    h.advance(5000)
    g = h.group("g")
    assert list(g.members) == [s1]
    assert g.static_members == {"i1": s1}
    assert g.state is S.PREPARING_REBALANCE
