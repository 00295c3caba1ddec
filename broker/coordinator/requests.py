"""Typed requests and results: what the coordinator's rules read and answer.

``broker.coordinator.api`` builds these from wire bodies of any version and shapes results
back for the version asked. The rules never see a version number: where Kafka's behaviour
depends on the version, the adapter turns that into a field saying what the client can do
(``require_known_member_id``, ``supports_skip_assignment``...). Everything is frozen.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import NamedTuple

from protocol.errors import ErrorCode

Protocols = tuple[tuple[str, bytes], ...]  # (name, metadata), in the member's order of preference


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """Who sent a request: the client id of its header and its host as Kafka reports it."""

    client_id: str = ""
    client_host: str = ""


# ---------------------------------------------------------------------- JoinGroup


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    reason: str | None = None
    client: ClientInfo = ClientInfo()
    #: KIP-394 (JoinGroup v4+): a new dynamic member must rejoin with the id it is given.
    require_known_member_id: bool = True
    #: KIP-814 (JoinGroup v9+): a rejoining static leader may be told to skip the assignment.
    supports_skip_assignment: bool = True


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinGroupMember, ...] = ()


# ---------------------------------------------------------------------- SyncGroup


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    #: Checked against the group when the client sends them (SyncGroup v5+).
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


# ---------------------------------------------------------------------- Heartbeat, LeaveGroup


# Heartbeat's types are named tuples, the most frequent request's: a frozen dataclass's
# constructor sets each field through a call, and the result is hashed and compared as
# the key of its cached reply body.


class HeartbeatRequest(NamedTuple):
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


class HeartbeatResult(NamedTuple):
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    members: tuple[LeavingMember, ...]


@dataclass(frozen=True, slots=True)
class LeaveGroupResult:
    """``error`` is the group-level outcome; ``members`` pairs each leaver with its own."""

    error: ErrorCode
    members: tuple[tuple[LeavingMember, ErrorCode], ...] = ()


# ---------------------------------------------------------------------- OffsetCommit


class CommitPartition(NamedTuple):
    """One partition of a commit (a named tuple: one is built per committed offset)."""

    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    #: OffsetCommit v1 lets the client set the commit time; -1 means "now".
    commit_timestamp: int = -1


class CommitTopic(NamedTuple):
    """One topic of a commit (named tuples, like ``CommitPartition``: built for every commit)."""

    name: str
    partitions: tuple[CommitPartition, ...]


class OffsetCommitRequest(NamedTuple):
    """An OffsetCommit of any version (a named tuple: a frozen dataclass costs a Python call
    per field to build, and one is built for every commit)."""

    group_id: str
    #: A classic group's generation, or a consumer group member's epoch; -1 when not given.
    generation_id_or_member_epoch: int
    member_id: str
    group_instance_id: str | None
    #: OffsetCommit v2-v4 retention; -1 means the broker's offsets.retention.minutes.
    retention_ms: int
    topics: tuple[CommitTopic, ...]
    #: OffsetCommit v9+: the KIP-848 form, where an unknown group is GROUP_ID_NOT_FOUND.
    consumer_protocol_version: bool = False
    #: A TxnOffsetCommit being validated: the group's state is not enforced, and a commit
    #: without member id and generation is accepted (older TxnOffsetCommit versions send none).
    transactional: bool = False


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    """Offsets committed inside a producer's transaction, with KIP-447's member checks (v3+)."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    group_instance_id: str | None
    topics: tuple[CommitTopic, ...]

    def as_offset_commit(self) -> OffsetCommitRequest:
        """The same commit as the group's validation sees it."""
        return OffsetCommitRequest(self.group_id, self.generation_id, self.member_id, self.group_instance_id, -1,
                                   self.topics, transactional=True)


PartitionErrors = tuple[tuple[str, tuple[tuple[int, ErrorCode], ...]], ...]  # topic -> (partition, error)


class OffsetCommitResult(NamedTuple):
    """Each partition's error (a named tuple: the reply cache hashes one for every commit)."""

    topics: PartitionErrors


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitResult:
    topics: PartitionErrors


# ---------------------------------------------------------------------- OffsetFetch


# The OffsetFetch types are named tuples, like the OffsetCommit ones: a few are built for
# every fetch, and a frozen dataclass's constructor sets each field through a call.


class FetchGroup(NamedTuple):
    group_id: str
    #: (topic, partitions) pairs; None asks for every committed offset of the group.
    topics: tuple[tuple[str, tuple[int, ...]], ...] | None
    member_id: str | None = None
    member_epoch: int = -1


class OffsetFetchRequest(NamedTuple):
    groups: tuple[FetchGroup, ...]
    require_stable: bool = False


class FetchedPartition(NamedTuple):
    """One partition of a fetch (a named tuple: one is built per fetched offset)."""

    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: ErrorCode = ErrorCode.NONE


class FetchedGroup(NamedTuple):
    group_id: str
    topics: tuple[tuple[str, tuple[FetchedPartition, ...]], ...]
    error: ErrorCode = ErrorCode.NONE


class OffsetFetchResult(NamedTuple):
    groups: tuple[FetchedGroup, ...]


# ---------------------------------------------------------------------- OffsetDelete


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequest:
    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResult:
    error: ErrorCode
    topics: PartitionErrors = ()


# ---------------------------------------------------------------------- admin


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    group_ids: tuple[str, ...]
    include_authorized_operations: bool = False


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    members: tuple[DescribedMember, ...]
    error: ErrorCode = ErrorCode.NONE
    #: Kafka AclOperation bits; None when the client did not ask for them.
    authorized_operations: int | None = None


@dataclass(frozen=True, slots=True)
class DescribeGroupsResult:
    groups: tuple[DescribedGroup, ...]


@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    states: tuple[str, ...] = ()
    types: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str


@dataclass(frozen=True, slots=True)
class ListGroupsResult:
    groups: tuple[ListedGroup, ...]
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroupsResult:
    results: tuple[tuple[str, ErrorCode], ...]


# ---------------------------------------------------------------------- KIP-848 consumer groups

TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


# ConsumerGroupHeartbeat's types are named tuples, as Heartbeat's are: a member of a
# KIP-848 group sends one every few seconds.


class ConsumerGroupHeartbeatRequest(NamedTuple):
    """One request for joining (epoch 0), heartbeating, and leaving (-1, or -2 for a static member)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    #: None: unchanged since the last heartbeat.
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    #: The partitions the member owns; None: unchanged since the last heartbeat.
    topic_partitions: TopicPartitions | None = None
    client: ClientInfo = ClientInfo()
    #: KIP-1082 (ConsumerGroupHeartbeat v1+): the client makes up its own member id.
    client_member_id: bool = True


class ConsumerGroupHeartbeatResult(NamedTuple):
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    #: None: the assignment has not changed since the member last heard it.
    assignment: TopicPartitions | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeRequest:
    group_ids: tuple[str, ...]
    include_authorized_operations: bool = False


@dataclass(frozen=True, slots=True)
class DescribedAssignment:
    topic_partitions: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: DescribedAssignment
    target_assignment: DescribedAssignment


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    group_id: str
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()
    authorized_operations: int | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeResult:
    groups: tuple[DescribedConsumerGroup, ...]


Result = (
    JoinGroupResult | SyncGroupResult | HeartbeatResult | LeaveGroupResult | OffsetCommitResult
    | TxnOffsetCommitResult    | OffsetFetchResult | OffsetDeleteResult | DescribeGroupsResult | ListGroupsResult | DeleteGroupsResult
    | ConsumerGroupHeartbeatResult | ConsumerGroupDescribeResult
)
