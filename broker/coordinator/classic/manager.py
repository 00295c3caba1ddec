"""The classic rebalance protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their timers.

Kafka keeps these rules in GroupMetadataManager (classicGroupJoin, classicGroupSync,
classicGroupHeartbeat, classicGroupLeave and the completion and expiry callbacks); the
rules below follow it, and docs/coordinator-rules.md says each one in the project's words.
A request with a ticket is answered in the given effects or parked on its member; parked
requests are answered in the effects of a later call. The group's GroupMetadata record is
written where Kafka writes it: when a join leaves the group Empty, when the leader's
assignment arrives, and when a static member is replaced in a Stable group.
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
    HeartbeatRequest,
    HeartbeatResult,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResult,
    LeaveGroupRequest,
    LeaveGroupResult,
    SyncGroupRequest,
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


class ClassicGroupManager:
    """Every classic group of the shard, and the rules that change them."""

    def __init__(
        self,
        config: CoordinatorConfig,
        groups: MutableMapping[str, ClassicGroup],
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

    # ------------------------------------------------------------------ records

    def persist(self, group: ClassicGroup, fx: Effects, assignments: dict[str, bytes] | None = None) -> None:
        """Write the group's GroupMetadata record; replaying it updates the live group."""
        value = group.metadata()
        if assignments is not None:
            value = type(value)(
                value.protocol_type, value.generation, value.protocol, value.leader,
                value.current_state_timestamp,
                tuple(type(m)(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                              m.rebalance_timeout_ms, m.session_timeout_ms, m.subscription,
                              assignments.get(m.member_id, b""))
                      for m in value.members),
            )
        fx.write(group.group_id, GroupMetadataRecord(group.group_id, value))

    # ------------------------------------------------------------------ timers

    def _heartbeat_current(self, deadline: int, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        return member is not None and member.heartbeat_deadline == deadline

    def _pending_current(self, deadline: int, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and group.pending_members.get(member_id) == deadline

    def _join_current(self, deadline: int, group_id: str, _member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and group.join_deadline == deadline and group.state is S.PREPARING_REBALANCE

    def _sync_current(self, deadline: int, group_id: str, _member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and group.sync_deadline == deadline

    def touch(self, group: ClassicGroup, member: ClassicMember, now: int, timeout_ms: int | None = None) -> None:
        """Restart a member's session timer (Kafka's rescheduleClassicGroupMemberHeartbeat)."""
        member.heartbeat_deadline = now + (member.session_timeout_ms if timeout_ms is None else timeout_ms)
        self.timers.schedule(member.heartbeat_deadline, HEARTBEAT, group.group_id, member.member_id)

    def _on_heartbeat_expiry(self, group_id: str, member_id: str, now: int, fx: Effects) -> None:
        group = self.groups[group_id]
        member = group.members[member_id]
        # Members parked in JoinGroup or SyncGroup are alive, except brand-new members,
        # which the new-member join timeout covers instead.
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return
        log.info("member %s of group %s failed its session timeout; removing it", member_id, group_id)
        self._remove_member_and_update_group(group, member, now, fx)

    def _on_pending_expiry(self, group_id: str, member_id: str, now: int, fx: Effects) -> None:
        group = self.groups[group_id]
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
        group = self.groups[group_id]
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
        log.info("stabilized group %s generation %d (%d members, protocol %s)",
                 group.group_id, group.generation, group.size, group.protocol)
        for member in group.members.values():
            if member.join_ticket is not None:
                is_leader = member.member_id == group.leader
                fx.reply(member.join_ticket, self._join_result(group, member, members=is_leader))
                member.join_ticket = None
            self.touch(group, member, now)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        group.sync_deadline = now + group.rebalance_timeout_ms
        self.timers.schedule(group.sync_deadline, SYNC, group.group_id)

    def _on_sync_deadline(self, group_id: str, _member_id: str, now: int, fx: Effects) -> None:
        group = self.groups[group_id]
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
            member.join_ticket = None
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
    def _park_join(member: ClassicMember, ticket: int, fx: Effects) -> None:
        if member.join_ticket is not None and member.join_ticket != ticket:
            # A newer JoinGroup supersedes one still parked; the old one must not hang.
            fx.reply(member.join_ticket, join_error(E.REBALANCE_IN_PROGRESS, member.member_id))
        member.join_ticket = ticket

    def _update_member_and_rebalance(self, group: ClassicGroup, member: ClassicMember, request: JoinGroupRequest,
                                     ticket: int, now: int, fx: Effects, reason: str) -> None:
        member.protocols = request.protocols
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        self._park_join(member, ticket, fx)
        self.maybe_prepare_rebalance(group, now, fx, reason)

    # ------------------------------------------------------------------ JoinGroup

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        limit = self.config.max_size
        if group.state in (S.EMPTY, S.DEAD):
            return True
        if group.state is S.PREPARING_REBALANCE:
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join) or group.awaiting_join_count < limit
        return member_id in group.members or group.size < limit

    def join_group(self, ticket: int, now: int, request: JoinGroupRequest, fx: Effects) -> None:
        group_id = request.group_id
        member_id = request.member_id
        if request.reason:
            log.info("JoinGroup from %s for group %s: reason %s", member_id or request.client.client_id,
                     group_id, request.reason[:255])
        if not group_id:
            fx.reply(ticket, join_error(E.INVALID_GROUP_ID, member_id))
            return
        cfg = self.config
        if not cfg.min_session_timeout_ms <= request.session_timeout_ms <= cfg.max_session_timeout_ms:
            fx.reply(ticket, join_error(E.INVALID_SESSION_TIMEOUT, member_id))
            return
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                fx.reply(ticket, join_error(E.UNKNOWN_MEMBER_ID, member_id))
                return
            group = ClassicGroup(group_id, state_timestamp=now)
            self.groups[group_id] = group

        if not self._accept_joining_member(group, member_id):
            existing = group.members.get(member_id)
            if existing is not None:
                self._drop_member(group, existing, fx)
            group.pending_members.pop(member_id, None)
            log.info("group %s is full (group.max.size=%d): turning away %s",
                     group_id, cfg.max_size, member_id or request.client.client_id)
            fx.reply(ticket, join_error(E.GROUP_MAX_SIZE_REACHED))
        elif not member_id:
            self._join_new_member(group, ticket, now, request, fx)
        else:
            self._join_current_member(group, ticket, now, request, fx)
        if group.state is S.PREPARING_REBALANCE:
            self._try_complete_join(group, now, fx)
        self.drop_if_unused(group)

    def _new_member(self, member_id: str, request: JoinGroupRequest, ticket: int,
                    instance_id: str | None) -> ClassicMember:
        return ClassicMember(member_id, instance_id, request.client.client_id, request.client.client_host,
                             request.rebalance_timeout_ms, request.session_timeout_ms, request.protocol_type,
                             request.protocols, join_ticket=ticket)

    def _join_new_member(self, group: ClassicGroup, ticket: int, now: int, request: JoinGroupRequest,
                         fx: Effects) -> None:
        if group.state is S.DEAD:
            fx.reply(ticket, join_error(E.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(request.protocol_type, request.protocols):
            fx.reply(ticket, join_error(E.INCONSISTENT_GROUP_PROTOCOL))
            return
        instance_id = request.group_instance_id
        prefix = instance_id if instance_id is not None else request.client.client_id
        new_member_id = f"{prefix}-{self._new_id()}"
        if instance_id is not None:
            old_member_id = group.static_members.get(instance_id)
            if old_member_id is None:
                log.info("static member %s (instance %s) joins group %s", new_member_id, instance_id,
                         group.group_id)
                self._add_member_and_rebalance(group, self._new_member(new_member_id, request, ticket, instance_id),
                                               now, fx)
            else:
                self._replace_static_member(group, old_member_id, new_member_id, request, ticket, now, fx)
        elif request.require_known_member_id:
            # KIP-394: the member must come back with the id we hand out.
            deadline = now + request.session_timeout_ms
            group.pending_members[new_member_id] = deadline
            self.timers.schedule(deadline, PENDING, group.group_id, new_member_id)
            fx.reply(ticket, join_error(E.MEMBER_ID_REQUIRED, new_member_id))
        else:
            self._add_member_and_rebalance(group, self._new_member(new_member_id, request, ticket, None), now, fx)

    def _replace_static_member(self, group: ClassicGroup, old_id: str, new_id: str, request: JoinGroupRequest,
                               ticket: int, now: int, fx: Effects) -> None:
        """KIP-345: a known instance id rejoins with a fresh member id; the old id is fenced."""
        current_leader = group.leader
        member = group.members[old_id]
        if member.join_ticket is not None:
            fx.reply(member.join_ticket, join_error(E.FENCED_INSTANCE_ID, old_id))
            member.join_ticket = None
        if member.sync_ticket is not None:
            fx.reply(member.sync_ticket, sync_reply(E.FENCED_INSTANCE_ID))
            member.sync_ticket = None
        group.rename_member(old_id, new_id)
        log.info("static member %s of group %s replaced by %s", old_id, group.group_id, new_id)
        self.touch(group, member, now)
        member.protocols = request.protocols
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        if group.state is S.STABLE:
            if group.select_protocol() == group.protocol:
                # Nothing changed for the group: persist the new member id, no rebalance.
                self.persist(group, fx)
                is_leader = group.leader == new_id
                if request.supports_skip_assignment:
                    fx.reply(ticket, self._join_result(group, member, members=is_leader,
                                                       skip_assignment=is_leader))
                else:
                    # The old leader id, so a rejoining leader does not run the assignor.
                    fx.reply(ticket, self._join_result(group, member, members=False, leader=current_leader))
            else:
                self._park_join(member, ticket, fx)
                self.maybe_prepare_rebalance(group, now, fx, f"static member {new_id} changed protocols")
        elif group.state is S.COMPLETING_REBALANCE:
            self._park_join(member, ticket, fx)
            self.prepare_rebalance(group, now, fx, f"static member {new_id} rejoined during sync")
        else:  # PreparingRebalance: wait with everyone else
            self._park_join(member, ticket, fx)

    def _join_current_member(self, group: ClassicGroup, ticket: int, now: int, request: JoinGroupRequest,
                             fx: Effects) -> None:
        member_id = request.member_id
        instance_id = request.group_instance_id
        if group.state is S.DEAD:
            fx.reply(ticket, join_error(E.COORDINATOR_NOT_AVAILABLE, member_id))
            return
        if not group.supports_protocols(request.protocol_type, request.protocols):
            fx.reply(ticket, join_error(E.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if member_id in group.pending_members:
            if instance_id is not None:
                fx.reply(ticket, join_error(E.UNKNOWN_MEMBER_ID, member_id))
                return
            self._add_member_and_rebalance(group, self._new_member(member_id, request, ticket, None), now, fx)
            return
        error = group.validate_member(member_id, instance_id)
        if error is not None:
            if error is E.FENCED_INSTANCE_ID:
                log.info("member %s with instance id %s is fenced", member_id, instance_id)
            fx.reply(ticket, join_error(error, member_id))
            return
        member = group.members[member_id]
        state = group.state
        if state is S.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, request, ticket, now, fx, f"member {member_id} rejoins")
        elif state is S.COMPLETING_REBALANCE:
            if member.matches(request.protocols):
                fx.reply(ticket, self._join_result(group, member, members=member_id == group.leader))
            else:
                self._update_member_and_rebalance(group, member, request, ticket, now, fx,
                                                  f"member {member_id} changed metadata")
        elif state is S.STABLE:
            if member_id == group.leader or not member.matches(request.protocols):
                self._update_member_and_rebalance(group, member, request, ticket, now, fx,
                                                  f"member {member_id} rejoins a stable group")
            else:
                fx.reply(ticket, self._join_result(group, member, members=False))
        else:
            fx.reply(ticket, join_error(E.UNKNOWN_MEMBER_ID, member_id))

    # ------------------------------------------------------------------ SyncGroup

    def sync_group(self, ticket: int, now: int, request: SyncGroupRequest, fx: Effects) -> None:
        group_id = request.group_id
        member_id = request.member_id
        if not group_id:
            fx.reply(ticket, sync_reply(E.INVALID_GROUP_ID))
            return
        group = self.groups.get(group_id)
        error = self._sync_error(group, request)
        if error is not None or group is None:
            fx.reply(ticket, sync_reply(error or E.UNKNOWN_MEMBER_ID))
            return
        member = group.members[member_id]
        group.pending_sync.discard(member_id)
        if group.state is S.STABLE:
            fx.reply(ticket, sync_reply(E.NONE, member.assignment, group))
            self.touch(group, member, now)
            return
        # CompletingRebalance: park until the leader's assignment arrives.
        if member.sync_ticket is not None and member.sync_ticket != ticket:
            fx.reply(member.sync_ticket, sync_reply(E.REBALANCE_IN_PROGRESS))
        member.sync_ticket = ticket
        if member_id == group.leader:
            assignments = dict(request.assignments)
            missing = [m for m in group.members if m not in assignments]
            if missing:
                log.warning("leader of group %s gave no assignment to %s; they get an empty one",
                            group_id, missing)
            self.persist(group, fx, assignments)  # replay sets every member's assignment
            for m in group.members.values():
                if m.sync_ticket is not None:
                    fx.reply(m.sync_ticket, sync_reply(E.NONE, m.assignment, group))
                    m.sync_ticket = None
                    self.touch(group, m, now)
            group.transition(S.STABLE, now)

    @staticmethod
    def _sync_error(group: ClassicGroup | None, request: SyncGroupRequest) -> ErrorCode | None:
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not None:
            return error
        if request.generation_id != group.generation:
            return E.ILLEGAL_GENERATION
        if request.protocol_type is not None and request.protocol_type != group.protocol_type:
            return E.INCONSISTENT_GROUP_PROTOCOL
        if request.protocol_name is not None and request.protocol_name != group.protocol:
            return E.INCONSISTENT_GROUP_PROTOCOL
        if group.state is S.EMPTY:
            return E.UNKNOWN_MEMBER_ID
        if group.state is S.PREPARING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        return None

    # ------------------------------------------------------------------ Heartbeat

    def heartbeat(self, ticket: int, now: int, request: HeartbeatRequest, fx: Effects) -> None:
        fx.reply(ticket, HeartbeatResult(self._heartbeat(now, request)))

    def _heartbeat(self, now: int, request: HeartbeatRequest) -> ErrorCode:
        if not request.group_id:
            return E.INVALID_GROUP_ID
        group = self.groups.get(request.group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not None:
            return error
        if request.generation_id != group.generation:
            return E.ILLEGAL_GENERATION
        if group.state is S.EMPTY:
            return E.UNKNOWN_MEMBER_ID
        self.touch(group, group.members[request.member_id], now)
        if group.state is S.PREPARING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    # ------------------------------------------------------------------ LeaveGroup

    def leave_group(self, ticket: int, now: int, request: LeaveGroupRequest, fx: Effects) -> None:
        group_id = request.group_id
        if not group_id:
            fx.reply(ticket, LeaveGroupResult(E.INVALID_GROUP_ID))
            return
        group = self.groups.get(group_id)
        if group is None:
            fx.reply(ticket, LeaveGroupResult(E.NONE, tuple((m, E.UNKNOWN_MEMBER_ID) for m in request.members)))
            return
        if group.state is S.DEAD:
            fx.reply(ticket, LeaveGroupResult(E.COORDINATOR_NOT_AVAILABLE))
            return
        results = tuple((leaving, self._leave_one(group, leaving.member_id, leaving.group_instance_id, now, fx))
                        for leaving in request.members)
        fx.reply(ticket, LeaveGroupResult(E.NONE, results))

    def _leave_one(self, group: ClassicGroup, member_id: str, instance_id: str | None, now: int,
                   fx: Effects) -> ErrorCode:
        if not member_id:
            current = group.static_members.get(instance_id) if instance_id is not None else None
            if current is None:
                return E.UNKNOWN_MEMBER_ID
            log.info("static member %s (instance %s) removed from group %s", current, instance_id, group.group_id)
            self._remove_member_and_update_group(group, group.members[current], now, fx)
            return E.NONE
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            if group.state is S.PREPARING_REBALANCE:
                self._try_complete_join(group, now, fx)
            return E.NONE
        error = group.validate_member(member_id, instance_id)
        if error is not None:
            return error
        log.info("member %s leaves group %s", member_id, group.group_id)
        self._remove_member_and_update_group(group, group.members[member_id], now, fx)
        return E.NONE

    # ------------------------------------------------------------------ load

    def on_loaded(self, now: int, fx: Effects) -> None:
        """After replay: member session timers restart, groups over group.max.size rebalance."""
        for group in list(self.groups.values()):
            for member in group.members.values():
                self.touch(group, member, now)
            if group.size > self.config.max_size:
                self.prepare_rebalance(group, now, fx, f"group is over group.max.size={self.config.max_size}")
