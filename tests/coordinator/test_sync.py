"""SyncGroup: validation order, parking, assignment propagation, pending-sync timeout
(docs/coordinator-rules.md#sync-group)."""

from __future__ import annotations

import pytest

from tests.coordinator.harness import E, Harness, S


def _completing(h: Harness, n: int = 3, **kw: object) -> list[str]:
    """A group that just finished its join phase (CompletingRebalance, generation 1)."""
    tickets = [h.join("g", version=3, client_id=f"c{i}", **kw) for i in range(n)]  # type: ignore[arg-type]
    h.run_join_phase("g")
    assert h.state("g") is S.COMPLETING_REBALANCE
    return [h.reply(t)["member_id"] for t in tickets]


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(("ptype", "pname"), [(None, "range"), ("consumer", None), (None, None)])
def test_v5_missing_protocol_type_or_name(ptype: str | None, pname: str | None) -> None:
    h = Harness()
    assert h.error(h.sync("unknown", "m", 0, version=5, protocol_type=ptype,
                          protocol_name=pname)) == E.INCONSISTENT_GROUP_PROTOCOL
    _a, b = h.stable_group("g", 2)
    assert h.error(h.sync("g", b, 1, version=5, protocol_type=ptype,
                          protocol_name=pname)) == E.INCONSISTENT_GROUP_PROTOCOL


def test_before_v5_protocol_fields_are_not_required() -> None:
    h = Harness()
    _a, b = h.stable_group("g", 2)
    reply = h.reply(h.sync("g", b, 1, version=4, protocol_type=None, protocol_name=None))
    assert reply["error_code"] == 0


def test_empty_group_id() -> None:
    h = Harness()
    assert h.error(h.sync("", "m", 0)) == E.INVALID_GROUP_ID


def test_unknown_group() -> None:
    h = Harness()
    assert h.error(h.sync("nope", "m", 1)) == E.UNKNOWN_MEMBER_ID
    assert "nope" not in h.coord.groups


def test_dead_group() -> None:
    h = Harness()
    _a, b = h.stable_group("g", 2)
    h.group("g").transition(S.DEAD, h.now)
    assert h.error(h.sync("g", b, 1)) == E.COORDINATOR_NOT_AVAILABLE


def test_member_validation_before_generation() -> None:
    h = Harness()
    s1, _s2 = h.stable_group("g", 2, instances=["i1", "i2"])
    assert h.error(h.sync("g", "nobody", 99)) == E.UNKNOWN_MEMBER_ID
    assert h.error(h.sync("g", s1, 99, instance="i2")) == E.FENCED_INSTANCE_ID
    assert h.error(h.sync("g", s1, 99, instance="ghost")) == E.UNKNOWN_MEMBER_ID


def test_generation_before_protocol() -> None:
    h = Harness()
    _a, b = h.stable_group("g", 2)
    assert h.error(h.sync("g", b, 0, version=5, protocol_name="other")) == E.ILLEGAL_GENERATION
    assert h.error(h.sync("g", b, 2)) == E.ILLEGAL_GENERATION


@pytest.mark.parametrize(("ptype", "pname"), [("connect", "range"), ("consumer", "roundrobin")])
def test_v5_protocol_mismatch(ptype: str, pname: str) -> None:
    h = Harness()
    _a, b = h.stable_group("g", 2)
    assert h.error(h.sync("g", b, 1, version=5, protocol_type=ptype, protocol_name=pname)) == \
        E.INCONSISTENT_GROUP_PROTOCOL


def test_empty_group_is_unknown_member() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 5})
    assert h.state("g") is S.EMPTY
    assert h.error(h.sync("g", "", 0)) == E.UNKNOWN_MEMBER_ID


def test_preparing_rebalance() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    h.join("g", a)
    assert h.state("g") is S.PREPARING_REBALANCE
    assert h.error(h.sync("g", b, 1)) == E.REBALANCE_IN_PROGRESS


# ---------------------------------------------------------------- the assignment


