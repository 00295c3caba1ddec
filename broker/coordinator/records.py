"""The coordinator's records: typed, and the one place they are encoded and decoded.

Every change the coordinator makes that must survive a restart is one of these records in
the ``__consumer_offsets`` log, in Kafka's own key and value schemas (``protocol.
consumer_offsets`` holds the wire codecs). Handlers only emit records; ``replay`` of the
same records builds the state, live and at load (see ``Effects.write``). A record with a
None value is a tombstone.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from broker.coordinator.modern.assignment import Assignment, assignment_of, pairs_of
from broker.coordinator.modern.consumer.member import ClassicMemberMetadata, ConsumerGroupMember, MemberState
from broker.coordinator.modern.topics import TopicMetadata
from protocol.consumer_offsets import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_PARTITION_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    REFUSED,
    ConsumerGroupKey,
    GroupKey,
    OffsetKey,
    OffsetValue,
    decode_consumer_group_value,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_consumer_group_value,
    encode_group_value,
    encode_key,
    encode_offset_commit_value,
    encode_offset_key,
    encode_plain_offset_records,
    offset_key_prefix,
    pack_offset_key_partition,
    pack_plain_offset_value,
)
from protocol.records import EncodedRecords

__all__ = [
    "ConsumerGroupCurrentAssignmentRecord",
    "ConsumerGroupEpochRecord",
    "ConsumerGroupMemberMetadataRecord",
    "ConsumerGroupSubscriptionMetadataRecord",
    "ConsumerGroupTargetAssignmentEpochRecord",
    "ConsumerGroupTargetMemberRecord",
    "CoordinatorRecord",
    "GroupMemberMetadata",
    "GroupMetadata",
    "GroupMetadataRecord",
    "OffsetCommitRecord",
    "OffsetValue",
    "decode",
    "encode",
    "encode_all",
    "encode_batch_records",
]


class OffsetCommitRecord(NamedTuple):
    """Kafka's OffsetCommitKey/OffsetCommitValue; ``value`` None deletes the offset.

    A named tuple rather than a frozen dataclass: one is built per committed offset.
    """

    group_id: str
    topic: str
    partition: int
    value: OffsetValue | None


@dataclass(frozen=True, slots=True)
class GroupMemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the group's selected protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """A classic group as Kafka persists it (GroupMetadataValue)."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[GroupMemberMetadata, ...]


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    """Kafka's GroupMetadataKey/GroupMetadataValue; ``value`` None deletes the group."""

    group_id: str
    value: GroupMetadata | None


# --- KIP-848 consumer groups; a None value is the record's tombstone.


@dataclass(frozen=True, slots=True)
class ConsumerGroupEpochRecord:
    """ConsumerGroupMetadata: the group epoch."""

    group_id: str
    epoch: int | None


@dataclass(frozen=True, slots=True)
class ConsumerGroupSubscriptionMetadataRecord:
    """ConsumerGroupPartitionMetadata: the subscribed topics' ids and partition counts."""

    group_id: str
    topics: Mapping[str, TopicMetadata] | None


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataRecord:
    """ConsumerGroupMemberMetadata: a member's subscription and client details (not its assignment)."""

    group_id: str
    member_id: str
    member: ConsumerGroupMember | None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentEpochRecord:
    """ConsumerGroupTargetAssignmentMetadata: the epoch of the target assignment."""

    group_id: str
    epoch: int | None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetMemberRecord:
    """ConsumerGroupTargetAssignmentMember: one member's target assignment."""

    group_id: str
    member_id: str
    assignment: Assignment | None


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentAssignmentRecord:
    """ConsumerGroupCurrentMemberAssignment: a member's epochs, state and partitions."""

    group_id: str
    member_id: str
    member: ConsumerGroupMember | None


ConsumerGroupRecord = (
    ConsumerGroupEpochRecord | ConsumerGroupSubscriptionMetadataRecord | ConsumerGroupMemberMetadataRecord
    | ConsumerGroupTargetAssignmentEpochRecord | ConsumerGroupTargetMemberRecord
    | ConsumerGroupCurrentAssignmentRecord
)
CoordinatorRecord = OffsetCommitRecord | GroupMetadataRecord | ConsumerGroupRecord


def _topic_partitions(assignment: Assignment) -> list[dict[str, Any]]:
    return [{"topic_id": t, "partitions": ps} for t, ps in pairs_of(assignment)]


def _assignment(body: list[Any]) -> dict[uuid.UUID, frozenset[int]]:
    return assignment_of((tp.topic_id, tp.partitions) for tp in body)


#: Encoded consumer group record keys: a member's keys are written again on every change of
#: its assignment, so they are encoded once (bounded: cleared when full).
_KEYS: dict[tuple[int, str, str | None], bytes] = {}
KEYS_KEPT = 65536


def _group_key(kind: int, group_id: str, member_id: str | None = None) -> bytes:
    cache_key = (kind, group_id, member_id)
    key = _KEYS.get(cache_key)
    if key is None:
        key = encode_key(ConsumerGroupKey(kind, group_id, member_id))
        if len(_KEYS) >= KEYS_KEPT:
            _KEYS.clear()
        _KEYS[cache_key] = key
    return key


