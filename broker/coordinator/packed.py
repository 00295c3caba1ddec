"""Bodies packed and read straight, for the APIs a broker answers most.

Reply bodies packed straight from a typed result: the generic path (``broker.coordinator.api``'s
encoders, then ``protocol.codec``) builds a dict per item and has the schema-driven encoder
type-check every field of it; for an OffsetFetch that was a third of the request's cost.
These write the same bytes with ``struct`` and are held to the generic codec's output, byte
for byte at every version, by tests/coordinator/test_fetch_encoding.py.

OffsetCommit and OffsetFetch requests read straight from the frame (``read_offset_commit``,
``read_offset_fetch``): the generic path decodes a ``Container`` per group, topic and
partition, which ``broker.coordinator.api``'s decoders then turn into named tuples; in a
100-partition commit that was 3.8k of the 30.9k instructions each additional offset cost
(valgrind, routed in process). The readers
take the shapes clients send (OffsetCommit v6 and later, OffsetFetch v6 and later; every
length in one byte where the version is flexible; no tagged fields) and hand anything else
back to the generic path, which also gives malformed bytes their error; where they read,
they give what the generic path gives (tests/coordinator/test_request_readers.py).
``read_consumer_group_heartbeat`` does the same for KIP-848's heartbeat (v0-v1).
"""

from __future__ import annotations

import struct
import uuid

from broker.coordinator.requests import (
    ClientInfo,
    CommitPartition,
    CommitTopic,
    ConsumerGroupHeartbeatRequest,
    FetchedPartition,
    FetchGroup,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResult,
    Result,
    TopicPartitions,
)
from protocol.varint import encode_uvarint

