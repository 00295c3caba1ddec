"""The consumer group protocol (KIP-848): ConsumerGroupHeartbeat, and the timers that fence members.

Kafka keeps these rules in GroupMetadataManager.consumerGroupHeartbeat and what it calls;
docs/coordinator-rules.md says each one in the project's words. One heartbeat:

1. finds or creates the member (epoch 0 joins; -1 leaves; -2 is a static member stepping
   out for a restart), checking its epoch against the coordinator's;
2. records a changed subscription, and bumps the group epoch when the subscription or the
   subscribed topics' metadata changed;
3. when the group epoch is ahead of the target assignment's, runs the assignor for a new
   target;
4. reconciles the member toward its target (``reconcile``) and answers with its epoch and,
   when it changed or the request was a full one, its assignment.

As in Kafka, each heartbeat computes its records from the group as it was before the
request and writes them at the end; replaying them is what changes the group.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence

from broker.coordinator.assignor import ASSIGNORS
from broker.coordinator.config import CoordinatorConfig
from broker.coordinator.effects import Effects
from broker.coordinator.modern.assignment import Assignment, is_subset, pairs_of
from broker.coordinator.modern.consumer.group import ConsumerGroup
from broker.coordinator.modern.consumer.member import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupMember,
    MemberState,
)
from broker.coordinator.modern.consumer.reconcile import FencedMember, Owned, reconcile
from broker.coordinator.modern.consumer.regex import RegexCache
from broker.coordinator.modern.target import build_target
from broker.coordinator.modern.topics import MetadataImage, TopicMetadata
from broker.coordinator.records import (
    ConsumerGroupCurrentAssignmentRecord,
    ConsumerGroupEpochRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupSubscriptionMetadataRecord,
    ConsumerGroupTargetMemberRecord,
    CoordinatorRecord,
)
from broker.coordinator.requests import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResult
from broker.coordinator.timers import TimerKind, Timers
from broker.metrics import Histogram
from protocol.errors import ErrorCode

log = logging.getLogger("kcoord.coordinator")

E = ErrorCode

# Enum members the request paths test, bound once: their lookup on the class is slow (docs/architecture.md).
_NONE = E.NONE
_STABLE, _UNREVOKED_PARTITIONS = MemberState.STABLE, MemberState.UNREVOKED_PARTITIONS

SESSION, REVOCATION, ASSIGNMENT = "consumer-session", "consumer-revocation", "consumer-assignment"
RECONCILIATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class HeartbeatError(Exception):
    """A heartbeat refused as a whole: its error code and message, and nothing written."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


