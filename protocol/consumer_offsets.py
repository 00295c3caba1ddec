"""Keys and values of the ``__consumer_offsets`` log, in Kafka's own format.

A key is an int16 key version followed by the key struct: versions 0 and 1 are offset
commits (writers use 1), version 2 is group metadata, versions 3 to 8 are the records of
KIP-848 consumer groups (one record type per key version). A value is an int16 value
version followed by the value struct; a null value is a tombstone. Writers emit
OffsetCommitValue v3 (v1 when an expire timestamp exists), GroupMetadataValue v3 and
consumer group values v0, as Kafka does.
"""

from __future__ import annotations

import functools
import io
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from construct import ConstructError, Container

from protocol.builder import struct_for
from protocol.codec import decode_body_reference
from protocol.compiler import CompiledStruct, compile_struct, compiled_for
from protocol.errors import ProtocolError
from protocol.messages.coordinator_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from protocol.records.batch import RECORD_VARINTS, EncodedRecords
from protocol.schema import Message

_VERSION = struct.Struct(">h")

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """The key of a KIP-848 consumer group record; ``kind`` is its key version (3-8)."""

    kind: int
    group: str
    member_id: str | None = None


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A record type this coordinator does not use (share groups, streams groups): skipped on load."""

    version: int


RecordKey = OffsetKey | GroupKey | ConsumerGroupKey | UnknownKey

CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8

#: key version -> (key schema, value schema) of each consumer group record type.
CONSUMER_GROUP_RECORDS: dict[int, tuple[Message, Message]] = {
    CONSUMER_GROUP_METADATA: (ConsumerGroupMetadataKey, ConsumerGroupMetadataValue),
    CONSUMER_GROUP_PARTITION_METADATA: (ConsumerGroupPartitionMetadataKey, ConsumerGroupPartitionMetadataValue),
    CONSUMER_GROUP_MEMBER_METADATA: (ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: (
        ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMetadataValue),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: (
        ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupTargetAssignmentMemberValue),
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: (
        ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue),
}
CONSUMER_GROUP_VALUE_VERSION = 0


@dataclass(slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int  # -1: none


# Generated codecs (``protocol.compiler``), built on first use. Keys and offset values
# decode straight into their dataclasses (a projection), skipping the Container.
_KEY_DECODERS: dict[int, CompiledStruct] = {}
_OFFSET_VALUE_DECODERS: dict[int, CompiledStruct] = {}
_OFFSET_VALUE_FIELDS = ("offset", "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp")


def _key_decoder(version: int) -> CompiledStruct | None:
    codec = _KEY_DECODERS.get(version)
    if codec is None:
        if version in (0, 1):
            codec = compile_struct(
                OffsetCommitKey.fields,
                version,
                OffsetCommitKey.is_flexible(version),
                label=f"OffsetCommitKey v{version}",
                project=("group", "topic", "partition"),
                factory=OffsetKey,
            )
        elif version == GROUP_KEY_VERSION:
            codec = compile_struct(
                GroupMetadataKey.fields,
                version,
                GroupMetadataKey.is_flexible(version),
                label=f"GroupMetadataKey v{version}",
                project=("group",),
                factory=GroupKey,
            )
        elif version in CONSUMER_GROUP_RECORDS:
            message = CONSUMER_GROUP_RECORDS[version][0]
            with_member = len(message.fields) > 1
            codec = compile_struct(
                message.fields,
                version,
                message.is_flexible(version),
                label=f"{message.name} v{version}",
                project=("group_id", "member_id") if with_member else ("group_id",),
                factory=lambda group, member=None, kind=version: ConsumerGroupKey(kind, group, member),
            )
        else:
            return None
        _KEY_DECODERS[version] = codec
    return codec


def _offset_value_decoder(version: int) -> CompiledStruct:
    codec = _OFFSET_VALUE_DECODERS.get(version)
    if codec is None:
        codec = compile_struct(
            OffsetCommitValue.fields,
            version,
            OffsetCommitValue.is_flexible(version),
            label=f"OffsetCommitValue v{version}",
            project=_OFFSET_VALUE_FIELDS,
            missing={"leader_epoch": -1, "expire_timestamp": -1},
            factory=OffsetValue,
        )
        _OFFSET_VALUE_DECODERS[version] = codec
    return codec


def _encode(message: Message, version: int, body: dict[str, Any]) -> bytes:
    out = bytearray(_VERSION.pack(version))
    compiled_for(message, version).encode(body, out)
    return bytes(out)


def encode_key(key: OffsetKey | GroupKey | ConsumerGroupKey) -> bytes:
    if isinstance(key, OffsetKey):
        return _encode(
            OffsetCommitKey,
            OFFSET_KEY_VERSION,
            {"group": key.group, "topic": key.topic, "partition": key.partition},
        )
    if isinstance(key, ConsumerGroupKey):
        message = CONSUMER_GROUP_RECORDS[key.kind][0]
        return _encode(message, key.kind, {"group_id": key.group, "member_id": key.member_id})
    return _encode(GroupMetadataKey, GROUP_KEY_VERSION, {"group": key.group})


_OFFSET_KEY_HEAD = struct.Struct(">hh")
_STRING_LENGTH = struct.Struct(">h")
_PARTITION = struct.Struct(">i")
_OFFSET_VALUE_V3 = struct.Struct(">hqih")
#: A v3 value without metadata, whole: version, offset, leader epoch, empty metadata, commit time.
_OFFSET_VALUE_V3_PLAIN = struct.Struct(">hqihq")
_OFFSET_VALUE_V1 = struct.Struct(">hqh")
_TIMESTAMP = struct.Struct(">q")
_TWO_TIMESTAMPS = struct.Struct(">qq")
#: What a direct pack may run into with values the compiled encoder refuses; those values
#: go through ``encode_key``/``encode_offset_value``, which raise the codec's own error.
REFUSED = (struct.error, UnicodeEncodeError, AttributeError, TypeError)

#: The packs of ``encode_offset_key`` (after the prefix) and of ``encode_offset_commit_value``'s
#: plain case, for a loop over many offsets that inlines them (``broker.coordinator.records.encode_all``);
#: on anything in ``REFUSED`` the loop calls the functions, which decide.
pack_offset_key_partition = _PARTITION.pack
pack_plain_offset_value = _OFFSET_VALUE_V3_PLAIN.pack


@functools.lru_cache(maxsize=4096)  # a consumer commits the same group and topic again and again
def offset_key_prefix(group: str, topic: str) -> bytes | None:
    """The bytes every offset key of ``group`` and ``topic`` starts with (None: not packable
    directly, use ``encode_key``); ``encode_offset_key`` appends the partition."""
    try:
        g = group.encode()
        t = topic.encode()
        return b"".join((_OFFSET_KEY_HEAD.pack(OFFSET_KEY_VERSION, len(g)), g, _STRING_LENGTH.pack(len(t)), t))
    except REFUSED:
        return None


def encode_offset_key(group: str, topic: str, partition: int, prefix: bytes | None = None) -> bytes:
    """``encode_key(OffsetKey(group, topic, partition))``, packed directly: the commit path's key.

    ``prefix`` is ``offset_key_prefix(group, topic)`` when the caller has it already.
    """
    if prefix is None:
        prefix = offset_key_prefix(group, topic)
    if prefix is not None:
        try:
            return prefix + _PARTITION.pack(partition)
        except REFUSED:
            pass
    return encode_key(OffsetKey(group, topic, partition))


def encode_offset_commit_value(value: OffsetValue) -> bytes:
    """``encode_offset_value(value)``, packed directly: the commit path's value."""
    try:
        if value.expire_timestamp < 0 and value.metadata == "":  # most commits: one pack
            return _OFFSET_VALUE_V3_PLAIN.pack(3, value.offset, value.leader_epoch, 0, value.commit_timestamp)
        metadata = value.metadata.encode()
        if value.expire_timestamp >= 0:
            return b"".join((_OFFSET_VALUE_V1.pack(1, value.offset, len(metadata)), metadata,
                             _TWO_TIMESTAMPS.pack(value.commit_timestamp, value.expire_timestamp)))
        return b"".join((_OFFSET_VALUE_V3.pack(3, value.offset, value.leader_epoch, len(metadata)), metadata,
                         _TIMESTAMP.pack(value.commit_timestamp)))
    except REFUSED:
        return encode_offset_value(value)


