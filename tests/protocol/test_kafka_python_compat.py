"""Byte-level agreement with kafka-python 3.0.12's own protocol classes.

For every (message, version) we declare that kafka-python has a class for, a value from
our strategy is encoded by us, decoded by kafka-python, compared field by field, and
re-encoded by kafka-python: its bytes must equal ours, and our decoder must read them
back to the original value. A handful of requests are also built by kafka-python from
keyword arguments (as its client does) and decoded by us, headers included.

kafka-python's JSON comes from a newer Kafka than ours; its field layout is compared
with ours per version before the bytes are, so a difference in the schemas themselves is
reported as such. ``KNOWN_DIFFERENCES`` lists (message, version) cases skipped for a
known, explained reason; it is empty at present.
"""

from __future__ import annotations

import importlib
import inspect
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.protocol.api_data import ApiData
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.codecs import UUID as KP_UUID
from kafka.protocol.schemas.fields.codecs import BitField

from protocol.codec import (
    decode_body,
    decode_request,
    decode_response,
    encode_body,
    encode_response,
)
from protocol.consumer_protocol import decode_assignment, decode_subscription, encode_subscription
from protocol.errors import ErrorCode
from protocol.messages import (
    PAIRS,
    ApiVersionsResponse,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from protocol.schema import UNKNOWN_TAGS, Array, Field, Message, Struct, Versions
from tests.protocol.strategies import ZERO_UUID, is_tagged, plain, value_for, versions_of

KP_MODULES = [
    "kafka.protocol.consumer.group",
    "kafka.protocol.consumer.fetch",
    "kafka.protocol.consumer.offsets",
    "kafka.protocol.consumer.metadata",
    "kafka.protocol.metadata.api_versions",
    "kafka.protocol.metadata.find_coordinator",
    "kafka.protocol.metadata.metadata",
    "kafka.protocol.producer.produce",
    "kafka.protocol.producer.transaction",
    "kafka.protocol.admin.topics",
    "kafka.protocol.admin.groups",
    "kafka.protocol.admin.acl",
    "kafka.protocol.admin.users",
    "kafka.protocol.admin.cluster",
    "kafka.protocol.sasl",
    "kafka.protocol.admin.configs",
    "kafka.protocol.admin.transactions",
]


def _kafka_python_classes() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for module_name in KP_MODULES:
        module = importlib.import_module(module_name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, (ApiMessage, ApiData))
                and obj not in (ApiMessage, ApiData)
                and getattr(obj, "_json", None) is not None
            ):
                found[obj.name] = obj
    return found


KP = _kafka_python_classes()
# kafka-python 3.0.12 speaks only the classic group protocol: the KIP-848 messages are
# checked against Kafka's JSON (test_spec.py) and spoken by librdkafka in the integration tests.
NOT_IN_KAFKA_PYTHON = {
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
}
OURS: list[Message] = [m for pair in PAIRS for m in pair if m.name not in NOT_IN_KAFKA_PYTHON] + [
    ConsumerProtocolSubscription,
    ConsumerProtocolAssignment,
]

# (message name, version) -> why kafka-python cannot be compared there. Empty: every
# declared version kafka-python can encode has the same layout as ours.
KNOWN_DIFFERENCES: dict[tuple[str, int], str] = {}

CASES = [(m, v) for m in OURS if m.name in KP for v in versions_of(m) if v <= KP[m.name].max_version]
IDS = [f"{m.name}-v{v}" for m, v in CASES]


def test_kafka_python_covers_every_declared_message() -> None:
    """Every declared message has a kafka-python class, for every version we serve."""
    missing = [m.name for m in OURS if m.name not in KP]
    assert not missing
    short = [
        (m.name, m.max_version, KP[m.name].max_version)
        for m in OURS
        if KP[m.name].max_version < m.max_version
    ]
    assert not short, short
    assert len(CASES) == sum(len(versions_of(m)) for m in OURS)


# --------------------------------------------------------------------------- normalizing


def norm_key(name: str) -> str:
    """Names compared without underscores (kafka-python splits ``ClientID`` differently).

    kafka-python also patches Metadata/DescribeGroups' *AuthorizedOperations into a
    bit-set field named ``authorized_operations``.
    """
    key = name.replace("_", "")
    return (
        "authorizedoperations" if key in ("clusterauthorizedoperations", "topicauthorizedoperations") else key
    )


def norm_ours(value: Any) -> Any:
    if isinstance(value, dict):
        return {norm_key(k): norm_ours(v) for k, v in value.items() if k != UNKNOWN_TAGS}
    if isinstance(value, list):
        return [norm_ours(v) for v in value]
    return value


