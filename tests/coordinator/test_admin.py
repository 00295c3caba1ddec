"""DeleteGroups, DescribeGroups and ListGroups.

docs/coordinator-rules.md#delete-groups, #describe-groups and #list-groups.
"""

from __future__ import annotations

import pytest

from protocol.consumer_offsets import GroupKey, OffsetKey
from tests.coordinator.harness import E, Harness, S

INT32_MIN = -(2**31)


def _groups_in_every_state(h: Harness) -> None:
    h.commit("simple", {("t", 0): 1})  # Empty, no protocol type
    h.stable_group("stable", 2, session=120_000)
    a, _b = h.stable_group("preparing", 2, session=120_000)
    h.join("preparing", a)
    for i in range(2):
        h.join("completing", version=3, client_id=f"c{i}", session=120_000)
    h.run_join_phase("completing")
    # a group that became Empty after a generation
    (x,) = h.stable_group("empty", 1)
    h.leave("empty", x)


# ---------------------------------------------------------------- ListGroups


def test_list_groups_all_states() -> None:
    h = Harness()
    _groups_in_every_state(h)
    listed = {g["group_id"]: (g["protocol_type"], g["group_state"]) for g in h.list_groups()}
    assert listed == {
        "simple": ("", "Empty"),
        "stable": ("consumer", "Stable"),
        "preparing": ("consumer", "PreparingRebalance"),
        "completing": ("consumer", "CompletingRebalance"),
        "empty": ("consumer", "Empty"),
    }


@pytest.mark.parametrize("states", [["stable", "EMPTY"], ["Stable", "Empty"], ["sTaBlE", "empty", "Dead"]])
def test_list_groups_states_filter_is_case_insensitive(states: list[str]) -> None:
    h = Harness()
    _groups_in_every_state(h)
    assert sorted(g["group_id"] for g in h.list_groups(states)) == ["empty", "simple", "stable"]


def test_list_groups_unknown_state_matches_nothing() -> None:
    h = Harness()
    _groups_in_every_state(h)
    assert h.list_groups(["Rebalancing"]) == []


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_list_groups_old_versions(version: int) -> None:
    h = Harness()
    _groups_in_every_state(h)
    assert len(h.list_groups(version=version)) == 5


def test_list_groups_omits_deleted_groups() -> None:
    h = Harness()
    h.commit("simple", {("t", 0): 1})
    h.delete_groups("simple")
    assert h.list_groups() == []


# ---------------------------------------------------------------- DescribeGroups


@pytest.mark.parametrize("version", [0, 3, 5])
def test_describe_unknown_group_is_dead(version: int) -> None:
    h = Harness()
    (d,) = h.describe("nope", version=version)
    assert d["error_code"] == 0
    assert d["group_id"] == "nope"
    assert d["group_state"] == "Dead"
    assert d["protocol_type"] == ""
    assert d["protocol_data"] == ""
    assert d["members"] == []
    assert "nope" not in h.coord.groups


def test_describe_empty_group_id_is_allowed() -> None:
    (d,) = Harness().describe("")
    assert d["error_code"] == 0
    assert d["group_state"] == "Dead"


def test_describe_stable_group() -> None:
    h = Harness()
    s, d = h.stable_group("g", 2, instances=["inst", None])
    (desc,) = h.describe("g")
    assert desc["error_code"] == 0
    assert desc["group_state"] == "Stable"
    assert desc["protocol_type"] == "consumer"
    assert desc["protocol_data"] == "range"
    assert desc["authorized_operations"] == INT32_MIN
    assert desc["members"] == [
        {"member_id": s, "group_instance_id": "inst", "client_id": "c0", "client_host": "/127.0.0.1",
         "member_metadata": b"range-meta", "member_assignment": b"assign-" + s.encode()},
        {"member_id": d, "group_instance_id": None, "client_id": "c1", "client_host": "/127.0.0.1",
         "member_metadata": b"range-meta", "member_assignment": b"assign-" + d.encode()},
    ]


