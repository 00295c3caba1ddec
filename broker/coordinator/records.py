"""The coordinator's records: typed, and the one place they are encoded and decoded.

Every change the coordinator makes that must survive a restart is one of these records in
the ``__consumer_offsets`` log, in Kafka's own key and value schemas (``protocol.
consumer_offsets`` holds the wire codecs). Handlers only emit records; ``replay`` of the
same records builds the state, live and at load (see ``Effects.write``). A record with a
None value is a tombstone.
"""

from __future__ import annotations

from dataclasses import dataclass

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

__all__ = [
    "CoordinatorRecord",
    "GroupMemberMetadata",
    "GroupMetadata",
    "GroupMetadataRecord",
    "OffsetCommitRecord",
    "OffsetValue",
    "decode",
    "encode",
]


@dataclass(frozen=True, slots=True)
class OffsetCommitRecord:
    """Kafka's OffsetCommitKey/OffsetCommitValue; ``value`` None deletes the offset."""

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


CoordinatorRecord = OffsetCommitRecord | GroupMetadataRecord


def encode(record: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    """The record's key and value bytes as they go into the log."""
    if isinstance(record, OffsetCommitRecord):
        key = encode_key(OffsetKey(record.group_id, record.topic, record.partition))
        return key, None if record.value is None else encode_offset_value(record.value)
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
    return None
