"""Groups of every type, and the group questions that do not depend on the type.

Kafka's GroupMetadataManager holds all groups of a shard, whatever their protocol. Here the
registry and the type-independent parts live (lookup, ListGroups, DescribeGroups, which
groups may be deleted or expire, replay of group records); each group type keeps its own
protocol in its own package (``classic/`` today, as Kafka has ``classic/`` and
``modern/consumer/``). A group answers the offset rules' questions itself
(``validate_offset_commit``, ``is_subscribed_to_topic``...).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.coordinator.classic.group import GROUP_OPERATIONS, ClassicGroup
from broker.coordinator.classic.manager import ClassicGroupManager
from broker.coordinator.classic.state import ClassicGroupState, parse_state
from broker.coordinator.config import CoordinatorConfig
from broker.coordinator.effects import Effects
from broker.coordinator.records import GroupMetadataRecord
from broker.coordinator.requests import (
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResult,
    ListGroupsRequest,
    ListGroupsResult,
    OffsetCommitRequest,
)
from broker.coordinator.timers import Timers
from protocol.errors import ErrorCode

log = logging.getLogger("kcoord.coordinator")

E = ErrorCode
S = ClassicGroupState

Group = ClassicGroup  # the union of group types the shard holds


def _dead(group_id: str, authorized_operations: int | None) -> DescribedGroup:
    return DescribedGroup(group_id, "Dead", "", "", (), authorized_operations=authorized_operations)


class GroupMetadataManager:
    def __init__(self, config: CoordinatorConfig, timers: Timers, new_id: Callable[[], str] | None,
                 has_offsets: Callable[[str], bool]) -> None:
        self.config = config
        self.groups: dict[str, Group] = {}
        self._has_offsets = has_offsets
        self.classic = ClassicGroupManager(config, self.groups, timers, new_id, has_offsets)

    # ------------------------------------------------------------------ replay

    def replay(self, record: GroupMetadataRecord) -> None:
        group_id = record.group_id
        if record.value is None:
            self.groups.pop(group_id, None)
            return
        group = self.groups.get(group_id)
        if group is None:
            self.groups[group_id] = ClassicGroup.loaded(group_id, record.value)
        else:
            group.apply_metadata(record.value)

    def on_loaded(self, offset_groups: list[str], now: int, fx: Effects) -> None:
        """After replay: groups known only by their offsets exist (Empty, simple), then each type loads."""
        for group_id in offset_groups:
            if group_id not in self.groups:
                self.groups[group_id] = ClassicGroup(group_id, state_timestamp=now)
        self.classic.on_loaded(now, fx)

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
        if error is None and group.state in (S.STABLE, S.PREPARING_REBALANCE):
            member = group.members.get(request.member_id)
            if member is not None:
                self.classic.touch(group, member, now)
        return error

    def after_offset_commit(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None:
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
        """The group is gone: its tombstone, and it leaves the registry (the caller deleted its offsets)."""
        group = self.groups[group_id]
        group.transition(S.DEAD, now)
        fx.write(group_id, GroupMetadataRecord(group_id, None))
        self.groups.pop(group_id, None)
        log.info("group %s deleted", group_id)

    def maybe_delete_expired(self, group: Group, now: int, fx: Effects) -> None:
        """An Empty group whose offsets all expired becomes Dead and goes (Kafka's maybeDeleteGroup)."""
        if (group.state is S.EMPTY and not group.members and not group.pending_members
                and not self._has_offsets(group.group_id)):
            group.transition(S.DEAD, now)
            self.groups.pop(group.group_id, None)
            if group.generation > 0:
                fx.write(group.group_id, GroupMetadataRecord(group.group_id, None))
            log.info("group %s has no offsets left and is removed", group.group_id)

    # ------------------------------------------------------------------ admin

    def describe(self, request: DescribeGroupsRequest) -> DescribeGroupsResult:
        # Without an authorizer every operation a group supports is allowed.
        operations = GROUP_OPERATIONS if request.include_authorized_operations else None
        described = []
        for group_id in request.group_ids:
            group = self.groups.get(group_id)
            if group is None or group.is_dead:
                described.append(_dead(group_id, operations))
            else:
                described.append(group.describe(operations))
        return DescribeGroupsResult(tuple(described))

    def list_groups(self, request: ListGroupsRequest) -> ListGroupsResult:
        wanted: set[ClassicGroupState] | None = None
        if request.states:
            wanted = {s for s in (parse_state(f) for f in request.states) if s is not None}
        types = {t.lower() for t in request.types}
        listed = tuple(
            g.listing() for g in self.groups.values()
            if not g.is_dead and (wanted is None or g.state in wanted)
            and (not types or g.group_type in types)
        )
        return ListGroupsResult(listed)

    def consuming(self, topic: str) -> list[Group]:
        """Groups with live members that subscribe to ``topic`` (the partition-expansion guard)."""
        return [g for g in self.groups.values() if not g.is_dead and topic in g.consuming_topics()]
