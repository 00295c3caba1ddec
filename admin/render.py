"""Command output: aligned text tables for people, JSON with stable keys for programs.

Each command builds plain dicts (the JSON form) with the functions here; the table form
is rendered from the same dicts, so both always say the same thing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from admin.client import CommittedOffset, GroupDescription, ListedGroup, Member
from admin.plan import PlanRow
from protocol.consumer_protocol import decode_assignment, decode_subscription
from protocol.errors import ProtocolError
from protocol.policy_marker import policy_of

TopicPartition = tuple[str, int]


def cell(value: object) -> str:
    if value is None or value == "":
        return "-"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell, two spaces apart; empty cells as ``-``."""
    text_rows = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(value))
    lines = []
    for row in [list(headers), *text_rows]:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def to_json(document: Any) -> str:
    return json.dumps(document, indent=2, sort_keys=False, ensure_ascii=False)


# ---------------------------------------------------------------------- groups list


def listed_groups(groups: list[ListedGroup]) -> dict[str, Any]:
    return {"groups": [{"group": g.group_id, "type": g.group_type, "state": g.state,
                        "protocol_type": g.protocol_type} for g in groups]}


def listed_groups_table(document: dict[str, Any]) -> str:
    rows = [(g["group"], g["type"] or "classic", g["state"], g["protocol_type"]) for g in document["groups"]]
    return table(("GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"), rows)


# ---------------------------------------------------------------------- groups describe


def assigned_partitions(member: Member, protocol_type: str) -> list[TopicPartition] | None:
    """The partitions a consumer-protocol member owns; None when the blob is not readable."""
    if member.partitions is not None:
        return member.partitions
    if protocol_type != "consumer" or not member.assignment:
        return None if protocol_type != "consumer" else []
    try:
        assignment = decode_assignment(member.assignment)
    except ProtocolError:
        return None
    return sorted((t.topic, int(p)) for t in assignment.assigned_partitions for p in t.partitions)


def subscribed_topics(member: Member, protocol_type: str) -> list[str] | None:
    if member.subscription is not None:
        return member.subscription
    if protocol_type != "consumer" or not member.metadata:
        return None
    try:
        return sorted(decode_subscription(member.metadata).topics)
    except ProtocolError:
        return None


def described_members(description: GroupDescription) -> list[dict[str, Any]]:
    members = []
    for m in sorted(description.members, key=lambda m: (m.client_id, m.member_id)):
        assigned = assigned_partitions(m, description.protocol_type)
        entry: dict[str, Any] = {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "host": m.client_host,
            "subscription": subscribed_topics(m, description.protocol_type),
            "assignment": None if assigned is None else [{"topic": t, "partition": p} for t, p in assigned],
        }
        if m.member_epoch is not None:
            entry["member_epoch"] = m.member_epoch
            entry["target_assignment"] = [{"topic": t, "partition": p} for t, p in m.target or []]
        members.append(entry)
    return members


def described_offsets(
    description: GroupDescription,
    committed: dict[TopicPartition, CommittedOffset],
    log_ends: dict[TopicPartition, int],
) -> list[dict[str, Any]]:
    """One row per partition the group has committed or is assigned, with lag and owner."""
    owners: dict[TopicPartition, Member] = {}
    for m in description.members:
        for tp in assigned_partitions(m, description.protocol_type) or []:
            owners[tp] = m
    rows = []
    for tp in sorted(set(committed) | set(owners)):
        current = committed[tp].offset if tp in committed else None
        end = log_ends.get(tp)
        owner = owners.get(tp)
        rows.append({
            "topic": tp[0],
            "partition": tp[1],
            "current_offset": current,
            "log_end_offset": end,
            "lag": None if current is None or end is None else max(end - current, 0),
            "member_id": owner.member_id if owner else None,
            "host": owner.client_host if owner else None,
            "client_id": owner.client_id if owner else None,
            # Set when the broker made this commit under one of the group's reset policies.
            "policy": policy_of(committed[tp].metadata) if tp in committed else None,
        })
    return rows


def described_group(
    description: GroupDescription,
    committed: dict[TopicPartition, CommittedOffset],
    log_ends: dict[TopicPartition, int],
) -> dict[str, Any]:
    node = description.coordinator
    offsets = described_offsets(description, committed, log_ends)
    document: dict[str, Any] = {
        "group": description.group_id,
        "type": description.group_type,
        "state": description.state,
        "protocol_type": description.protocol_type,
        "protocol": description.protocol,
        "coordinator": None if node is None else {"node_id": node.node_id, "host": node.host, "port": node.port},
        "members": described_members(description),
        "offsets": offsets,
        "total_lag": sum(r["lag"] for r in offsets if r["lag"] is not None),
    }
    if description.group_epoch is not None:
        document["group_epoch"] = description.group_epoch
        document["assignment_epoch"] = description.assignment_epoch
    return document


