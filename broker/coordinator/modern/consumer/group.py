"""A KIP-848 consumer group: its epochs, members, target assignment and partition owners.

Everything here is set by replay of the group's records (``apply_*``), live and at load,
as Kafka's ConsumerGroup is. A few derived indexes are kept beside the records: how many
members subscribe to each topic name, regex and assignor, which instance id belongs to
which member, and, for every partition a member owns or still has to give up, the epoch
of that member. The last one is what guarantees that no partition is ever owned by two
members: replaying a record that would give a partition a second owner raises.
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from broker.coordinator.modern.assignment import EMPTY, Assignment
from broker.coordinator.modern.consumer.member import ConsumerGroupMember, MemberState
from broker.coordinator.modern.topics import TopicMetadata
from broker.coordinator.records import (
    ConsumerGroupEpochRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupRecord,
    ConsumerGroupSubscriptionMetadataRecord,
    ConsumerGroupTargetAssignmentEpochRecord,
    ConsumerGroupTargetMemberRecord,
    OffsetValue,
)
from broker.coordinator.requests import ListedGroup, OffsetCommitRequest
from protocol.errors import ErrorCode

E = ErrorCode
CONSUMER_PROTOCOL_TYPE = "consumer"


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def wire_name(self) -> str:
        return self.value


class OwnershipError(RuntimeError):
    """A record would give a partition a second owner: always a coordinator bug."""


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    subscription_metadata: dict[str, TopicMetadata] = field(default_factory=dict)
    target_assignment: dict[str, Assignment] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    topic_counts: Counter[str] = field(default_factory=Counter)  # explicit topic names
    regex_counts: Counter[str] = field(default_factory=Counter)
    assignor_counts: Counter[str] = field(default_factory=Counter)
    classic_members: int = 0
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    # Soft state, never persisted: the topics each regex matched when metadata was last
    # looked at, and the image version that was.
    resolved_regexes: dict[str, frozenset[str]] = field(default_factory=dict)
    metadata_version: int = -1
    dead: bool = False

    group_type = "consumer"

    # ------------------------------------------------------------------ derived views

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        epoch = self.assignment_epoch
        for member in self.members.values():
            if member.member_epoch != epoch or member.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    @property
    def is_dead(self) -> bool:
        return self.dead

    @property
    def size(self) -> int:
        return len(self.members)

    def is_empty(self) -> bool:
        return not self.members

    def all_members_use_classic_protocol_except(self, member_id: str) -> bool:
        return all(m.uses_classic_protocol for mid, m in self.members.items() if mid != member_id)

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        if instance_id is None:
            return None
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def member_target(self, member_id: str, instance_id: str | None) -> Assignment:
        """A member's target; a static member replacing its predecessor inherits the predecessor's."""
        if instance_id is not None:
            previous = self.static_members.get(instance_id)
            if previous is not None:
                return self.target_assignment.get(previous, EMPTY)
            return EMPTY
        return self.target_assignment.get(member_id, EMPTY)

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def subscribed_topic_names(self) -> set[str]:
        """Every topic some member subscribes to, by name or through its regex (as last resolved)."""
        names = {name for name, count in self.topic_counts.items() if count > 0}
        for regex, count in self.regex_counts.items():
            if count > 0:
                names |= self.resolved_regexes.get(regex, frozenset())
        return names

    def member_topic_names(self, member: ConsumerGroupMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            names |= self.resolved_regexes.get(member.subscribed_topic_regex, frozenset())
        return names

    def preferred_assignor(self, default: str) -> str:
        """The assignor most members asked for (Kafka's computePreferredServerAssignor), else the default."""
        best = [(count, name) for name, count in self.assignor_counts.items() if count > 0]
        return max(best)[1] if best else default

    def owner_of(self) -> dict[tuple[uuid.UUID, int], str]:
        """Who owns (or is still revoking) each partition: for describing and for checks."""
        out: dict[tuple[uuid.UUID, int], str] = {}
        for member_id, member in self.members.items():
            for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
                for topic_id, partitions in assignment.items():
                    for partition in partitions:
                        out[(topic_id, partition)] = member_id
        return out

    # ------------------------------------------------------------------ replay

    def apply_epoch(self, epoch: int) -> None:
        self.group_epoch = epoch

    def apply_subscription_metadata(self, topics: Mapping[str, TopicMetadata]) -> None:
        self.subscription_metadata = dict(topics)

    def apply_member_metadata(self, member: ConsumerGroupMember) -> None:
        """A member's metadata record: its subscription and client details (not its assignment)."""
        old = self.members.get(member.member_id)
        if old is not None:
            # The record carries no reconciliation state: keep what the member had.
            member = _with_assignment_of(member, old)
        self._put(old, member)

    def apply_member_assignment(self, member_id: str, member: ConsumerGroupMember) -> None:
        """A member's current assignment record: epochs, state, owned and revoking partitions."""
        old = self.members.get(member_id)
        if old is None:
            raise OwnershipError(f"current assignment for unknown member {member_id} of group {self.group_id}")
        self._put(old, _with_assignment_of(old, member))

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is None:
            return
        self._count(old, -1)
        self._release(old)
        if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]

    def clear_member_assignment(self, member_id: str) -> None:
        """The current assignment record's tombstone: the member owns nothing and is on its way out."""
        old = self.members.get(member_id)
        if old is None:
            return
        self._put(old, ConsumerGroupMember(**_metadata_fields(old),  # type: ignore[arg-type]
                                           member_epoch=-1, previous_member_epoch=-1))

    def waiting_on_unreleased_partition(self, member: ConsumerGroupMember) -> bool:
        """Whether some partition of the member's target is still held by another member."""
        target = self.target_assignment.get(member.member_id, EMPTY)
        for topic_id, partitions in target.items():
            have = member.assigned_partitions.get(topic_id, frozenset())
            for partition in partitions - have:
                if (topic_id, partition) in self.partition_epochs:
                    return True
        return False

    def supports_classic_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Kafka's ConsumerGroup.supportsClassicProtocols: a classic member must share a protocol
        with every other classic member."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE:
            return False
        if not self.members:
            return bool(names)
        classic = [m for m in self.members.values() if m.classic is not None]
        return any(all(name in {n for n, _ in m.classic.protocols} for m in classic  # type: ignore[union-attr]
                       ) for name in names)

    def apply_target(self, member_id: str, assignment: Assignment | None) -> None:
        if assignment is None:
            self.target_assignment.pop(member_id, None)
        else:
            self.target_assignment[member_id] = assignment

    def apply_assignment_epoch(self, epoch: int) -> None:
        self.assignment_epoch = epoch

    def _put(self, old: ConsumerGroupMember | None, new: ConsumerGroupMember) -> None:
        if old is not None:
            self._count(old, -1)
            self._release(old)
        self.members[new.member_id] = new
        self._count(new, 1)
        self._claim(new)
        if new.instance_id is not None:
            self.static_members[new.instance_id] = new.member_id

    def _count(self, member: ConsumerGroupMember, delta: int) -> None:
        for name in member.subscribed_topic_names:
            self.topic_counts[name] += delta
            if self.topic_counts[name] <= 0:
                del self.topic_counts[name]
        for key, counter in ((member.subscribed_topic_regex, self.regex_counts),
                             (member.server_assignor, self.assignor_counts)):
            if key:
                counter[key] += delta
                if counter[key] <= 0:
                    del counter[key]
        if member.uses_classic_protocol:
            self.classic_members += delta

    def _claim(self, member: ConsumerGroupMember) -> None:
        epochs = self.partition_epochs
        for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, partitions in assignment.items():
                for partition in partitions:
                    key = (topic_id, partition)
                    if key in epochs:
                        raise OwnershipError(
                            f"group {self.group_id}: partition {topic_id}-{partition} is owned at epoch "
                            f"{epochs[key]}; member {member.member_id} cannot take it at {member.member_epoch}")
                    epochs[key] = member.member_epoch

    def _release(self, member: ConsumerGroupMember) -> None:
        epochs = self.partition_epochs
        for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, partitions in assignment.items():
                for partition in partitions:
                    epochs.pop((topic_id, partition), None)

    # ------------------------------------------------------------------ what the offset rules ask

    def validate_offset_commit(self, request: OffsetCommitRequest) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetCommit (the group exists and is not Dead)."""
        epoch = request.generation_id_or_member_epoch
        if epoch < 0 and not self.members:
            return None  # an admin client, or a consumer that assigns itself
        member = self.members.get(request.member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if request.transactional:
            # TxnOffsetCommit carries a generation: a stale epoch is ILLEGAL_GENERATION there.
            return None if epoch == member.member_epoch else E.ILLEGAL_GENERATION
        if not member.uses_classic_protocol and not request.consumer_protocol_version:
            return E.UNSUPPORTED_VERSION  # consumer-protocol members commit with OffsetCommit v9+
        return self._validate_epoch(epoch, member)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        if member_id is None and member_epoch < 0:
            return None
        member = self.members.get(member_id or "")
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        return self._validate_epoch(member_epoch, member)

    @staticmethod
    def _validate_epoch(received: int, member: ConsumerGroupMember) -> ErrorCode | None:
        if received != member.member_epoch:
            return E.ILLEGAL_GENERATION if member.uses_classic_protocol else E.STALE_MEMBER_EPOCH
        return None

    def validate_offset_delete(self) -> ErrorCode | None:
        return None

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.topic_counts or any(
            topic in self.resolved_regexes.get(regex, frozenset()) for regex in self.regex_counts)

    def validate_delete_group(self) -> ErrorCode | None:
        return None if not self.members else E.NON_EMPTY_GROUP

    def offset_expiration(self) -> tuple[Callable[[OffsetValue], int], Callable[[str], bool]]:
        """Kafka's ConsumerGroup.offsetExpirationCondition: from the commit time, unsubscribed topics only."""
        return (lambda v: v.commit_timestamp), (lambda t: not self.is_subscribed_to_topic(t))

    def consuming_topics(self) -> set[str]:
        return self.subscribed_topic_names() if self.members else set()

    def listing(self) -> ListedGroup:
        return ListedGroup(self.group_id, CONSUMER_PROTOCOL_TYPE, self.state.wire_name, self.group_type)