def _scalar(field: Any, value: Any) -> Any:
    kind = getattr(field, "_type", None)
    if kind is BitField:
        bits = {31} if value is None else value
        raw = sum(1 << b for b in bits)
        return raw - (1 << 32) if raw >= 1 << 31 else raw
    if kind is KP_UUID and value is None:
        return ZERO_UUID
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def _field_value(field: Any, value: Any, version: int) -> Any:
    if field.is_struct():
        if value is None and not field.nullable_for_version_q(version):
            value = field.data_class(version=version)  # an absent tagged struct: its defaults
        return None if value is None else norm_theirs(value, field, version)
    if field.is_struct_array():
        return None if value is None else [norm_theirs(item, field.array_of, version) for item in value]
    if field.is_array():
        return None if value is None else [_scalar(field.array_of, item) for item in value]
    return _scalar(field, value)


def norm_theirs(obj: Any, struct_field: Any, version: int) -> dict[str, Any]:
    return {
        norm_key(field.name): _field_value(field, getattr(obj, field.name), version)
        for field in struct_field._fields
        if field.for_version_q(version)
    }


def their_layout(fields: Any, version: int, flexible: bool) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for field in fields:
        if not field.for_version_q(version):
            continue
        kind = field._type_str.replace("bitfield", "int32")
        nested = None
        if field.is_struct() or field.is_struct_array():
            nested = their_layout((field if field.is_struct() else field.array_of)._fields, version, flexible)
            kind = "[]struct" if field.is_struct_array() else "struct"
        tag = field.tag if flexible and field.tagged_field_q(version) else None
        out.append((norm_key(field.name), kind, field.nullable_for_version_q(version), tag, nested))
    return out


def our_layout(fields: tuple[Field, ...], version: int, flexible: bool) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for decl in fields:
        if not decl.present_in(version):
            continue
        base = decl.type.of if isinstance(decl.type, Array) else decl.type
        prefix = "[]" if isinstance(decl.type, Array) else ""
        nested = None
        if isinstance(base, Struct):
            kind = prefix + "struct"
            nested = our_layout(base.fields, version, flexible)
        else:
            kind = prefix + base.name
        tag = decl.tag if is_tagged(decl, version, flexible) else None
        out.append((norm_key(decl.name), kind, version in Versions.parse(decl.nullable), tag, nested))
    return out


# --------------------------------------------------------------------------- bodies


def kp_decode(cls: Any, version: int, data: bytes) -> Any:
    if issubclass(cls, ApiData):
        return cls.decode(data, version=version, header=False)
    return cls.decode(data, version=version)


def kp_encode(obj: Any, version: int) -> bytes:
    if isinstance(obj, ApiData):
        return bytes(obj.encode(version=version, header=False))
    # Decoded messages skip __init__; encode() touches the header slot.
    obj._header = None
    return bytes(obj.encode())


def adjust(message: Message, version: int, value: dict[str, Any]) -> dict[str, Any]:
    if message is ApiVersionsResponse:
        # kafka-python (like Kafka's client) reads any error reply as a v0 body (KIP-511).
        value["error_code"] = 0
    return value


@pytest.mark.parametrize(("message", "version"), CASES, ids=IDS)
def test_layout_matches_kafka_python(message: Message, version: int) -> None:
    reason = KNOWN_DIFFERENCES.get((message.name, version))
    if reason:
        pytest.skip(reason)
    cls = KP[message.name]
    assert cls.flexible_version_q(version) == message.is_flexible(version)
    flexible = message.is_flexible(version)
    assert our_layout(message.fields, version, flexible) == their_layout(
        cls._struct._fields, version, flexible
    )


@pytest.mark.parametrize(("message", "version"), CASES, ids=IDS)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_bytes_agree_with_kafka_python(message: Message, version: int, data: st.DataObject) -> None:
    reason = KNOWN_DIFFERENCES.get((message.name, version))
    if reason:
        pytest.skip(reason)
    cls = KP[message.name]
    # kafka-python drops unknown tagged fields on re-encode, so none are generated here.
    value = adjust(message, version, data.draw(value_for(message, version, unknown_tags=False)))
    ours = encode_body(message, version, value)
    theirs_obj = kp_decode(cls, version, ours)
    assert norm_theirs(theirs_obj, cls._struct, version) == norm_ours(plain(value))
    theirs = kp_encode(theirs_obj, version)
    assert theirs == ours
    assert plain(decode_body(message, version, theirs)) == plain(value)


# --------------------------------------------------------------------------- requests from kwargs


def kp_request_frame(obj: Any, correlation_id: int, client_id: str | None) -> bytes:
    obj.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(obj.encode(header=True))