def test_describe_metadata_is_that_of_the_selected_protocol() -> None:
    h = Harness()
    for i in range(2):
        h.join("g", version=3, client_id=f"c{i}", client_host=f"/10.0.0.{i}",
               protocols=(("roundrobin", b"rr%d" % i), ("range", b"range%d" % i)))
    h.run_join_phase("g")
    g = h.group("g")
    h.sync("g", g.leader, 1, assignments={})
    (desc,) = h.describe("g")
    assert desc["protocol_data"] == "roundrobin"
    assert [(m["client_host"], m["member_metadata"], m["member_assignment"]) for m in desc["members"]] == [
        ("/10.0.0.0", b"rr0", b""), ("/10.0.0.1", b"rr1", b"")]


@pytest.mark.parametrize("group", ["preparing", "completing", "empty", "simple"])
def test_describe_other_states_carry_no_metadata(group: str) -> None:
    h = Harness()
    _groups_in_every_state(h)
    (desc,) = h.describe(group)
    assert desc["group_state"] == h.state(group).wire_name
    assert desc["protocol_data"] == ""
    assert desc["protocol_type"] == ("" if group == "simple" else "consumer")
    for m in desc["members"]:
        assert m["member_metadata"] == b""
        assert m["member_assignment"] == b""
    if group in ("preparing", "completing"):
        assert len(desc["members"]) == 2
        assert all(m["client_id"] for m in desc["members"])


def test_describe_several_groups_in_order() -> None:
    h = Harness()
    _groups_in_every_state(h)
    assert [d["group_id"] for d in h.describe("stable", "nope", "simple")] == ["stable", "nope", "simple"]


# ---------------------------------------------------------------- DeleteGroups


def test_delete_unknown_group() -> None:
    h = Harness()
    assert h.delete_groups("nope") == {"nope": E.GROUP_ID_NOT_FOUND}
    assert h.records == []


@pytest.mark.parametrize("group", ["stable", "preparing", "completing"])
def test_delete_non_empty_group(group: str) -> None:
    h = Harness()
    _groups_in_every_state(h)
    before = len(h.records)
    state = h.state(group)
    assert h.delete_groups(group) == {group: E.NON_EMPTY_GROUP}
    assert h.state(group) is state
    assert h.records[before:] == []


def test_delete_empty_group_writes_tombstones() -> None:
    h = Harness()
    (a,) = h.stable_group("g", 1)
    h.commit("g", {("t", 0): 10, ("t", 1): 11, ("u", 0): 12}, member_id=a, generation=1)
    h.leave("g", a)
    assert h.state("g") is S.EMPTY
    before = len(h.records)
    assert h.delete_groups("g", "nope") == {"g": E.NONE, "nope": E.GROUP_ID_NOT_FOUND}
    written = h.decoded_records(before)
    assert written == [
        (OffsetKey("g", "t", 0), None), (OffsetKey("g", "t", 1), None), (OffsetKey("g", "u", 0), None),
        (GroupKey("g"), None),
    ]
    assert "g" not in h.coord.groups
    assert h.describe("g")[0]["group_state"] == "Dead"
    fetched = h.fetch("g", {"t": [0]})
    assert fetched["topics"][0]["partitions"][0]["committed_offset"] == -1
    # a restart agrees: nothing is left
    r = h.replayed()
    assert "g" not in r.coord.groups
    assert r.coord.offsets.snapshot() == {}


def test_delete_simple_group() -> None:
    h = Harness()
    h.commit("simple", {("t", 0): 1})
    before = len(h.records)
    assert h.delete_groups("simple") == {"simple": E.NONE}
    assert (OffsetKey("simple", "t", 0), None) in h.decoded_records(before)
    assert "simple" not in h.coord.groups
    assert h.delete_groups("simple") == {"simple": E.GROUP_ID_NOT_FOUND}


def test_delete_dead_group() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 1})
    h.group("g").transition(S.DEAD, h.now)
    assert h.delete_groups("g") == {"g": E.GROUP_ID_NOT_FOUND}


def test_describe_groups_reports_authorized_operations_only_when_asked() -> None:
    from protocol.messages import DescribeGroupsRequest

    h = Harness()

    def described(include: bool) -> int:
        reply = h.request_now(DescribeGroupsRequest, 5, {"groups": ["g"], "include_authorized_operations": include})
        return int(reply["groups"][0]["authorized_operations"])

    assert described(False) == -2147483648
    assert described(True) == (1 << 3) | (1 << 6) | (1 << 8)  # READ, DELETE, DESCRIBE