def apply_record(group: ConsumerGroup, record: ConsumerGroupRecord) -> None:
    """Replay one consumer group record into ``group`` (Kafka's GroupMetadataManager.replay overloads)."""
    if isinstance(record, ConsumerGroupEpochRecord):
        if record.epoch is None:
            group.dead = True
        else:
            group.apply_epoch(record.epoch)
    elif isinstance(record, ConsumerGroupSubscriptionMetadataRecord):
        group.apply_subscription_metadata(record.topics or {})
    elif isinstance(record, ConsumerGroupMemberMetadataRecord):
        if record.member is None:
            group.remove_member(record.member_id)
        else:
            group.apply_member_metadata(record.member)
    elif isinstance(record, ConsumerGroupTargetAssignmentEpochRecord):
        group.apply_assignment_epoch(record.epoch if record.epoch is not None else -1)
    elif isinstance(record, ConsumerGroupTargetMemberRecord):
        group.apply_target(record.member_id, record.assignment)
    elif record.member is None:
        group.clear_member_assignment(record.member_id)
    else:
        group.apply_member_assignment(record.member_id, record.member)


def _metadata_fields(member: ConsumerGroupMember) -> dict[str, object]:
    return {
        "member_id": member.member_id, "instance_id": member.instance_id, "rack_id": member.rack_id,
        "client_id": member.client_id, "client_host": member.client_host,
        "subscribed_topic_names": member.subscribed_topic_names,
        "subscribed_topic_regex": member.subscribed_topic_regex,
        "rebalance_timeout_ms": member.rebalance_timeout_ms, "server_assignor": member.server_assignor,
        "classic": member.classic,
    }


def _with_assignment_of(metadata: ConsumerGroupMember, assignment: ConsumerGroupMember) -> ConsumerGroupMember:
    """``metadata``'s subscription and client fields with ``assignment``'s reconciliation fields."""
    return ConsumerGroupMember(
        **_metadata_fields(metadata),  # type: ignore[arg-type]
        member_epoch=assignment.member_epoch,
        previous_member_epoch=assignment.previous_member_epoch,
        state=assignment.state,
        assigned_partitions=assignment.assigned_partitions,
        partitions_pending_revocation=assignment.partitions_pending_revocation,
    )


def iter_partitions(assignment: Assignment) -> Iterable[tuple[uuid.UUID, int]]:
    for topic_id, partitions in assignment.items():
        for partition in partitions:
            yield topic_id, partition
