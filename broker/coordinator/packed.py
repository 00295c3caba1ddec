"""Reply bodies packed straight from a typed result, for the APIs a broker answers most.

The generic path (``broker.coordinator.api``'s encoders, then ``protocol.codec``) builds a
dict per item and has the schema-driven encoder type-check every field of it; for an
OffsetFetch that was a third of the request's cost. These write the same bytes with
``struct`` and are held to the generic codec's output, byte for byte at every version,
by tests/coordinator/test_fetch_encoding.py.
"""

from __future__ import annotations

import struct

from broker.coordinator.requests import FetchedPartition, OffsetFetchResult, Result
from protocol.varint import encode_uvarint

__all__ = ["offset_fetch_body"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I16_TAGS = struct.Struct(">hB")  # an error code, then an empty tagged-field section
_PARTITION_V0 = struct.Struct(">iq")  # partition_index, committed_offset
_PARTITION_V5 = struct.Struct(">iqi")  # and committed_leader_epoch


#: Compact lengths (length + 1) below 128 are one byte: nearly every array and string.
_COMPACT = tuple(bytes((n,)) for n in range(128))


def _compact_length(n: int) -> bytes:
    return _COMPACT[n + 1] if n < 127 else encode_uvarint(n + 1)


def _fetched_topics_body(out: list[bytes], topics: tuple[tuple[str, tuple[FetchedPartition, ...]], ...],
                         version: int) -> None:
    """OffsetFetchResponse's topics (v0-v7) or a group's topics (v8+), appended to ``out``."""
    flexible = version >= 6
    epochs = version >= 5
    partition_struct = _PARTITION_V5 if epochs else _PARTITION_V0
    add = out.append
    add(_compact_length(len(topics)) if flexible else _I32.pack(len(topics)))
    for name, partitions in topics:
        encoded = name.encode()
        add(_compact_length(len(encoded)) if flexible else _I16.pack(len(encoded)))
        add(encoded)
        add(_compact_length(len(partitions)) if flexible else _I32.pack(len(partitions)))
        for partition, offset, leader_epoch, metadata, error in partitions:
            add(partition_struct.pack(partition, offset, leader_epoch) if epochs
                else partition_struct.pack(partition, offset))
            if metadata is None:
                add(b"\x00" if flexible else b"\xff\xff")
            else:
                text = metadata.encode()
                add(_compact_length(len(text)) if flexible else _I16.pack(len(text)))
                add(text)
            add(_I16_TAGS.pack(error, 0) if flexible else _I16.pack(error))
        if flexible:
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
            _fetched_topics_body(out, group.topics, version)
            out.append(_I16_TAGS.pack(group.error, 0))
        out.append(b"\x00")
        return b"".join(out)
    group = r.groups[0]
    _fetched_topics_body(out, group.topics, version)
    if version >= 6:
        out.append(_I16_TAGS.pack(group.error, 0))
    elif version >= 2:
        out.append(_I16.pack(group.error))
    return b"".join(out)