__all__ = ["offset_fetch_body", "read_consumer_group_heartbeat", "read_offset_commit", "read_offset_fetch"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I16_TAGS = struct.Struct(">hB")  # an error code, then an empty tagged-field section
_PARTITION_V0 = struct.Struct(">iq")  # partition_index, committed_offset
_PARTITION_V5 = struct.Struct(">iqi")  # and committed_leader_epoch
#: A flexible version's partition without metadata: v5's fields, the metadata's compact length
#: (0: null, 1: empty), the error code and an empty tagged-field section.
_PARTITION_BARE = struct.Struct(">iqiBhx")


#: Compact lengths (length + 1) below 128 are one byte: nearly every array and string.
_COMPACT = tuple(bytes((n,)) for n in range(128))


def _compact_length(n: int) -> bytes:
    return _COMPACT[n + 1] if n < 127 else encode_uvarint(n + 1)


def _classic_topics_body(out: list[bytes], topics: tuple[tuple[str, tuple[FetchedPartition, ...]], ...],
                         version: int) -> None:
    """OffsetFetchResponse's topics at a classic version (v0-v5), appended to ``out``."""
    epochs = version >= 5
    partition_struct = _PARTITION_V5 if epochs else _PARTITION_V0
    add = out.append
    add(_I32.pack(len(topics)))
    for name, partitions in topics:
        encoded = name.encode()
        add(_I16.pack(len(encoded)))
        add(encoded)
        add(_I32.pack(len(partitions)))
        for partition, offset, leader_epoch, metadata, error in partitions:
            add(partition_struct.pack(partition, offset, leader_epoch) if epochs
                else partition_struct.pack(partition, offset))
            if metadata is None:
                add(b"\xff\xff")
            else:
                text = metadata.encode()
                add(_I16.pack(len(text)))
                add(text)
            add(_I16.pack(error))


def _flexible_topics_body(out: list[bytes], topics: tuple[tuple[str, tuple[FetchedPartition, ...]], ...]) -> None:
    """The topics of a flexible version (v6+): a partition without metadata (null or empty,
    as nearly every one is) is one pack, its compact length and empty tagged fields included."""
    add = out.append
    compact = _COMPACT
    pack_bare = _PARTITION_BARE.pack
    n = len(topics)
    add(compact[n + 1] if n < 127 else encode_uvarint(n + 1))
    for name, partitions in topics:
        encoded = name.encode()
        n = len(encoded)
        add(compact[n + 1] if n < 127 else encode_uvarint(n + 1))
        add(encoded)
        n = len(partitions)
        add(compact[n + 1] if n < 127 else encode_uvarint(n + 1))
        for partition, offset, leader_epoch, metadata, error in partitions:
            if not metadata:  # null (compact length 0) or empty (1)
                add(pack_bare(partition, offset, leader_epoch, metadata is not None, error))
            else:
                text = metadata.encode()
                add(_PARTITION_V5.pack(partition, offset, leader_epoch))
                add(_compact_length(len(text)))
                add(text)
                add(_I16_TAGS.pack(error, 0))
        add(b"\x00")


def offset_fetch_body(version: int, r: Result) -> bytes:
    """The OffsetFetchResponse body of ``r`` at ``version``, packed directly: the bytes the
    generic codec makes of ``encode_offset_fetch(version, r)``, without the dicts between.
    A fetch's reply is a third of its cost through the generic encoder, which type-checks
    every field of every partition."""
    assert isinstance(r, OffsetFetchResult)
    out: list[bytes] = []
    if version >= 3:
        out.append(_I32.pack(0))  # throttle_time_ms
    if version >= 8:
        groups = r.groups
        out.append(_compact_length(len(groups)))
        for group in groups:
            encoded = group.group_id.encode()
            out += (_compact_length(len(encoded)), encoded)
            _flexible_topics_body(out, group.topics)
            out.append(_I16_TAGS.pack(group.error, 0))
        out.append(b"\x00")
        return b"".join(out)
    group = r.groups[0]
    if version >= 6:
        _flexible_topics_body(out, group.topics)
        out.append(_I16_TAGS.pack(group.error, 0))
    else:
        _classic_topics_body(out, group.topics, version)
        if version >= 2:
            out.append(_I16.pack(group.error))
    return b"".join(out)


# ---------------------------------------------------------------------- requests, read

_INT16_AT = struct.Struct(">h").unpack_from
_INT32_AT = struct.Struct(">i").unpack_from
_INT32_INT16_AT = struct.Struct(">ih").unpack_from
#: A flexible commit's partition with the byte after it (the metadata's compact length) and
#: the one after that (its tagged fields' count if the metadata is empty).
_FLEXIBLE_PARTITION_AT = struct.Struct(">iqiBB").unpack_from
#: A classic commit's partition with its metadata's int16 length.
_CLASSIC_PARTITION_AT = struct.Struct(">iqih").unpack_from
#: ``unpack_from`` of n big-endian int32s, by n (one-byte compact counts: n under 127).
_INT32S_AT = tuple(struct.Struct(f">{n}i").unpack_from for n in range(127))


class _NotTaken(Exception):
    """A reader met bytes it does not take."""


#: What reading past the frame's end or an invalid string raises, or bytes a reader does not
#: take: the generic path then decodes them (and refuses what is malformed).
_UNREAD = (IndexError, struct.error, UnicodeDecodeError, _NotTaken)


# A flexible version's compact length is length + 1 (0: null), one byte while under 128; the
# readers take only one-byte lengths. A classic version's is an int16 (-1: null). The
# readers of the shapes nearly every client sends (OffsetCommit v6-v9, OffsetFetch v6-v7)
# read a group's strings inline and each topic's name with its array's count in one call
# (``_name_and_count``): a helper call per string cost a one-partition request 2 to 3 % of
# its instructions. ``_compact`` and its kin read the rest (OffsetFetch v8 and later).

def _compact(buf: bytes, pos: int) -> tuple[str, int]:
    """A non-null compact string at ``pos``, and the position after it."""
    n = buf[pos] - 1
    pos += 1
    stop = pos + n
    if not 0 <= n < 127 or stop > len(buf):
        raise _NotTaken
    return buf[pos:stop].decode(), stop


def _compact_or_null(buf: bytes, pos: int) -> tuple[str | None, int]:
    if buf[pos] == 0:
        return None, pos + 1
    return _compact(buf, pos)


def _name_and_count(buf: bytes, pos: int) -> tuple[str, int, int]:
    """A topic's compact name and the one-byte count of the array after it: both, and the
    position after the count. One call for what ``_compact`` and ``_compact_count`` read in
    two; a name running past the frame's end leaves the count's byte out of range
    (IndexError: not taken)."""
    n = buf[pos] - 1
    if not 0 <= n < 127:
        raise _NotTaken
    stop = pos + 1 + n
    count = buf[stop] - 1
    if not 0 <= count < 127:
        raise _NotTaken
    return buf[pos + 1:stop].decode(), count, stop + 1


def _compact_count(buf: bytes, pos: int) -> int:
    """A non-null compact array's element count at ``pos`` (its one byte)."""
    count = buf[pos] - 1
    if not 0 <= count < 127:
        raise _NotTaken
    return count


# ---------------------------------------------------------------------- OffsetCommit, read


def read_offset_commit(version: int, buf: bytes, pos: int) -> OffsetCommitRequest | None:
    """The OffsetCommit body at ``buf[pos:]`` as ``decode_offset_commit`` would give it after
    the generic decoder, or None where this reader does not take the bytes (the generic
    path decodes them, or refuses them as malformed).

    Takes v6-v7 and, for the flexible v8-v9, bodies whose every string and array length is
    one byte (under 127) and which carry no tagged fields; bytes after the body are ignored,
    as the generic decoder does.
    """
    try:
        if version >= 8:
            return _read_commit_flexible(version, buf, pos)
        if version >= 6:
            return _read_commit_classic(version, buf, pos)
    except _UNREAD:
        pass
    return None


def _read_commit_flexible(version: int, buf: bytes, pos: int) -> OffsetCommitRequest:
    new_tuple = tuple.__new__
    partition_type = CommitPartition
    end = len(buf)
    # The group's strings and the topic count are read inline (``_compact``,
    # ``_compact_or_null``, ``_compact_count``): a call each cost more than its lines. One
    # running past the frame's end leaves the read right after it out of range: not taken.
    n = buf[pos] - 1  # the group id's length
    if not 0 <= n < 127:
        raise _NotTaken
    stop = pos + 1 + n
    group_id = buf[pos + 1:stop].decode()
    (generation,) = _INT32_AT(buf, stop)
    pos = stop + 4
    n = buf[pos] - 1  # the member id's
    if not 0 <= n < 127:
        raise _NotTaken
    stop = pos + 1 + n
    member_id = buf[pos + 1:stop].decode()
    n = buf[stop] - 1  # the instance id's (-1: null)
    if n == -1:
        instance_id = None
        pos = stop + 1
    else:
        if not 0 <= n < 127:
            raise _NotTaken
        pos = stop + 1 + n
        instance_id = buf[stop + 1:pos].decode()
    topic_count = buf[pos] - 1
    if not 0 <= topic_count < 127:
        raise _NotTaken
    pos += 1
    topics = []
    for _ in range(topic_count):
        name, count, pos = _name_and_count(buf, pos)
        partitions = []
        for _ in range(count):
            partition, offset, leader_epoch, length, tags = _FLEXIBLE_PARTITION_AT(buf, pos)
            if length == 1 and not tags:  # empty metadata and no tagged fields: most commits
                metadata = ""
                pos += 18
            else:
                n = length - 1  # the metadata's compact length
                pos += 17
                if n == -1:
                    metadata = ""
                else:
                    stop = pos + n
                    if not 0 <= n < 127 or stop > end:
                        raise _NotTaken
                    metadata = buf[pos:stop].decode()
                    pos = stop
                if buf[pos]:  # tagged fields
                    raise _NotTaken
                pos += 1
            partitions.append(new_tuple(partition_type, (partition, offset, leader_epoch, metadata, -1)))
        if buf[pos]:
            raise _NotTaken
        pos += 1
        topics.append(new_tuple(CommitTopic, (name, tuple(partitions))))
    if buf[pos]:
        raise _NotTaken
    return new_tuple(OffsetCommitRequest, (group_id, generation, member_id, instance_id, -1, tuple(topics),
                                           version >= 9, False))


def _read_commit_classic(version: int, buf: bytes, pos: int) -> OffsetCommitRequest:
    new_tuple = tuple.__new__
    partition_type = CommitPartition
    end = len(buf)
    # The strings are read inline, without a helper call each (a call cost more than its
    # lines). One running past the frame's end leaves the int read right after it out of
    # range: struct.error, not taken.
    (n,) = _INT16_AT(buf, pos)  # the group id's length
    if n < 0:
        raise _NotTaken
    stop = pos + 2 + n
    group_id = buf[pos + 2:stop].decode()
    generation, n = _INT32_INT16_AT(buf, stop)  # and the member id's length
    if n < 0:
        raise _NotTaken
    pos = stop + 6
    stop = pos + n
    member_id = buf[pos:stop].decode()
    pos = stop
    instance_id = None
    if version >= 7:
        (n,) = _INT16_AT(buf, pos)
        pos += 2
        if n != -1:
            if n < 0:
                raise _NotTaken
            stop = pos + n
            instance_id = buf[pos:stop].decode()
            pos = stop
    (topic_count,) = _INT32_AT(buf, pos)
    pos += 4
    topics = []
    for _ in range(topic_count):  # a negative count: no topics, then refused below
        (n,) = _INT16_AT(buf, pos)
        if n < 0:
            raise _NotTaken
        stop = pos + 2 + n
        name = buf[pos + 2:stop].decode()
        (count,) = _INT32_AT(buf, stop)
        if count < 0:
            raise _NotTaken
        pos = stop + 4
        partitions = []
        for _ in range(count):
            partition, offset, leader_epoch, n = _CLASSIC_PARTITION_AT(buf, pos)  # n: the metadata's length
            pos += 18
            if -1 <= n <= 0:  # null or empty
                metadata = ""
            else:
                stop = pos + n
                if n < 0 or stop > end:
                    raise _NotTaken
                metadata = buf[pos:stop].decode()
                pos = stop
            partitions.append(new_tuple(partition_type, (partition, offset, leader_epoch, metadata, -1)))
        topics.append(new_tuple(CommitTopic, (name, tuple(partitions))))
    if topic_count < 0:
        raise _NotTaken
    return new_tuple(OffsetCommitRequest, (group_id, generation, member_id, instance_id, -1, tuple(topics),
                                           False, False))


# ---------------------------------------------------------------------- OffsetFetch, read


def read_offset_fetch(version: int, buf: bytes, pos: int) -> OffsetFetchRequest | None:
    """The OffsetFetch body at ``buf[pos:]`` as ``decode_offset_fetch`` would give it after the
    generic decoder, or None where this reader does not take the bytes (as ``read_offset_commit``).

    Takes the flexible versions (v6-v9) whose every string and array length is one byte and
    which carry no tagged fields.
    """
    if version < 6:
        return None
    try:
        if version >= 8:
            return _read_fetch_groups(version, buf, pos)
        return _read_fetch_group(version, buf, pos)
    except _UNREAD:
        return None


def _read_fetch_topics(buf: bytes, pos: int) -> tuple[tuple[tuple[str, tuple[int, ...]], ...] | None, int]:
    """A nullable compact array of (name, partition indexes), and the position after it."""
    if buf[pos] == 0:
        return None, pos + 1
    count = _compact_count(buf, pos)
    pos += 1
    topics = []
    for _ in range(count):
        name, n, pos = _name_and_count(buf, pos)
        partitions = _INT32S_AT[n](buf, pos)
        pos += 4 * n
        if buf[pos]:  # tagged fields
            raise _NotTaken
        pos += 1
        topics.append((name, partitions))
    return tuple(topics), pos


def _read_fetch_group(version: int, buf: bytes, pos: int) -> OffsetFetchRequest:
    # v6-v7: one group, its id read inline (``_compact``); an id running past the frame's
    # end leaves ``buf[stop]`` out of range for the topics' reader.
    n = buf[pos] - 1
    if not 0 <= n < 127:
        raise _NotTaken
    stop = pos + 1 + n
    group_id = buf[pos + 1:stop].decode()
    topics, pos = _read_fetch_topics(buf, stop)
    require_stable = False
    if version >= 7:
        require_stable = buf[pos] != 0
        pos += 1
    if buf[pos]:
        raise _NotTaken
    new_tuple = tuple.__new__
    return new_tuple(OffsetFetchRequest, ((new_tuple(FetchGroup, (group_id, topics, None, -1)),), require_stable))


def _read_fetch_groups(version: int, buf: bytes, pos: int) -> OffsetFetchRequest:
    # v8+: several groups, each with its member (v9).
    new_tuple = tuple.__new__
    count = _compact_count(buf, pos)
    pos += 1
    groups = []
    for _ in range(count):
        group_id, pos = _compact(buf, pos)
        member_id = None
        member_epoch = -1
        if version >= 9:
            member_id, pos = _compact_or_null(buf, pos)
            (member_epoch,) = _INT32_AT(buf, pos)
            pos += 4
        topics, pos = _read_fetch_topics(buf, pos)
        if buf[pos]:
            raise _NotTaken
        pos += 1
        groups.append(new_tuple(FetchGroup, (group_id, topics, member_id, member_epoch)))
    require_stable = buf[pos] != 0
    if buf[pos + 1]:
        raise _NotTaken
    return new_tuple(OffsetFetchRequest, (tuple(groups), require_stable))


# ---------------------------------------------------------------------- ConsumerGroupHeartbeat, read

_UUID_AT = struct.Struct(">16s").unpack_from


def read_consumer_group_heartbeat(version: int, buf: bytes, pos: int) -> ConsumerGroupHeartbeatRequest | None:
    """The ConsumerGroupHeartbeat body (v0-v1, flexible) at ``buf[pos:]`` as
    ``decode_consumer_group_heartbeat`` would give it after the generic decoder, with the
    request's ``client`` left at its default: the group service puts the connection's in
    (``Binding.with_client``). None where this reader does not take the bytes (as
    ``read_offset_commit``): a string or array of 127 or more, tagged fields.

    A member of a KIP-848 group sends one every few seconds; a steady one names nothing
    that did not change, so most fields are null, and the generic decoder's ``Container``
    and the adapter's lookups were a fifth of the request's bytecodes.
    """
    if version > 1:  # a later version's fields are the generic decoder's
        return None
    try:
        return _read_consumer_group_heartbeat(version, buf, pos)
    except _UNREAD:
        return None


def _read_consumer_group_heartbeat(version: int, buf: bytes, pos: int) -> ConsumerGroupHeartbeatRequest:
    group_id, pos = _compact(buf, pos)
    member_id, pos = _compact(buf, pos)
    member_epoch, = _INT32_AT(buf, pos)
    # A nullable string is ``_compact_or_null`` written out, so that a null (one zero byte, as
    # a steady member sends nearly every field) costs no call: 103.9k instructions per steady
    # heartbeat against 105.5k through the helper (107.1k through the generic decoder).
    pos += 4
    instance_id, pos = _compact(buf, pos) if buf[pos] else (None, pos + 1)
    rack_id, pos = _compact(buf, pos) if buf[pos] else (None, pos + 1)
    rebalance_timeout_ms, = _INT32_AT(buf, pos)
    pos += 4
    names: tuple[str, ...] | None = None
    if buf[pos]:
        count = _compact_count(buf, pos)
        pos += 1
        read = []
        for _ in range(count):
            name, pos = _compact(buf, pos)
            read.append(name)
        names = tuple(read)
    else:
        pos += 1
    regex = None
    if version >= 1:
        regex, pos = _compact(buf, pos) if buf[pos] else (None, pos + 1)
    assignor, pos = _compact(buf, pos) if buf[pos] else (None, pos + 1)
    owned: TopicPartitions | None = None
    if buf[pos]:
        count = _compact_count(buf, pos)
        pos += 1
        topics = []
        for _ in range(count):
            raw, = _UUID_AT(buf, pos)
            n = _compact_count(buf, pos + 16)
            pos += 17
            partitions = _INT32S_AT[n](buf, pos)
            pos += 4 * n
            if buf[pos]:  # tagged fields
                raise _NotTaken
            pos += 1
            topics.append((uuid.UUID(bytes=raw), partitions))
        owned = tuple(topics)
    else:
        pos += 1
    if buf[pos]:  # tagged fields
        raise _NotTaken
    return tuple.__new__(ConsumerGroupHeartbeatRequest, (
        group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms, names, regex, assignor, owned,
        _NO_CLIENT, version >= 1))


_NO_CLIENT = ClientInfo()