def test_followers_park_until_leader_syncs() -> None:
    h = Harness()
    leader, f1, f2 = _completing(h)
    assert h.group("g").leader == leader
    s1 = h.sync("g", f1, 1)
    s2 = h.sync("g", f2, 1)
    assert not h.answered(s1) and not h.answered(s2)
    assert h.records == []
    sl = h.sync("g", leader, 1, assignments={leader: b"L", f1: b"F1", "not-a-member": b"X"})
    # f2 is missing from the leader's assignment: it gets empty bytes
    assert h.reply(sl)["assignment"] == b"L"
    assert h.reply(s1)["assignment"] == b"F1"
    assert h.reply(s2)["assignment"] == b""
    for t in (sl, s1, s2):
        assert h.error(t) == E.NONE
    g = h.group("g")
    assert g.state is S.STABLE
    (record,) = h.group_records("g")
    assert record.generation == 1
    assert record.protocol == "range"
    assert record.protocol_type == "consumer"
    assert record.leader == leader
    assert [(m.member_id, m.assignment, m.subscription) for m in record.members] == [
        (leader, b"L", b"range-meta"), (f1, b"F1", b"range-meta"), (f2, b"", b"range-meta")]
    assert [(m.client_id, m.client_host, m.session_timeout, m.rebalance_timeout) for m in record.members] == [
        (f"c{i}", "/127.0.0.1", 10_000, 30_000) for i in range(3)]


def test_follower_syncing_after_leader_gets_current_assignment() -> None:
    h = Harness()
    leader, f1, f2 = _completing(h)
    h.sync("g", leader, 1, assignments={leader: b"L", f1: b"F1", f2: b"F2"})
    assert h.reply(h.sync("g", f2, 1))["assignment"] == b"F2"
    assert h.reply(h.sync("g", f2, 1))["assignment"] == b"F2"  # Stable: any number of times
    assert h.reply(h.sync("g", leader, 1, assignments={leader: b"ignored"}))["assignment"] == b"L"
    assert len(h.group_records("g")) == 1


def test_v5_reply_echoes_protocol() -> None:
    h = Harness()
    leader, f1 = _completing(h, 2)
    reply = h.reply(h.sync("g", leader, 1, version=5, assignments={f1: b"x"}))
    assert reply["protocol_type"] == "consumer"
    assert reply["protocol_name"] == "range"
    err = h.reply(h.sync("g", "nobody", 1, version=5))
    assert err["protocol_type"] is None and err["protocol_name"] is None


def test_leader_rejoin_while_followers_parked_answers_rebalance_in_progress() -> None:
    h = Harness()
    leader, f1, _f2 = _completing(h)
    s1 = h.sync("g", f1, 1)
    h.join("g", leader, version=3, protocols=(("range", b"new"),))
    assert h.error(s1) == E.REBALANCE_IN_PROGRESS
    assert h.reply(s1)["assignment"] == b""


# ---------------------------------------------------------------- pending sync and leader failure


def test_member_that_never_syncs_is_removed_after_rebalance_timeout() -> None:
    h = Harness()
    leader, f1 = _completing(h, 2, rebalance=20_000)
    completed = h.now
    h.sync("g", leader, 1, assignments={leader: b"L", f1: b"F"})
    assert h.state("g") is S.STABLE
    for _ in range(3):  # both stay alive by heartbeat; f1 just never sends SyncGroup
        h.advance(6000)
        assert h.heartbeat("g", leader, 1) == E.NONE
        assert h.heartbeat("g", f1, 1) == E.NONE
    h.advance_to(completed + 19_999)
    assert h.state("g") is S.STABLE
    h.advance(1)
    g = h.group("g")
    assert list(g.members) == [leader]
    assert g.state is S.PREPARING_REBALANCE
    assert h.heartbeat("g", f1, 1) == E.UNKNOWN_MEMBER_ID


def test_synced_members_are_not_removed_by_pending_sync_timeout() -> None:
    h = Harness()
    leader, f1 = _completing(h, 2, rebalance=20_000, session=30_000)
    h.sync("g", leader, 1, assignments={})
    h.sync("g", f1, 1)
    h.advance(20_000)
    assert h.state("g") is S.STABLE
    assert h.group("g").size == 2