#: After an offset key's prefix, the rest of a plain offset record in a batch: the key's
#: partition, the value's length (24, as a zig-zag varint: 48), the v3 value without
#: metadata (as ``_OFFSET_VALUE_V3_PLAIN``) and the record's header count (0).
_PLAIN_RECORD_TAIL = struct.Struct(">iBhqihqx")
#: A plain offset record's size less its offset delta and its key's length and prefix: the
#: attributes and timestamp delta (a byte each), then the tail.
_PLAIN_RECORD_FIXED = 2 + _PLAIN_RECORD_TAIL.size


def encode_plain_offset_records(records: Sequence[tuple[str, str, int, OffsetValue | None]]) -> EncodedRecords | None:
    """The records section of a plain batch of ``records`` (group, topic, partition, value),
    byte for byte what ``encode_key_value_batch`` writes for their ``encode_offset_key`` and
    ``encode_offset_commit_value``; None unless every value is an ``OffsetValue`` without
    metadata or expiry that packs as it is (the caller encodes those records the general way).

    A commit's offsets, written as one loop with one pack each: no key, value or pair per
    offset (the commit path, once per committed offset).
    """
    pack = _PLAIN_RECORD_TAIL.pack
    value_type = OffsetValue
    parts: list[bytes | bytearray] = [b""]
    group = topic = None
    leads: list[bytes] = []
    count = len(records)
    try:
        for i, (group_id, topic_name, partition, value) in enumerate(records):
            if type(value) is not value_type or value.expire_timestamp >= 0 or value.metadata != "":
                return None
            if topic_name != topic or group_id != group:
                group, topic = group_id, topic_name
                prefix = offset_key_prefix(group_id, topic_name)
                if prefix is None:
                    return None
                leads = _record_leads(prefix, count)
            parts += (leads[i], pack(partition, 48, 3, value.offset, value.leader_epoch, 0, value.commit_timestamp))
    except (struct.error, IndexError, TypeError, ValueError):
        return None
    return EncodedRecords(parts, count)


