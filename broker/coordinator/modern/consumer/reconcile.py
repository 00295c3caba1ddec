"""Reconciliation: moving one member from what it owns toward its target (Kafka's CurrentAssignmentBuilder).

A member never gets a partition another member still owns or is still revoking: such a
partition stays pending until its owner lets go (UNRELEASED_PARTITIONS). A member that
must give partitions up stays at its epoch with them marked pending revocation
(UNREVOKED_PARTITIONS) until its heartbeat no longer reports them; only then does it move
to the target epoch and receive new ones. Revocation before assignment is what makes the
protocol incremental: partitions a member keeps are never revoked.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence

from broker.coordinator.modern.assignment import EMPTY, Assignment, owns_any
from broker.coordinator.modern.consumer.member import ConsumerGroupMember, MemberState

Owned = Sequence[tuple[uuid.UUID, Sequence[int]]] | None

# Enum members the request paths test, bound once: their lookup on the class is slow (docs/architecture.md).
_STABLE, _UNREVOKED_PARTITIONS, _UNRELEASED_PARTITIONS = (
    MemberState.STABLE, MemberState.UNREVOKED_PARTITIONS, MemberState.UNRELEASED_PARTITIONS)


class FencedMember(Exception):
    """The member is in a state the coordinator cannot reconcile from: it must rejoin empty-handed."""


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: Owned,
) -> ConsumerGroupMember:
    """The member's next state, or ``member`` itself when it cannot move yet."""
    state = member.state
    if state is _STABLE:
        if member.member_epoch != target_epoch:
            return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
        return member
    if state is _UNREVOKED_PARTITIONS:
        if owns_any(owned, member.partitions_pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if state is _UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    # A state written by a newer coordinator: start over from nothing.
    if owned is None or any(True for _ in owned):
        raise FencedMember(f"member {member.member_id} is in an unknown state and must rejoin")
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _next(
    member: ConsumerGroupMember,
    epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: Owned,
) -> ConsumerGroupMember:
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    pending: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    current = member.assigned_partitions
    for topic_id in set(target) | set(current):
        wanted = target.get(topic_id, frozenset())
        have = current.get(topic_id, frozenset())
        keep = have & wanted
        if keep:
            assigned[topic_id] = keep
        if have - keep:
            revoking[topic_id] = have - keep
        free = set()
        for partition in wanted - keep:
            if partition_epoch(topic_id, partition) != -1:
                unreleased = True
            else:
                free.add(partition)
        if free:
            pending[topic_id] = frozenset(free)
    if revoking and owns_any(owned, revoking):
        # Give up first, at the current epoch; nothing new until the client confirms.
        return dataclasses.replace(
            member, state=MemberState.UNREVOKED_PARTITIONS, member_epoch=epoch,
            previous_member_epoch=_previous(member, epoch), assigned_partitions=assigned,
            partitions_pending_revocation=revoking)
    for topic_id, partitions in pending.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    return dataclasses.replace(
        member,
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        member_epoch=target_epoch,
        previous_member_epoch=_previous(member, target_epoch),
        assigned_partitions=assigned,
        partitions_pending_revocation=EMPTY,
    )


def _previous(member: ConsumerGroupMember, epoch: int) -> int:
    """Kafka's Builder.updateMemberEpoch: the epoch the member had before this step."""
    return member.member_epoch
