"""Assignments: which partitions of which topics (by topic id) a member has or should have.

An assignment is a mapping from topic id to a frozenset of partition numbers; empty topics
are left out, so two assignments are equal exactly when they hold the same partitions.
They are never mutated in place: every change builds a new mapping.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from types import MappingProxyType

Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY: Assignment = MappingProxyType({})


def assignment_of(pairs: Iterable[tuple[uuid.UUID, Iterable[int]]]) -> dict[uuid.UUID, frozenset[int]]:
    """An assignment from (topic id, partitions) pairs; repeated topics merge, empty ones go."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for topic_id, partitions in pairs:
        merged = out.get(topic_id, frozenset()) | frozenset(partitions)
        if merged:
            out[topic_id] = merged
    return out


def pairs_of(assignment: Assignment) -> list[tuple[uuid.UUID, list[int]]]:
    """(topic id, sorted partitions), in a stable order: for records and replies."""
    return [(topic_id, sorted(assignment[topic_id])) for topic_id in sorted(assignment)]


def union(a: Assignment, b: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    out = dict(a)
    for topic_id, partitions in b.items():
        out[topic_id] = out.get(topic_id, frozenset()) | partitions
    return out


def size(assignment: Assignment) -> int:
    return sum(len(p) for p in assignment.values())


def is_subset(owned: Iterable[tuple[uuid.UUID, Iterable[int]]] | None, target: Assignment) -> bool:
    """Whether every partition the member reports owning is in ``target`` (None: unknown, so no)."""
    if owned is None:
        return False
    for topic_id, partitions in owned:
        held = target.get(topic_id)
        if held is None:
            if any(True for _ in partitions):
                return False
            continue
        if not held.issuperset(partitions):
            return False
    return True


def owns_any(owned: Iterable[tuple[uuid.UUID, Iterable[int]]] | None, pending: Assignment) -> bool:
    """Whether the member still reports owning any partition of ``pending`` (None: assume it does)."""
    if owned is None:
        return True
    for topic_id, partitions in owned:
        revoking = pending.get(topic_id)
        if revoking and any(p in revoking for p in partitions):
            return True
    return False