def _encode_consumer_group(record: ConsumerGroupRecord) -> tuple[bytes, bytes | None]:
    """Key and value bytes of a consumer group record (Kafka's GroupCoordinatorRecordHelpers)."""
    group_id = record.group_id
    if isinstance(record, ConsumerGroupEpochRecord):
        key = _group_key(CONSUMER_GROUP_METADATA, group_id)
        if record.epoch is None:
            return key, None
        return key, encode_consumer_group_value(CONSUMER_GROUP_METADATA, {"epoch": record.epoch})
    if isinstance(record, ConsumerGroupSubscriptionMetadataRecord):
        key = _group_key(CONSUMER_GROUP_PARTITION_METADATA, group_id)
        if record.topics is None:
            return key, None
        return key, encode_consumer_group_value(CONSUMER_GROUP_PARTITION_METADATA, {"topics": [
            {"topic_id": t.topic_id, "topic_name": t.name, "num_partitions": t.num_partitions,
             "partition_metadata": []}
            for t in sorted(record.topics.values(), key=lambda t: t.name)
        ]})
    if isinstance(record, ConsumerGroupTargetAssignmentEpochRecord):
        key = _group_key(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, group_id)
        if record.epoch is None:
            return key, None
        return key, encode_consumer_group_value(
            CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, {"assignment_epoch": record.epoch})
    if isinstance(record, ConsumerGroupTargetMemberRecord):
        key = _group_key(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, group_id, record.member_id)
        if record.assignment is None:
            return key, None
        return key, encode_consumer_group_value(
            CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, {"topic_partitions": _topic_partitions(record.assignment)})
    if isinstance(record, ConsumerGroupMemberMetadataRecord):
        key = _group_key(CONSUMER_GROUP_MEMBER_METADATA, group_id, record.member_id)
        m = record.member
        if m is None:
            return key, None
        classic = None if m.classic is None else {
            "session_timeout_ms": m.classic.session_timeout_ms,
            "supported_protocols": [{"name": n, "metadata": md} for n, md in m.classic.protocols],
        }
        return key, encode_consumer_group_value(CONSUMER_GROUP_MEMBER_METADATA, {
            "instance_id": m.instance_id, "rack_id": m.rack_id, "client_id": m.client_id,
            "client_host": m.client_host, "subscribed_topic_names": list(m.subscribed_topic_names),
            "subscribed_topic_regex": m.subscribed_topic_regex, "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "server_assignor": m.server_assignor, "classic_member_metadata": classic,
        })
    key = _group_key(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, group_id, record.member_id)
    m = record.member
    if m is None:
        return key, None
    return key, encode_consumer_group_value(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, {
        "member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch,
        "state": int(m.state), "assigned_partitions": _topic_partitions(m.assigned_partitions),
        "partitions_pending_revocation": _topic_partitions(m.partitions_pending_revocation),
    })


def _member_state(value: int) -> MemberState:
    try:
        return MemberState(value)
    except ValueError:
        return MemberState.UNKNOWN


def _decode_consumer_group(key: ConsumerGroupKey, value: bytes | None) -> ConsumerGroupRecord:
    group_id, kind, member_id = key.group, key.kind, key.member_id or ""
    body = None if value is None else decode_consumer_group_value(kind, value)
    if kind == CONSUMER_GROUP_METADATA:
        return ConsumerGroupEpochRecord(group_id, None if body is None else body.epoch)
    if kind == CONSUMER_GROUP_PARTITION_METADATA:
        return ConsumerGroupSubscriptionMetadataRecord(group_id, None if body is None else {
            t.topic_name: TopicMetadata(t.topic_id, t.topic_name, t.num_partitions) for t in body.topics})
    if kind == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        return ConsumerGroupTargetAssignmentEpochRecord(group_id, None if body is None else body.assignment_epoch)
    if kind == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        return ConsumerGroupTargetMemberRecord(
            group_id, member_id, None if body is None else _assignment(body.topic_partitions))
    if kind == CONSUMER_GROUP_MEMBER_METADATA:
        if body is None:
            return ConsumerGroupMemberMetadataRecord(group_id, member_id, None)
        classic = body.get("classic_member_metadata")
        return ConsumerGroupMemberMetadataRecord(group_id, member_id, ConsumerGroupMember(
            member_id=member_id, instance_id=body.instance_id, rack_id=body.rack_id, client_id=body.client_id,
            client_host=body.client_host, subscribed_topic_names=tuple(body.subscribed_topic_names),
            subscribed_topic_regex=body.subscribed_topic_regex, rebalance_timeout_ms=body.rebalance_timeout_ms,
            server_assignor=body.server_assignor,
            classic=None if classic is None else ClassicMemberMetadata(
                classic.session_timeout_ms, tuple((p.name, bytes(p.metadata)) for p in classic.supported_protocols)),
        ))
    if body is None:
        return ConsumerGroupCurrentAssignmentRecord(group_id, member_id, None)
    return ConsumerGroupCurrentAssignmentRecord(group_id, member_id, ConsumerGroupMember(
        member_id=member_id, member_epoch=body.member_epoch, previous_member_epoch=body.previous_member_epoch,
        state=_member_state(body.state), assigned_partitions=_assignment(body.assigned_partitions),
        partitions_pending_revocation=_assignment(body.partitions_pending_revocation),
    ))


