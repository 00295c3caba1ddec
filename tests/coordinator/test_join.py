"""JoinGroup: validation, new/pending/existing members, the join phase and its completion
(docs/coordinator-rules.md#join-group and its subsections)."""

from __future__ import annotations

import pytest

from tests.coordinator.harness import CONSUMER, RANGE, START, E, Harness, S

RR = (("roundrobin", b"rr-meta"),)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("version", [0, 5, 7, 9])
def test_empty_group_id_is_invalid(version: int) -> None:
    h = Harness()
    t = h.join("", version=version)
    reply = h.reply(t)
    assert reply is not None
    assert reply["error_code"] == E.INVALID_GROUP_ID
    assert reply["generation_id"] == -1
    assert reply["leader"] == ""
    assert reply["members"] == []
    assert h.coord.groups == {}


@pytest.mark.parametrize(("session", "ok"), [(5999, False), (6000, True), (1_800_000, True), (1_800_001, False)])
def test_session_timeout_bounds(session: int, ok: bool) -> None:
    h = Harness()
    t = h.join("g", session=session)
    expected = E.MEMBER_ID_REQUIRED if ok else E.INVALID_SESSION_TIMEOUT
    assert h.error(t) == expected
    if not ok:
        assert "g" not in h.coord.groups


def test_session_timeout_bounds_come_from_config() -> None:
    h = Harness.with_config(min_session_timeout_ms=100, max_session_timeout_ms=200)
    assert h.error(h.join("g", session=99)) == E.INVALID_SESSION_TIMEOUT
    assert h.error(h.join("g", session=201)) == E.INVALID_SESSION_TIMEOUT
    assert h.error(h.join("g", session=150)) == E.MEMBER_ID_REQUIRED


def test_session_timeout_checked_before_unknown_member() -> None:
    h = Harness()
    assert h.error(h.join("g", "someone", session=1)) == E.INVALID_SESSION_TIMEOUT


def test_unknown_group_with_member_id_is_unknown_member() -> None:
    h = Harness()
    t = h.join("g", "ghost-1")
    assert h.error(t) == E.UNKNOWN_MEMBER_ID
    assert h.reply(t)["member_id"] == "ghost-1"  # error replies echo the member id
    assert "g" not in h.coord.groups


@pytest.mark.parametrize(("protocol_type", "protocols"), [("", RANGE), (CONSUMER, ())])
def test_empty_group_needs_protocol_type_and_protocols(protocol_type: str, protocols: tuple) -> None:
    h = Harness()
    for version in (3, 5):
        t = h.join("g", version=version, protocol_type=protocol_type, protocols=protocols)
        assert h.error(t) == E.INCONSISTENT_GROUP_PROTOCOL
        assert h.reply(t)["member_id"] == ""
    assert h.state("g") in (None, S.EMPTY)
    assert h.records == []


def test_mismatched_protocol_type() -> None:
    h = Harness()
    h.stable_group("g", 1)
    assert h.error(h.join("g", protocol_type="connect")) == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.state("g") is S.STABLE


def test_no_protocol_common_to_all_members() -> None:
    h = Harness()
    h.stable_group("g", 2)
    assert h.error(h.join("g", protocols=RR)) == E.INCONSISTENT_GROUP_PROTOCOL
    # one protocol in common with everyone is enough
    assert h.error(h.join("g", protocols=RR + RANGE)) == E.MEMBER_ID_REQUIRED


def test_existing_member_with_no_common_protocol() -> None:
    h = Harness()
    _a, b = h.stable_group("g", 2)
    assert h.error(h.join("g", b, protocols=RR)) == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.state("g") is S.STABLE


def test_join_dead_group() -> None:
    h = Harness()
    (a,) = h.stable_group("g", 1)
    h.group("g").transition(S.DEAD, h.now)
    assert h.error(h.join("g")) == E.COORDINATOR_NOT_AVAILABLE
    assert h.error(h.join("g", a)) == E.COORDINATOR_NOT_AVAILABLE


