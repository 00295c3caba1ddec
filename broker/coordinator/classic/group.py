"""A classic group and its members: the in-memory model the classic rules mutate.

What survives a restart is the group's ``GroupMetadata`` record. ``metadata`` builds it and
``apply_metadata`` takes it back, both live (the coordinator replays every record it writes)
and at load, so the persisted fields of a group are always exactly what its last record
says. Parked requests, deadlines and pending members are the rules' working state and are
never persisted, as in Kafka.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.coordinator.classic.state import CAN_REBALANCE, ClassicGroupState, check_transition
from broker.coordinator.records import GroupMemberMetadata, GroupMetadata, OffsetValue
from broker.coordinator.requests import (
    DescribedGroup,
    DescribedMember,
    ListedGroup,
    OffsetCommitRequest,
    Protocols,
)
from protocol.consumer_protocol import subscribed_topics
from protocol.errors import ErrorCode

S = ClassicGroupState
E = ErrorCode

# Enum members the request paths test, bound once: their lookup on the class is slow (docs/architecture.md).
_DEAD, _EMPTY, _COMPLETING_REBALANCE = S.DEAD, S.EMPTY, S.COMPLETING_REBALANCE

# Kafka AclOperation codes a group supports: READ (3), DELETE (6), DESCRIBE (8).
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(slots=True)
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    join_ticket: int | None = None  # a parked JoinGroup
    sync_ticket: int | None = None  # a parked SyncGroup
    is_new: bool = False
    heartbeat_deadline: int = 0

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_ticket is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_ticket is not None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: Protocols) -> bool:
        """Same protocols, same order, same metadata bytes."""
        return self.protocols == protocols


@dataclass(slots=True)
class ClassicGroup:
    group_id: str
    state: ClassicGroupState = ClassicGroupState.EMPTY
    state_timestamp: int = -1
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)  # insertion order = join order
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> expiry (KIP-394)
    #: Members yet to SyncGroup this generation (a dict used as an ordered set: an empty set
    #: costs 216 bytes, an empty dict 64, and every group loaded from offsets alone has one).
    pending_sync: dict[str, None] = field(default_factory=dict)
    new_member_added: bool = False
    # The join phase deadline (initial delay or rebalance timeout) and the delay state.
    join_deadline: int | None = None
    initial_delay_remaining: int | None = None  # None: not an initial delayed join
    initial_delay_last: int = 0
    sync_deadline: int | None = None
    #: Kept as members come, go, park and change protocols, so a join costs the same in a
    #: group of a thousand as in a group of one (Kafka's ClassicGroup keeps
    #: ``supportedProtocols`` and ``numMembersAwaitingJoinResponse`` the same way): how many
    #: members support each protocol name, and how many have a JoinGroup parked.
    protocol_support: dict[str, int] = field(default_factory=dict)
    awaiting_joins: int = 0

    group_type = "classic"

    # ------------------------------------------------------------------ persisted image

    def metadata(self, assignments: dict[str, bytes] | None = None) -> GroupMetadata:
        """The group as its GroupMetadata record persists it, with new ``assignments`` if given."""
        protocol = self.protocol
        return GroupMetadata(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=protocol,
            leader=self.leader,
            current_state_timestamp=self.state_timestamp,
            members=tuple(
                GroupMemberMetadata(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                    m.session_timeout_ms, m.metadata_for(protocol),
                    m.assignment if assignments is None else assignments.get(m.member_id, b""),
                )
                for m in self.members.values()
            ),
        )

    def apply_metadata(self, value: GroupMetadata) -> None:
        """Take the persisted fields from a GroupMetadata record (live or at load).

        Members the record names get its values. A member known only from the log has just
        the selected protocol's metadata, which is all a restarted group needs; members
        already here keep their protocol list and their parked requests. A group in one of
        the states a record can leave it in (Stable or Empty) takes the state the record
        implies; mid-rebalance states belong to the rules, which move on from there.
        """
        if self.state in (S.STABLE, S.EMPTY):
            self.state = S.STABLE if value.members else S.EMPTY
        self.protocol_type = value.protocol_type or None
        self.generation = value.generation
        self.protocol = value.protocol
        self.leader = value.leader if value.members else None
        self.state_timestamp = value.current_state_timestamp
        members: dict[str, ClassicMember] = {}
        statics: dict[str, str] = {}
        for m in value.members:
            member = self.members.get(m.member_id)
            if member is None:
                member = ClassicMember(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                    m.session_timeout_ms, value.protocol_type, ((value.protocol or "", m.subscription),),
                )
            selected = (value.protocol or "", m.subscription)
            if selected not in member.protocols:
                member.protocols = (selected,)
            member.protocol_type = value.protocol_type
            member.group_instance_id = m.group_instance_id
            member.client_id = m.client_id
            member.client_host = m.client_host
            member.rebalance_timeout_ms = m.rebalance_timeout_ms
            member.session_timeout_ms = m.session_timeout_ms
            member.assignment = m.assignment
            members[m.member_id] = member
            if m.group_instance_id is not None:
                statics[m.group_instance_id] = m.member_id
        self.members = members
        self.static_members = statics
        self._recount()

    def _recount(self) -> None:
        """Rebuild the tallies from the members (after a record replaced them)."""
        support: dict[str, int] = {}
        awaiting = 0
        for member in self.members.values():
            for name in {name for name, _ in member.protocols}:
                support[name] = support.get(name, 0) + 1
            awaiting += member.join_ticket is not None
        self.protocol_support = support
        self.awaiting_joins = awaiting

    def _tally(self, member: ClassicMember, delta: int) -> None:
        support = self.protocol_support
        for name in {name for name, _ in member.protocols}:
            count = support.get(name, 0) + delta
            if count > 0:
                support[name] = count
            else:
                support.pop(name, None)
        if member.join_ticket is not None:
            self.awaiting_joins += delta

    @classmethod
    def loaded(cls, group_id: str, value: GroupMetadata) -> ClassicGroup:
        """A group as a restart finds it: Stable with its members, or Empty."""
        group = cls(group_id)
        group.apply_metadata(value)
        return group

    # ------------------------------------------------------------------ states and members

    def transition(self, target: ClassicGroupState, now: int) -> None:
        check_transition(self.state, target)
        self.state = target
        self.state_timestamp = now

    @property
    def can_rebalance(self) -> bool:
        return self.state in CAN_REBALANCE

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def awaiting_join_count(self) -> int:
        return self.awaiting_joins

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and self.awaiting_joins == len(self.members)

    def set_join_ticket(self, member: ClassicMember, ticket: int | None) -> None:
        """Park a member's JoinGroup (or clear it, with None); every change of a member's
        ``join_ticket`` goes through here so ``awaiting_joins`` stays true."""
        if member.member_id in self.members and self.members[member.member_id] is member:
            self.awaiting_joins += (ticket is not None) - (member.join_ticket is not None)
        member.join_ticket = ticket

    def set_protocols(self, member: ClassicMember, protocols: Protocols) -> None:
        """Change a member's protocols, keeping ``protocol_support`` true."""
        held = member.member_id in self.members and self.members[member.member_id] is member
        if held:
            self._tally(member, -1)
        member.protocols = protocols
        if held:
            self._tally(member, 1)

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def add(self, member: ClassicMember) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        replaced = self.members.get(member.member_id)
        if replaced is not None:
            self._tally(replaced, -1)
        self.members[member.member_id] = member
        self._tally(member, 1)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> ClassicMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._tally(member, -1)
        if member is not None and member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.pop(member_id, None)
        return member

    def rename_member(self, old_id: str, new_id: str) -> ClassicMember:
        """KIP-345: a static member rejoined under a new id; it keeps its place and role."""
        member = self.members[old_id]
        member.member_id = new_id
        self.members = {(new_id if k == old_id else k): v for k, v in self.members.items()}
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = new_id
        if self.leader == old_id:
            self.leader = new_id
        if old_id in self.pending_sync:
            del self.pending_sync[old_id]
            self.pending_sync[new_id] = None
        return member

    def supported_protocol_counts(self) -> dict[str, int]:
        """How many members support each protocol name."""
        return self.protocol_support

    def supports_protocols(self, protocol_type: str, protocols: Protocols) -> bool:
        if self.state is S.EMPTY:
            return bool(protocol_type) and bool(protocols)
        if self.protocol_type != protocol_type:
            return False
        counts = self.protocol_support
        size = len(self.members)
        return any(counts.get(name, 0) == size for name, _ in protocols)

    def select_protocol(self) -> str:
        """Candidates are supported by every member; each votes for its first candidate."""
        counts = self.protocol_support
        candidates = {name for name, n in counts.items() if n == len(self.members)}
        votes: Counter[str] = Counter()
        for member in self.members.values():
            for name, _ in member.protocols:
                if name in candidates:
                    votes[name] += 1
                    break
        # Ties go to the candidate first in the order of the first member's preference.
        best = max(votes.values())
        first = next(iter(self.members.values()))
        for name, _ in first.protocols:
            if votes.get(name) == best:
                return name
        return max(votes, key=lambda n: votes[n])

    def subscribed_topics(self) -> set[str] | None:
        """Topics subscribed by any member ("consumer" groups); None when unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            member_topics = subscribed_topics(member.metadata_for(self.protocol))
            if member_topics is None:
                return None
            topics |= member_topics
        return topics

    def consuming_topics(self) -> set[str]:
        """Topics named by the readable consumer-protocol subscriptions of current members.

        Unlike ``subscribed_topics`` this works in every state, also before a protocol is
        selected: every protocol a member offers carries its subscription, so all count.
        Unreadable metadata contributes nothing (not "everything").
        """
        topics: set[str] = set()
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return topics
        for member in self.members.values():
            for _, metadata in member.protocols:
                topics |= subscribed_topics(metadata) or set()
        return topics

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode | None:
        """Kafka's ClassicGroup.validateMember: static members are checked by instance id."""
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is None:
                return E.UNKNOWN_MEMBER_ID
            if current != member_id:
                return E.FENCED_INSTANCE_ID
            return None
        if member_id not in self.members:
            return E.UNKNOWN_MEMBER_ID
        return None

    # ------------------------------------------------------------------ what the offset rules ask

    def is_empty(self) -> bool:
        return self.state is S.EMPTY

    @property
    def is_dead(self) -> bool:
        return self.state is _DEAD

    def validate_offset_commit(self, request: OffsetCommitRequest) -> ErrorCode | None:
        """Kafka's ClassicGroup.validateOffsetCommit (the group exists and is not Dead).

        A transactional commit (TxnOffsetCommit) may come without member id and generation
        (versions before KIP-447), and the group's state is not enforced for it.
        """
        generation = request.generation_id_or_member_epoch
        if generation < 0 and self.state is _EMPTY:
            return None  # an admin client or a consumer that manages its own assignment
        if generation >= 0 or request.member_id or request.group_instance_id is not None:
            error = self.validate_member(request.member_id, request.group_instance_id)
            if error is not None:
                return error
            if generation != self.generation:
                return E.ILLEGAL_GENERATION
        elif not request.transactional:
            return E.UNKNOWN_MEMBER_ID
        if self.state is _COMPLETING_REBALANCE and not request.transactional:
            return E.REBALANCE_IN_PROGRESS
        return None

    def validate_offset_delete(self) -> ErrorCode | None:
        """Offsets of a non-Empty group may go only if it speaks the consumer protocol (KIP-496)."""
        if self.state is not S.EMPTY and self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return E.NON_EMPTY_GROUP
        return None

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Whether an OffsetDelete of ``topic`` must be refused; unreadable subscriptions count as all."""
        if self.state is S.EMPTY:
            return False
        subscribed = self.subscribed_topics()
        return subscribed is None or topic in subscribed

    def validate_delete_group(self) -> ErrorCode | None:
        return None if self.state is S.EMPTY else E.NON_EMPTY_GROUP

    def offset_expiration(self) -> tuple[Callable[[OffsetValue], int], Callable[[str], bool]] | None:
        """Kafka's ClassicGroup.offsetExpirationCondition, with which topics it covers (KIP-211).

        Returns (the time an offset's retention counts from, whether a topic's offsets are
        considered), or None when no offset of the group may expire now.
        """
        if self.protocol_type:
            if self.state is S.EMPTY:
                stamp = self.state_timestamp
                return (lambda v: stamp if stamp >= 0 else v.commit_timestamp), (lambda _t: True)
            if self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.state is S.STABLE:
                subscribed = self.subscribed_topics()
                if subscribed is not None:
                    return (lambda v: v.commit_timestamp), (lambda t: t not in subscribed)
            return None
        return (lambda v: v.commit_timestamp), (lambda _t: True)

    # ------------------------------------------------------------------ admin views

    def describe(self, authorized_operations: int | None) -> DescribedGroup:
        stable = self.state is S.STABLE
        return DescribedGroup(
            group_id=self.group_id,
            state=self.state.wire_name,
            protocol_type=self.protocol_type or "",
            protocol_data=(self.protocol or "") if stable else "",
            members=tuple(
                DescribedMember(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.metadata_for(self.protocol) if stable else b"",
                    m.assignment if stable else b"",
                )
                for m in self.members.values()
            ),
            authorized_operations=authorized_operations,
        )

    def listing(self) -> ListedGroup:
        return ListedGroup(self.group_id, self.protocol_type or "", self.state.wire_name, self.group_type)
