"""Groups of every type, and the group questions that do not depend on the type.

Kafka's GroupMetadataManager holds all groups of a shard, whatever their protocol. Here the
registry and the type-independent parts live (lookup, ListGroups, DescribeGroups, which
groups may be deleted or expire, replay of group records, and which manager a request goes
to); each group type keeps its own protocol in its own package: ``classic/`` and
``modern/consumer/`` (KIP-848), as in Kafka. A group answers the offset rules' questions
itself (``validate_offset_commit``, ``is_subscribed_to_topic``...).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from broker.coordinator.classic.group import GROUP_OPERATIONS, ClassicGroup
from broker.coordinator.classic.manager import ClassicGroupManager
from broker.coordinator.classic.rebalance import join_error, sync_reply
from broker.coordinator.classic.state import ClassicGroupState
from broker.coordinator.config import CoordinatorConfig
from broker.coordinator.effects import Effects
from broker.coordinator.modern.consumer.classic_members import ClassicMembers
from broker.coordinator.modern.consumer.describe import describe_consumer_group
from broker.coordinator.modern.consumer.group import ConsumerGroup, apply_record
from broker.coordinator.modern.consumer.manager import ConsumerGroupManager
from broker.coordinator.modern.consumer.migration import Migration
from broker.coordinator.modern.topics import MetadataImage
from broker.coordinator.records import (
    ConsumerGroupCurrentAssignmentRecord,
    ConsumerGroupEpochRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupRecord,
    ConsumerGroupSubscriptionMetadataRecord,
    ConsumerGroupTargetAssignmentEpochRecord,
    ConsumerGroupTargetMemberRecord,
    GroupMetadataRecord,
)
from broker.coordinator.requests import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResult,
    DescribedConsumerGroup,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResult,
    FetchGroup,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    ListGroupsResult,
    OffsetCommitRequest,
    SyncGroupRequest,
)
from broker.coordinator.timers import Timers
from protocol.errors import ErrorCode

log = logging.getLogger("kcoord.coordinator")

E = ErrorCode
S = ClassicGroupState

# Enum members the request paths test, bound once: their lookup on the class is slow (docs/architecture.md).
_MEMBERS_HEARTBEAT = (S.STABLE, S.PREPARING_REBALANCE)  # a tuple: identity tests, no Enum __hash__

Group = ClassicGroup | ConsumerGroup  # the group types the shard holds


def _dead(group_id: str, authorized_operations: int | None) -> DescribedGroup:
    return DescribedGroup(group_id, "Dead", "", "", (), authorized_operations=authorized_operations)


class GroupMetadataManager:
    def __init__(self, config: CoordinatorConfig, timers: Timers, new_id: Callable[[], str] | None,
                 has_offsets: Callable[[str], bool], image: Callable[[], MetadataImage | None]) -> None:
        self.config = config
        self.groups: dict[str, Group] = {}
        self._has_offsets = has_offsets
        registry: dict[str, object] = self.groups  # type: ignore[assignment]
        self.classic = ClassicGroupManager(config, registry, timers, new_id, has_offsets)
        self.consumer = ConsumerGroupManager(config, registry, timers, image)
        self.classic_members = ClassicMembers(self.consumer)
        self.migration = Migration(self.consumer, self.classic, self.classic_members)

    # ------------------------------------------------------------------ replay

    def replay(self, record: GroupMetadataRecord | ConsumerGroupRecord) -> None:
        group_id = record.group_id
        existing = self.groups.get(group_id)
        if isinstance(record, GroupMetadataRecord):
            if record.value is None:
                if isinstance(existing, ClassicGroup):
                    del self.groups[group_id]
            elif isinstance(existing, ClassicGroup):
                existing.apply_metadata(record.value)
            else:
                self.groups[group_id] = ClassicGroup.loaded(group_id, record.value)
            return
        if isinstance(record, ConsumerGroupEpochRecord) and record.epoch is None:
            if isinstance(existing, ConsumerGroup):
                del self.groups[group_id]
            return
        if not isinstance(existing, ConsumerGroup):
            if _is_tombstone(record):
                return  # nothing to delete
            existing = self.groups[group_id] = ConsumerGroup(group_id)
        apply_record(existing, record)

    def on_loaded(self, offset_groups: list[str], now: int, fx: Effects, only: Collection[str] | None = None) -> None:
        """After replay: groups known only by their offsets exist (Empty, simple), then each type loads.

        ``only``: the groups just loaded, when a cluster node takes over a coordinator partition.
        """
        for group_id in offset_groups:
            if group_id not in self.groups and (only is None or group_id in only):
                self.groups[group_id] = ClassicGroup(group_id, state_timestamp=now)
        self.classic.on_loaded(now, fx, only)
        self.consumer.on_loaded(now, only)

    def unload(self, group_ids: Collection[str], fx: Effects) -> None:
        """Kafka's onUnloaded: another node coordinates these groups now. Parked requests are
        answered NOT_COORDINATOR (their clients look the coordinator up again) and the groups
        leave memory; nothing is written."""
        for group_id in group_ids:
            group = self.groups.pop(group_id, None)
            if isinstance(group, ClassicGroup):
                for member in group.members.values():
                    if member.join_ticket is not None:
                        fx.reply(member.join_ticket, join_error(E.NOT_COORDINATOR, member.member_id))
                        group.set_join_ticket(member, None)
                    if member.sync_ticket is not None:
                        fx.reply(member.sync_ticket, sync_reply(E.NOT_COORDINATOR))
                        member.sync_ticket = None
        self.consumer.forget(group_ids)

    # ------------------------------------------------------------------ classic requests, to either type

    def join_group(self, ticket: int, now: int, request: JoinGroupRequest, fx: Effects) -> None:
        group = self.groups.get(request.group_id)
        if isinstance(group, ConsumerGroup):
            self.classic_members.join_group(ticket, now, group, request, fx)
        else:
            self.classic.join_group(ticket, now, request, fx)

    def sync_group(self, ticket: int, now: int, request: SyncGroupRequest, fx: Effects) -> None:
        group = self.groups.get(request.group_id)
        if isinstance(group, ConsumerGroup):
            self.classic_members.sync_group(ticket, now, group, request, fx)
        else:
            self.classic.sync_group(ticket, now, request, fx)

    def heartbeat(self, ticket: int, now: int, request: HeartbeatRequest, fx: Effects) -> None:
        group = self.groups.get(request.group_id)
        if isinstance(group, ConsumerGroup):
            self.classic_members.heartbeat(ticket, now, group, request, fx)
        else:
            self.classic.heartbeat(ticket, now, request, fx)

    def leave_group(self, ticket: int, now: int, request: LeaveGroupRequest, fx: Effects) -> None:
        group = self.groups.get(request.group_id)
        if isinstance(group, ConsumerGroup):
            self.classic_members.leave_group(ticket, now, group, request, fx)
        else:
            self.classic.leave_group(ticket, now, request, fx)

    # ------------------------------------------------------------------ offsets' questions

    def validate_offset_commit(self, request: OffsetCommitRequest, now: int) -> ErrorCode | None:
        """Kafka's OffsetMetadataManager.validateOffsetCommit, up to the group's own check.

        A commit without a generation for an unknown group creates a simple group (offsets
        only), as Kafka does for admin clients and consumers that assign themselves.
        """
        group = self.groups.get(request.group_id)
        if group is None:
            if request.generation_id_or_member_epoch >= 0:
                return E.GROUP_ID_NOT_FOUND if request.consumer_protocol_version else E.ILLEGAL_GENERATION
            self.groups[request.group_id] = ClassicGroup(request.group_id, state_timestamp=now)
            return None
        if group.is_dead:
            return E.COORDINATOR_NOT_AVAILABLE
        error = group.validate_offset_commit(request)
        if error is None and isinstance(group, ClassicGroup) and group.state in _MEMBERS_HEARTBEAT:
            member = group.members.get(request.member_id)
            if member is not None:
                self.classic.touch(group, member, now)
        return error

    def validate_offset_fetch(self, request: FetchGroup) -> ErrorCode | None:
        group = self.groups.get(request.group_id)
        if isinstance(group, ConsumerGroup):
            return group.validate_offset_fetch(request.member_id, request.member_epoch)
        return None

    def after_offset_commit(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if isinstance(group, ClassicGroup):
            self.classic.drop_if_unused(group)

    def validate_offset_delete(self, group_id: str) -> tuple[ErrorCode | None, Callable[[str], bool]]:
        """(the group-level error, which topics the group still subscribes to)."""
        if not group_id:
            return E.INVALID_GROUP_ID, lambda _t: False
        group = self.groups.get(group_id)
        if group is None or group.is_dead:
            return E.GROUP_ID_NOT_FOUND, lambda _t: False
        return group.validate_offset_delete(), group.is_subscribed_to_topic

    def validate_delete_group(self, group_id: str) -> ErrorCode | None:
        group = self.groups.get(group_id)
        if group is None or group.is_dead:
            return E.GROUP_ID_NOT_FOUND
        return group.validate_delete_group()

    def delete_group(self, group_id: str, now: int, fx: Effects) -> None:
        """The group is gone: its tombstones, and it leaves the registry (the caller deleted its offsets)."""
        group = self.groups[group_id]
        if isinstance(group, ClassicGroup):
            group.transition(S.DEAD, now)
            fx.write(group_id, GroupMetadataRecord(group_id, None))
            self.groups.pop(group_id, None)
        else:
            for record in consumer_group_tombstones(group):
                fx.write(group_id, record)
        log.info("group %s deleted", group_id)

    def maybe_delete_expired(self, group: Group, now: int, fx: Effects) -> None:
        """An empty group whose offsets all expired goes (Kafka's maybeDeleteGroup)."""
        if self._has_offsets(group.group_id) or not group.is_empty() or group.members:
            return
        if isinstance(group, ClassicGroup):
            if group.pending_members:
                return
            group.transition(S.DEAD, now)
            self.groups.pop(group.group_id, None)
            if group.generation > 0:
                fx.write(group.group_id, GroupMetadataRecord(group.group_id, None))
        else:
            for record in consumer_group_tombstones(group):
                fx.write(group.group_id, record)
        log.info("group %s has no offsets left and is removed", group.group_id)

    # ------------------------------------------------------------------ admin

    def describe(self, request: DescribeGroupsRequest) -> DescribeGroupsResult:
        # Without an authorizer every operation a group supports is allowed.
        operations = GROUP_OPERATIONS if request.include_authorized_operations else None
        described = []
        for group_id in request.group_ids:
            group = self.groups.get(group_id)
            if isinstance(group, ClassicGroup) and not group.is_dead:
                described.append(group.describe(operations))
            else:  # DescribeGroups describes classic groups only; consumer groups have ConsumerGroupDescribe
                described.append(_dead(group_id, operations))
        return DescribeGroupsResult(tuple(described))

    def consumer_describe(self, request: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResult:
        operations = GROUP_OPERATIONS if request.include_authorized_operations else None
        image = self.consumer.image()
        out = []
        for group_id in request.group_ids:
            group = self.groups.get(group_id)
            if isinstance(group, ConsumerGroup) and not group.is_dead:
                out.append(describe_consumer_group(group, self.consumer.assignor_names(), image, operations))
            elif group is None or group.is_dead:
                out.append(DescribedConsumerGroup(group_id, E.GROUP_ID_NOT_FOUND,
                                                  f"Group {group_id} not found.", authorized_operations=operations))
            else:
                out.append(DescribedConsumerGroup(group_id, E.GROUP_ID_NOT_FOUND,
                                                  f"Group {group_id} is not a consumer group.",
                                                  authorized_operations=operations))
        return ConsumerGroupDescribeResult(tuple(out))

    def list_groups(self, request: ListGroupsRequest) -> ListGroupsResult:
        states = {s.lower() for s in request.states}
        types = {t.lower() for t in request.types}
        listed = []
        for group in self.groups.values():
            if group.is_dead:
                continue
            entry = group.listing()
            if states and entry.state.lower() not in states:
                continue
            if types and entry.group_type not in types:
                continue
            listed.append(entry)
        return ListGroupsResult(tuple(listed))

    def consuming(self, topic: str) -> list[Group]:
        """Groups with live members that subscribe to ``topic`` (the partition-expansion guard)."""
        return [g for g in self.groups.values() if not g.is_dead and topic in g.consuming_topics()]


def _is_tombstone(record: ConsumerGroupRecord) -> bool:
    if isinstance(record, ConsumerGroupEpochRecord | ConsumerGroupTargetAssignmentEpochRecord):
        return record.epoch is None
    if isinstance(record, ConsumerGroupSubscriptionMetadataRecord):
        return record.topics is None
    if isinstance(record, ConsumerGroupTargetMemberRecord):
        return record.assignment is None
    return record.member is None


def consumer_group_tombstones(group: ConsumerGroup) -> list[ConsumerGroupRecord]:
    """Kafka's ConsumerGroup.createGroupTombstoneRecords, in its order."""
    gid = group.group_id
    out: list[ConsumerGroupRecord] = []
    out.extend(ConsumerGroupCurrentAssignmentRecord(gid, m, None) for m in group.members)
    out.extend(ConsumerGroupTargetMemberRecord(gid, m, None) for m in group.members)
    out.append(ConsumerGroupTargetAssignmentEpochRecord(gid, None))
    out.extend(ConsumerGroupMemberMetadataRecord(gid, m, None) for m in group.members)
    out.append(ConsumerGroupSubscriptionMetadataRecord(gid, None))
    out.append(ConsumerGroupEpochRecord(gid, None))
    return out
