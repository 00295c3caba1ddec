"""The machinery of a classic rebalance: session and rebalance timers, joins completing, members leaving.

Kafka keeps this in GroupMetadataManager beside the request handlers (prepareRebalance,
completeClassicGroupJoin, the heartbeat, join and sync expirations, removeMemberAndUpdate
ClassicGroup). The request handlers are in ``classic.manager``; this is what they and the
timers share. docs/coordinator-rules.md says each rule in the project's words.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, MutableMapping

from broker.coordinator.classic.group import ClassicGroup, ClassicMember
from broker.coordinator.classic.state import ClassicGroupState
from broker.coordinator.config import CoordinatorConfig
from broker.coordinator.effects import Effects
from broker.coordinator.records import GroupMetadataRecord
from broker.coordinator.requests import (
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResult,
    SyncGroupResult,
)
from broker.coordinator.timers import TimerKind, Timers
from protocol.errors import ErrorCode

log = logging.getLogger("kcoord.coordinator")

E = ErrorCode
S = ClassicGroupState

# Timer kinds; a timer is valid only while its group still holds the deadline it carries.
HEARTBEAT, PENDING, JOIN, SYNC = "classic-heartbeat", "classic-pending", "classic-join", "classic-sync"


def join_error(error: ErrorCode, member_id: str = "") -> JoinGroupResult:
    return JoinGroupResult(error, member_id)


def sync_reply(error: ErrorCode, assignment: bytes = b"", group: ClassicGroup | None = None) -> SyncGroupResult:
    if error is E.NONE and group is not None:
        return SyncGroupResult(error, assignment, group.protocol_type, group.protocol)
    return SyncGroupResult(error, assignment)


class ClassicRebalancer:
    """Every classic group of the shard, their timers, and how a rebalance moves on."""

    def __init__(
        self,
        config: CoordinatorConfig,
        groups: MutableMapping[str, object],
        timers: Timers,
        new_id: Callable[[], str] | None = None,
        has_offsets: Callable[[str], bool] = lambda _group: False,
    ) -> None:
        self.config = config
        self.groups = groups
        self.timers = timers
        self._new_id = new_id or (lambda: str(uuid.uuid4()))
        self._has_offsets = has_offsets
        self.rebalances = 0  # completed joins since start-up: generation bumps
        timers.register(HEARTBEAT, TimerKind(self._heartbeat_current, self._on_heartbeat_expiry))
        timers.register(PENDING, TimerKind(self._pending_current, self._on_pending_expiry))
        timers.register(JOIN, TimerKind(self._join_current, self._on_join_deadline))
        timers.register(SYNC, TimerKind(self._sync_current, self._on_sync_deadline))

    def classic_group(self, group_id: str) -> ClassicGroup | None:
        """The classic group of that id; groups of other types belong to their own managers."""
        group = self.groups.get(group_id)
        return group if isinstance(group, ClassicGroup) else None

    # ------------------------------------------------------------------ records

    def persist(self, group: ClassicGroup, fx: Effects, assignments: dict[str, bytes] | None = None) -> None:
        """Write the group's GroupMetadata record; replaying it updates the live group."""
        fx.write(group.group_id, GroupMetadataRecord(group.group_id, group.metadata(assignments)))

    # ------------------------------------------------------------------ timers

    def _heartbeat_current(self, deadline: int, group_id: str, member_id: str) -> bool:
        group = self.classic_group(group_id)
        member = None if group is None else group.members.get(member_id)
        return member is not None and member.heartbeat_deadline == deadline

    def _pending_current(self, deadline: int, group_id: str, member_id: str) -> bool:
        group = self.classic_group(group_id)
        return group is not None and group.pending_members.get(member_id) == deadline

    def _join_current(self, deadline: int, group_id: str, _member_id: str) -> bool:
        group = self.classic_group(group_id)
        return group is not None and group.join_deadline == deadline and group.state is S.PREPARING_REBALANCE

    def _sync_current(self, deadline: int, group_id: str, _member_id: str) -> bool:
        group = self.classic_group(group_id)
        return group is not None and group.sync_deadline == deadline

    def touch(self, group: ClassicGroup, member: ClassicMember, now: int, timeout_ms: int | None = None) -> None:
        """Restart a member's session timer (Kafka's rescheduleClassicGroupMemberHeartbeat)."""
        member.heartbeat_deadline = now + (member.session_timeout_ms if timeout_ms is None else timeout_ms)
        self.timers.schedule(member.heartbeat_deadline, HEARTBEAT, group.group_id, member.member_id)

    def _on_heartbeat_expiry(self, group_id: str, member_id: str, now: int, fx: Effects) -> None:
        group = self.classic_group(group_id)
        assert group is not None
        member = group.members[member_id]
        # Members parked in JoinGroup or SyncGroup are alive, except brand-new members,
        # which the new-member join timeout covers instead.
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return
        log.info("member %s of group %s failed its session timeout; removing it", member_id, group_id)
        self._remove_member_and_update_group(group, member, now, fx)

    def _on_pending_expiry(self, group_id: str, member_id: str, now: int, fx: Effects) -> None:
        group = self.classic_group(group_id)
        assert group is not None
        del group.pending_members[member_id]
        log.info("pending member %s of group %s expired", member_id, group_id)
        if group.state is S.PREPARING_REBALANCE:
            self._try_complete_join(group, now, fx)
        self.drop_if_unused(group)

    # ------------------------------------------------------------------ helpers

    def drop_if_unused(self, group: ClassicGroup) -> None:
        """Forget an Empty group that never held anything (e.g. a join that failed)."""
        if (
            group.state is S.EMPTY
            and group.generation == 0
            and not group.members
            and not group.pending_members
            and not self._has_offsets(group.group_id)
        ):
            self.groups.pop(group.group_id, None)

    def _member_list(self, group: ClassicGroup) -> tuple[JoinGroupMember, ...]:
        return tuple(
            JoinGroupMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol))
            for m in group.members.values()
        )

    def _join_result(self, group: ClassicGroup, member: ClassicMember, *, members: bool,
                     leader: str | None = None, skip_assignment: bool = False) -> JoinGroupResult:
        return JoinGroupResult(
            error=E.NONE,
            member_id=member.member_id,
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol,
            leader=(group.leader if leader is None else leader) or "",
            skip_assignment=skip_assignment,
            members=self._member_list(group) if members else (),
        )

    # ------------------------------------------------------------------ rebalance machinery

    def maybe_prepare_rebalance(self, group: ClassicGroup, now: int, fx: Effects, reason: str) -> None:
        if group.can_rebalance:
            self.prepare_rebalance(group, now, fx, reason)

    def prepare_rebalance(self, group: ClassicGroup, now: int, fx: Effects, reason: str) -> None:
        if group.state is S.COMPLETING_REBALANCE:
            self._reset_assignments(group, E.REBALANCE_IN_PROGRESS, now, fx)
        group.sync_deadline = None
        if group.state is S.EMPTY:
            delay = self.config.initial_rebalance_delay_ms
            group.initial_delay_last = delay
            group.initial_delay_remaining = max(group.rebalance_timeout_ms - delay, 0)
            group.join_deadline = now + delay
        else:
            group.initial_delay_remaining = None
            group.join_deadline = now + group.rebalance_timeout_ms
        group.transition(S.PREPARING_REBALANCE, now)
        self.timers.schedule(group.join_deadline, JOIN, group.group_id)
        log.info("preparing to rebalance group %s (generation %d): %s", group.group_id, group.generation, reason)
        # Kafka's tryCompleteElseWatch: a join every member has already joined (e.g. the last
        # member just left) completes now, not at the next timer.
        self._try_complete_join(group, now, fx)

    def _reset_assignments(self, group: ClassicGroup, error: ErrorCode, now: int, fx: Effects) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.sync_ticket is not None:
                fx.reply(member.sync_ticket, sync_reply(error))
                member.sync_ticket = None
                # Kafka's propagateAssignment: the session timer restarts after a SyncGroup reply.
                self.touch(group, member, now)

    def _try_complete_join(self, group: ClassicGroup, now: int, fx: Effects) -> None:
        # The initial delayed join never completes early.
        if group.initial_delay_remaining is None and group.has_all_members_joined():
            self._complete_join(group, now, fx)

    def _on_join_deadline(self, group_id: str, _member_id: str, now: int, fx: Effects) -> None:
        group = self.classic_group(group_id)
        assert group is not None
        remaining = group.initial_delay_remaining
        if remaining is not None and group.new_member_added and remaining != 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, remaining)
            group.initial_delay_remaining = max(remaining - group.initial_delay_last, 0)
            group.initial_delay_last = delay
            group.join_deadline = now + delay
            self.timers.schedule(group.join_deadline, JOIN, group.group_id)
            return
        self._complete_join(group, now, fx)

    def _elect_joined_leader(self, group: ClassicGroup) -> bool:
        if group.leader is None:
            return False
        if group.members[group.leader].awaiting_join:
            return True
        for member_id, member in group.members.items():
            if member.awaiting_join:
                group.leader = member_id
                return True
        return False

    def _complete_join(self, group: ClassicGroup, now: int, fx: Effects) -> None:
        for member in list(group.members.values()):
            if not member.awaiting_join and not member.is_static:
                log.info("removing member %s of group %s: it did not rejoin", member.member_id, group.group_id)
                self._drop_member(group, member, fx)
        if not self._elect_joined_leader(group) and group.members:
            log.warning("group %s could not complete rebalance: no member rejoined", group.group_id)
            group.initial_delay_remaining = None
            group.join_deadline = now + group.rebalance_timeout_ms
            self.timers.schedule(group.join_deadline, JOIN, group.group_id)
            return
        group.generation += 1
        self.rebalances += 1
        group.join_deadline = None
        group.initial_delay_remaining = None
        group.new_member_added = False
        group.pending_sync.clear()
        if not group.members:
            group.protocol = None
            group.transition(S.EMPTY, now)
            log.info("group %s with generation %d is now empty", group.group_id, group.generation)
            self.persist(group, fx)
            return
        group.protocol = group.select_protocol()
        group.transition(S.COMPLETING_REBALANCE, now)
        log.info("stabilized group %s generation %d (%d member%s, protocol %s)", group.group_id, group.generation,
                 group.size, "" if group.size == 1 else "s", group.protocol)
        for member in group.members.values():
            if member.join_ticket is not None:
                is_leader = member.member_id == group.leader
                fx.reply(member.join_ticket, self._join_result(group, member, members=is_leader))
                group.set_join_ticket(member, None)
            self.touch(group, member, now)
            member.is_new = False
            group.pending_sync[member.member_id] = None
        group.sync_deadline = now + group.rebalance_timeout_ms
        self.timers.schedule(group.sync_deadline, SYNC, group.group_id)

    def _on_sync_deadline(self, group_id: str, _member_id: str, now: int, fx: Effects) -> None:
        group = self.classic_group(group_id)
        assert group is not None
        group.sync_deadline = None
        if group.state not in (S.COMPLETING_REBALANCE, S.STABLE) or not group.pending_sync:
            return
        missing = sorted(group.pending_sync)
        log.info("removing members %s of group %s: no SyncGroup within the rebalance timeout",
                 missing, group.group_id)
        for member_id in missing:
            member = group.members.get(member_id)
            if member is not None:
                self._drop_member(group, member, fx)
        self.prepare_rebalance(group, now, fx, f"members {missing} never sent SyncGroup")

    def _drop_member(self, group: ClassicGroup, member: ClassicMember, fx: Effects) -> None:
        """Remove a member, answering anything it has parked."""
        if member.join_ticket is not None:
            fx.reply(member.join_ticket, join_error(E.UNKNOWN_MEMBER_ID))
            group.set_join_ticket(member, None)
        if member.sync_ticket is not None:
            fx.reply(member.sync_ticket, sync_reply(E.UNKNOWN_MEMBER_ID))
            member.sync_ticket = None
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: ClassicGroup, member: ClassicMember, now: int,
                                        fx: Effects) -> None:
        self._drop_member(group, member, fx)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance(group, now, fx, f"removing member {member.member_id}")
        elif group.state is S.PREPARING_REBALANCE:
            self._try_complete_join(group, now, fx)

    def _add_member_and_rebalance(self, group: ClassicGroup, member: ClassicMember, now: int,
                                  fx: Effects) -> None:
        member.is_new = True
        if group.state is S.PREPARING_REBALANCE and group.generation == 0:
            group.new_member_added = True
        group.add(member)
        self.touch(group, member, now, self.config.new_member_join_timeout_ms)
        self.maybe_prepare_rebalance(group, now, fx, f"adding new member {member.member_id}")

    @staticmethod
    def _park_join(group: ClassicGroup, member: ClassicMember, ticket: int, fx: Effects) -> None:
        if member.join_ticket is not None and member.join_ticket != ticket:
            # A newer JoinGroup supersedes one still parked; the old one must not hang.
            fx.reply(member.join_ticket, join_error(E.REBALANCE_IN_PROGRESS, member.member_id))
        group.set_join_ticket(member, ticket)

    def _update_member_and_rebalance(self, group: ClassicGroup, member: ClassicMember, request: JoinGroupRequest,
                                     ticket: int, now: int, fx: Effects, reason: str) -> None:
        group.set_protocols(member, request.protocols)
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        self._park_join(group, member, ticket, fx)
        self.maybe_prepare_rebalance(group, now, fx, reason)
