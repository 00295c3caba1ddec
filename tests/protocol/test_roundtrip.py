"""decode(encode(x)) == x for every declared message and version, and whole-frame rules.

The property runs once per (message, version), each its own test id, over values drawn
from the declarations themselves (``strategies.value_for``), unknown tagged fields
included on flexible versions.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.codec import (
    decode_body,
    decode_request,
    decode_response,
    encode_body,
    encode_request,
    encode_response,
    request_header_version,
    response_header_version,
)
from protocol.errors import ProtocolError, UnsupportedRequest
from protocol.messages import (
    PAIRS,
    REQUESTS,
    RESPONSES,
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    FetchResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    MetadataRequest,
    MetadataResponse,
    RequestHeader,
    ResponseHeader,
)
from protocol.schema import UNKNOWN_TAGS, Message
from tests.protocol.strategies import example_for, plain, value_for, versions_of

EXTRA: list[Message] = [
    RequestHeader,
    ResponseHeader,
    ConsumerProtocolSubscription,
    ConsumerProtocolAssignment,
]
CASES = [(m, v) for pair in PAIRS for m in pair for v in versions_of(m)] + [
    (m, v) for m in EXTRA for v in versions_of(m)
]
IDS = [f"{m.name}-v{v}" for m, v in CASES]

PROPERTY = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize(("message", "version"), CASES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_body_roundtrip(message: Message, version: int, data: st.DataObject) -> None:
    value = data.draw(value_for(message, version), label="value")
    encoded = encode_body(message, version, value)
    decoded = decode_body(message, version, encoded)
    assert plain(decoded) == plain(value)
    assert encode_body(message, version, decoded) == encoded


def test_cases_cover_every_declared_version() -> None:
    assert len(CASES) == len(set(IDS))
    for request, response in PAIRS:
        assert request.api_key == response.api_key and request.api_key is not None
        assert REQUESTS[request.api_key] is request and RESPONSES[response.api_key] is response
        for message in (request, response):
            assert {v for m, v in CASES if m is message} == set(versions_of(message))


def test_unknown_tags_survive_in_nested_and_tagged_structs() -> None:
    """Unknown tags at the top, inside array elements and inside a default tagged struct."""
    part = _partition()
    part[UNKNOWN_TAGS] = {9: b"\x01\x02"}
    # Equal to the default struct but for its unknown tags: must still be written.
    part["diverging_epoch"] = {"epoch": -1, "end_offset": -1, UNKNOWN_TAGS: {4: b"x"}}
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": "t", "partitions": [part]}],
        UNKNOWN_TAGS: {100: b"", 2**20: b"abc"},
    }
    encoded = encode_body(FetchResponse, 12, body)
    decoded = plain(decode_body(FetchResponse, 12, encoded))
    assert decoded[UNKNOWN_TAGS] == {100: b"", 2**20: b"abc"}
    got = decoded["responses"][0]["partitions"][0]
    assert got[UNKNOWN_TAGS] == {9: b"\x01\x02"}
    assert got["diverging_epoch"] == {"epoch": -1, "end_offset": -1, UNKNOWN_TAGS: {4: b"x"}}
    assert decoded == plain(body)


def _partition() -> dict[str, Any]:
    return {
        "partition_index": 1,
        "error_code": 0,
        "high_watermark": 10,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "diverging_epoch": {"epoch": -1, "end_offset": -1},
        "current_leader": {"leader_id": -1, "leader_epoch": -1},
        "snapshot_id": {"end_offset": -1, "epoch": -1},
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": None,
    }


def test_example_for_is_deterministic() -> None:
    for message, version in CASES:
        first = example_for(message, version, seed=7)
        assert first == example_for(message, version, seed=7)
        assert plain(decode_body(message, version, encode_body(message, version, first))) == plain(first)
    assert example_for(JoinGroupRequest, 5, seed=1) != example_for(JoinGroupRequest, 5, seed=2)


def test_absent_tagged_fields_decode_as_defaults() -> None:
    minimal = {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}
    encoded = encode_body(ApiVersionsResponse, 3, minimal)
    assert encoded == b"\x00\x00" + b"\x01" + b"\x00\x00\x00\x00" + b"\x00"
    decoded = decode_body(ApiVersionsResponse, 3, encoded)
    assert decoded.supported_features == []
    assert decoded.finalized_features_epoch == -1
    assert decoded.finalized_features == []
    assert decoded.zk_migration_ready is False
    assert UNKNOWN_TAGS not in decoded


# --------------------------------------------------------------------------- whole frames


def _split_request_header(
    frame: bytes, header_version: int
) -> tuple[tuple[int, int, int, str | None], bytes]:
    """Parse a request header by hand: the prefix, then a non-compact client_id."""
    api_key, api_version, correlation_id, length = struct.unpack_from(">hhih", frame, 0)
    pos = 10
    client_id = None
    if length >= 0:
        client_id = frame[pos : pos + length].decode()
        pos += length
    if header_version == 2:
        assert frame[pos] == 0, "request header v2 ends in an empty tagged-field section"
        pos += 1
    return (api_key, api_version, correlation_id, client_id), frame[pos:]


REQUEST_FRAMES = [
    (ApiVersionsRequest, 0),
    (ApiVersionsRequest, 3),
    (MetadataRequest, 8),
    (MetadataRequest, 12),
    (JoinGroupRequest, 5),
    (JoinGroupRequest, 6),
    (JoinGroupRequest, 9),
]


@pytest.mark.parametrize(
    ("message", "version"), REQUEST_FRAMES, ids=[f"{m.name}-v{v}" for m, v in REQUEST_FRAMES]
)
@pytest.mark.parametrize("client_id", ["kcoord-test", "", None, "ünï"])
def test_request_frame_roundtrip(message: Message, version: int, client_id: str | None) -> None:
    assert message.api_key is not None
    body = example_for(message, version, seed=version)
    frame = encode_request(message.api_key, version, 4242, body, client_id=client_id)
    (size,) = struct.unpack_from(">i", frame, 0)
    assert size == len(frame) - 4
    header_version = 2 if message.is_flexible(version) else 1
    assert request_header_version(message, version) == header_version
    fields, raw_body = _split_request_header(frame[4:], header_version)
    assert fields == (message.api_key, version, 4242, client_id)
    assert raw_body == encode_body(message, version, body)

    request = decode_request(frame[4:])
    assert request.message is message
    assert request.header.api_key == message.api_key
    assert request.header.api_version == version
    assert request.header.correlation_id == 4242
    assert request.header.client_id == client_id
    assert request.header.header_version == header_version
    assert plain(request.body) == plain(body)


def test_request_header_v2_client_id_is_not_compact() -> None:
    frame = encode_request(18, 3, 7, {"client_software_name": "a", "client_software_version": "b"}, "cli")
    # size, api_key 18, version 3, correlation 7, int16 length 3 + "cli", empty tag section
    assert frame[4:17] == b"\x00\x12\x00\x03\x00\x00\x00\x07\x00\x03cli"
    assert frame[17] == 0
    assert frame[18:] == b"\x02a\x02b\x00"
    null_frame = encode_request(18, 3, 7, {"client_software_name": "a", "client_software_version": "b"}, None)
    assert null_frame[12:14] == b"\xff\xff"  # int16 -1, not a compact 0
    assert decode_request(null_frame[4:]).header.client_id is None


RESPONSE_FRAMES = [
    (ApiVersionsResponse, 0),
    (ApiVersionsResponse, 2),
    (ApiVersionsResponse, 3),
    (MetadataResponse, 8),
    (MetadataResponse, 9),
    (MetadataResponse, 12),
    (JoinGroupResponse, 5),
    (JoinGroupResponse, 6),
]


@pytest.mark.parametrize(
    ("message", "version"), RESPONSE_FRAMES, ids=[f"{m.name}-v{v}" for m, v in RESPONSE_FRAMES]
)
def test_response_frame_roundtrip(message: Message, version: int) -> None:
    assert message.api_key is not None
    body = example_for(message, version, seed=version + 1)
    frame = encode_response(message.api_key, version, -5, body)
    (size, correlation_id) = struct.unpack_from(">ii", frame, 0)
    assert size == len(frame) - 4
    assert correlation_id == -5
    header_version = response_header_version(message, version)
    if message is ApiVersionsResponse:
        assert header_version == 0
    else:
        assert header_version == (1 if message.is_flexible(version) else 0)
    rest = frame[8:]
    if header_version == 1:
        assert rest[0] == 0, "response header v1 ends in an empty tagged-field section"
        rest = rest[1:]
    assert rest == encode_body(message, version, body)
    got_id, decoded = decode_response(message.api_key, version, frame[4:])
    assert got_id == -5
    assert plain(decoded) == plain(body)


def test_api_versions_v3_response_uses_header_v0() -> None:
    body = {
        "error_code": 35,
        "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}],
        "throttle_time_ms": 0,
    }
    frame = encode_response(18, 3, 99, body)
    assert frame[4:8] == b"\x00\x00\x00\x63"
    # Straight after the correlation id: error_code 35, no tag byte in between.
    assert frame[8:10] == b"\x00\x23"
    assert frame[10] == 2  # compact array of one api key
    assert decode_response(18, 3, frame[4:]) == (
        99,
        body
        | {
            "supported_features": [],
            "finalized_features_epoch": -1,
            "finalized_features": [],
            "zk_migration_ready": False,
        },
    )
    # A flexible response of another API does carry the tag byte.
    heartbeat = encode_response(12, 4, 99, {"throttle_time_ms": 0, "error_code": 0})
    assert heartbeat[8] == 0 and heartbeat[9:11] == b"\x00\x00"


def test_unsupported_version_is_reported_with_correlation_id() -> None:
    frame = struct.pack(">hhih", 18, 99, 1234, -1)
    with pytest.raises(UnsupportedRequest) as info:
        decode_request(frame)
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (18, 99, 1234)
    with pytest.raises(UnsupportedRequest):
        decode_request(struct.pack(">hhih", 10_000, 0, 1, -1))
    assert isinstance(info.value, ProtocolError)


def test_trailing_bytes_after_a_request_body_are_ignored() -> None:
    frame = encode_request(3, 12, 1, example_for(MetadataRequest, 12, seed=1))
    request = decode_request(frame[4:] + b"\x00\x00garbage")
    assert plain(request.body) == plain(example_for(MetadataRequest, 12, seed=1))
    with pytest.raises(ProtocolError):
        decode_body(MetadataRequest, 12, encode_body(MetadataRequest, 12, request.body) + b"\x00")