def encode(record: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    """The record's key and value bytes as they go into the log."""
    if isinstance(record, OffsetCommitRecord):
        key = encode_offset_key(record.group_id, record.topic, record.partition)
        return key, None if record.value is None else encode_offset_commit_value(record.value)
    if not isinstance(record, GroupMetadataRecord):
        return _encode_consumer_group(record)
    key = encode_key(GroupKey(record.group_id))
    value = record.value
    if value is None:
        return key, None
    return key, encode_group_value({
        "protocol_type": value.protocol_type,
        "generation": value.generation,
        "protocol": value.protocol,
        "leader": value.leader,
        "current_state_timestamp": value.current_state_timestamp,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "rebalance_timeout": m.rebalance_timeout_ms,
                "session_timeout": m.session_timeout_ms,
                "subscription": m.subscription,
                "assignment": m.assignment,
            }
            for m in value.members
        ],
    })


def encode_all(records: Sequence[CoordinatorRecord],
               latest: dict[bytes, bytes] | None = None) -> list[tuple[bytes, bytes | None]]:
    """``[encode(r) for r in records]``; offset records of one group and topic share their key's prefix.

    With ``latest``, every group record (not an offset) also updates it: its last value per
    key, in the order written, a tombstone removing the key. That is the compacted view of
    the group records a snapshot keeps (``broker.coordinator.snapshot``).
    """
    out: list[tuple[bytes, bytes | None]] = []
    add = out.append
    group: str | None = None
    topic: str | None = None
    prefix: bytes | None = None
    # encode_offset_key and encode_offset_commit_value inlined (a commit writes up to
    # thousands of these): their packs, and the functions themselves for anything refused.
    pack_partition = pack_offset_key_partition
    pack_plain = pack_plain_offset_value
    refused = REFUSED
    for record in records:
        if type(record) is OffsetCommitRecord:
            group_id, topic_name, partition, offset = record
            if topic_name != topic or group_id != group:
                group, topic = group_id, topic_name
                prefix = offset_key_prefix(group_id, topic_name)
            try:
                key = prefix + pack_partition(partition)  # type: ignore[operator]  # None: refused
            except refused:
                key = encode_offset_key(group_id, topic_name, partition, prefix)
            if offset is None:
                add((key, None))
                continue
            try:
                if offset.expire_timestamp < 0 and offset.metadata == "":
                    value = pack_plain(3, offset.offset, offset.leader_epoch, 0, offset.commit_timestamp)
                else:
                    value = encode_offset_commit_value(offset)
            except refused:
                value = encode_offset_commit_value(offset)
            add((key, value))
        else:
            key, group_value = encode(record)
            out.append((key, group_value))
            if latest is not None:
                latest.pop(key, None)
                if group_value is not None:
                    latest[key] = group_value
    return out


def encode_batch_records(records: Sequence[CoordinatorRecord], latest: dict[bytes, bytes] | None = None
                         ) -> EncodedRecords | list[tuple[bytes, bytes | None]]:
    """What the log appends as one plain (not transactional) batch of ``records``.

    A commit's plain offsets (no metadata, no expiry: most commits) as the batch's records
    section at once (``encode_plain_offset_records``); anything else as ``encode_all``'s
    pairs, ``latest`` kept as it says. Either way the log writes the same bytes.
    """
    encoded = encode_plain_offset_records(records)  # type: ignore[arg-type]  # None unless all are offsets
    return encoded if encoded is not None else encode_all(records, latest)


def decode(key: bytes, value: bytes | None) -> CoordinatorRecord | None:
    """A record read back from the log; None for key types this coordinator does not keep.

    Raises ``ProtocolError`` when the bytes are not a valid record.
    """
    record_key = decode_key(key)
    if isinstance(record_key, OffsetKey):
        return OffsetCommitRecord(
            record_key.group, record_key.topic, record_key.partition,
            None if value is None else decode_offset_value(value),
        )
    if isinstance(record_key, GroupKey):
        if value is None:
            return GroupMetadataRecord(record_key.group, None)
        body = decode_group_value(value)
        return GroupMetadataRecord(record_key.group, GroupMetadata(
            protocol_type=body.protocol_type,
            generation=body.generation,
            protocol=body.protocol,
            leader=body.leader,
            current_state_timestamp=body.current_state_timestamp,
            members=tuple(
                GroupMemberMetadata(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                    m.session_timeout, bytes(m.subscription), bytes(m.assignment),
                )
                for m in body.members
            ),
        ))
    if isinstance(record_key, ConsumerGroupKey):
        return _decode_consumer_group(record_key, value)
    return None