# ---------------------------------------------------------------- new members


def test_v4_dynamic_member_gets_member_id_required() -> None:
    h = Harness()
    t = h.join("g", version=4, client_id="app")
    reply = h.reply(t)
    assert reply["error_code"] == E.MEMBER_ID_REQUIRED
    assert reply["member_id"] == "app-1"  # <client.id>-<generated>
    assert reply["generation_id"] == -1
    assert reply["members"] == []
    g = h.group("g")
    assert g.state is S.EMPTY
    assert "app-1" in g.pending_members
    assert g.members == {}

    t2 = h.join("g", "app-1", version=4, client_id="app")
    assert not h.answered(t2)
    assert g.state is S.PREPARING_REBALANCE
    assert list(g.members) == ["app-1"]
    assert g.pending_members == {}
    h.run_join_phase("g")
    reply = h.reply(t2)
    assert reply["error_code"] == 0
    assert reply["member_id"] == "app-1"
    assert reply["leader"] == "app-1"
    assert reply["generation_id"] == 1


def test_pending_member_expires_after_its_session_timeout() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    t = h.join("g", session=7000)
    pending = h.reply(t)["member_id"]
    h.heartbeat("g", a, 1)
    h.heartbeat("g", b, 1)
    h.advance(6999)
    assert pending in h.group("g").pending_members
    h.advance(1)
    assert pending not in h.group("g").pending_members
    assert h.error(h.join("g", pending)) == E.UNKNOWN_MEMBER_ID
    assert h.state("g") is S.STABLE


def test_pending_member_in_new_group_expires_and_group_is_forgotten() -> None:
    h = Harness()
    t = h.join("g")
    pending = h.reply(t)["member_id"]
    h.advance(10_000)
    assert h.state("g") is None
    assert h.error(h.join("g", pending)) == E.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_pre_v4_dynamic_member_is_added_directly(version: int) -> None:
    h = Harness()
    t = h.join("g", version=version, client_id="old")
    assert not h.answered(t)
    g = h.group("g")
    assert list(g.members) == ["old-1"]
    assert g.state is S.PREPARING_REBALANCE
    assert g.pending_members == {}
    h.run_join_phase("g")
    assert h.reply(t)["member_id"] == "old-1"
    assert h.reply(t)["generation_id"] == 1


def test_v0_rebalance_timeout_is_session_timeout() -> None:
    h = Harness()
    h.join("g", version=0, session=20_000, rebalance=99_999)
    assert h.group("g").members["client-1"].rebalance_timeout_ms == 20_000


def test_group_rebalance_timeout_is_max_over_members() -> None:
    h = Harness()
    h.join("g", version=3, rebalance=10_000, client_id="a")
    h.join("g", version=3, rebalance=50_000, client_id="b")
    h.join("g", version=3, rebalance=20_000, client_id="c")
    assert h.group("g").rebalance_timeout_ms == 50_000


# ---------------------------------------------------------------- protocol selection


def _initial_join(h: Harness, members: list[tuple]) -> list[int]:
    tickets = [h.join("g", version=3, client_id=f"m{i}", protocols=p) for i, p in enumerate(members)]
    h.run_join_phase("g")
    return tickets


def test_protocol_selected_by_majority_vote() -> None:
    h = Harness()
    tickets = _initial_join(h, [
        (("roundrobin", b"1"), ("range", b"1")),
        (("range", b"2"), ("roundrobin", b"2")),
        (("range", b"3"), ("roundrobin", b"3")),
    ])
    assert h.group("g").protocol == "range"
    assert all(h.reply(t)["protocol_name"] == "range" for t in tickets)