def test_join_group_v5_with_range_assignor_metadata() -> None:
    cls = KP["JoinGroupRequest"]
    metadata = bytes(RangePartitionAssignor.metadata({"orders"}).encode())
    request = cls[5](
        group_id="g1",
        session_timeout_ms=10000,
        rebalance_timeout_ms=30000,
        member_id="",
        group_instance_id="static-1",
        protocol_type="consumer",
        protocols=[cls.JoinGroupRequestProtocol(name="range", metadata=metadata)],
    )
    decoded = decode_request(kp_request_frame(request, 17, "kp-client"))
    assert decoded.header.api_key == 11 and decoded.header.api_version == 5
    assert decoded.header.correlation_id == 17
    assert decoded.header.client_id == "kp-client"
    assert decoded.header.header_version == 1
    body = decoded.body
    assert (body.group_id, body.session_timeout_ms, body.rebalance_timeout_ms) == ("g1", 10000, 30000)
    assert (body.member_id, body.group_instance_id, body.protocol_type) == ("", "static-1", "consumer")
    assert [p.name for p in body.protocols] == ["range"]
    subscription = decode_subscription(body.protocols[0].metadata)
    assert subscription.version == 0
    assert subscription.topics == ["orders"]
    assert subscription.user_data == b""


def test_join_group_v9_with_subscription_v3() -> None:
    cls = KP["JoinGroupRequest"]
    sub_cls = KP["ConsumerProtocolSubscription"]
    subscription = sub_cls(
        version=3,
        topics=["a", "b"],
        user_data=None,
        owned_partitions=[sub_cls.TopicPartition(topic="a", partitions=[0, 2])],
        generation_id=7,
        rack_id="rack-1",
    )
    metadata = bytes(subscription.encode())
    assert metadata == encode_subscription(
        {
            "topics": ["a", "b"],
            "user_data": None,
            "owned_partitions": [{"topic": "a", "partitions": [0, 2]}],
            "generation_id": 7,
            "rack_id": "rack-1",
        },
        version=3,
    )
    request = cls[9](
        group_id="g",
        session_timeout_ms=45000,
        rebalance_timeout_ms=300000,
        member_id="m-1",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[cls.JoinGroupRequestProtocol(name="cooperative-sticky", metadata=metadata)],
        reason="rejoin: metadata changed",
    )
    decoded = decode_request(kp_request_frame(request, 2**31 - 1, None))
    assert decoded.header.header_version == 2
    assert decoded.header.client_id is None
    assert decoded.header.correlation_id == 2**31 - 1
    assert decoded.body.reason == "rejoin: metadata changed"
    assert decoded.body.group_instance_id is None
    parsed = decode_subscription(decoded.body.protocols[0].metadata)
    assert parsed.version == 3
    assert parsed.topics == ["a", "b"] and parsed.user_data is None
    assert plain(parsed.owned_partitions) == [{"topic": "a", "partitions": [0, 2]}]
    assert (parsed.generation_id, parsed.rack_id) == (7, "rack-1")


def test_assignment_from_kafka_python() -> None:
    cls = KP["ConsumerProtocolAssignment"]
    for version in range(4):
        blob = bytes(cls(version, [("t", [0, 1]), ("u", [5])], b"ud").encode())
        parsed = decode_assignment(blob)
        assert parsed.version == version
        assert plain(parsed.assigned_partitions) == [
            {"topic": "t", "partitions": [0, 1]},
            {"topic": "u", "partitions": [5]},
        ]
        assert parsed.user_data == b"ud"


def test_metadata_request_v12() -> None:
    cls = KP["MetadataRequest"]
    topic_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    request = cls[12](
        topics=[
            cls.MetadataRequestTopic(topic_id=None, name="orders"),
            cls.MetadataRequestTopic(topic_id=topic_id, name=None),
        ],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=True,
    )
    decoded = decode_request(kp_request_frame(request, 5, "kp"))
    assert (decoded.header.api_key, decoded.header.api_version, decoded.header.header_version) == (3, 12, 2)
    assert plain(decoded.body.topics) == [
        {"topic_id": ZERO_UUID, "name": "orders"},
        {"topic_id": topic_id, "name": None},
    ]
    assert decoded.body.allow_auto_topic_creation is False
    assert decoded.body.include_topic_authorized_operations is True
    all_topics = cls[12](
        topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False
    )
    assert decode_request(kp_request_frame(all_topics, 6, "kp")).body.topics is None


