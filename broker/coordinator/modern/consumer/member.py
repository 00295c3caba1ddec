"""A consumer group member: what it subscribes to, and where its reconciliation stands.

Immutable: every change builds a new member (``dataclasses.replace``), and the group holds
whatever replay of its records last put there. The epochs follow KIP-848: a member at
epoch N owns the partitions of its assignment; ``previous_member_epoch`` lets a member
whose last response was lost come back with the epoch before.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from broker.coordinator.modern.assignment import EMPTY, Assignment

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
JOIN_GROUP_MEMBER_EPOCH = 0


class MemberState(enum.IntEnum):
    """Where a member is in its reconciliation (Kafka's MemberState, with its record values)."""

    STABLE = 0  # holds exactly what it may hold at its epoch
    UNREVOKED_PARTITIONS = 1  # must give partitions up before it can move to the next epoch
    UNRELEASED_PARTITIONS = 2  # waits for partitions other members still own
    UNKNOWN = 127


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """For a member that speaks the classic protocol inside a consumer group (KIP-848 migration)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic: ClassicMemberMetadata | None = None
    # Reconciliation (the ConsumerGroupCurrentMemberAssignment record).
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned_partitions: Assignment = field(default_factory=lambda: EMPTY)
    partitions_pending_revocation: Assignment = field(default_factory=lambda: EMPTY)

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    @property
    def is_reconciled_at(self) -> int:
        """The epoch it is stable at, or -1 while still reconciling."""
        return self.member_epoch if self.state is MemberState.STABLE else -1

    def subscription_equals(self, other: ConsumerGroupMember) -> bool:
        """Same topics, regex and assignor: what decides whether the group epoch must be bumped."""
        return (
            self.subscribed_topic_names == other.subscribed_topic_names
            and self.subscribed_topic_regex == other.subscribed_topic_regex
            and self.server_assignor == other.server_assignor
        )

    def metadata_equals(self, other: ConsumerGroupMember) -> bool:
        """Same ConsumerGroupMemberMetadata record."""
        return (
            self.instance_id == other.instance_id
            and self.rack_id == other.rack_id
            and self.client_id == other.client_id
            and self.client_host == other.client_host
            and self.subscription_equals(other)
            and self.rebalance_timeout_ms == other.rebalance_timeout_ms
            and self.classic == other.classic
        )

    def assignment_equals(self, other: ConsumerGroupMember) -> bool:
        """Same ConsumerGroupCurrentMemberAssignment record."""
        return (
            self.member_epoch == other.member_epoch
            and self.previous_member_epoch == other.previous_member_epoch
            and self.state == other.state
            and self.assigned_partitions == other.assigned_partitions
            and self.partitions_pending_revocation == other.partitions_pending_revocation
        )