class ConsumerGroupManager:
    def __init__(
        self,
        config: CoordinatorConfig,
        groups: dict[str, object],
        timers: Timers,
        image: Callable[[], MetadataImage | None],
    ) -> None:
        self.config = config
        self.groups = groups
        self.timers = timers
        self.image = image
        self.regexes = RegexCache()
        self.sessions: dict[tuple[str, str], int] = {}
        self.revocations: dict[tuple[str, str], tuple[int, int]] = {}  # deadline, member epoch
        self.assigned_at: dict[str, int] = {}  # group -> when its target was last computed
        self.assignments_due: dict[str, int] = {}  # group -> when its deferred target is computed
        # Counters for the metrics collector.
        self.heartbeats = 0
        self.epoch_bumps = 0
        self.fenced = 0
        #: Seconds from a member's target changing to the member being stable at it.
        self.reconciliation_seconds = Histogram(RECONCILIATION_BUCKETS)
        self._reconciling_since: dict[tuple[str, str], int] = {}
        # Set by the group manager: converts a classic group for a consumer-protocol join.
        self.upgrade: Callable[[str, list[CoordinatorRecord], Effects, int], ConsumerGroup | None] = (
            lambda _g, _r, _fx, _now: None)
        self.downgrade: Callable[[ConsumerGroup, str, Effects, int], bool] = lambda _g, _m, _fx, _now: False
        # Set by the shard: a group's own consumer.session.timeout.ms and consumer.heartbeat.interval.ms
        # (group configs, read on every heartbeat so a change applies without a restart).
        self.session_timeout_ms: Callable[[str], int] = lambda _g: config.consumer_session_timeout_ms
        self.heartbeat_interval_ms: Callable[[str], int] = lambda _g: config.consumer_heartbeat_interval_ms
        timers.register(SESSION, TimerKind(self._session_current, self._on_session_expired))
        timers.register(REVOCATION, TimerKind(self._revocation_current, self._on_revocation_expired))
        timers.register(ASSIGNMENT, TimerKind(self._assignment_current, self._on_assignment_due))

    # ------------------------------------------------------------------ lookups

    def group(self, group_id: str) -> ConsumerGroup | None:
        group = self.groups.get(group_id)
        return group if isinstance(group, ConsumerGroup) else None

    def assignor_names(self) -> tuple[str, ...]:
        return tuple(name for name in self.config.consumer_assignors if name in ASSIGNORS)

    def topics_of(self, group: ConsumerGroup) -> Callable[[ConsumerGroupMember], set[str]]:
        return group.member_topic_names

    # ------------------------------------------------------------------ the request

    def heartbeat(self, ticket: int, now: int, request: ConsumerGroupHeartbeatRequest, fx: Effects) -> None:
        self.heartbeats += 1
        try:
            self._validate(request)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                result = self._leave(request, now, fx)
            else:
                result = self._heartbeat(request, now, fx)
        except HeartbeatError as exc:
            result = ConsumerGroupHeartbeatResult(exc.error, exc.message)
        fx.reply(ticket, result)

    def _validate(self, request: ConsumerGroupHeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        def invalid(message: str) -> HeartbeatError:
            return HeartbeatError(E.INVALID_REQUEST, message)

        epoch = request.member_epoch
        if (request.client_member_id or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH) \
                and not request.member_id.strip():
            raise invalid("MemberId can't be empty.")
        if not request.group_id.strip():
            raise invalid("GroupId can't be empty.")
        if request.instance_id is not None and not request.instance_id.strip():
            raise invalid("InstanceId can't be empty.")
        if request.rack_id is not None and not request.rack_id.strip():
            raise invalid("RackId can't be empty.")
        if epoch == JOIN_GROUP_MEMBER_EPOCH:
            if request.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.topic_partitions is None or request.topic_partitions:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if request.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if request.server_assignor is not None and request.server_assignor not in self.assignor_names():
            raise HeartbeatError(
                E.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
                + ", ".join(self.assignor_names()) + ".")
        if request.subscribed_topic_regex:
            error = self.regexes.problem(request.subscribed_topic_regex)
            if error is not None:
                raise HeartbeatError(E.INVALID_REGULAR_EXPRESSION, error)

    # ------------------------------------------------------------------ join and heartbeat

    def _group_for(self, group_id: str, create: bool, records: list[CoordinatorRecord], fx: Effects,
                   now: int) -> ConsumerGroup:
        existing = self.groups.get(group_id)
        if existing is None:
            if not create:
                raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
            return ConsumerGroup(group_id)
        if isinstance(existing, ConsumerGroup) and not existing.is_dead:
            return existing
        if create:
            converted = self.upgrade(group_id, records, fx, now)
            if converted is not None:
                return converted
        raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")

    def _heartbeat(self, request: ConsumerGroupHeartbeatRequest, now: int, fx: Effects) -> ConsumerGroupHeartbeatResult:
        records: list[CoordinatorRecord] = []
        create = request.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        group = self._group_for(request.group_id, create, records, fx, now)
        member_id = request.member_id or str(uuid.uuid4())
        if group.size >= self.config.consumer_max_size and member_id not in group.members:
            raise HeartbeatError(E.GROUP_MAX_SIZE_REACHED,
                                 f"The consumer group has reached its maximum capacity of "
                                 f"{self.config.consumer_max_size} members.")
        owned = request.topic_partitions
        member, replaced = self._member_for(group, member_id, request, create, owned, records)
        updated = member if self._changes_nothing(member, request) else dataclasses.replace(
            member,
            instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(request.rebalance_timeout_ms if request.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=(request.server_assignor if request.server_assignor is not None
                             else member.server_assignor),
            subscribed_topic_names=(tuple(sorted(set(request.subscribed_topic_names)))
                                    if request.subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(request.subscribed_topic_regex or None
                                    if request.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            client_id=request.client.client_id,
            client_host=request.client.client_host,
            classic=None,
        )
        target_epoch, target = self.update_group(group, member, updated, replaced, now, records)
        reconciled = self.reconcile(group, updated, target_epoch, target, owned, now, records)
        self.write(group.group_id, records, fx)
        self.schedule_session(group.group_id, member_id, now, self.session_timeout_ms(group.group_id))
        full = create or (request.rebalance_timeout_ms != -1 and request.subscribed_topic_names is not None
                          and owned is not None)
        changed = reconciled.assigned_partitions != member.assigned_partitions or member_id not in group.members
        assignment = None
        if full or changed:
            assignment = tuple((t, tuple(ps)) for t, ps in pairs_of(reconciled.assigned_partitions))
        return ConsumerGroupHeartbeatResult(
            _NONE, None, member_id, reconciled.member_epoch, self.heartbeat_interval_ms(group.group_id), assignment)

    @staticmethod
    def _changes_nothing(member: ConsumerGroupMember, request: ConsumerGroupHeartbeatRequest) -> bool:
        """Whether the request leaves every field of the member as it is: the usual heartbeat,
        which sends only what changed, so the member need not be rebuilt."""
        return (
            (request.instance_id is None or request.instance_id == member.instance_id)
            and (request.rack_id is None or request.rack_id == member.rack_id)
            and (request.rebalance_timeout_ms == -1 or request.rebalance_timeout_ms == member.rebalance_timeout_ms)
            and (request.server_assignor is None or request.server_assignor == member.server_assignor)
            and request.subscribed_topic_names is None
            and request.subscribed_topic_regex is None
            and request.client.client_id == member.client_id
            and request.client.client_host == member.client_host
            and member.classic is None
        )

    def _member_for(self, group: ConsumerGroup, member_id: str, request: ConsumerGroupHeartbeatRequest,
                    create: bool, owned: Owned,
                    records: list[CoordinatorRecord]) -> tuple[ConsumerGroupMember, str | None]:
        """The member as it stands, and the id of a static member it replaces (Kafka's
        getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember)."""
        instance_id = request.instance_id
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not create:
                    raise HeartbeatError(E.UNKNOWN_MEMBER_ID,
                                         f"Member {member_id} is not a member of group {group.group_id}.")
                log.info("member %s joins consumer group %s", member_id, group.group_id)
                return ConsumerGroupMember(member_id), None
            self._check_epoch(member, request.member_epoch, owned)
            return member, None
        existing = group.static_member(instance_id)
        if create:
            if existing is None:
                log.info("static member %s (instance %s) joins consumer group %s",
                         member_id, instance_id, group.group_id)
                return group.members.get(member_id) or ConsumerGroupMember(member_id), None
            # Kafka compares no member ids here: the holder must have left with -2 (unless it
            # speaks the classic protocol), and the joiner replaces it, even when it is itself
            # (since KIP-1082 a client keeps its member id across a temporary leave).
            if not existing.uses_classic_protocol and existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise HeartbeatError(
                    E.UNRELEASED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {instance_id} cannot join the group because "
                    f"the instance id is owned by {existing.member_id} member.")
            # The new incarnation takes over the old one's place, partitions and target.
            new = dataclasses.replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0,
                                      partitions_pending_revocation={}, state=MemberState.STABLE)
            if existing.member_id == member_id:
                records.append(ConsumerGroupCurrentAssignmentRecord(group.group_id, member_id, new))
                log.info("static member %s (instance %s) rejoins consumer group %s",
                         member_id, instance_id, group.group_id)
                return new, None
            self.remove_records(group.group_id, existing.member_id, records)
            records.append(ConsumerGroupMemberMetadataRecord(group.group_id, member_id, new))
            records.append(ConsumerGroupTargetMemberRecord(
                group.group_id, member_id, group.target_assignment.get(existing.member_id, {})))
            records.append(ConsumerGroupCurrentAssignmentRecord(group.group_id, member_id, new))
            log.info("static member with instance id %s rejoins consumer group %s as %s, replacing %s",
                     instance_id, group.group_id, member_id, existing.member_id)
            return new, existing.member_id
        if existing is None:
            raise HeartbeatError(E.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise HeartbeatError(E.FENCED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {instance_id} was fenced by "
                                 f"member {existing.member_id}.")
        self._check_epoch(existing, request.member_epoch, owned)
        return existing, None

    @staticmethod
    def _check_epoch(member: ConsumerGroupMember, received: int, owned: Owned) -> None:
        """Kafka's throwIfConsumerGroupMemberEpochIsInvalid."""
        if received > member.member_epoch:
            raise HeartbeatError(E.FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a greater member epoch ({received}) than the one "
                                 f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                 f"all its partitions and rejoin.")
        if received < member.member_epoch and (
                received != member.previous_member_epoch or not is_subset(owned, member.assigned_partitions)):
            raise HeartbeatError(E.FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a smaller member epoch ({received}) than the one "
                                 f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                 f"all its partitions and rejoin.")

    # ------------------------------------------------------------------ steps shared with classic members

    def update_group(self, group: ConsumerGroup, member: ConsumerGroupMember, updated: ConsumerGroupMember,
                     replaced: str | None, now: int,
                     records: list[CoordinatorRecord]) -> tuple[int, Assignment]:
        """Steps 1 and 2: the member's metadata record, the epoch bump, the target; returns (epoch, target)."""
        group_id = group.group_id
        # A brand-new member starts from an empty one, so its subscription counts as a change;
        # a static member taking over its predecessor's place (``replaced``) does not.
        new_member = updated.member_id not in group.members and replaced is None
        bump = False
        if new_member or (updated is not member and not updated.metadata_equals(member)):
            records.append(ConsumerGroupMemberMetadataRecord(group_id, updated.member_id, updated))
            if not updated.subscription_equals(member):
                bump = True
        image = self.image()
        epoch = group.group_epoch
        subscription = group.subscription_metadata
        changes: dict[str, ConsumerGroupMember | None] = {updated.member_id: updated}
        if replaced is not None:
            changes[replaced] = None
        version = -1 if image is None else image.version
        if bump or group.metadata_version != version:
            subscription = self.subscription_metadata(group, changes, image)
            if subscription != group.subscription_metadata:
                records.append(ConsumerGroupSubscriptionMetadataRecord(group_id, subscription))
                bump = True
            group.metadata_version = version
        if bump:
            epoch += 1
            records.append(ConsumerGroupEpochRecord(group_id, epoch))
            self.epoch_bumps += 1
            log.debug("consumer group %s: epoch %d", group_id, epoch)
        if epoch > group.assignment_epoch:
            if self._assignment_due(group_id, now):
                assignor = ASSIGNORS[self._assignor_for(group, member, updated)]
                result = build_target(group_id, epoch, assignor, group.members, group.target_assignment,
                                      subscription, group.member_topic_names, changes,
                                      {updated.member_id: replaced} if replaced else None)
                records.extend(result.records)
                self.assigned_at[group_id] = now
                return epoch, result.members.get(updated.member_id, {})
            self._schedule_assignment(group_id)
        return group.assignment_epoch, group.member_target(updated.member_id, updated.instance_id)

    # ------------------------------------------------------------------ batched target assignments

    def _assignment_due(self, group_id: str, now: int) -> bool:
        """Whether a new target may be computed now (``group.consumer.assignment.interval.ms``)."""
        last = self.assigned_at.get(group_id)
        interval = self.config.consumer_assignment_interval_ms
        return interval <= 0 or last is None or now - last >= interval

    def _schedule_assignment(self, group_id: str) -> None:
        """Compute the group's target when its interval is up, for every change made meanwhile."""
        if group_id in self.assignments_due:
            return
        deadline = self.assigned_at.get(group_id, 0) + self.config.consumer_assignment_interval_ms
        self.assignments_due[group_id] = deadline
        self.timers.schedule(deadline, ASSIGNMENT, group_id)

    def _assignment_current(self, deadline: int, group_id: str, _member_id: str) -> bool:
        return self.assignments_due.get(group_id) == deadline

    def _on_assignment_due(self, group_id: str, _member_id: str, now: int, fx: Effects) -> None:
        del self.assignments_due[group_id]
        group = self.group(group_id)
        if group is None or group.group_epoch <= group.assignment_epoch:
            return
        names = self.assignor_names()
        assignor = ASSIGNORS[group.preferred_assignor(names[0] if names else "uniform")]
        result = build_target(group_id, group.group_epoch, assignor, group.members, group.target_assignment,
                              group.subscription_metadata, group.member_topic_names)
        self.assigned_at[group_id] = now
        self.write(group_id, result.records, fx)
        log.info("consumer group %s: target assignment for epoch %d", group_id, group.group_epoch)

    def _assignor_for(self, group: ConsumerGroup, old: ConsumerGroupMember, new: ConsumerGroupMember) -> str:
        names = self.assignor_names()
        default = names[0] if names else "uniform"
        counts = dict(group.assignor_counts)
        for member, delta in ((old, -1), (new, 1)):
            if member.server_assignor and (member is new or member.member_id in group.members):
                counts[member.server_assignor] = counts.get(member.server_assignor, 0) + delta
        best = [(n, name) for name, n in counts.items() if n > 0 and name in ASSIGNORS]
        return max(best)[1] if best else default

    def subscription_metadata(self, group: ConsumerGroup, changes: Mapping[str, ConsumerGroupMember | None],
                              image: MetadataImage | None) -> dict[str, TopicMetadata]:
        """The subscribed topics' metadata with ``changes`` applied to the members (Kafka's
        computeSubscriptionMetadata over computeSubscribedTopicNames): from the group's
        per-topic and per-regex counts, so it costs the topics, not the members."""
        names = Counter(group.topic_counts)
        regexes = Counter(group.regex_counts)
        for member_id, member in changes.items():
            for who, delta in ((group.members.get(member_id), -1), (member, 1)):
                if who is None:
                    continue
                for name in who.subscribed_topic_names:
                    names[name] += delta
                if who.subscribed_topic_regex:
                    regexes[who.subscribed_topic_regex] += delta
        out: dict[str, TopicMetadata] = {}
        if image is None:
            return out
        wanted = {name for name, count in names.items() if count > 0}
        for regex, count in regexes.items():
            if count > 0:
                group.resolved_regexes[regex] = resolved = self.regexes.resolve(regex, image)
                wanted |= resolved
        for name in sorted(wanted):
            meta = image.topic_metadata(name)
            if meta is not None:
                out[name] = meta
        return out

    def reconcile(self, group: ConsumerGroup, member: ConsumerGroupMember, target_epoch: int, target: Assignment,
                  owned: Owned, now: int, records: list[CoordinatorRecord]) -> ConsumerGroupMember:
        """Step 3: move the member toward its target, and watch how long its revocation takes."""
        try:
            reconciled = reconcile(member, target_epoch, target, group.current_partition_epoch, owned)
        except FencedMember as exc:
            raise HeartbeatError(E.FENCED_MEMBER_EPOCH, str(exc)) from None
        if not reconciled.assignment_equals(member) or member.member_id not in group.members:
            records.append(ConsumerGroupCurrentAssignmentRecord(group.group_id, member.member_id, reconciled))
            log.debug("consumer group %s: member %s at epoch %d is %s", group.group_id, member.member_id,
                      reconciled.member_epoch, reconciled.state.name)
        key = (group.group_id, member.member_id)
        if reconciled.state is _STABLE and reconciled.member_epoch == target_epoch:
            started = self._reconciling_since.pop(key, None)
            if started is not None:
                self.reconciliation_seconds.observe(max(now - started, 0) / 1000)
        else:
            self._reconciling_since.setdefault(key, now)
        if reconciled.state is _UNREVOKED_PARTITIONS:
            if self.revocations.get(key, (0, -1))[1] != reconciled.member_epoch:
                deadline = now + max(reconciled.rebalance_timeout_ms, 0)
                self.revocations[key] = (deadline, reconciled.member_epoch)
                self.timers.schedule(deadline, REVOCATION, *key)
        else:
            self.revocations.pop(key, None)
        return reconciled

    def write(self, group_id: str, records: Sequence[CoordinatorRecord], fx: Effects) -> None:
        for record in records:
            fx.write(group_id, record)

    @staticmethod
    def remove_records(group_id: str, member_id: str, records: list[CoordinatorRecord]) -> None:
        """Kafka's removeMember: the member's assignment, target and metadata tombstones, in that order."""
        records.append(ConsumerGroupCurrentAssignmentRecord(group_id, member_id, None))
        records.append(ConsumerGroupTargetMemberRecord(group_id, member_id, None))
        records.append(ConsumerGroupMemberMetadataRecord(group_id, member_id, None))

    # ------------------------------------------------------------------ leaving and fencing

    def _leave(self, request: ConsumerGroupHeartbeatRequest, now: int, fx: Effects) -> ConsumerGroupHeartbeatResult:
        group = self.group(request.group_id)
        if group is None:
            raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Consumer group {request.group_id} not found.")
        if request.instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                raise HeartbeatError(E.UNKNOWN_MEMBER_ID,
                                     f"Member {request.member_id} is not a member of group {group.group_id}.")
        else:
            member = group.static_member(request.instance_id)
            if member is None:
                raise HeartbeatError(E.UNKNOWN_MEMBER_ID, f"Instance id {request.instance_id} is unknown.")
            if member.member_id != request.member_id:
                raise HeartbeatError(E.FENCED_INSTANCE_ID,
                                     f"Static member {request.member_id} with instance id {request.instance_id} "
                                     f"was fenced by member {member.member_id}.")
        interval = self.heartbeat_interval_ms(group.group_id)
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # A static member steps out to restart: it keeps its partitions for a session timeout.
            leaving = dataclasses.replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                                          partitions_pending_revocation={})
            log.info("static member %s (instance %s) of consumer group %s leaves temporarily",
                     member.member_id, request.instance_id, group.group_id)
            fx.write(group.group_id, ConsumerGroupCurrentAssignmentRecord(group.group_id, member.member_id, leaving))
            return ConsumerGroupHeartbeatResult(E.NONE, None, member.member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                                                interval)
        log.info("member %s leaves consumer group %s", member.member_id, group.group_id)
        self.fence(group, member.member_id, now, fx)
        return ConsumerGroupHeartbeatResult(E.NONE, None, member.member_id, LEAVE_GROUP_MEMBER_EPOCH, interval)

    def fence(self, group: ConsumerGroup, member_id: str, now: int, fx: Effects) -> None:
        """Remove a member and bump the epoch (Kafka's consumerGroupFenceMember), or hand the group
        back to the classic protocol when only classic members would be left."""
        self.fenced += 1
        self._reconciling_since.pop((group.group_id, member_id), None)
        self.sessions.pop((group.group_id, member_id), None)
        self.revocations.pop((group.group_id, member_id), None)
        if self.downgrade(group, member_id, fx, now):
            return
        records: list[CoordinatorRecord] = []
        self.remove_records(group.group_id, member_id, records)
        subscription = self.subscription_metadata(group, {member_id: None}, self.image())
        if subscription != group.subscription_metadata:
            records.append(ConsumerGroupSubscriptionMetadataRecord(group.group_id, subscription))
        records.append(ConsumerGroupEpochRecord(group.group_id, group.group_epoch + 1))
        self.epoch_bumps += 1
        self.write(group.group_id, records, fx)
        if self.config.consumer_assignment_interval_ms > 0 and group.members:
            self._schedule_assignment(group.group_id)

    # ------------------------------------------------------------------ timers

    def schedule_session(self, group_id: str, member_id: str, now: int, timeout_ms: int) -> None:
        deadline = now + timeout_ms
        self.sessions[(group_id, member_id)] = deadline
        self.timers.schedule(deadline, SESSION, group_id, member_id)

    def _session_current(self, deadline: int, group_id: str, member_id: str) -> bool:
        return self.sessions.get((group_id, member_id)) == deadline

    def _on_session_expired(self, group_id: str, member_id: str, now: int, fx: Effects) -> None:
        self.sessions.pop((group_id, member_id), None)
        group = self.group(group_id)
        if group is None or member_id not in group.members:
            return
        log.info("member %s of consumer group %s failed its session timeout; fencing it", member_id, group_id)
        self.fence(group, member_id, now, fx)

    def _revocation_current(self, deadline: int, group_id: str, member_id: str) -> bool:
        entry = self.revocations.get((group_id, member_id))
        return entry is not None and entry[0] == deadline

    def _on_revocation_expired(self, group_id: str, member_id: str, now: int, fx: Effects) -> None:
        _, epoch = self.revocations.pop((group_id, member_id))
        group = self.group(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return
        if member.state is MemberState.UNREVOKED_PARTITIONS and member.member_epoch == epoch:
            log.info("member %s of consumer group %s did not revoke its partitions within its rebalance "
                     "timeout; fencing it", member_id, group_id)
            self.fence(group, member_id, now, fx)

    # ------------------------------------------------------------------ load

    def forget(self, group_ids: Collection[str]) -> None:
        """These groups left this coordinator (unloaded): drop their timers' bookkeeping."""
        gone = set(group_ids)
        for key in [k for k in self.sessions if k[0] in gone]:
            del self.sessions[key]
        for key in [k for k in self.revocations if k[0] in gone]:
            del self.revocations[key]
        for group_id in gone:
            self.assignments_due.pop(group_id, None)

    def on_loaded(self, now: int, only: Collection[str] | None = None) -> None:
        """After replay: every member's session starts now, revocations are timed again, and a
        group whose epoch is ahead of its target gets one. ``only``: the groups just loaded."""
        for group in self.groups.values() if only is None else [self.groups[g] for g in only if g in self.groups]:
            if not isinstance(group, ConsumerGroup):
                continue
            if group.group_epoch > group.assignment_epoch and group.members:
                self.assignments_due[group.group_id] = now
                self.timers.schedule(now, ASSIGNMENT, group.group_id)
            for member in group.members.values():
                timeout = (member.classic.session_timeout_ms if member.classic is not None
                           else self.session_timeout_ms(group.group_id))
                self.schedule_session(group.group_id, member.member_id, now, timeout)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    deadline = now + max(member.rebalance_timeout_ms, 0)
                    self.revocations[(group.group_id, member.member_id)] = (deadline, member.member_epoch)
                    self.timers.schedule(deadline, REVOCATION, group.group_id, member.member_id)

