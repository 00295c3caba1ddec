"""What an assignor is given and what it returns (Kafka's GroupSpec and GroupAssignment)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from broker.coordinator.modern.assignment import Assignment


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """One member: its static instance id (if any), the topic ids it subscribes to, its current target."""

    instance_id: str | None
    subscribed_topic_ids: frozenset[uuid.UUID]
    assignment: Assignment


@dataclass(frozen=True, slots=True)
class GroupSpec:
    members: Mapping[str, MemberSpec]
    #: topic id -> partition count, for every topic some member subscribes to and that exists.
    partitions: Mapping[uuid.UUID, int]

    @property
    def homogeneous(self) -> bool:
        """Every member subscribes to the same topics."""
        subscriptions = {m.subscribed_topic_ids for m in self.members.values()}
        return len(subscriptions) <= 1


GroupAssignment = dict[str, dict[uuid.UUID, frozenset[int]]]


class Assignor(Protocol):
    name: str

    def assign(self, spec: GroupSpec) -> GroupAssignment: ...
