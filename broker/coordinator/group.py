"""A classic group and its members: the in-memory model the coordinator mutates."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from broker.coordinator.state import GroupState, check_transition

Protocols = list[tuple[str, bytes]]  # (name, metadata), in the member's order of preference


@dataclass(slots=True)
class Member:
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
    join_version: int = 0
    sync_ticket: int | None = None  # a parked SyncGroup
    sync_version: int = 0
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
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp: int = -1
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # insertion order = join order
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> expiry (KIP-394)
    pending_sync: set[str] = field(default_factory=set)
    new_member_added: bool = False
    # The join phase deadline (initial delay or rebalance timeout) and the delay state.
    join_deadline: int | None = None
    initial_delay_remaining: int | None = None  # None: not an initial delayed join
    initial_delay_last: int = 0
    sync_deadline: int | None = None

    def transition(self, target: GroupState, now: int) -> None:
        check_transition(self.state, target)
        self.state = target
        self.state_timestamp = now

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        return member

    def supported_protocol_counts(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for member in self.members.values():
            counts.update({name for name, _ in member.protocols})
        return counts

    def supports_protocols(self, protocol_type: str, protocols: Protocols) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocols)
        if self.protocol_type != protocol_type:
            return False
        counts = self.supported_protocol_counts()
        return any(counts[name] == len(self.members) for name, _ in protocols)

    def select_protocol(self) -> str:
        """Candidates are supported by every member; each votes for its first candidate."""
        counts = self.supported_protocol_counts()
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
        from protocol.consumer_protocol import subscribed_topics

        if self.protocol_type != "consumer" or self.protocol is None:
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
        from protocol.consumer_protocol import subscribed_topics

        topics: set[str] = set()
        if self.protocol_type != "consumer":
            return topics
        for member in self.members.values():
            for _, metadata in member.protocols:
                topics |= subscribed_topics(metadata) or set()
        return topics
