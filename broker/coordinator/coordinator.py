"""The classic group coordinator, sans-IO.

Every public method takes ``now`` (epoch ms) and returns ``Effects``. A request handed in
with a ticket is either answered in those effects or parked; parked requests are answered
in the effects of a later call (another request, or ``on_time`` when a deadline passes).
Records are encoded ``__consumer_offsets`` keys/values; replies are response bodies to be
encoded at the request's version. The shell appends the records (one batch per group),
waits until they are durable, then releases the replies.

Rules follow Kafka's classic coordinator; section numbers refer to the coordinator facts
(COORDINATOR-FACTS.md) this project is built from.
"""

from __future__ import annotations

import heapq
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.coordinator.group import Group, Member, Protocols
from broker.coordinator.offsets import MAX_PARTITION, OffsetStore
from broker.coordinator.state import CAN_REBALANCE, GroupState, parse_state
from protocol.consumer_offsets import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_value,
    encode_key,
    encode_offset_value,
)
from protocol.errors import ErrorCode

log = logging.getLogger("kcoord.coordinator")

INT32_MIN = -2147483648
# Kafka AclOperation codes a group supports: READ (3), DELETE (6), DESCRIBE (8).
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000

E = ErrorCode
S = GroupState


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2_147_483_647
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    # group.new.partitions.start: "earliest" commits new partitions' start offsets for
    # subscribed groups; "latest" commits nothing (the client's auto.offset.reset decides).
    new_partitions_start: str = "earliest"

    @classmethod
    def from_config(cls, config: Any) -> CoordinatorConfig:
        return cls(
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            max_size=config["group.max.size"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
            new_partitions_start=config["group.new.partitions.start"],
        )


Record = tuple[bytes, bytes | None]


@dataclass
class Effects:
    """What a call produced: one batch of records per group, and replies by ticket."""

    records: dict[str, list[Record]] = field(default_factory=dict)
    replies: list[tuple[int, dict[str, Any]]] = field(default_factory=list)

    def write(self, group_id: str, key: bytes, value: bytes | None) -> None:
        self.records.setdefault(group_id, []).append((key, value))

    def reply(self, ticket: int | None, body: dict[str, Any]) -> None:
        if ticket is not None:
            self.replies.append((ticket, body))

    def merge(self, other: Effects) -> None:
        for group_id, records in other.records.items():
            self.records.setdefault(group_id, []).extend(records)
        self.replies.extend(other.replies)

    def reply_for(self, ticket: int) -> dict[str, Any] | None:
        for t, body in self.replies:
            if t == ticket:
                return body
        return None


# Timer kinds; a timer is valid only while the deadline it carries is still current.
_HEARTBEAT, _PENDING, _JOIN, _SYNC = "heartbeat", "pending", "join", "sync"


def _utf16_length(text: str) -> int:
    """Java's String.length(): UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def _join_error(error: ErrorCode, member_id: str, version: int) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "error_code": int(error),
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None if version >= 7 else "",
        "leader": "",
        "skip_assignment": False,
        "member_id": member_id,
        "members": [],
    }


def _sync_reply(error: ErrorCode, assignment: bytes = b"", group: Group | None = None) -> dict[str, Any]:
    ok = error is E.NONE and group is not None
    return {
        "throttle_time_ms": 0,
        "error_code": int(error),
        "protocol_type": group.protocol_type if ok and group else None,
        "protocol_name": group.protocol if ok and group else None,
        "assignment": assignment,
    }


class GroupCoordinator:
    """All groups and offsets of this broker, and the rules that change them."""

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self.groups: dict[str, Group] = {}
        self.offsets = OffsetStore()
        self._new_id = new_id or (lambda: str(uuid.uuid4()))
        self._timers: list[tuple[int, int, str, str, str]] = []  # deadline, seq, kind, group, member
        self._timer_seq = 0
        # Counters since start-up (replay does not count), read by the metrics endpoint.
        self.rebalances = 0  # completed joins: generation bumps
        self.offsets_committed = 0  # partition offsets stored by OffsetCommit
        self.offsets_expired = 0  # offsets tombstoned by expiry

    # ------------------------------------------------------------------ timers

    def _schedule(self, deadline: int, kind: str, group_id: str, member_id: str = "") -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (deadline, self._timer_seq, kind, group_id, member_id))

    def _timer_current(self, deadline: int, kind: str, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        if group is None:
            return False
        if kind == _HEARTBEAT:
            member = group.members.get(member_id)
            return member is not None and member.heartbeat_deadline == deadline
        if kind == _PENDING:
            return group.pending_members.get(member_id) == deadline
        if kind == _JOIN:
            return group.join_deadline == deadline and group.state is S.PREPARING_REBALANCE
        return group.sync_deadline == deadline

    def next_deadline(self) -> int | None:
        """The earliest time ``on_time`` has work to do, or None."""
        timers = self._timers
        while timers:
            deadline, _, kind, group_id, member_id = timers[0]
            if self._timer_current(deadline, kind, group_id, member_id):
                return deadline
            heapq.heappop(timers)
        return None

    def on_time(self, now: int) -> Effects:
        """Fire every deadline that has passed."""
        fx = Effects()
        timers = self._timers
        while timers and timers[0][0] <= now:
            deadline, _, kind, group_id, member_id = heapq.heappop(timers)
            if not self._timer_current(deadline, kind, group_id, member_id):
                continue
            group = self.groups[group_id]
            if kind == _HEARTBEAT:
                self._on_heartbeat_expiry(group, group.members[member_id], now, fx)
            elif kind == _PENDING:
                del group.pending_members[member_id]
                log.info("pending member %s of group %s expired", member_id, group_id)
                if group.state is S.PREPARING_REBALANCE:
                    self._try_complete_join(group, now, fx)
                self._drop_if_unused(group)
            elif kind == _JOIN:
                self._on_join_deadline(group, now, fx)
            else:
                self._on_sync_deadline(group, now, fx)
        return fx

    def _touch(self, group: Group, member: Member, now: int, timeout_ms: int | None = None) -> None:
        """Restart a member's session timer (Kafka's completeAndScheduleNextHeartbeatExpiration)."""
        member.heartbeat_deadline = now + (member.session_timeout_ms if timeout_ms is None else timeout_ms)
        self._schedule(member.heartbeat_deadline, _HEARTBEAT, group.group_id, member.member_id)

    def _on_heartbeat_expiry(self, group: Group, member: Member, now: int, fx: Effects) -> None:
        # Members parked in JoinGroup or SyncGroup are alive, except brand-new members,
        # which the new-member join timeout covers instead (§5).
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return
        log.info("member %s of group %s failed its session timeout; removing it",
                 member.member_id, group.group_id)
        self._remove_member_and_update_group(group, member, now, fx)

    # ------------------------------------------------------------------ helpers

    def _generate_member_id(self, prefix: str) -> str:
        return f"{prefix}-{self._new_id()}"

    def _drop_if_unused(self, group: Group) -> None:
        """Forget an Empty group that never held anything (e.g. a join that failed)."""
        if (
            group.state is S.EMPTY
            and group.generation == 0
            and not group.members
            and not group.pending_members
            and not self.offsets.has_group(group.group_id)
        ):
            self.groups.pop(group.group_id, None)

    def _validate_member(self, group: Group, member_id: str, instance_id: str | None) -> ErrorCode | None:
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return E.UNKNOWN_MEMBER_ID
            if current != member_id:
                log.info("member %s with instance id %s is fenced by %s", member_id, instance_id, current)
                return E.FENCED_INSTANCE_ID
            return None
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        return None

    def _member_list(self, group: Group) -> list[dict[str, Any]]:
        return [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata_for(group.protocol),
            }
            for m in group.members.values()
        ]

    def _join_result(self, group: Group, member: Member, version: int, *, members: bool,
                     leader: str | None = None, skip_assignment: bool = False) -> dict[str, Any]:
        protocol_name = group.protocol if group.protocol is not None or version >= 7 else ""
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "generation_id": group.generation,
            "protocol_type": group.protocol_type,
            "protocol_name": protocol_name,
            "leader": (group.leader if leader is None else leader) or "",
            "skip_assignment": skip_assignment,
            "member_id": member.member_id,
            "members": self._member_list(group) if members else [],
        }

    def _store_group(self, group: Group, fx: Effects) -> None:
        """Write the GroupMetadata record for the group as it stands."""
        value = {
            "protocol_type": group.protocol_type or "",
            "generation": group.generation,
            "protocol": group.protocol,
            "leader": group.leader,
            "current_state_timestamp": group.state_timestamp,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "rebalance_timeout": m.rebalance_timeout_ms,
                    "session_timeout": m.session_timeout_ms,
                    "subscription": m.metadata_for(group.protocol),
                    "assignment": m.assignment,
                }
                for m in group.members.values()
            ],
        }
        fx.write(group.group_id, encode_key(GroupKey(group.group_id)), encode_group_value(value))

    # ------------------------------------------------------------------ rebalance machinery

    def _maybe_prepare_rebalance(self, group: Group, now: int, fx: Effects, reason: str) -> None:
        if group.state in CAN_REBALANCE:
            self._prepare_rebalance(group, now, fx, reason)

    def _prepare_rebalance(self, group: Group, now: int, fx: Effects, reason: str) -> None:
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
        self._schedule(group.join_deadline, _JOIN, group.group_id)
        log.info("preparing to rebalance group %s (generation %d): %s", group.group_id, group.generation, reason)
        # Kafka's tryCompleteElseWatch: a join every member has already joined (e.g. the last
        # member just left) completes now, not at the next timer.
        self._try_complete_join(group, now, fx)

    def _reset_assignments(self, group: Group, error: ErrorCode, now: int, fx: Effects) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.sync_ticket is not None:
                fx.reply(member.sync_ticket, _sync_reply(error))
                member.sync_ticket = None
                # Kafka's propagateAssignment: the session timer restarts after a SyncGroup reply.
                self._touch(group, member, now)

    def _try_complete_join(self, group: Group, now: int, fx: Effects) -> None:
        # The initial delayed join never completes early (§3).
        if group.initial_delay_remaining is None and group.has_all_members_joined():
            self._complete_join(group, now, fx)

    def _on_join_deadline(self, group: Group, now: int, fx: Effects) -> None:
        remaining = group.initial_delay_remaining
        if remaining is not None and group.new_member_added and remaining != 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, remaining)
            group.initial_delay_remaining = max(remaining - group.initial_delay_last, 0)
            group.initial_delay_last = delay
            group.join_deadline = now + delay
            self._schedule(group.join_deadline, _JOIN, group.group_id)
            return
        self._complete_join(group, now, fx)

    def _elect_joined_leader(self, group: Group) -> bool:
        if group.leader is None:
            return False
        if group.members[group.leader].awaiting_join:
            return True
        for member_id, member in group.members.items():
            if member.awaiting_join:
                group.leader = member_id
                return True
        return False

    def _complete_join(self, group: Group, now: int, fx: Effects) -> None:
        for member in list(group.members.values()):
            if not member.awaiting_join and not member.is_static:
                log.info("removing member %s of group %s: it did not rejoin", member.member_id, group.group_id)
                self._drop_member(group, member, fx)
        if not self._elect_joined_leader(group) and group.members:
            log.warning("group %s could not complete rebalance: no member rejoined", group.group_id)
            group.initial_delay_remaining = None
            group.join_deadline = now + group.rebalance_timeout_ms
            self._schedule(group.join_deadline, _JOIN, group.group_id)
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
            self._store_group(group, fx)
            return
        group.protocol = group.select_protocol()
        group.transition(S.COMPLETING_REBALANCE, now)
        log.info("stabilized group %s generation %d (%d members, protocol %s)",
                 group.group_id, group.generation, group.size, group.protocol)
        for member in group.members.values():
            if member.join_ticket is not None:
                is_leader = member.member_id == group.leader
                fx.reply(member.join_ticket,
                         self._join_result(group, member, member.join_version, members=is_leader))
                member.join_ticket = None
            self._touch(group, member, now)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        group.sync_deadline = now + group.rebalance_timeout_ms
        self._schedule(group.sync_deadline, _SYNC, group.group_id)

    def _on_sync_deadline(self, group: Group, now: int, fx: Effects) -> None:
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
        self._prepare_rebalance(group, now, fx, f"members {missing} never sent SyncGroup")

    def _drop_member(self, group: Group, member: Member, fx: Effects) -> None:
        """Remove a member, answering anything it has parked."""
        if member.join_ticket is not None:
            fx.reply(member.join_ticket, _join_error(E.UNKNOWN_MEMBER_ID, "", member.join_version))
            member.join_ticket = None
        if member.sync_ticket is not None:
            fx.reply(member.sync_ticket, _sync_reply(E.UNKNOWN_MEMBER_ID))
            member.sync_ticket = None
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: Group, member: Member, now: int, fx: Effects) -> None:
        self._drop_member(group, member, fx)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, now, fx, f"removing member {member.member_id}")
        elif group.state is S.PREPARING_REBALANCE:
            self._try_complete_join(group, now, fx)

    def _add_member_and_rebalance(self, group: Group, member: Member, now: int, fx: Effects) -> None:
        member.is_new = True
        if group.state is S.PREPARING_REBALANCE and group.generation == 0:
            group.new_member_added = True
        group.add(member)
        self._touch(group, member, now, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group, now, fx, f"adding new member {member.member_id}")

    def _park_join(self, member: Member, ticket: int, version: int, fx: Effects) -> None:
        if member.join_ticket is not None and member.join_ticket != ticket:
            # A newer JoinGroup supersedes one still parked; the old one must not hang.
            fx.reply(member.join_ticket, _join_error(E.REBALANCE_IN_PROGRESS, member.member_id, member.join_version))
        member.join_ticket = ticket
        member.join_version = version

    def _update_member_and_rebalance(self, group: Group, member: Member, protocols: Protocols,
                                     rebalance_timeout: int, session_timeout: int, ticket: int,
                                     version: int, now: int, fx: Effects, reason: str) -> None:
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout
        member.session_timeout_ms = session_timeout
        self._park_join(member, ticket, version, fx)
        self._maybe_prepare_rebalance(group, now, fx, reason)

    # ------------------------------------------------------------------ JoinGroup (§3)

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        limit = self.config.max_size
        if group.state in (S.EMPTY, S.DEAD):
            return True
        if group.state is S.PREPARING_REBALANCE:
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join) or group.awaiting_join_count < limit
        return member_id in group.members or group.size < limit

    def join_group(self, ticket: int, now: int, version: int, body: Any,
                   client_id: str, client_host: str) -> Effects:
        fx = Effects()
        group_id: str = body.group_id
        member_id: str = body.member_id
        instance_id: str | None = body.get("group_instance_id")
        session_timeout: int = body.session_timeout_ms
        rebalance_timeout: int = body.rebalance_timeout_ms if version >= 1 else session_timeout
        protocols: Protocols = [(p.name, bytes(p.metadata)) for p in body.protocols]
        protocol_type: str = body.protocol_type
        if version >= 8 and body.get("reason"):
            log.info("JoinGroup from %s for group %s: reason %s", member_id or client_id, group_id,
                     body.reason[:255])

        if not group_id:
            fx.reply(ticket, _join_error(E.INVALID_GROUP_ID, member_id, version))
            return fx
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout <= cfg.max_session_timeout_ms:
            fx.reply(ticket, _join_error(E.INVALID_SESSION_TIMEOUT, member_id, version))
            return fx
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                fx.reply(ticket, _join_error(E.UNKNOWN_MEMBER_ID, member_id, version))
                return fx
            group = Group(group_id, state_timestamp=now)
            self.groups[group_id] = group

        if not self._accept_joining_member(group, member_id):
            existing = group.members.get(member_id)
            if existing is not None:
                self._drop_member(group, existing, fx)
            group.pending_members.pop(member_id, None)
            log.info("group %s is full (group.max.size=%d): turning away %s",
                     group_id, cfg.max_size, member_id or client_id)
            fx.reply(ticket, _join_error(E.GROUP_MAX_SIZE_REACHED, "", version))
        elif not member_id:
            self._join_new_member(group, ticket, now, version, instance_id, client_id, client_host,
                                  rebalance_timeout, session_timeout, protocol_type, protocols, fx)
        else:
            self._join_current_member(group, ticket, now, version, member_id, instance_id, client_id,
                                      client_host, rebalance_timeout, session_timeout, protocol_type,
                                      protocols, fx)
        if group.state is S.PREPARING_REBALANCE:
            self._try_complete_join(group, now, fx)
        self._drop_if_unused(group)
        return fx

    def _join_new_member(self, group: Group, ticket: int, now: int, version: int, instance_id: str | None,
                         client_id: str, client_host: str, rebalance_timeout: int, session_timeout: int,
                         protocol_type: str, protocols: Protocols, fx: Effects) -> None:
        if group.state is S.DEAD:
            fx.reply(ticket, _join_error(E.COORDINATOR_NOT_AVAILABLE, "", version))
            return
        if not group.supports_protocols(protocol_type, protocols):
            fx.reply(ticket, _join_error(E.INCONSISTENT_GROUP_PROTOCOL, "", version))
            return
        new_member_id = self._generate_member_id(instance_id if instance_id is not None else client_id)
        member = Member(new_member_id, instance_id, client_id, client_host, rebalance_timeout,
                        session_timeout, protocol_type, protocols, join_ticket=ticket, join_version=version)
        if instance_id is not None:
            old_member_id = group.static_members.get(instance_id)
            if old_member_id is None:
                log.info("static member %s (instance %s) joins group %s", new_member_id, instance_id,
                         group.group_id)
                self._add_member_and_rebalance(group, member, now, fx)
            else:
                self._replace_static_member(group, old_member_id, new_member_id, instance_id, protocols,
                                            rebalance_timeout, session_timeout, ticket, version, now, fx)
        elif version >= 4:
            # KIP-394: the member must come back with the id we hand out.
            deadline = now + session_timeout
            group.pending_members[new_member_id] = deadline
            self._schedule(deadline, _PENDING, group.group_id, new_member_id)
            fx.reply(ticket, _join_error(E.MEMBER_ID_REQUIRED, new_member_id, version))
        else:
            self._add_member_and_rebalance(group, member, now, fx)

    def _replace_static_member(self, group: Group, old_id: str, new_id: str, instance_id: str,
                               protocols: Protocols, rebalance_timeout: int, session_timeout: int,
                               ticket: int, version: int, now: int, fx: Effects) -> None:
        """KIP-345: a known instance id rejoins with a fresh member id; the old id is fenced."""
        current_leader = group.leader
        member = group.members[old_id]
        if member.join_ticket is not None:
            fx.reply(member.join_ticket, _join_error(E.FENCED_INSTANCE_ID, old_id, member.join_version))
            member.join_ticket = None
        if member.sync_ticket is not None:
            fx.reply(member.sync_ticket, _sync_reply(E.FENCED_INSTANCE_ID))
            member.sync_ticket = None
        member.member_id = new_id
        group.members = {(new_id if k == old_id else k): v for k, v in group.members.items()}
        group.static_members[instance_id] = new_id
        if group.leader == old_id:
            group.leader = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        log.info("static member %s of group %s replaced by %s", old_id, group.group_id, new_id)
        self._touch(group, member, now)
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout
        member.session_timeout_ms = session_timeout
        if group.state is S.STABLE:
            if group.select_protocol() == group.protocol:
                # Nothing changed for the group: persist the new member id, no rebalance.
                self._store_group(group, fx)
                is_leader = group.leader == new_id
                if version >= 9:
                    fx.reply(ticket, self._join_result(group, member, version, members=is_leader,
                                                       skip_assignment=is_leader))
                else:
                    # The old leader id, so a rejoining leader does not run the assignor.
                    fx.reply(ticket, self._join_result(group, member, version, members=False,
                                                       leader=current_leader))
            else:
                self._park_join(member, ticket, version, fx)
                self._maybe_prepare_rebalance(group, now, fx, f"static member {new_id} changed protocols")
        elif group.state is S.COMPLETING_REBALANCE:
            self._park_join(member, ticket, version, fx)
            self._prepare_rebalance(group, now, fx, f"static member {new_id} rejoined during sync")
        else:  # PreparingRebalance: wait with everyone else
            self._park_join(member, ticket, version, fx)

    def _join_current_member(self, group: Group, ticket: int, now: int, version: int, member_id: str,
                             instance_id: str | None, client_id: str, client_host: str,
                             rebalance_timeout: int, session_timeout: int, protocol_type: str,
                             protocols: Protocols, fx: Effects) -> None:
        if group.state is S.DEAD:
            fx.reply(ticket, _join_error(E.COORDINATOR_NOT_AVAILABLE, member_id, version))
            return
        if not group.supports_protocols(protocol_type, protocols):
            fx.reply(ticket, _join_error(E.INCONSISTENT_GROUP_PROTOCOL, member_id, version))
            return
        if member_id in group.pending_members:
            if instance_id is not None:
                fx.reply(ticket, _join_error(E.UNKNOWN_MEMBER_ID, member_id, version))
                return
            member = Member(member_id, None, client_id, client_host, rebalance_timeout, session_timeout,
                            protocol_type, protocols, join_ticket=ticket, join_version=version)
            self._add_member_and_rebalance(group, member, now, fx)
            return
        error = self._validate_member(group, member_id, instance_id)
        if error is not None:
            fx.reply(ticket, _join_error(error, member_id, version))
            return
        member = group.members[member_id]
        state = group.state
        if state is S.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout, session_timeout,
                                              ticket, version, now, fx, f"member {member_id} rejoins")
        elif state is S.COMPLETING_REBALANCE:
            if member.matches(protocols):
                fx.reply(ticket, self._join_result(group, member, version,
                                                   members=member_id == group.leader))
            else:
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout,
                                                  session_timeout, ticket, version, now, fx,
                                                  f"member {member_id} changed metadata")
        elif state is S.STABLE:
            if member_id == group.leader or not member.matches(protocols):
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout,
                                                  session_timeout, ticket, version, now, fx,
                                                  f"member {member_id} rejoins a stable group")
            else:
                fx.reply(ticket, self._join_result(group, member, version, members=False))
        else:
            fx.reply(ticket, _join_error(E.UNKNOWN_MEMBER_ID, member_id, version))

    # ------------------------------------------------------------------ SyncGroup (§4)

    def sync_group(self, ticket: int, now: int, version: int, body: Any) -> Effects:
        fx = Effects()
        group_id: str = body.group_id
        member_id: str = body.member_id
        instance_id: str | None = body.get("group_instance_id")
        protocol_type = body.get("protocol_type") if version >= 5 else None
        protocol_name = body.get("protocol_name") if version >= 5 else None

        def fail(error: ErrorCode) -> Effects:
            fx.reply(ticket, _sync_reply(error))
            return fx

        # KafkaApis rejects a v5+ request without protocol type/name before the
        # coordinator looks at the group id.
        if version >= 5 and (protocol_type is None or protocol_name is None):
            return fail(E.INCONSISTENT_GROUP_PROTOCOL)
        if not group_id:
            return fail(E.INVALID_GROUP_ID)
        group = self.groups.get(group_id)
        if group is None:
            return fail(E.UNKNOWN_MEMBER_ID)
        if group.state is S.DEAD:
            return fail(E.COORDINATOR_NOT_AVAILABLE)
        error = self._validate_member(group, member_id, instance_id)
        if error is not None:
            return fail(error)
        if body.generation_id != group.generation:
            return fail(E.ILLEGAL_GENERATION)
        if protocol_type is not None and protocol_type != group.protocol_type:
            return fail(E.INCONSISTENT_GROUP_PROTOCOL)
        if protocol_name is not None and protocol_name != group.protocol:
            return fail(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.state is S.EMPTY:
            return fail(E.UNKNOWN_MEMBER_ID)
        if group.state is S.PREPARING_REBALANCE:
            return fail(E.REBALANCE_IN_PROGRESS)
        member = group.members[member_id]
        group.pending_sync.discard(member_id)
        if group.state is S.STABLE:
            fx.reply(ticket, _sync_reply(E.NONE, member.assignment, group))
            self._touch(group, member, now)
            return fx
        # CompletingRebalance: park until the leader's assignment arrives.
        if member.sync_ticket is not None and member.sync_ticket != ticket:
            fx.reply(member.sync_ticket, _sync_reply(E.REBALANCE_IN_PROGRESS))
        member.sync_ticket = ticket
        member.sync_version = version
        if member_id == group.leader:
            assignments = {a.member_id: bytes(a.assignment) for a in body.assignments}
            missing = [m for m in group.members if m not in assignments]
            if missing:
                log.warning("leader of group %s gave no assignment to %s; they get an empty one",
                            group_id, missing)
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            self._store_group(group, fx)
            for m in group.members.values():
                if m.sync_ticket is not None:
                    fx.reply(m.sync_ticket, _sync_reply(E.NONE, m.assignment, group))
                    m.sync_ticket = None
                    self._touch(group, m, now)
            group.transition(S.STABLE, now)
        return fx

    # ------------------------------------------------------------------ Heartbeat (§5)

    def heartbeat(self, ticket: int, now: int, version: int, body: Any) -> Effects:
        fx = Effects()
        fx.reply(ticket, {"throttle_time_ms": 0, "error_code": int(self._heartbeat(now, body))})
        return fx

    def _heartbeat(self, now: int, body: Any) -> ErrorCode:
        if not body.group_id:
            return E.INVALID_GROUP_ID
        group = self.groups.get(body.group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(group, body.member_id, body.get("group_instance_id"))
        if error is not None:
            return error
        if body.generation_id != group.generation:
            return E.ILLEGAL_GENERATION
        if group.state is S.EMPTY:
            return E.UNKNOWN_MEMBER_ID
        self._touch(group, group.members[body.member_id], now)
        if group.state is S.PREPARING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    # ------------------------------------------------------------------ LeaveGroup (§6)

    def leave_group(self, ticket: int, now: int, version: int, body: Any) -> Effects:
        fx = Effects()
        if version >= 3:
            leaving = [(m.member_id, m.get("group_instance_id")) for m in body.members]
        else:
            leaving = [(body.member_id, None)]
        top, results = self._leave(body.group_id, leaving, now, fx)
        if version >= 3:
            reply = {
                "throttle_time_ms": 0,
                "error_code": int(top),
                "members": [
                    {"member_id": mid, "group_instance_id": iid, "error_code": int(err)}
                    for (mid, iid), err in zip(leaving, results, strict=True)
                ]
                if top is E.NONE
                else [],
            }
        else:
            first = next((err for err in results if err is not E.NONE), E.NONE)
            reply = {"throttle_time_ms": 0, "error_code": int(top if top is not E.NONE else first)}
        fx.reply(ticket, reply)
        return fx

    def _leave(self, group_id: str, leaving: list[tuple[str, str | None]], now: int,
               fx: Effects) -> tuple[ErrorCode, list[ErrorCode]]:
        if not group_id:
            return E.INVALID_GROUP_ID, []
        group = self.groups.get(group_id)
        if group is None:
            return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(leaving)
        if group.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE, []
        results: list[ErrorCode] = []
        for member_id, instance_id in leaving:
            if not member_id:
                current = group.static_members.get(instance_id) if instance_id is not None else None
                if current is None:
                    results.append(E.UNKNOWN_MEMBER_ID)
                    continue
                log.info("static member %s (instance %s) removed from group %s", current, instance_id, group_id)
                self._remove_member_and_update_group(group, group.members[current], now, fx)
                results.append(E.NONE)
            elif member_id in group.pending_members:
                del group.pending_members[member_id]
                if group.state is S.PREPARING_REBALANCE:
                    self._try_complete_join(group, now, fx)
                results.append(E.NONE)
            else:
                error = self._validate_member(group, member_id, instance_id)
                if error is None:
                    log.info("member %s leaves group %s", member_id, group_id)
                    self._remove_member_and_update_group(group, group.members[member_id], now, fx)
                    results.append(E.NONE)
                else:
                    results.append(error)
        return E.NONE, results

    # ------------------------------------------------------------------ admin (§10, §11)

    def describe_groups(self, ticket: int, now: int, version: int, body: Any) -> Effects:
        # Without an authorizer every operation a group supports is allowed; Kafka reports
        # them only when asked (v3+), else INT32_MIN.
        operations = GROUP_OPERATIONS if body.get("include_authorized_operations") else INT32_MIN
        described = []
        for group_id in body.groups:
            group = self.groups.get(group_id)
            if group is None or group.state is S.DEAD:
                described.append({
                    "error_code": 0, "group_id": group_id, "group_state": "Dead", "protocol_type": "",
                    "protocol_data": "", "members": [], "authorized_operations": operations,
                })
                continue
            stable = group.state is S.STABLE
            described.append({
                "error_code": 0,
                "group_id": group_id,
                "group_state": group.state.wire_name,
                "protocol_type": group.protocol_type or "",
                "protocol_data": (group.protocol or "") if stable else "",
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata_for(group.protocol) if stable else b"",
                        "member_assignment": m.assignment if stable else b"",
                    }
                    for m in group.members.values()
                ],
                "authorized_operations": operations,
            })
        fx = Effects()
        fx.reply(ticket, {"throttle_time_ms": 0, "groups": described})
        return fx

    def list_groups(self, ticket: int, now: int, version: int, body: Any) -> Effects:
        wanted: set[GroupState] | None = None
        filters = body.get("states_filter") or []
        if filters:
            wanted = {s for s in (parse_state(f) for f in filters) if s is not None}
        listed = [
            {"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state.wire_name}
            for g in self.groups.values()
            if g.state is not S.DEAD and (wanted is None or g.state in wanted)
        ]
        fx = Effects()
        fx.reply(ticket, {"throttle_time_ms": 0, "error_code": 0, "groups": listed})
        return fx

    def delete_groups(self, ticket: int, now: int, version: int, body: Any) -> Effects:
        fx = Effects()
        results = []
        for group_id in body.groups_names:
            group = self.groups.get(group_id)
            if group is None or group.state is S.DEAD:
                error = E.GROUP_ID_NOT_FOUND
            elif group.state is not S.EMPTY:
                error = E.NON_EMPTY_GROUP
            else:
                for topic, partition in self.offsets.partitions_of(group_id):
                    fx.write(group_id, encode_key(OffsetKey(group_id, topic, partition)), None)
                    self.offsets.delete(group_id, topic, partition)
                fx.write(group_id, encode_key(GroupKey(group_id)), None)
                group.transition(S.DEAD, now)
                del self.groups[group_id]
                log.info("group %s deleted", group_id)
                error = E.NONE
            results.append({"group_id": group_id, "error_code": int(error)})
        fx.reply(ticket, {"throttle_time_ms": 0, "results": results})
        return fx

    # ------------------------------------------------------------------ offsets (§7, §8)

    def offset_commit(self, ticket: int, now: int, version: int, body: Any,
                      partition_exists: Callable[[str, int], bool] | None = None) -> Effects:
        fx = Effects()
        group_id: str = body.group_id
        generation: int = body.generation_id_or_member_epoch if version >= 1 else -1
        member_id: str = body.member_id if version >= 1 else ""
        instance_id: str | None = body.get("group_instance_id") if version >= 7 else None
        retention: int = body.get("retention_time_ms", -1) if 2 <= version <= 4 else -1

        error = self._validate_commit(group_id, generation, member_id, instance_id, now)
        topics_out = []
        for topic in body.topics:
            partitions_out = []
            for p in topic.partitions:
                # KafkaApis answers unknown partitions before the coordinator validates the group (§7).
                if partition_exists is not None and not partition_exists(topic.name, p.partition_index):
                    code = E.UNKNOWN_TOPIC_OR_PARTITION
                elif error is not None:
                    code = error
                else:
                    code = self._commit_one(group_id, topic.name, p, version, retention, now, fx)
                partitions_out.append({"partition_index": p.partition_index, "error_code": int(code)})
            topics_out.append({"name": topic.name, "partitions": partitions_out})
        group = self.groups.get(group_id)
        if group is not None:
            self._drop_if_unused(group)
        fx.reply(ticket, {"throttle_time_ms": 0, "topics": topics_out})
        return fx

    def _validate_commit(self, group_id: str, generation: int, member_id: str,
                         instance_id: str | None, now: int) -> ErrorCode | None:
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:
                return E.ILLEGAL_GENERATION
            group = Group(group_id, state_timestamp=now)  # a "simple" group: offsets only
            self.groups[group_id] = group
            return None
        if group.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.state is S.EMPTY:
            return None
        if generation >= 0 or member_id or instance_id is not None:
            error = self._validate_member(group, member_id, instance_id)
            if error is not None:
                return error
            if generation != group.generation:
                return E.ILLEGAL_GENERATION
        else:
            return E.UNKNOWN_MEMBER_ID
        if group.state is S.COMPLETING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        if group.state in (S.STABLE, S.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            if member is not None:
                self._touch(group, member, now)
        return None

    def _commit_one(self, group_id: str, topic: str, p: Any, version: int, retention: int, now: int,
                    fx: Effects) -> ErrorCode:
        if not 0 <= p.partition_index < MAX_PARTITION:
            return E.UNKNOWN_TOPIC_OR_PARTITION
        metadata: str = p.get("committed_metadata") or ""
        if _utf16_length(metadata) > self.config.offset_metadata_max_bytes:
            return E.OFFSET_METADATA_TOO_LARGE
        commit_ts = now
        if version == 1 and p.get("commit_timestamp", -1) != -1:
            commit_ts = p.commit_timestamp
        expire_ts = now + retention if retention != -1 else -1
        value = OffsetValue(
            offset=p.committed_offset,
            leader_epoch=p.get("committed_leader_epoch", -1) if version >= 6 else -1,
            metadata=metadata,
            commit_timestamp=commit_ts,
            expire_timestamp=expire_ts,
        )
        self._store_offset(group_id, topic, p.partition_index, value, fx)
        self.offsets_committed += 1
        return E.NONE

    def _store_offset(self, group_id: str, topic: str, partition: int, value: OffsetValue,
                      fx: Effects) -> None:
        """One committed offset: its log record and the store entry replay would build from it."""
        fx.write(group_id, encode_key(OffsetKey(group_id, topic, partition)), encode_offset_value(value))
        self.offsets.put(group_id, topic, partition, value)

    def offset_fetch(self, ticket: int, now: int, version: int, body: Any) -> Effects:
        fx = Effects()
        if version >= 8:
            groups = [
                {"group_id": g.group_id, "topics": self._fetch_group(g.group_id, g.topics, version),
                 "error_code": 0}
                for g in body.groups
            ]
            fx.reply(ticket, {"throttle_time_ms": 0, "groups": groups})
        else:
            topics = self._fetch_group(body.group_id, body.topics, version)
            fx.reply(ticket, {"throttle_time_ms": 0, "topics": topics, "error_code": 0})
        return fx

    def _fetch_group(self, group_id: str, requested: Iterable[Any] | None, version: int) -> list[dict[str, Any]]:
        leader_epoch_field = version >= 5
        if requested is None:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for (topic, partition), value in self.offsets.items_of(group_id):
                by_topic.setdefault(topic, []).append(self._fetched(partition, value, leader_epoch_field))
            return [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
        out = []
        for topic in requested:
            name = topic.name
            indexes = topic.partition_indexes
            out.append({
                "name": name,
                "partitions": [
                    self._fetched(i, self.offsets.get(group_id, name, i), leader_epoch_field) for i in indexes
                ],
            })
        return out

    @staticmethod
    def _fetched(partition: int, value: OffsetValue | None, leader_epoch_field: bool) -> dict[str, Any]:
        if value is None:
            return {"partition_index": partition, "committed_offset": -1, "committed_leader_epoch": -1,
                    "metadata": "", "error_code": 0}
        return {"partition_index": partition, "committed_offset": value.offset,
                "committed_leader_epoch": value.leader_epoch if leader_epoch_field else -1,
                "metadata": value.metadata, "error_code": 0}

    def delete_topic_offsets(self, topic: str, now: int) -> Effects:
        """A topic was deleted: tombstone every group's committed offsets for it."""
        fx = Effects()
        for group_id in self.offsets.group_ids():
            for t, partition in self.offsets.partitions_of(group_id):
                if t == topic:
                    self.offsets.delete(group_id, t, partition)
                    fx.write(group_id, encode_key(OffsetKey(group_id, t, partition)), None)
        return fx

    # ------------------------------------------------------------------ partition expansion

    def partitions_added(self, topic: str, new_partitions: Mapping[int, int], now: int) -> Effects:
        """CreatePartitions grew ``topic``; ``new_partitions`` maps each new index to its log start offset.

        With ``group.new.partitions.start=earliest``, every group with live members whose
        consumer-protocol subscription names ``topic`` gets the new partitions' start offsets
        committed, as ordinary offset commit records. Without this a consumer with
        auto.offset.reset=latest that learns of the partitions only at its next metadata
        refresh and rebalance starts them at their end then, skipping whatever producers
        (who may learn sooner) wrote in between. An offset already committed is kept.

        Only groups that are consuming are covered: an Empty group has no subscription to go
        by, and where a group starts when it next comes up is its clients' reset policy.
        ``latest`` commits nothing: a new partition is empty, so its end offset equals its
        start offset and committing it would be ``earliest`` under another name; leaving
        the partitions uncommitted is what gives the client's own (latest) reset, as on Kafka.
        """
        fx = Effects()
        if self.config.new_partitions_start != "earliest" or not new_partitions:
            return fx
        for group in self.groups.values():
            if group.state is S.DEAD or topic not in group.consuming_topics():
                continue
            committed = []
            for partition, start in sorted(new_partitions.items()):
                if self.offsets.get(group.group_id, topic, partition) is not None:
                    continue
                value = OffsetValue(offset=start, leader_epoch=-1, metadata="", commit_timestamp=now,
                                    expire_timestamp=-1)
                self._store_offset(group.group_id, topic, partition, value, fx)
                committed.append(partition)
            if committed:
                log.info("topic %s grew: committed the start offsets of new partitions %s for group %s",
                         topic, committed, group.group_id)
        return fx

    # ------------------------------------------------------------------ OffsetDelete (§9, KIP-496)

    def offset_delete(self, ticket: int, now: int, version: int, body: Any,
                      partition_exists: Callable[[str, int], bool] | None = None) -> Effects:
        fx = Effects()
        group_id: str = body.group_id

        def reply(error: ErrorCode, topics: list[dict[str, Any]]) -> Effects:
            fx.reply(ticket, {"error_code": int(error), "throttle_time_ms": 0, "topics": topics})
            return fx

        if not group_id:
            return reply(E.INVALID_GROUP_ID, [])
        group = self.groups.get(group_id)
        if group is None or group.state is S.DEAD:
            return reply(E.GROUP_ID_NOT_FOUND, [])
        subscribed: set[str] | None = set()
        if group.state is not S.EMPTY:
            if group.protocol_type != "consumer":
                return reply(E.NON_EMPTY_GROUP, [])
            # Members' subscriptions (v0 prefix); unreadable ones count as "everything".
            subscribed = group.subscribed_topics()
        topics_out = []
        for topic in body.topics:
            partitions_out = []
            for p in topic.partitions:
                index = p.partition_index
                if partition_exists is not None and not partition_exists(topic.name, index):
                    code = E.UNKNOWN_TOPIC_OR_PARTITION
                elif subscribed is None or topic.name in subscribed:
                    code = E.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    if self.offsets.delete(group_id, topic.name, index):
                        fx.write(group_id, encode_key(OffsetKey(group_id, topic.name, index)), None)
                    code = E.NONE
                partitions_out.append({"partition_index": index, "error_code": int(code)})
            topics_out.append({"name": topic.name, "partitions": partitions_out})
        return reply(E.NONE, topics_out)

    # ------------------------------------------------------------------ expiry (§14, KIP-211)

    def expire_offsets(self, now: int) -> Effects:
        """Tombstone expired offsets; Empty groups left with none become Dead and go.

        Which offsets are considered, and from what base time, depends on the group (KIP-211):
        an Empty group with a protocol type counts from when it became Empty; a Stable
        "consumer" group only expires topics no member subscribes to, from their commit
        time; a simple group (no protocol type) expires each offset from its commit time.
        An explicit expire timestamp (OffsetCommit v2-v4 retention) always wins.
        """
        fx = Effects()
        retention = self.config.offsets_retention_ms
        for group in list(self.groups.values()):
            condition = self._expiry_condition(group)
            if condition is not None:
                base_of, considered = condition
                for (topic, partition), value in list(self.offsets.items_of(group.group_id)):
                    if not considered(topic):
                        continue
                    if value.expire_timestamp >= 0:
                        expired = now >= value.expire_timestamp
                    else:
                        expired = now - base_of(value) >= retention
                    if expired:
                        self.offsets.delete(group.group_id, topic, partition)
                        fx.write(group.group_id, encode_key(OffsetKey(group.group_id, topic, partition)), None)
                        self.offsets_expired += 1
            if group.state is S.EMPTY and not group.members and not group.pending_members \
                    and not self.offsets.has_group(group.group_id):
                group.transition(S.DEAD, now)
                del self.groups[group.group_id]
                if group.generation > 0:
                    fx.write(group.group_id, encode_key(GroupKey(group.group_id)), None)
                log.info("group %s has no offsets left and is removed", group.group_id)
        expired_count = sum(len(r) for r in fx.records.values())
        if expired_count:
            log.info("offset expiry wrote %d tombstones", expired_count)
        return fx

    @staticmethod
    def _expiry_condition(
        group: Group,
    ) -> tuple[Callable[[OffsetValue], int], Callable[[str], bool]] | None:
        if group.protocol_type:
            if group.state is S.EMPTY:
                stamp = group.state_timestamp
                return (lambda v: stamp if stamp >= 0 else v.commit_timestamp), (lambda _t: True)
            if group.protocol_type == "consumer" and group.state is S.STABLE:
                subscribed = group.subscribed_topics()
                if subscribed is not None:
                    return (lambda v: v.commit_timestamp), (lambda t: t not in subscribed)
            return None
        return (lambda v: v.commit_timestamp), (lambda _t: True)

    # ------------------------------------------------------------------ load (§14)

    def replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one record from the log; the last record per key wins."""
        record_key = decode_key(key)
        if isinstance(record_key, OffsetKey):
            if value is None:
                self.offsets.delete(record_key.group, record_key.topic, record_key.partition)
            else:
                self.offsets.put(record_key.group, record_key.topic, record_key.partition,
                                 decode_offset_value(value))
        elif isinstance(record_key, GroupKey):
            if value is None:
                self.groups.pop(record_key.group, None)
            else:
                self.groups[record_key.group] = self._group_from_record(record_key.group, value)
        else:
            log.warning("skipping record with unknown key version %d", record_key.version)

    @staticmethod
    def _group_from_record(group_id: str, value: bytes) -> Group:
        body = decode_group_value(value)
        group = Group(
            group_id,
            state=S.STABLE if body.members else S.EMPTY,
            state_timestamp=body.current_state_timestamp,
            generation=body.generation,
            protocol_type=body.protocol_type or None,
            protocol=body.protocol,
            leader=body.leader if body.members else None,
        )
        for m in body.members:
            member = Member(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                m.session_timeout, body.protocol_type, [(body.protocol or "", bytes(m.subscription))],
                assignment=bytes(m.assignment),
            )
            group.members[m.member_id] = member
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        return group

    def finish_load(self, now: int) -> Effects:
        """After replay: offset-only groups exist, sessions restart, oversized groups rebalance."""
        fx = Effects()
        for group_id in self.offsets.group_ids():
            if group_id not in self.groups:
                self.groups[group_id] = Group(group_id, state_timestamp=now)
        for group in self.groups.values():
            for member in group.members.values():
                self._touch(group, member, now)
            if group.size > self.config.max_size:
                self._prepare_rebalance(group, now, fx, f"group is over group.max.size={self.config.max_size}")
        return fx