def test_leader_never_syncs() -> None:
    h = Harness()
    leader, f1, f2 = _completing(h, 3, rebalance=20_000)
    completed = h.now
    s1 = h.sync("g", f1, 1)
    s2 = h.sync("g", f2, 1)
    for _ in range(3):
        h.advance(6000)
        assert h.heartbeat("g", leader, 1) == E.NONE
    h.advance_to(completed + 20_000)
    assert h.error(s1) == E.REBALANCE_IN_PROGRESS
    assert h.error(s2) == E.REBALANCE_IN_PROGRESS
    g = h.group("g")
    assert list(g.members) == [f1, f2]
    assert g.leader == f1
    assert g.state is S.PREPARING_REBALANCE


def test_leader_session_expires_while_followers_parked() -> None:
    h = Harness()
    leader, f1, f2 = _completing(h, 3, session=10_000)
    s1 = h.sync("g", f1, 1)
    s2 = h.sync("g", f2, 1)
    h.advance(9_999)
    assert not h.answered(s1)
    h.advance(1)
    assert h.error(s1) == E.REBALANCE_IN_PROGRESS
    assert h.error(s2) == E.REBALANCE_IN_PROGRESS
    g = h.group("g")
    assert leader not in g.members
    assert g.members.keys() == {f1, f2}  # parked followers count as alive
    assert g.state is S.PREPARING_REBALANCE
    t1 = h.join("g", f1, version=3)
    t2 = h.join("g", f2, version=3)
    assert h.reply(t1)["generation_id"] == h.reply(t2)["generation_id"] == 2
    assert h.reply(t1)["leader"] == f1


def test_leader_leaves_while_followers_parked() -> None:
    h = Harness()
    leader, f1, f2 = _completing(h, 3)
    s1 = h.sync("g", f1, 1)
    s2 = h.sync("g", f2, 1)
    assert h.leave("g", leader)["members"][0]["error_code"] == E.NONE
    assert h.error(s1) == E.REBALANCE_IN_PROGRESS
    assert h.error(s2) == E.REBALANCE_IN_PROGRESS
    assert h.state("g") is S.PREPARING_REBALANCE


def test_session_restarts_after_sync_error_reply() -> None:
    # A member parked in SyncGroup outlives its session timer; once its SyncGroup is answered
    # (here REBALANCE_IN_PROGRESS) its session timer must run again, as after
    # GroupMetadataManager.propagateAssignment.
    h = Harness()
    leader, f = h.stable_group("g", 2, instances=["i1", "i2"], session=10_000, rebalance=30_000)
    h.join("g", leader, instance="i1")  # rebalance: leader parked
    tf = h.join("g", f, instance="i2")
    assert h.state("g") is S.COMPLETING_REBALANCE
    sf = h.sync("g", f, 2, instance="i2")
    for _ in range(2):
        h.advance(6000)
        assert h.heartbeat("g", leader, 2, instance="i1") == E.NONE
    assert f in h.group("g").members  # 12 s parked, alive
    assert h.leave("g", members=[("", "i1")])["members"][0]["error_code"] == E.NONE
    assert h.error(sf) == E.REBALANCE_IN_PROGRESS
    answered = h.now
    assert h.reply(tf)["generation_id"] == 2
    h.advance(9_999)
    assert f in h.group("g").members
    h.advance(1)
    assert answered + 10_000 == h.now
    assert h.group("g").members == {}
    assert h.state("g") is S.EMPTY


def test_v5_missing_protocol_is_checked_before_the_group_id() -> None:
    """KafkaApis answers INCONSISTENT_GROUP_PROTOCOL before the coordinator sees the group id."""
    from protocol.messages import SyncGroupRequest

    reply = Harness().request_now(SyncGroupRequest, 5, {
        "group_id": "", "generation_id": 1, "member_id": "m", "group_instance_id": None,
        "protocol_type": None, "protocol_name": None, "assignments": []})
    assert reply["error_code"] == 23  # INCONSISTENT_GROUP_PROTOCOL, not INVALID_GROUP_ID (24)
