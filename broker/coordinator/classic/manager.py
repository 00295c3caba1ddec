"""The classic rebalance protocol's requests: JoinGroup, SyncGroup, Heartbeat and LeaveGroup.

Kafka keeps these rules in GroupMetadataManager (classicGroupJoin, classicGroupSync,
classicGroupHeartbeat, classicGroupLeave); the rules below follow it, and
docs/coordinator-rules.md says each one in the project's words. A request with a ticket is
answered in the given effects or parked on its member; parked requests are answered in the
effects of a later call (``classic.rebalance`` moves the group on). The group's
GroupMetadata record is written where Kafka writes it: when a join leaves the group Empty,
when the leader's assignment arrives, and when a static member is replaced in a Stable group.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from broker.coordinator.classic.group import ClassicGroup, ClassicMember
from broker.coordinator.classic.rebalance import PENDING, ClassicRebalancer, join_error, sync_reply
from broker.coordinator.classic.state import ClassicGroupState
from broker.coordinator.effects import Effects
from broker.coordinator.requests import (
    HeartbeatRequest,
    HeartbeatResult,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeaveGroupResult,
    SyncGroupRequest,
)
from protocol.errors import ErrorCode

log = logging.getLogger("kcoord.coordinator")

E = ErrorCode
S = ClassicGroupState

# Enum members the request paths test, bound once: their lookup on the class is slow (docs/architecture.md).
_NONE = E.NONE
_DEAD, _EMPTY, _PREPARING_REBALANCE = S.DEAD, S.EMPTY, S.PREPARING_REBALANCE


class ClassicGroupManager(ClassicRebalancer):
    """Every classic group of the shard, and the requests that change them."""

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
        group = self.classic_group(group_id)
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
            group.set_join_ticket(member, None)
        if member.sync_ticket is not None:
            fx.reply(member.sync_ticket, sync_reply(E.FENCED_INSTANCE_ID))
            member.sync_ticket = None
        group.rename_member(old_id, new_id)
        log.info("static member %s of group %s replaced by %s", old_id, group.group_id, new_id)
        self.touch(group, member, now)
        group.set_protocols(member, request.protocols)
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
                self._park_join(group, member, ticket, fx)
                self.maybe_prepare_rebalance(group, now, fx, f"static member {new_id} changed protocols")
        elif group.state is S.COMPLETING_REBALANCE:
            self._park_join(group, member, ticket, fx)
            self.prepare_rebalance(group, now, fx, f"static member {new_id} rejoined during sync")
        else:  # PreparingRebalance: wait with everyone else
            self._park_join(group, member, ticket, fx)

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
        group = self.classic_group(group_id)
        error = self._sync_error(group, request)
        if error is not None or group is None:
            fx.reply(ticket, sync_reply(error or E.UNKNOWN_MEMBER_ID))
            return
        member = group.members[member_id]
        group.pending_sync.pop(member_id, None)
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
        fx.reply(ticket, tuple.__new__(HeartbeatResult, (self._heartbeat(now, request),)))

    def _heartbeat(self, now: int, request: HeartbeatRequest) -> ErrorCode:
        if not request.group_id:
            return E.INVALID_GROUP_ID
        group = self.classic_group(request.group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        state = group.state
        if state is _DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not None:
            return error
        if request.generation_id != group.generation:
            return E.ILLEGAL_GENERATION
        if state is _EMPTY:
            return E.UNKNOWN_MEMBER_ID
        self.touch(group, group.members[request.member_id], now)
        if group.state is _PREPARING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        return _NONE

    # ------------------------------------------------------------------ LeaveGroup

    def leave_group(self, ticket: int, now: int, request: LeaveGroupRequest, fx: Effects) -> None:
        group_id = request.group_id
        if not group_id:
            fx.reply(ticket, LeaveGroupResult(E.INVALID_GROUP_ID))
            return
        group = self.classic_group(group_id)
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

    def on_loaded(self, now: int, fx: Effects, only: Collection[str] | None = None) -> None:
        """After replay: member session timers restart, groups over group.max.size rebalance.

        ``only``: the groups just loaded (a coordinator partition a cluster node took over).
        """
        loaded = self.groups.values() if only is None else [self.groups[g] for g in only if g in self.groups]
        # Most groups have offsets only (no members: nothing to time, never over the limit).
        for group in [g for g in loaded if isinstance(g, ClassicGroup) and g.members]:
            for member in group.members.values():
                self.touch(group, member, now)
            if group.size > self.config.max_size:
                self.prepare_rebalance(group, now, fx, f"group is over group.max.size={self.config.max_size}")