def test_each_member_votes_for_its_first_listed_candidate() -> None:
    # sticky is not supported by m1, so it is not a candidate: m0 and m2 vote roundrobin.
    h = Harness()
    _initial_join(h, [
        (("sticky", b""), ("roundrobin", b""), ("range", b"")),
        (("range", b""), ("roundrobin", b"")),
        (("sticky", b""), ("roundrobin", b""), ("range", b"")),
    ])
    assert h.group("g").protocol == "roundrobin"


def test_leader_gets_metadata_of_the_selected_protocol() -> None:
    h = Harness()
    tickets = _initial_join(h, [
        (("roundrobin", b"rr0"), ("range", b"range0")),
        (("range", b"range1"),),
    ])
    leader = h.reply(tickets[0])
    assert leader["protocol_name"] == "range"
    assert [(m["member_id"], m["metadata"]) for m in leader["members"]] == [
        ("m0-1", b"range0"), ("m1-2", b"range1")]


# ---------------------------------------------------------------- initial rebalance delay


def test_initial_delay_never_completes_early() -> None:
    h = Harness()
    t = h.join("g", version=3)
    assert h.group("g").has_all_members_joined()
    h.advance(2999)
    assert not h.answered(t)
    assert h.state("g") is S.PREPARING_REBALANCE
    h.advance(1)
    assert h.reply(t)["generation_id"] == 1
    assert h.state("g") is S.COMPLETING_REBALANCE


def test_initial_delay_is_the_configured_delay() -> None:
    h = Harness.with_config(initial_rebalance_delay_ms=500)
    t = h.join("g", version=3)
    h.advance(499)
    assert not h.answered(t)
    h.advance(1)
    assert h.answered(t)


def test_initial_delay_zero_completes_at_once_on_timer() -> None:
    h = Harness.with_config(initial_rebalance_delay_ms=0)
    t = h.join("g", version=3)
    assert h.coord.next_deadline() == h.now
    h.advance(0)
    assert h.reply(t)["generation_id"] == 1


def test_initial_delay_extended_once_when_a_member_arrives() -> None:
    # rebalance 10000, delay 3000: remaining = 7000; a member during the first delay
    # extends it by min(3000, 7000) = 3000; nobody new in the second delay: done at 6000.
    h = Harness()
    a = h.join("g", version=3, rebalance=10_000, client_id="a")
    h.advance(1000)
    b = h.join("g", version=3, rebalance=10_000, client_id="b")
    h.advance(2000)  # t=3000: extension
    assert not h.answered(a) and not h.answered(b)
    h.advance(2999)  # t=5999
    assert not h.answered(a)
    h.advance(1)  # t=6000
    assert h.reply(a)["generation_id"] == 1
    assert h.reply(b)["generation_id"] == 1
    assert h.now == START + 6000


def test_initial_delay_extensions_are_capped_by_rebalance_timeout() -> None:
    # remaining 7000 -> (ext 3000) 4000 -> (ext 3000) 1000 -> (ext min(3000, 1000)=1000) 0 -> done.
    h = Harness()
    tickets = [h.join("g", version=3, rebalance=10_000, client_id="a")]
    for at in (1000, 4000, 7000, 9500):
        h.advance_to(START + at)
        tickets.append(h.join("g", version=3, rebalance=10_000, client_id=f"m{at}"))
    h.advance_to(START + 9999)
    assert not any(h.answered(t) for t in tickets)
    h.advance(1)
    assert all(h.reply(t)["generation_id"] == 1 for t in tickets)
    assert h.group("g").size == 5


def test_no_extension_when_rebalance_timeout_not_above_delay() -> None:
    # remaining = max(2000 - 3000, 0) = 0: a newcomer does not extend the delay.
    h = Harness()
    a = h.join("g", version=3, rebalance=2000, session=6000, client_id="a")
    h.advance(1000)
    b = h.join("g", version=3, rebalance=2000, session=6000, client_id="b")
    h.advance(2000)
    assert h.answered(a) and h.answered(b)


