"""The console's changes: reset (planned, previewed, then committed), delete offsets, delete a group.

A reset is two steps, as ``kcoord offsets reset`` is a dry run unless ``--execute``: ``plan``
computes every partition's new offset with the same planner (``admin.plan``), the page
shows it, and ``commit_plan`` commits exactly the offsets that were shown. Both refuse
while the group has members, as Kafka's broker does (an administrative commit to a group
with members fails with UNKNOWN_MEMBER_ID), and the broker is the final judge.

``restore-as-of`` reads the group's committed offsets at a past time from the coordinator
log's history (``pipeline.history``, the reader ``kcoord offsets restore --as-of`` uses).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from admin.client import AdminClient, CommittedOffset, TopicPartition
from admin.errors import GroupStateError, UsageError
from admin.inputs import OffsetRow, format_time, parse_duration, parse_time
from admin.plan import (
    BY_DURATION,
    EARLIEST,
    LATEST,
    NEAREST,
    SHIFT_BY,
    TO_DATETIME,
    TO_OFFSET,
    PlanRow,
    Strategy,
    plan_reset,
    plan_restore,
)
from console.data import COMMITTABLE_STATES, group_state

RESTORE_AS_OF = "restore-as-of"

#: The form's strategies, in the order the form lists them: (name, label, what the value is).
STRATEGIES: tuple[tuple[str, str, str], ...] = (
    (EARLIEST, "Earliest: the log start offset", ""),
    (LATEST, "Latest: the log end offset", ""),
    (TO_OFFSET, "Offset: a given offset, kept within the log", "offset"),
    (SHIFT_BY, "Shift by: the committed offset plus N (negative goes back)", "N"),
    (TO_DATETIME, "Date and time: the first offset at or after it", "ISO-8601 time, e.g. 2026-01-05T10:00:00Z"),
    (BY_DURATION, "Duration: the first offset at or after now minus it", "ISO-8601 duration, e.g. PT15M"),
    (NEAREST, "Nearest: the committed offset moved into the log when out of range", ""),
    (RESTORE_AS_OF, "Restore as of: the offsets the group had committed at a past time (history)",
     "ISO-8601 time, e.g. 2026-01-05T10:00:00Z"),
)
_NAMES = {name for name, _, _ in STRATEGIES}


@dataclass
class Plan:
    group: str
    action: str
    rows: list[PlanRow]
    state: str
    members: int

    @property
    def committable(self) -> bool:
        return self.state in COMMITTABLE_STATES

    @property
    def changes(self) -> list[PlanRow]:
        return [r for r in self.rows if r.new is not None]


def parse_strategy(name: str, value: str, now_ms: int | None = None) -> tuple[Strategy, str]:
    """The form's strategy and value as a ``Strategy``, and the action's wording."""
    if name not in _NAMES:
        raise UsageError(f"unknown strategy {name!r}")
    value = value.strip()
    if name in (TO_OFFSET, SHIFT_BY):
        try:
            number = int(value)
        except ValueError:
            raise UsageError(f"{value!r} is not a whole number") from None
        if name == TO_OFFSET and number < 0:
            raise UsageError(f"an offset cannot be negative ({number})")
        return Strategy(name, number), f"reset {name} {number}"
    if name in (TO_DATETIME, RESTORE_AS_OF):
        moment = parse_time(value)
        verb = "restore as of" if name == RESTORE_AS_OF else f"reset {name}"
        return Strategy(name, moment), f"{verb} {format_time(moment)}"
    if name == BY_DURATION:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        moment = now - parse_duration(value)
        return Strategy(name, moment), f"reset {name} {value} ({format_time(moment)})"
    return Strategy(name), f"reset {name}"


def _history(data_dir: Path, group: str, as_of_ms: int) -> dict[TopicPartition, OffsetRow]:
    from pipeline.history import offsets_as_of

    found = offsets_as_of(data_dir, as_of_ms, group).get(group, {})
    return {(topic, partition): OffsetRow(topic, partition, int(e["offset"]), str(e.get("metadata") or ""),
                                          int(e.get("leader_epoch", -1)))
            for (topic, partition), e in found.items()}


def plan(client: AdminClient, group: str, strategy: Strategy, action: str, topics: list[str] | None,
         data_dir: Path) -> Plan:
    """Every partition's current and new offset; ``topics`` None means every committed topic."""
    state, members = group_state(client, group)
    committed = {tp: c.offset for tp, c in client.fetch_offsets(group).items()}

    def wanted(tp: TopicPartition) -> bool:
        return topics is None or tp[0] in topics

    if strategy.name == RESTORE_AS_OF:
        restored = {tp: row for tp, row in _history(data_dir, group, strategy.value).items() if wanted(tp)}
        known = client.partitions_of({t for t, _ in restored}) if restored else {}
        restored = {tp: row for tp, row in restored.items() if tp[1] in known.get(tp[0], [])}
        rows = plan_restore(restored, committed, client.log_range(restored))
    else:
        if topics is None:
            partitions = {tp for tp in committed}
        else:
            known = client.partitions_of(topics)
            partitions = {(t, p) for t in topics for p in known[t]}
        existing = client.partitions_of({t for t, _ in partitions}) if partitions else {}
        partitions = {tp for tp in partitions if tp[1] in existing.get(tp[0], [])}
        ranges = client.log_range(partitions)
        found = client.list_offsets({tp: strategy.value for tp in partitions}) \
            if strategy.name in (TO_DATETIME, BY_DURATION) else None
        rows = plan_reset(strategy, sorted(partitions), committed, ranges, found)
    return Plan(group, action, rows, state, members)


def commit_plan(client: AdminClient, group: str, offsets: dict[TopicPartition, CommittedOffset]) -> None:
    """Commit exactly the previewed offsets; refused while the group has members."""
    refuse_if_active(client, group, "offsets can only be reset")
    if offsets:
        client.commit_offsets(group, offsets)


def refuse_if_active(client: AdminClient, group: str, what: str) -> None:
    state, count = group_state(client, group)
    if state not in COMMITTABLE_STATES:
        raise GroupStateError(
            f"group {group!r} is {state} with {count} member{'s' if count != 1 else ''}: "
            f"{what} while it is Empty. Stop its consumers (or wait for their session timeout), then retry.")
