"""Classic-protocol members inside a consumer group (KIP-848's online migration).

A consumer group may hold members that still speak JoinGroup, SyncGroup and Heartbeat (a
kafka-python or aiokafka consumer, or a librdkafka one on ``group.protocol=classic``). The
coordinator computes their assignment like anyone else's: JoinGroup is their heartbeat with
a full subscription, SyncGroup hands them their current partitions, Heartbeat answers
REBALANCE_IN_PROGRESS when they must rejoin to move on. Kafka keeps this in
GroupMetadataManager.classicGroup{Join,Sync,Heartbeat,Leave}ToConsumerGroup.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid

from broker.coordinator.effects import Effects
from broker.coordinator.modern.assignment import Assignment
from broker.coordinator.modern.consumer.group import ConsumerGroup
from broker.coordinator.modern.consumer.manager import ConsumerGroupManager, HeartbeatError
from broker.coordinator.modern.consumer.member import ClassicMemberMetadata, ConsumerGroupMember, MemberState
from broker.coordinator.records import (
    ConsumerGroupCurrentAssignmentRecord,
    ConsumerGroupEpochRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupSubscriptionMetadataRecord,
    ConsumerGroupTargetMemberRecord,
    CoordinatorRecord,
)
from broker.coordinator.requests import (
    HeartbeatRequest,
    HeartbeatResult,
    JoinGroupRequest,
    JoinGroupResult,
    LeaveGroupRequest,
    LeaveGroupResult,
    LeavingMember,
    SyncGroupRequest,
    SyncGroupResult,
)
from broker.coordinator.timers import TimerKind
from protocol.consumer_protocol import decode_subscription, encode_assignment
from protocol.errors import ErrorCode, ProtocolError

log = logging.getLogger("kcoord.coordinator")

E = ErrorCode
JOIN, SYNC = "consumer-classic-join", "consumer-classic-sync"
CONSUMER_PROTOCOL_TYPE = "consumer"


def subscription_version(metadata: bytes) -> int:
    return int.from_bytes(metadata[:2], "big", signed=True) if len(metadata) >= 2 else 0


class ClassicMembers:
    """The classic requests of members of consumer groups."""

    def __init__(self, consumer: ConsumerGroupManager) -> None:
        self.consumer = consumer
        self.joins: dict[tuple[str, str], int] = {}
        self.syncs: dict[tuple[str, str], int] = {}
        consumer.timers.register(JOIN, TimerKind(self._join_current, self._on_join_expired))
        consumer.timers.register(SYNC, TimerKind(self._sync_current, self._on_sync_expired))

    # ------------------------------------------------------------------ JoinGroup

    def join_group(self, ticket: int, now: int, group: ConsumerGroup, request: JoinGroupRequest, fx: Effects) -> None:
        try:
            result = self._join(group, request, now, fx)
        except HeartbeatError as exc:
            result = JoinGroupResult(exc.error, request.member_id)
        fx.reply(ticket, result)

    def _join(self, group: ConsumerGroup, request: JoinGroupRequest, now: int, fx: Effects) -> JoinGroupResult:
        manager = self.consumer
        config = manager.config
        if not request.group_id:
            raise HeartbeatError(E.INVALID_GROUP_ID, "")
        if not config.min_session_timeout_ms <= request.session_timeout_ms <= config.max_session_timeout_ms:
            raise HeartbeatError(E.INVALID_SESSION_TIMEOUT, "")
        unknown = not request.member_id
        member_id = request.member_id or str(uuid.uuid4())
        if group.size >= config.consumer_max_size and member_id not in group.members:
            raise HeartbeatError(E.GROUP_MAX_SIZE_REACHED, "")
        if not group.supports_classic_protocols(request.protocol_type, {n for n, _ in request.protocols}):
            raise HeartbeatError(E.INCONSISTENT_GROUP_PROTOCOL, "")
        if unknown and request.require_known_member_id and request.group_instance_id is None:
            # KIP-394: the member comes back with the id it is given; nothing is stored yet.
            return JoinGroupResult(E.MEMBER_ID_REQUIRED, member_id)
        try:
            subscription = decode_subscription(request.protocols[0][1])
        except ProtocolError:
            raise HeartbeatError(E.INCONSISTENT_GROUP_PROTOCOL, "unreadable consumer protocol subscription") from None
        records: list[CoordinatorRecord] = []
        member, replaced = self._member_for(group, member_id, request, unknown, records)
        updated = dataclasses.replace(
            member,
            instance_id=request.group_instance_id or member.instance_id,
            rack_id=subscription.get("rack_id") or member.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            server_assignor=None,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            subscribed_topic_regex=None,
            client_id=request.client.client_id,
            client_host=request.client.client_host,
            classic=ClassicMemberMetadata(request.session_timeout_ms, tuple(request.protocols)),
        )
        target_epoch, target = manager.update_group(group, member, updated, replaced, now, records)
        owned = self._owned(group, subscription)
        reconciled = manager.reconcile(group, updated, target_epoch, target, owned, now, records)
        manager.write(group.group_id, records, fx)
        self.joins.pop((group.group_id, member_id), None)
        manager.schedule_session(group.group_id, member_id, now, request.session_timeout_ms)
        self._schedule(self.syncs, SYNC, group.group_id, member_id, now + request.rebalance_timeout_ms)
        return JoinGroupResult(E.NONE, member_id, reconciled.member_epoch, CONSUMER_PROTOCOL_TYPE,
                               request.protocols[0][0], "", False, ())

    def _member_for(self, group: ConsumerGroup, member_id: str, request: JoinGroupRequest, unknown: bool,
                    records: list[CoordinatorRecord]) -> tuple[ConsumerGroupMember, str | None]:
        instance_id = request.group_instance_id
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                log.info("member %s joins consumer group %s using the classic protocol", member_id, group.group_id)
                return ConsumerGroupMember(member_id), None
            return member, None
        existing = group.static_member(instance_id)
        if existing is None:
            return group.members.get(member_id) or ConsumerGroupMember(member_id), None
        if not unknown:
            if existing.member_id != member_id:
                raise HeartbeatError(E.FENCED_INSTANCE_ID, "")
            return existing, None
        new = dataclasses.replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0,
                                  partitions_pending_revocation={}, state=MemberState.STABLE)
        self.consumer.remove_records(group.group_id, existing.member_id, records)
        records.append(ConsumerGroupMemberMetadataRecord(group.group_id, member_id, new))
        records.append(ConsumerGroupTargetMemberRecord(
            group.group_id, member_id, group.target_assignment.get(existing.member_id, {})))
        records.append(ConsumerGroupCurrentAssignmentRecord(group.group_id, member_id, new))
        return new, existing.member_id

    def _owned(self, group: ConsumerGroup, subscription: object) -> list[tuple[uuid.UUID, list[int]]]:
        """The partitions a classic member says it owns (cooperative clients only; eager ones own none)."""
        out = []
        image = self.consumer.image()
        for tp in getattr(subscription, "get", lambda _k, _d=None: None)("owned_partitions") or []:
            meta = group.subscription_metadata.get(tp.topic) or (image.topic_metadata(tp.topic) if image else None)
            if meta is not None:
                out.append((meta.topic_id, list(tp.partitions)))
        return out

    # ------------------------------------------------------------------ SyncGroup, Heartbeat

    def _validate(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                  generation: int) -> ConsumerGroupMember:
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise HeartbeatError(E.UNKNOWN_MEMBER_ID, "")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise HeartbeatError(E.UNKNOWN_MEMBER_ID, "")
            if member.member_id != member_id:
                raise HeartbeatError(E.FENCED_INSTANCE_ID, "")
        if member.classic is None:
            raise HeartbeatError(E.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic protocol.")
        if generation != member.member_epoch:
            raise HeartbeatError(E.ILLEGAL_GENERATION, "")
        return member

    def sync_group(self, ticket: int, now: int, group: ConsumerGroup, request: SyncGroupRequest, fx: Effects) -> None:
        try:
            member = self._validate(group, request.member_id, request.group_instance_id, request.generation_id)
            assert member.classic is not None
            protocol = member.classic.protocols[0][0]
            if request.protocol_type is not None and request.protocol_type != CONSUMER_PROTOCOL_TYPE:
                raise HeartbeatError(E.INCONSISTENT_GROUP_PROTOCOL, "")
            if request.protocol_name is not None and request.protocol_name != protocol:
                raise HeartbeatError(E.INCONSISTENT_GROUP_PROTOCOL, "")
            self._rebalance_in_progress(group, member, now)
            self.syncs.pop((group.group_id, member.member_id), None)
            self.consumer.schedule_session(group.group_id, member.member_id, now, member.classic.session_timeout_ms)
            version = subscription_version(member.classic.protocols[0][1])
            assignment = self.serialize(group, member.assigned_partitions, version)
            result = SyncGroupResult(E.NONE, assignment, CONSUMER_PROTOCOL_TYPE, protocol)
        except HeartbeatError as exc:
            result = SyncGroupResult(exc.error)
        fx.reply(ticket, result)

    def _rebalance_in_progress(self, group: ConsumerGroup, member: ConsumerGroupMember, now: int) -> None:
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._join_timeout(group.group_id, member, now)
            raise HeartbeatError(E.REBALANCE_IN_PROGRESS, "")

    def _join_timeout(self, group_id: str, member: ConsumerGroupMember, now: int) -> None:
        if (group_id, member.member_id) not in self.joins:
            self._schedule(self.joins, JOIN, group_id, member.member_id, now + member.rebalance_timeout_ms)

    def heartbeat(self, ticket: int, now: int, group: ConsumerGroup, request: HeartbeatRequest, fx: Effects) -> None:
        try:
            member = self._validate(group, request.member_id, request.group_instance_id, request.generation_id)
            assert member.classic is not None
            self.consumer.schedule_session(group.group_id, member.member_id, now, member.classic.session_timeout_ms)
            error = E.NONE
            if (member.member_epoch < group.group_epoch
                    or member.state is MemberState.UNREVOKED_PARTITIONS
                    or (member.state is MemberState.UNRELEASED_PARTITIONS
                        and not group.waiting_on_unreleased_partition(member))):
                error = E.REBALANCE_IN_PROGRESS
                self._join_timeout(group.group_id, member, now)
            result = HeartbeatResult(error)
        except HeartbeatError as exc:
            result = HeartbeatResult(exc.error)
        fx.reply(ticket, result)

    def serialize(self, group: ConsumerGroup, assignment: Assignment, version: int) -> bytes:
        """An assignment as a ConsumerProtocolAssignment, topics by name, at the member's version."""
        names = {meta.topic_id: name for name, meta in group.subscription_metadata.items()}
        image = self.consumer.image()
        topics = []
        for topic_id in sorted(assignment):
            name = names.get(topic_id) or (image.topic_name(topic_id) if image else None)
            if name is not None:
                topics.append({"topic": name, "partitions": sorted(assignment[topic_id])})
        version = max(0, min(version, 3))
        return encode_assignment({"assigned_partitions": topics, "user_data": None}, version=version)

    # ------------------------------------------------------------------ LeaveGroup

    def leave_group(self, ticket: int, now: int, group: ConsumerGroup, request: LeaveGroupRequest, fx: Effects) -> None:
        records: list[CoordinatorRecord] = []
        results: list[tuple[LeavingMember, ErrorCode]] = []
        left: dict[str, ConsumerGroupMember | None] = {}
        for leaving in request.members:
            if leaving.group_instance_id is None:
                member = group.members.get(leaving.member_id)
            else:
                member = group.static_member(leaving.group_instance_id)
                if member is not None and leaving.member_id and member.member_id != leaving.member_id:
                    results.append((leaving, E.FENCED_INSTANCE_ID))
                    continue
            if member is None or member.classic is None:
                results.append((leaving, E.UNKNOWN_MEMBER_ID))
                continue
            log.info("member %s leaves consumer group %s through LeaveGroup", member.member_id, group.group_id)
            self.consumer.remove_records(group.group_id, member.member_id, records)
            self._forget(group.group_id, member.member_id)
            left[member.member_id] = None
            results.append((LeavingMember(member.member_id, leaving.group_instance_id, leaving.reason), E.NONE))
        if records:
            subscription = self.consumer.subscription_metadata(group, left, self.consumer.image())
            if subscription != group.subscription_metadata:
                records.append(ConsumerGroupSubscriptionMetadataRecord(group.group_id, subscription))
            records.append(ConsumerGroupEpochRecord(group.group_id, group.group_epoch + 1))
            self.consumer.write(group.group_id, records, fx)
        fx.reply(ticket, LeaveGroupResult(E.NONE, tuple(results)))

    # ------------------------------------------------------------------ timers

    def _schedule(self, table: dict[tuple[str, str], int], kind: str, group_id: str, member_id: str,
                  deadline: int) -> None:
        table[(group_id, member_id)] = deadline
        self.consumer.timers.schedule(deadline, kind, group_id, member_id)

    def _forget(self, group_id: str, member_id: str) -> None:
        for table in (self.joins, self.syncs, self.consumer.sessions):
            table.pop((group_id, member_id), None)
        self.consumer.revocations.pop((group_id, member_id), None)

    def _join_current(self, deadline: int, group_id: str, member_id: str) -> bool:
        return self.joins.get((group_id, member_id)) == deadline

    def _sync_current(self, deadline: int, group_id: str, member_id: str) -> bool:
        return self.syncs.get((group_id, member_id)) == deadline

    def _expire(self, table: dict[tuple[str, str], int], group_id: str, member_id: str, now: int, fx: Effects,
                why: str) -> None:
        table.pop((group_id, member_id), None)
        group = self.consumer.group(group_id)
        if group is None or member_id not in group.members:
            return
        log.info("classic member %s of consumer group %s %s; fencing it", member_id, group_id, why)
        self.consumer.fence(group, member_id, now, fx)

    def _on_join_expired(self, group_id: str, member_id: str, now: int, fx: Effects) -> None:
        self._expire(self.joins, group_id, member_id, now, fx, "did not rejoin within its rebalance timeout")

    def _on_sync_expired(self, group_id: str, member_id: str, now: int, fx: Effects) -> None:
        self._expire(self.syncs, group_id, member_id, now, fx, "did not sync within its rebalance timeout")