def group_state(description: GroupDescription) -> dict[str, Any]:
    """``groups describe --state``: one group's coordinator, strategy, state and member count."""
    node = description.coordinator
    return {
        "group": description.group_id,
        "coordinator": None if node is None else {"node_id": node.node_id, "host": node.host, "port": node.port},
        "assignment_strategy": description.protocol or None,
        "state": description.state,
        "members": len(description.members),
    }


def group_states_table(documents: list[dict[str, Any]]) -> str:
    rows = []
    for d in documents:
        node = d["coordinator"]
        where = None if node is None else f"{node['host']}:{node['port']} ({node['node_id']})"
        rows.append((d["group"], where, d["assignment_strategy"], d["state"], d["members"]))
    return table(("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"), rows)


def described_group_table(document: dict[str, Any], members: bool, offsets: bool) -> str:
    node = document["coordinator"]
    where = "-" if node is None else f"{node['host']}:{node['port']} (id {node['node_id']})"
    count = len(document["members"])
    protocol = "/".join(p for p in (document["protocol_type"], document["protocol"]) if p) or "-"
    rows: list[tuple[object, ...]]
    consumer = document.get("type") == "consumer"
    if consumer:
        kind = (f"type consumer (KIP-848), assignor {document['protocol'] or '-'}, "
                f"epoch {document['group_epoch']}, assignment epoch {document['assignment_epoch']}")
    else:
        kind = f"type classic, protocol {protocol}"
    parts = [
        f"Group {document['group']!r}: state {document['state']}, {kind}, "
        f"{count} member{'s' if count != 1 else ''}, coordinator {where}"
    ]
    if offsets:
        rows = [(document["group"], r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"],
                 r["member_id"], r["host"], r["client_id"]) for r in document["offsets"]]
        columns: tuple[str, ...] = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                    "CONSUMER-ID", "HOST", "CLIENT-ID")
        if any(r.get("policy") for r in document["offsets"]):
            # Why an offset moved without its consumers: the broker's reset policy that committed it.
            rows = [(*row, r.get("policy")) for row, r in zip(rows, document["offsets"], strict=True)]
            columns = (*columns, "COMMITTED-BY-POLICY")
        parts.append(table(columns, rows)
                     + f"\n\nTotal lag: {document['total_lag']} across {len(rows)} "
                       f"partition{'s' if len(rows) != 1 else ''}" if rows
                     else f"Group {document['group']!r} has no committed offsets and no assigned partitions.")
    if members:
        rows = []
        for m in document["members"]:
            assignment = m["assignment"]
            listed = None if assignment is None else _partition_list(assignment)
            row: tuple[object, ...] = (document["group"], m["member_id"], m["group_instance_id"], m["host"],
                                       m["client_id"], None if assignment is None else len(assignment), listed)
            if consumer:
                row = (*row[:5], m.get("member_epoch"), *row[5:], _partition_list(m.get("target_assignment") or []))
            rows.append(row)
        heading: tuple[str, ...] = ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                    "ASSIGNMENT")
        if consumer:
            heading = (*heading[:5], "MEMBER-EPOCH", *heading[5:], "TARGET-ASSIGNMENT")
        parts.append(table(heading, rows) if rows else f"Group {document['group']!r} has no active members.")
    return "\n\n".join(parts)


def _partition_list(assignment: list[dict[str, Any]]) -> str:
    by_topic: dict[str, list[int]] = {}
    for item in assignment:
        by_topic.setdefault(item["topic"], []).append(item["partition"])
    return " ".join(f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in sorted(by_topic.items()))


# ---------------------------------------------------------------------- plans


def plan_document(group: str, action: str, rows: list[PlanRow], executed: bool) -> dict[str, Any]:
    return {
        "group": group,
        "action": action,
        "executed": executed,
        "partitions": [{
            "topic": r.topic, "partition": r.partition, "current_offset": r.current, "new_offset": r.new,
            "log_start_offset": r.log_start, "log_end_offset": r.log_end,
        } for r in rows],
    }


def plan_table(document: dict[str, Any]) -> str:
    rows = [(document["group"], p["topic"], p["partition"], p["current_offset"], p["new_offset"],
             p["log_start_offset"], p["log_end_offset"]) for p in document["partitions"]]
    body = table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "LOG-START-OFFSET",
                  "LOG-END-OFFSET"), rows)
    if not rows:
        return f"No partitions to change for group {document['group']!r}."
    changed = sum(1 for p in document["partitions"] if p["new_offset"] is not None)
    if document["executed"]:
        tail = f"Committed {changed} offset{'s' if changed != 1 else ''} for group {document['group']!r}."
    else:
        tail = "Dry run: nothing committed. Add --execute to commit these offsets."
    return body + "\n\n" + tail