def test_offset_commit_request_v8() -> None:
    cls = KP["OffsetCommitRequest"]
    topic_cls = cls.OffsetCommitRequestTopic
    partition_cls = topic_cls.OffsetCommitRequestPartition
    request = cls[8](
        group_id="g",
        generation_id_or_member_epoch=3,
        member_id="m-1",
        group_instance_id=None,
        topics=[
            topic_cls(
                name="orders",
                partitions=[
                    partition_cls(
                        partition_index=0,
                        committed_offset=42,
                        committed_leader_epoch=-1,
                        committed_metadata="meta",
                    ),
                    partition_cls(
                        partition_index=3,
                        committed_offset=2**40,
                        committed_leader_epoch=9,
                        committed_metadata=None,
                    ),
                ],
            )
        ],
    )
    decoded = decode_request(kp_request_frame(request, 99, "kp"))
    assert (decoded.header.api_key, decoded.header.api_version, decoded.header.header_version) == (8, 8, 2)
    body = decoded.body
    assert (body.group_id, body.generation_id_or_member_epoch, body.member_id) == ("g", 3, "m-1")
    assert body.group_instance_id is None
    assert plain(body.topics) == [
        {
            "name": "orders",
            "partitions": [
                {
                    "partition_index": 0,
                    "committed_offset": 42,
                    "committed_leader_epoch": -1,
                    "committed_metadata": "meta",
                },
                {
                    "partition_index": 3,
                    "committed_offset": 2**40,
                    "committed_leader_epoch": 9,
                    "committed_metadata": None,
                },
            ],
        }
    ]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_request(version: int) -> None:
    cls = KP["ApiVersionsRequest"]
    kwargs = (
        {"client_software_name": "kafka-python", "client_software_version": "3.0.12"} if version >= 3 else {}
    )
    decoded = decode_request(kp_request_frame(cls[version](**kwargs), 1, "kp-client"))
    assert decoded.header.api_key == 18 and decoded.header.api_version == version
    assert decoded.header.header_version == (2 if version >= 3 else 1)
    assert decoded.header.client_id == "kp-client"
    assert plain(decoded.body) == kwargs


def test_kafka_python_reads_our_api_versions_responses() -> None:
    cls = KP["ApiVersionsResponse"]
    body = {
        "error_code": 0,
        "api_keys": [
            {"api_key": 18, "min_version": 0, "max_version": 3},
            {"api_key": 11, "min_version": 0, "max_version": 9},
        ],
        "throttle_time_ms": 0,
        "finalized_features_epoch": 5,
    }
    frame = encode_response(18, 3, 77, body)
    response = cls.decode(frame, version=3, header=True, framed=True)
    assert response.header.correlation_id == 77
    assert response.error_code == 0 and response.finalized_features_epoch == 5
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(18, 0, 3), (11, 0, 9)]

    # An unsupported-version reply is a v0 body whatever the client asked (KIP-511).
    reply = {
        "error_code": int(ErrorCode.UNSUPPORTED_VERSION),
        "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}],
    }
    frame = encode_response(18, 0, 78, reply)
    response = cls.decode(frame, version=3, header=True, framed=True)
    assert response.header.correlation_id == 78
    assert response.error_code == 35
    assert [(k.api_key, k.max_version) for k in response.api_keys] == [(18, 3)]


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("HeartbeatResponse", 3),
        ("HeartbeatResponse", 4),
        ("JoinGroupResponse", 5),
        ("JoinGroupResponse", 9),
        ("MetadataResponse", 12),
    ],
)
def test_kafka_python_reads_our_response_frames(name: str, version: int) -> None:
    message = next(m for m in OURS if m.name == name)
    assert message.api_key is not None
    value = {
        field.name: field.default_value(version) for field in message.fields if field.present_in(version)
    }
    frame = encode_response(message.api_key, version, 4321, value)
    response = KP[name].decode(frame, version=version, header=True, framed=True)
    assert response.header.correlation_id == 4321
    assert norm_theirs(response, KP[name]._struct, version) == norm_ours(plain(value))
    # ...and our decoder reads kafka-python's own framing of the same response back.
    response.with_header(correlation_id=4321)
    theirs = bytes(response.encode(header=True))
    got_id, body = decode_response(message.api_key, version, theirs)
    assert got_id == 4321 and plain(body) == plain(value)


def test_request_header_bytes_match_kafka_python() -> None:
    """Our encode_request and kafka-python's request framing agree byte for byte."""
    from protocol.codec import encode_request

    cls = KP["HeartbeatRequest"]
    for version in (0, 3, 4):
        kwargs: dict[str, Any] = {"group_id": "g", "generation_id": 2, "member_id": "m"}
        if version >= 3:
            kwargs["group_instance_id"] = None
        theirs = kp_request_frame(cls[version](**kwargs), 11, "client-x")
        ours = encode_request(12, version, 11, kwargs, client_id="client-x")
        assert struct.unpack(">i", ours[:4])[0] == len(theirs)
        assert ours[4:] == theirs