#: ``_record_leads`` kept by offset key prefix (a group commits the same topics again and
#: again), up to _LEADS_KEPT leads in all; past that they are dropped and built again.
_LEADS: dict[bytes, list[bytes]] = {}
_LEADS_KEPT = 1 << 14
_leads_held = 0


def _record_leads(prefix: bytes, count: int) -> list[bytes]:
    """The bytes before the partition in record i of a plain batch whose offset keys start
    with ``prefix``, for i in 0..count-1 at least: the record's size, its attributes and
    timestamp delta, the offset delta i, the key's length and the prefix."""
    global _leads_held
    leads = _LEADS.get(prefix)
    if leads is not None and len(leads) >= count:
        return leads
    table = RECORD_VARINTS
    if count > len(table):
        raise IndexError("offset deltas past the varint table")
    held = len(leads) if leads is not None else 0
    if _leads_held - held + count > _LEADS_KEPT:
        _LEADS.clear()
        _leads_held = held = 0
    head = table[len(prefix) + 4] + prefix  # the key's length, then all but its partition
    fixed = _PLAIN_RECORD_FIXED + len(head)
    leads = _LEADS[prefix] = [table[fixed + len(table[i])] + b"\x00\x00" + table[i] + head for i in range(count)]
    _leads_held += count - held
    return leads


def encode_consumer_group_value(kind: int, body: dict[str, Any]) -> bytes:
    """The value of a consumer group record of key version ``kind`` (value version 0)."""
    return _encode(CONSUMER_GROUP_RECORDS[kind][1], CONSUMER_GROUP_VALUE_VERSION, body)


def decode_consumer_group_value(kind: int, data: bytes) -> Container:
    """Any version of a consumer group record's value; newer writers' extra tagged fields are kept."""
    message = CONSUMER_GROUP_RECORDS[kind][1]
    version = _value_version(data, message.max_version)
    body, _ = compiled_for(message, version).decode(data, 2)
    return body


def is_offset_key(key: bytes) -> bool:
    """Whether record key bytes are an offset commit's (key versions 0 and 1), without decoding them."""
    return key[:2] in (b"\x00\x00", b"\x00\x01")


def decode_key(data: bytes) -> RecordKey:
    if len(data) < 2:
        raise ProtocolError("record key shorter than its version")
    (version,) = _VERSION.unpack_from(data)
    codec = _KEY_DECODERS.get(version) or _key_decoder(version)
    if codec is not None:
        key, pos = codec.decode(data, 2)
        if pos != len(data):
            raise ProtocolError(f"trailing bytes after record key v{version}")
        return key  # type: ignore[no-any-return]
    if version < 0:
        raise ProtocolError(f"negative record key version {version}")
    return UnknownKey(version)


def encode_offset_value(value: OffsetValue) -> bytes:
    version = 1 if value.expire_timestamp >= 0 else 3
    return _encode(
        OffsetCommitValue,
        version,
        {
            "offset": value.offset,
            "leader_epoch": value.leader_epoch,
            "metadata": value.metadata,
            "commit_timestamp": value.commit_timestamp,
            "expire_timestamp": value.expire_timestamp,
        },
    )


