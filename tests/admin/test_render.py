"""Tables for people and JSON for programs, built from the same documents."""

from __future__ import annotations

import json

from admin.client import CommittedOffset, GroupDescription, ListedGroup, Member, Node
from admin.plan import PlanRow
from admin.render import (
    assigned_partitions,
    described_group,
    described_group_table,
    listed_groups,
    listed_groups_table,
    plan_document,
    plan_table,
    table,
    to_json,
)
from protocol.consumer_protocol import encode_assignment, encode_subscription


def _member(member_id: str, client: str, partitions: dict[str, list[int]], instance: str | None = None) -> Member:
    assignment = encode_assignment({"assigned_partitions": [{"topic": t, "partitions": ps}
                                                            for t, ps in partitions.items()], "user_data": None})
    metadata = encode_subscription({"topics": sorted(partitions), "user_data": None, "owned_partitions": [],
                                    "generation_id": -1, "rack_id": None})
    return Member(member_id, instance, client, "/10.0.0.1", metadata, assignment)


def test_table_aligns_columns_and_dashes_empty_cells() -> None:
    assert table(("A", "LONG-HEADER", "C"), [("xxxxx", None, 1), ("y", "", 22)]) == (
        "A      LONG-HEADER  C\n"
        "xxxxx  -            1\n"
        "y      -            22"
    )


def test_group_list() -> None:
    document = listed_groups([ListedGroup("a", "consumer", "Stable", "consumer"), ListedGroup("bb", "", "Empty")])
    assert document == {"groups": [{"group": "a", "type": "consumer", "state": "Stable", "protocol_type": "consumer"},
                                   {"group": "bb", "type": None, "state": "Empty", "protocol_type": ""}]}
    assert listed_groups_table(document) == (
        "GROUP  TYPE      STATE   PROTOCOL-TYPE\n"
        "a      consumer  Stable  consumer\n"
        "bb     classic   Empty   -"
    )


def _stable_group() -> GroupDescription:
    return GroupDescription("g", "Stable", "consumer", "range", [
        _member("m-2", "c2", {"t": [2]}),
        _member("m-1", "c1", {"t": [0, 1]}, instance="i-1"),
    ], Node(0, "127.0.0.1", 9092))


def test_assignment_decoded_from_consumer_protocol() -> None:
    member = _member("m", "c", {"t": [1, 0], "a": [3]})
    assert assigned_partitions(member, "consumer") == [("a", 3), ("t", 0), ("t", 1)]
    assert assigned_partitions(member, "connect") is None
    assert assigned_partitions(Member("m", None, "c", "h", b"", b""), "consumer") == []
    assert assigned_partitions(Member("m", None, "c", "h", b"", b"\x00"), "consumer") is None


def test_describe_offsets_with_lag_owner_and_uncommitted_assigned_partitions() -> None:
    committed = {("t", 0): CommittedOffset(3), ("t", 1): CommittedOffset(10), ("old", 0): CommittedOffset(4)}
    ends = {("t", 0): 10, ("t", 1): 10, ("t", 2): 7}
    document = described_group(_stable_group(), committed, ends)
    assert [(r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"], r["member_id"])
            for r in document["offsets"]] == [
        ("old", 0, 4, None, None, None),  # a topic that is gone: no log end, no lag
        ("t", 0, 3, 10, 7, "m-1"),
        ("t", 1, 10, 10, 0, "m-1"),
        ("t", 2, None, 7, None, "m-2"),  # assigned, nothing committed yet
    ]
    assert document["coordinator"] == {"node_id": 0, "host": "127.0.0.1", "port": 9092}
    assert [m["member_id"] for m in document["members"]] == ["m-1", "m-2"]
    assert document["members"][0] == {
        "member_id": "m-1", "group_instance_id": "i-1", "client_id": "c1", "host": "/10.0.0.1",
        "subscription": ["t"], "assignment": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]}
    assert json.loads(to_json(document)) == document
    assert list(document) == ["group", "type", "state", "protocol_type", "protocol", "coordinator", "members", "offsets",
                              "total_lag"]
    assert document["total_lag"] == 7  # partitions without a lag do not count