def test_initial_delay_extension_only_at_generation_zero() -> None:
    h = Harness()
    (a,) = h.stable_group("g", 1, rebalance=10_000)
    h.leave("g", a)
    assert h.state("g") is S.EMPTY
    assert h.generation("g") == 2
    start = h.now
    t1 = h.join("g", version=3, rebalance=10_000, client_id="x")
    h.advance(1000)
    t2 = h.join("g", version=3, rebalance=10_000, client_id="y")
    h.advance(1999)
    assert not h.answered(t1)  # still never completes early
    h.advance(1)
    assert h.now == start + 3000
    assert h.reply(t1)["generation_id"] == 3
    assert h.reply(t2)["generation_id"] == 3


# ---------------------------------------------------------------- join completion


def test_non_initial_rebalance_completes_when_all_rejoined() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    ta = h.join("g", a)
    assert not h.answered(ta)
    assert h.state("g") is S.PREPARING_REBALANCE
    tb = h.join("g", b)
    assert h.reply(ta)["generation_id"] == 2
    assert h.reply(tb)["generation_id"] == 2
    assert h.state("g") is S.COMPLETING_REBALANCE


def test_pending_member_holds_the_join_until_it_expires() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    ta = h.join("g", a)
    pending = h.reply(h.join("g", session=8000))["member_id"]
    tb = h.join("g", b)
    assert not h.answered(ta) and not h.answered(tb)  # a pending member has not joined yet
    h.advance(8000)
    assert pending not in h.group("g").pending_members
    assert h.reply(ta)["generation_id"] == 2


def test_rebalance_timeout_removes_dynamic_keeps_static_and_elects_joined_leader() -> None:
    h = Harness()
    s, d1, _d2 = h.stable_group("g", 3, instances=["static", None, None], session=60_000)
    assert h.group("g").leader == s
    t = h.join("g", d1, protocols=(("range", b"v2"),))  # rebalance; s and d2 never rejoin
    h.advance(29_999)
    assert not h.answered(t)
    h.advance(1)
    g = h.group("g")
    assert list(g.members) == [s, d1]  # d2 removed, static s kept
    assert g.leader == d1  # the old leader did not rejoin
    reply = h.reply(t)
    assert reply["leader"] == d1
    assert reply["generation_id"] == 2
    assert [m["member_id"] for m in reply["members"]] == [s, d1]
    assert [m["group_instance_id"] for m in reply["members"]] == ["static", None]


def test_leader_election_when_dynamic_leader_does_not_rejoin() -> None:
    h = Harness()
    leader, f1, f2 = h.stable_group("g", 3)
    t1 = h.join("g", f1, protocols=(("range", b"v2"),))
    t2 = h.join("g", f2)
    for _ in range(3):
        h.advance(9000)
        assert h.heartbeat("g", leader, 1) == E.REBALANCE_IN_PROGRESS
    h.advance(3000)
    assert leader not in h.group("g").members
    assert h.reply(t1)["leader"] == f1
    assert h.reply(t2)["leader"] == f1
    assert len(h.reply(t1)["members"]) == 2
    assert h.reply(t2)["members"] == []


def test_no_member_rejoined_reschedules() -> None:
    h = Harness()
    s1, _s2 = h.stable_group("g", 2, instances=["i1", "i2"], session=60_000, rebalance=20_000)
    assert h.leave("g", members=[("", "i2")])["members"][0]["error_code"] == 0
    assert h.state("g") is S.PREPARING_REBALANCE
    h.advance(20_000)
    assert h.state("g") is S.PREPARING_REBALANCE  # static s1 kept, nobody rejoined
    assert h.generation("g") == 1
    assert h.coord.next_deadline() == h.now + 20_000
    h.advance(5000)
    t = h.join("g", s1, instance="i1", session=60_000, rebalance=20_000)
    assert h.reply(t)["generation_id"] == 2
    assert h.state("g") is S.COMPLETING_REBALANCE