def _value_version(data: bytes, highest: int) -> int:
    if len(data) < 2:
        raise ProtocolError("record value shorter than its version")
    (version,) = _VERSION.unpack_from(data)
    if not 0 <= version <= highest:
        raise ProtocolError(f"unknown record value version {version}")
    return int(version)


def decode_offset_value(data: bytes) -> OffsetValue:
    """Any OffsetCommitValue version; bytes after the known fields (newer writers) are ignored."""
    version = _value_version(data, OffsetCommitValue.max_version)
    codec = _OFFSET_VALUE_DECODERS.get(version) or _offset_value_decoder(version)
    value, _ = codec.decode(data, 2)
    return value  # type: ignore[no-any-return]


def encode_group_value(value: dict[str, Any]) -> bytes:
    return _encode(GroupMetadataValue, GROUP_VALUE_VERSION, value)


def decode_group_value(data: bytes) -> Container:
    """Decode any GroupMetadataValue version; v0 records take rebalance timeout from session timeout."""
    version = _value_version(data, GroupMetadataValue.max_version)
    body, _ = compiled_for(GroupMetadataValue, version).decode(data, 2)
    return _complete_group_value(body)


def _complete_group_value(body: Container) -> Container:
    body.setdefault("current_state_timestamp", -1)
    for member in body["members"]:
        member.setdefault("group_instance_id", None)
        if member.get("rebalance_timeout", -1) == -1:
            member["rebalance_timeout"] = member["session_timeout"]
    return body


# --- reference: the same decoders through construct (for tests) -------------------------


def _decode_lenient(message: Message, version: int, data: bytes) -> Container:
    """Decode a value body with construct; newer writers may append tagged data we do not know."""
    try:
        body: Container = struct_for(message, version)._parsereport(io.BytesIO(data), Container(), "(value)")
    except ConstructError as exc:
        raise ProtocolError(f"malformed {message.name} v{version}: {exc}") from None
    return body


def decode_key_reference(data: bytes) -> RecordKey:
    """``decode_key`` through construct."""
    if len(data) < 2:
        raise ProtocolError("record key shorter than its version")
    (version,) = _VERSION.unpack_from(data)
    if version in (0, 1):
        body = decode_body_reference(OffsetCommitKey, version, data[2:])
        return OffsetKey(body.group, body.topic, body.partition)
    if version == GROUP_KEY_VERSION:
        return GroupKey(decode_body_reference(GroupMetadataKey, version, data[2:]).group)
    if version in CONSUMER_GROUP_RECORDS:
        body = decode_body_reference(CONSUMER_GROUP_RECORDS[version][0], version, data[2:])
        return ConsumerGroupKey(version, body.group_id, body.get("member_id"))
    if version < 0:
        raise ProtocolError(f"negative record key version {version}")
    return UnknownKey(version)


def decode_offset_value_reference(data: bytes) -> OffsetValue:
    """``decode_offset_value`` through construct."""
    version = _value_version(data, OffsetCommitValue.max_version)
    body = _decode_lenient(OffsetCommitValue, version, data[2:])
    return OffsetValue(
        offset=body.offset,
        leader_epoch=body.get("leader_epoch", -1),
        metadata=body.metadata,
        commit_timestamp=body.commit_timestamp,
        expire_timestamp=body.get("expire_timestamp", -1),
    )


def decode_group_value_reference(data: bytes) -> Container:
    """``decode_group_value`` through construct."""
    version = _value_version(data, GroupMetadataValue.max_version)
    return _complete_group_value(_decode_lenient(GroupMetadataValue, version, data[2:]))


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: 31*h + c over UTF-16 code units, wrapping at 32 bits."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for(group: str, partitions: int) -> int:
    """The __consumer_offsets partition of a group: Utils.abs(hashCode) % partitions."""
    h = _hash_cache.get(group)
    if h is None:
        h = java_string_hash(group)
        if len(_hash_cache) >= _HASH_CACHE_SIZE:
            _hash_cache.clear()
        _hash_cache[group] = h
    return (0 if h == -0x80000000 else abs(h)) % partitions


#: Group id -> Java hash code: every append and lookup asks for a group's partition, and
#: the hash is a Python loop over the id. Bounded (cleared when full) against hostile ids.
_hash_cache: dict[str, int] = {}
_HASH_CACHE_SIZE = 65536
