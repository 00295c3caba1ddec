"""OffsetForLeaderEpoch bytes, version by version.

Its JSON is not in the shared spec directory (test_spec.py checks the declaration against
the copy bundled with kafka-python), so these pin the wire layout independently: exact
bytes for v0 and v4, and a round trip of every served version.
"""

from __future__ import annotations

import struct

import pytest

from protocol.codec import decode_body, encode_body
from protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)

REQUEST = {
    "replica_id": -1,
    "topics": [
        {"topic": "t", "partitions": [{"partition": 2, "current_leader_epoch": 5, "leader_epoch": 4}]}
    ],
}
RESPONSE = {
    "throttle_time_ms": 0,
    "topics": [
        {"topic": "t", "partitions": [{"error_code": 0, "partition": 2, "leader_epoch": 4, "end_offset": 17}]}
    ],
}


@pytest.mark.parametrize("version", range(0, 5))
def test_request_round_trips(version: int) -> None:
    decoded = decode_body(
        OffsetForLeaderEpochRequest, version, encode_body(OffsetForLeaderEpochRequest, version, REQUEST)
    )
    partition = decoded.topics[0].partitions[0]
    assert decoded.topics[0].topic == "t"
    assert (partition.partition, partition.leader_epoch) == (2, 4)
    assert partition.get("current_leader_epoch") == (5 if version >= 2 else None)
    assert decoded.get("replica_id") == (-1 if version >= 3 else None)


@pytest.mark.parametrize("version", range(0, 5))
def test_response_round_trips(version: int) -> None:
    decoded = decode_body(
        OffsetForLeaderEpochResponse, version, encode_body(OffsetForLeaderEpochResponse, version, RESPONSE)
    )
    partition = decoded.topics[0].partitions[0]
    assert (partition.error_code, partition.partition, partition.end_offset) == (0, 2, 17)
    assert partition.get("leader_epoch") == (4 if version >= 1 else None)


def test_v0_request_is_topics_partitions_and_epoch_only() -> None:
    expected = struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">iii", 1, 2, 4)
    assert encode_body(OffsetForLeaderEpochRequest, 0, REQUEST) == expected


def test_v4_request_is_compact_with_tagged_fields() -> None:
    expected = (
        struct.pack(">i", -1)
        + bytes([2, 2]) + b"t"
        + bytes([2]) + struct.pack(">iii", 2, 5, 4) + bytes([0])
        + bytes([0])
        + bytes([0])
    )
    assert encode_body(OffsetForLeaderEpochRequest, 4, REQUEST) == expected


def test_v0_response_has_no_leader_epoch_nor_throttle() -> None:
    expected = struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">ihiq", 1, 0, 2, 17)
    assert encode_body(OffsetForLeaderEpochResponse, 0, RESPONSE) == expected