def test_only_the_leader_gets_the_member_list() -> None:
    h = Harness()
    tickets = [h.join("g", version=5, instance=f"i{n}", client_id=f"c{n}") for n in range(3)]
    h.run_join_phase("g")
    leader, *followers = (h.reply(t) for t in tickets)
    assert leader["leader"] == leader["member_id"]
    assert [(m["member_id"], m["group_instance_id"], m["metadata"]) for m in leader["members"]] == [
        ("i0-1", "i0", b"range-meta"), ("i1-2", "i1", b"range-meta"), ("i2-3", "i2", b"range-meta")]
    for f in followers:
        assert f["members"] == []
        assert f["leader"] == "i0-1"
        assert f["generation_id"] == 1
        assert f["protocol_name"] == "range"


@pytest.mark.parametrize("version", range(10))
def test_reply_protocol_fields_by_version(version: int) -> None:
    h = Harness()
    _, t = h.new_member("g", version=version)
    h.run_join_phase("g")
    reply = h.reply(t)
    assert reply["error_code"] == 0
    assert reply["protocol_name"] == "range"
    if version >= 7:
        assert reply["protocol_type"] == CONSUMER
    assert reply["skip_assignment"] is False


@pytest.mark.parametrize(("version", "name"), [(0, ""), (5, ""), (6, ""), (7, None), (9, None)])
def test_error_reply_protocol_name_null_or_empty(version: int, name: str | None) -> None:
    h = Harness()
    reply = h.reply(h.join("", version=version))
    assert reply["protocol_name"] == name
    assert reply["protocol_type"] is None


def test_member_id_required_at_v7_has_null_protocol_name() -> None:
    h = Harness()
    reply = h.reply(h.join("g", version=7))
    assert reply["error_code"] == E.MEMBER_ID_REQUIRED
    assert reply["protocol_name"] is None
    assert reply["protocol_type"] is None


def test_rebalance_ending_with_no_members_goes_empty_and_is_stored() -> None:
    h = Harness()
    t = h.join("g", version=3)
    assert h.leave("g", "client-1", version=0)["error_code"] == 0
    assert h.reply(t)["error_code"] == E.UNKNOWN_MEMBER_ID  # its parked join is answered
    assert h.state("g") is S.PREPARING_REBALANCE  # the initial delay never completes early
    h.advance(3000)
    g = h.group("g")
    assert g.state is S.EMPTY
    assert g.generation == 1
    (record,) = h.group_records("g")
    assert record.generation == 1
    assert record.members == []
    assert record.protocol is None
    assert record.leader is None
    assert record.protocol_type == CONSUMER


def test_last_member_leaving_stable_group_empties_it_at_once() -> None:
    h = Harness()
    (a,) = h.stable_group("g", 1)
    before = len(h.records)
    h.leave("g", a)
    assert h.state("g") is S.EMPTY
    assert h.generation("g") == 2
    (record,) = h.group_records("g", before)
    assert record.members == [] and record.generation == 2


def test_new_member_waiting_in_join_expires_after_five_minutes() -> None:
    h = Harness()
    (a,) = h.stable_group("g", 1, rebalance=600_000)
    t = h.join("g", version=3, client_id="late", rebalance=600_000)
    assert h.state("g") is S.PREPARING_REBALANCE
    for _ in range(33):
        h.advance(9000)
        assert h.heartbeat("g", a, 1) == E.REBALANCE_IN_PROGRESS
    assert not h.answered(t)  # 297 s
    h.advance(3000)  # 300 s after it joined
    reply = h.reply(t)
    assert reply["error_code"] == E.UNKNOWN_MEMBER_ID
    assert reply["member_id"] == ""
    assert list(h.group("g").members) == [a]


# ---------------------------------------------------------------- existing members


def test_follower_rejoin_in_stable_with_same_metadata() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    before = len(h.records)
    t = h.join("g", b)
    reply = h.reply(t)
    assert reply["error_code"] == 0
    assert reply["generation_id"] == 1
    assert reply["leader"] == a
    assert reply["member_id"] == b
    assert reply["members"] == []
    assert h.state("g") is S.STABLE
    assert h.records[before:] == []