def test_describe_tables() -> None:
    committed = {("t", 0): CommittedOffset(3)}
    document = described_group(_stable_group(), committed, {("t", 0): 10, ("t", 1): 5, ("t", 2): 7})
    offsets = described_group_table(document, members=False, offsets=True)
    assert offsets.splitlines() == [
        "Group 'g': state Stable, type classic, protocol consumer/range, 2 members, coordinator 127.0.0.1:9092 (id 0)",
        "",
        "GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST       CLIENT-ID",
        "g      t      0          3               10              7    m-1          /10.0.0.1  c1",
        "g      t      1          -               5               -    m-1          /10.0.0.1  c1",
        "g      t      2          -               7               -    m-2          /10.0.0.1  c2",
        "",
        "Total lag: 7 across 3 partitions",
    ]
    members = described_group_table(document, members=True, offsets=False)
    assert members.splitlines()[2:] == [
        "GROUP  CONSUMER-ID  GROUP-INSTANCE-ID  HOST       CLIENT-ID  #PARTITIONS  ASSIGNMENT",
        "g      m-1          i-1                /10.0.0.1  c1         2            t(0,1)",
        "g      m-2          -                  /10.0.0.1  c2         1            t(2)",
    ]
    both = described_group_table(document, members=True, offsets=True)
    assert "LOG-END-OFFSET" in both and "#PARTITIONS" in both


def test_offsets_the_broker_committed_by_a_policy_show_which() -> None:
    committed = {("t", 0): CommittedOffset(40, metadata="kcoord:nearest"), ("t", 1): CommittedOffset(5, metadata="app")}
    document = described_group(_stable_group(), committed, {("t", 0): 50, ("t", 1): 5, ("t", 2): 7})
    assert [r["policy"] for r in document["offsets"]] == ["nearest", None, None]
    lines = described_group_table(document, members=False, offsets=True).splitlines()
    assert lines[2].endswith("CLIENT-ID  COMMITTED-BY-POLICY")
    assert lines[3].endswith("c1         nearest")
    # Without policy commits the table keeps its usual columns.
    plain = described_group(_stable_group(), {("t", 0): CommittedOffset(40)}, {("t", 0): 50})
    assert "COMMITTED-BY-POLICY" not in described_group_table(plain, members=False, offsets=True)


def test_describe_empty_group_says_so() -> None:
    document = described_group(GroupDescription("e", "Empty", "", ""), {}, {})
    text = described_group_table(document, members=True, offsets=True)
    assert text.splitlines() == [
        "Group 'e': state Empty, type classic, protocol -, 0 members, coordinator -",
        "",
        "Group 'e' has no committed offsets and no assigned partitions.",
        "",
        "Group 'e' has no active members.",
    ]


def test_plan_document_and_table() -> None:
    rows = [PlanRow("t", 0, 30, 10, 10, 50), PlanRow("t", 3, None, None, 5, 9)]
    document = plan_document("g", "reset to-nearest", rows, executed=False)
    assert document == {"group": "g", "action": "reset to-nearest", "executed": False, "partitions": [
        {"topic": "t", "partition": 0, "current_offset": 30, "new_offset": 10, "log_start_offset": 10,
         "log_end_offset": 50},
        {"topic": "t", "partition": 3, "current_offset": None, "new_offset": None, "log_start_offset": 5,
         "log_end_offset": 9},
    ]}
    assert plan_table(document).splitlines() == [
        "GROUP  TOPIC  PARTITION  CURRENT-OFFSET  NEW-OFFSET  LOG-START-OFFSET  LOG-END-OFFSET",
        "g      t      0          30              10          10                50",
        "g      t      3          -               -           5                 9",
        "",
        "Dry run: nothing committed. Add --execute to commit these offsets.",
    ]
    executed = plan_table(plan_document("g", "x", rows, executed=True))
    assert executed.endswith("Committed 1 offset for group 'g'.")


def test_empty_plan_says_so() -> None:
    assert plan_table(plan_document("g", "restore", [], executed=False)) == "No partitions to change for group 'g'."