def test_follower_rejoin_in_stable_with_changed_metadata_rebalances() -> None:
    h = Harness()
    _a, b = h.stable_group("g", 2)
    t = h.join("g", b, protocols=(("range", b"changed"),))
    assert not h.answered(t)
    assert h.state("g") is S.PREPARING_REBALANCE


def test_leader_rejoin_in_stable_forces_rebalance() -> None:
    h = Harness()
    a, _b = h.stable_group("g", 2)
    t = h.join("g", a)
    assert not h.answered(t)
    assert h.state("g") is S.PREPARING_REBALANCE
    assert h.group("g").members[a].assignment == b"assign-" + a.encode()  # only Completing resets


def test_completing_rebalance_rejoin_with_same_metadata() -> None:
    h = Harness()
    ta = h.join("g", version=3, client_id="a")
    tb = h.join("g", version=3, client_id="b")
    h.run_join_phase("g")
    assert h.state("g") is S.COMPLETING_REBALANCE
    a, b = h.reply(ta)["member_id"], h.reply(tb)["member_id"]
    ra = h.reply(h.join("g", a, version=3))
    rb = h.reply(h.join("g", b, version=3))
    assert ra["generation_id"] == rb["generation_id"] == 1
    assert [m["member_id"] for m in ra["members"]] == [a, b]
    assert rb["members"] == []
    assert ra["leader"] == rb["leader"] == a
    assert h.state("g") is S.COMPLETING_REBALANCE


def test_completing_rebalance_rejoin_with_changed_metadata_rebalances() -> None:
    h = Harness()
    ta = h.join("g", version=3, client_id="a")
    tb = h.join("g", version=3, client_id="b")
    h.run_join_phase("g")
    a, b = h.reply(ta)["member_id"], h.reply(tb)["member_id"]
    sb = h.sync("g", b, 1)
    assert not h.answered(sb)
    t = h.join("g", a, version=3, protocols=(("range", b"new"),))
    assert h.error(sb) == E.REBALANCE_IN_PROGRESS
    assert h.state("g") is S.PREPARING_REBALANCE
    assert not h.answered(t)


def test_existing_member_validation() -> None:
    h = Harness()
    s, d = h.stable_group("g", 2, instances=["inst", None])
    assert h.error(h.join("g", "nobody")) == E.UNKNOWN_MEMBER_ID
    assert h.error(h.join("g", d, instance="inst")) == E.FENCED_INSTANCE_ID
    assert h.error(h.join("g", s, instance="other")) == E.UNKNOWN_MEMBER_ID
    assert h.state("g") is S.STABLE


def test_generated_ids_use_instance_id_or_client_id() -> None:
    h = Harness()
    assert h.reply(h.join("g", version=5, client_id="cli"))["member_id"] == "cli-1"
    t = h.join("g", version=5, instance="inst", client_id="cli")
    assert list(h.group("g").members) == ["inst-2"]
    assert not h.answered(t)


def test_second_join_while_parked_does_not_leave_the_first_hanging() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    t1 = h.join("g", a)
    t2 = h.join("g", a)
    assert h.answered(t1)  # superseded: answered once, not left hanging
    assert not h.answered(t2)
    h.join("g", b)
    assert h.reply(t2)["generation_id"] == 2


@pytest.mark.parametrize("count, words", [(1, "1 member,"), (2, "2 members,")])
def test_the_stabilized_log_line_counts_members_in_english(caplog: pytest.LogCaptureFixture, count: int,
                                                            words: str) -> None:
    h = Harness()
    with caplog.at_level("INFO", logger="kcoord.coordinator"):
        h.stable_group("g", count)
    line = next(r.getMessage() for r in caplog.records if "stabilized group g" in r.getMessage())
    assert f"({words} protocol range)" in line
