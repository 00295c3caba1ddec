"""The generated codecs (``protocol.compiler``) against the construct reference.

For every declared (message, version), the headers, the consumer-protocol blobs and the
``__consumer_offsets`` records: the compiled encoder writes exactly the reference's bytes
(also for values with missing, extra or wrongly typed fields: whatever the reference
accepts, and refusing with ``ProtocolError`` whatever it refuses); the compiled decoder
returns the reference's value (same Container/list/scalar types, same keys in the same
order, unknown tags included), and on truncated, corrupted or random bytes both accept
with equal values or both refuse, the compiled path only ever with ``ProtocolError``.
Then whole frames, the ``__consumer_offsets`` codecs and the record-batch fast loop
against ``RECORD``.
"""

from __future__ import annotations

import functools
import gzip
import random
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

import construct
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import codec
from protocol import consumer_offsets as co
from protocol.codec import (
    FRAME_HEAD,
    decode_body,
    decode_body_reference,
    decode_request,
    decode_request_reference,
    decode_response,
    decode_response_reference,
    encode_body,
    encode_body_reference,
    encode_request,
    encode_request_reference,
    encode_response,
    encode_response_body,
    encode_response_reference,
    response_frame,
    response_tail,
)
from protocol.compiler import compile_struct, compiled_for
from protocol.errors import ProtocolError, UnsupportedRequest
from protocol.messages import (
    PAIRS,
    REQUESTS,
    RESPONSES,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    MetadataResponse,
    RequestHeader,
    ResponseHeader,
)
from protocol.messages.coordinator_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from protocol.records import (
    Compression,
    Record,
    RecordBatchError,
    decode_batch,
    encode_batch,
    iter_records,
)
from protocol.records.batch import (
    _encode_records,
    _encode_records_reference,
    _parse_records,
    _parse_records_reference,
)
from protocol.schema import UNKNOWN_TAGS, Message
from tests.protocol.strategies import example_for, value_for, versions_of

MESSAGES: list[Message] = [m for pair in PAIRS for m in pair] + [
    RequestHeader,
    ResponseHeader,
    ConsumerProtocolSubscription,
    ConsumerProtocolAssignment,
    OffsetCommitKey,
    OffsetCommitValue,
    GroupMetadataKey,
    GroupMetadataValue,
]
CASES = [(m, v) for m in MESSAGES for v in versions_of(m)]
IDS = [f"{m.name}-v{v}" for m, v in CASES]

REFUSED: Any = object()


def quick(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )


def typed(value: Any) -> Any:
    """A comparable picture of a value that also pins types and key order.

    Containers must stay Containers (the broker reads ``body.field``), bools must not
    become ints, and floats compare by their bits (random bytes decode to NaNs).
    """
    if isinstance(value, dict):
        return (type(value).__name__, [(key, typed(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [typed(item) for item in value])
    if isinstance(value, float):
        return ("float", struct.pack(">d", value))
    return (type(value).__name__, value)


def outcome(call: Callable[[], Any], refusals: tuple[type[BaseException], ...] = (ProtocolError,)) -> Any:
    try:
        return call()
    except refusals:
        return REFUSED


def reference_outcome(call: Callable[[], Any]) -> Any:
    """The reference's result, any exception counting as a refusal (it lets a few
    non-construct errors through, e.g. TypeError for ``len()`` of a non-array)."""
    try:
        return call()
    except Exception:
        return REFUSED


def decodes_alike(message: Message, version: int, data: bytes) -> bool:
    """Both decoders accept with identical values, or both refuse. True when accepted."""
    expected = outcome(lambda: decode_body_reference(message, version, data))
    got = outcome(lambda: decode_body(message, version, data))
    if expected is REFUSED or got is REFUSED:
        assert got is expected, f"reference {'refused' if expected is REFUSED else 'accepted'} {data!r}"
        return False
    assert typed(got) == typed(expected)
    return True


def encodes_alike(message: Message, version: int, value: Any) -> None:
    expected = reference_outcome(lambda: encode_body_reference(message, version, value))
    got = outcome(lambda: encode_body(message, version, value))
    assert got == expected


WRONG: list[Any] = [None, "x", b"y", 1.5, -1, 2**70, [], {}, [1], True, uuid.UUID(int=1)]


def mangle(value: Any, rng: random.Random) -> Any:
    """Drop keys (defaults apply), add unknown keys (ignored), put wrongly typed values."""
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            roll = rng.random()
            if roll < 0.15:
                continue
            out[key] = rng.choice(WRONG) if roll < 0.22 else mangle(item, rng)
        if rng.random() < 0.2:
            out["not_a_field"] = rng.choice(WRONG)
        return out
    if isinstance(value, list):
        return [mangle(item, rng) for item in value]
    return value


# --------------------------------------------------------------------------- bodies


@pytest.mark.parametrize(("message", "version"), CASES, ids=IDS)
@quick(15)
@given(data=st.data())
def test_compiled_body_matches_reference(message: Message, version: int, data: st.DataObject) -> None:
    value = data.draw(value_for(message, version), label="value")
    encoded = encode_body_reference(message, version, value)
    assert encode_body(message, version, value) == encoded
    assert decodes_alike(message, version, encoded)
    decoded = decode_body(message, version, encoded)
    assert encode_body(message, version, decoded) == encoded

    # The rest is driven by one seeded Random (cheaper than drawing each part).
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    # Values the reference may or may not accept: identical bytes or a refusal.
    encodes_alike(message, version, mangle(value, rng))
    # Truncations (every proper prefix is refused), trailing junk, corruptions, noise.
    cuts = {0, len(encoded) - 1} | {rng.randrange(len(encoded) or 1) for _ in range(3)}
    for cut in sorted(c for c in cuts if 0 <= c < len(encoded)):
        assert not decodes_alike(message, version, encoded[:cut])
    assert not decodes_alike(message, version, encoded + b"\x00")
    for _ in range(rng.randint(1, 6) if encoded else 0):
        corrupted = bytearray(encoded)
        corrupted[rng.randrange(len(encoded))] = rng.randrange(256)
        decodes_alike(message, version, bytes(corrupted))
    decodes_alike(message, version, rng.randbytes(rng.randint(0, 48)))


@pytest.mark.parametrize(("message", "version"), CASES, ids=IDS)
def test_seeded_examples_and_defaults(message: Message, version: int) -> None:
    for seed in range(3):
        value = example_for(message, version, seed=seed)
        encoded = encode_body_reference(message, version, value)
        assert encode_body(message, version, value) == encoded
        assert decodes_alike(message, version, encoded)
    # Nothing given: every field takes its default, on both paths.
    assert encode_body(message, version, {}) == encode_body_reference(message, version, {})
    default = message.default(version)
    assert encode_body(message, version, default) == encode_body_reference(message, version, default)


def test_decoded_values_are_containers_with_attribute_access() -> None:
    body = decode_body(
        MetadataResponse, 12, encode_body(MetadataResponse, 12, example_for(MetadataResponse, 12))
    )
    assert isinstance(body, construct.Container)
    assert body.topics == body.get("topics")
    assert all(isinstance(topic, construct.Container) for topic in body.topics)


def test_unknown_tags_in_a_tagged_struct_equal_to_its_default_are_kept() -> None:
    from protocol.messages import FetchResponse

    part = {"partition_index": 0, "diverging_epoch": {"epoch": -1, "end_offset": -1, UNKNOWN_TAGS: {7: b"z"}}}
    body = {"responses": [{"topic": "t", "partitions": [part]}], UNKNOWN_TAGS: {99: b"q"}}
    encoded = encode_body(FetchResponse, 12, body)
    assert encoded == encode_body_reference(FetchResponse, 12, body)
    decoded = decode_body(FetchResponse, 12, encoded)
    assert decoded[UNKNOWN_TAGS] == {99: b"q"}
    assert decoded.responses[0].partitions[0].diverging_epoch[UNKNOWN_TAGS] == {7: b"z"}
    assert decodes_alike(FetchResponse, 12, encoded)


def test_tagged_field_rules() -> None:
    from protocol.messages import ApiVersionsResponse

    base = {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}
    body = base | {
        "finalized_features_epoch": 5,
        "zk_migration_ready": True,
        UNKNOWN_TAGS: {4: b"\x01", 9: b""},
    }
    encoded = encode_body(ApiVersionsResponse, 3, body)
    assert encoded == encode_body_reference(ApiVersionsResponse, 3, body)
    decoded = decode_body(ApiVersionsResponse, 3, encoded)
    assert decoded[UNKNOWN_TAGS] == {4: b"\x01", 9: b""}
    assert (decoded.finalized_features_epoch, decoded.zk_migration_ready) == (5, True)
    assert decoded.supported_features == [] and decoded.finalized_features == []
    # Plain fields, then sections: tag 1 is an int64 (epoch), tag 3 a bool.
    plain_part = b"\x00\x00\x01\x00\x00\x00\x00"
    epoch = b"\x01\x08" + struct.pack(">q", 5)
    ready = b"\x03\x01\x01"
    assert decodes_alike(ApiVersionsResponse, 3, plain_part + b"\x02" + epoch + ready)
    assert decodes_alike(ApiVersionsResponse, 3, plain_part + b"\x80\x00")  # non-minimal zero count
    for bad in (
        b"\x02" + ready + epoch,  # out of order
        b"\x02" + ready + ready,  # repeated
        b"\x01\x01\x09" + struct.pack(">q", 5) + b"\x00",  # trailing bytes inside a tagged field
        b"\x01\x01\x03\x00\x00\x00",  # an int64 given 3 bytes
        b"\x01\x01\x08\x00",  # the field's bytes run out
        b"\xff\xff\xff\xff\x0f",  # a huge count
        b"\x01\x80\x80\x80\x80\x80\x01\x00",  # a tag varint longer than 5 bytes
        b"",  # no section at all
    ):
        assert not decodes_alike(ApiVersionsResponse, 3, plain_part + bad)


def test_lying_counts_fail_fast() -> None:
    from protocol.messages import ApiVersionsResponse, MetadataRequest

    start = time.perf_counter()
    for compact, version in ((False, 1), (True, 9)):
        count = b"\xff\xff\xff\xff\x07" if compact else b"\x7f\xff\xff\xff"
        with pytest.raises(ProtocolError):
            decode_body(MetadataRequest, version, count + b"\x00" * 40)
    with pytest.raises(ProtocolError):
        decode_body(
            ApiVersionsResponse, 3, b"\x00\x00\x01\x00\x00\x00\x00" + b"\xff\xff\xff\xff\x0f" + b"\x00" * 40
        )
    assert time.perf_counter() - start < 1.0


def test_only_protocol_error_escapes_hostile_input() -> None:
    rng = random.Random(1234)
    for message, version in CASES[::7]:
        for _ in range(20):
            data = rng.randbytes(rng.randint(0, 40))
            decodes_alike(message, version, data)
            decodes_alike(message, version, memoryview(data).tobytes())
    compiled = compiled_for(REQUESTS[3], 12)
    with pytest.raises(ProtocolError):
        compiled.decode("not bytes", 0)
    with pytest.raises(ProtocolError):
        compiled.encode(["not", "a", "dict"], bytearray())


def test_decoders_accept_memoryview_and_offsets() -> None:
    message, version = REQUESTS[8], 8
    encoded = encode_body(message, version, example_for(message, version, seed=3))
    compiled = compiled_for(message, version)
    value, end = compiled.decode(memoryview(b"xyz" + encoded), 3)
    assert end == 3 + len(encoded)
    assert typed(value) == typed(decode_body_reference(message, version, encoded))


def test_projection_decoders_match_containers() -> None:
    for version in versions_of(OffsetCommitValue):
        fields = ("offset", "metadata", "leader_epoch", "expire_timestamp")
        compiled = compile_struct(
            OffsetCommitValue.fields,
            version,
            OffsetCommitValue.is_flexible(version),
            project=fields,
            missing={"leader_epoch": -7, "expire_timestamp": -9},
        )
        value = example_for(OffsetCommitValue, version, seed=version)
        encoded = encode_body_reference(OffsetCommitValue, version, value)
        body = decode_body_reference(OffsetCommitValue, version, encoded)
        got, end = compiled.decode(encoded, 0)
        assert end == len(encoded)
        assert got == (
            body.offset,
            body.metadata,
            body.get("leader_epoch", -7),
            body.get("expire_timestamp", -9),
        )
    with pytest.raises(ValueError):
        compile_struct(OffsetCommitValue.fields, 0, False, project=("leader_epoch",))


def test_reference_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    message, version = REQUESTS[12], 4
    value = example_for(message, version, seed=1)
    monkeypatch.setattr(codec, "REFERENCE", True)

    def no_compiled(message: Message, version: int) -> Any:
        raise AssertionError("compiled path used while REFERENCE is set")

    monkeypatch.setattr(codec, "compiled_for", no_compiled)
    encoded = encode_body(message, version, value)
    assert typed(decode_body(message, version, encoded)) == typed(
        decode_body_reference(message, version, encoded)
    )
    frame = encode_request(12, 4, 1, value)
    assert decode_request(frame[4:]).header.correlation_id == 1
    response = encode_response(12, 4, 2, {"error_code": 0})
    assert decode_response(12, 4, response[4:])[0] == 2


# --------------------------------------------------------------------------- frames


def _request_cases() -> st.SearchStrategy[tuple[Message, int]]:
    return st.sampled_from(sorted(REQUESTS)).flatmap(
        lambda key: st.tuples(st.just(REQUESTS[key]), st.sampled_from(list(versions_of(REQUESTS[key]))))
    )


def _same_request(frame: bytes) -> None:
    expected = outcome(lambda: decode_request_reference(frame))
    got = outcome(lambda: decode_request(frame))
    if isinstance(expected, UnsupportedRequest) or isinstance(got, UnsupportedRequest):
        raise AssertionError("outcome() never returns exceptions")
    if expected is REFUSED or got is REFUSED:
        assert got is expected
        # Unsupported requests are reported identically, with their correlation id.
        try:
            decode_request(frame)
        except UnsupportedRequest as exc:
            with pytest.raises(UnsupportedRequest) as ref:
                decode_request_reference(frame)
            assert (exc.api_key, exc.api_version, exc.correlation_id) == (
                ref.value.api_key,
                ref.value.api_version,
                ref.value.correlation_id,
            )
        except ProtocolError:
            with pytest.raises(ProtocolError) as ref_error:
                decode_request_reference(frame)
            assert not isinstance(ref_error.value, UnsupportedRequest)
        return
    assert got.header == expected.header
    assert got.message is expected.message
    assert typed(got.body) == typed(expected.body)


@quick(60)
@given(
    case=_request_cases(),
    seed=st.integers(0, 2**16),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.one_of(st.none(), st.text(max_size=10)),
    data=st.data(),
)
def test_request_frames(
    case: tuple[Message, int], seed: int, correlation_id: int, client_id: str | None, data: st.DataObject
) -> None:
    message, version = case
    assert message.api_key is not None
    body = example_for(message, version, seed=seed)
    frame = encode_request(message.api_key, version, correlation_id, body, client_id)
    assert frame == encode_request_reference(message.api_key, version, correlation_id, body, client_id)
    _same_request(frame[4:])
    _same_request(frame[4:] + b"trailing bytes are ignored")
    cut = data.draw(st.integers(0, len(frame) - 5))
    _same_request(frame[4 : 4 + cut])
    index = data.draw(st.integers(4, len(frame) - 1))
    corrupted = bytearray(frame)
    corrupted[index] = data.draw(st.integers(0, 255))
    _same_request(bytes(corrupted[4:]))


@quick(150)
@given(frame=st.binary(max_size=48), prefix=st.sampled_from(sorted(REQUESTS)), version=st.integers(-1, 13))
def test_random_request_frames_agree(frame: bytes, prefix: int, version: int) -> None:
    _same_request(frame)
    _same_request(struct.pack(">hhi", prefix, version, 7) + frame)


@quick(60)
@given(
    key=st.sampled_from(sorted(RESPONSES)),
    seed=st.integers(0, 2**16),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    data=st.data(),
)
def test_response_frames(key: int, seed: int, correlation_id: int, data: st.DataObject) -> None:
    message = RESPONSES[key]
    version = data.draw(st.sampled_from(list(versions_of(message))))
    body = example_for(message, version, seed=seed)
    frame = encode_response(key, version, correlation_id, body)
    assert frame == encode_response_reference(key, version, correlation_id, body)
    # A body encoded once and framed per reply (the coordinator's repeating replies).
    encoded = encode_response_body(key, version, body)
    assert response_frame(key, version, correlation_id, encoded) == frame
    size, tail = response_tail(key, version, encoded)
    assert FRAME_HEAD.pack(size, correlation_id) + tail == frame
    for candidate in (
        frame[4:],
        frame[4 : 4 + data.draw(st.integers(0, len(frame) - 5))],
        frame[4:] + b"\x00",
        data.draw(st.binary(max_size=32)),
    ):
        expected = outcome(functools.partial(decode_response_reference, key, version, candidate))
        got = outcome(functools.partial(decode_response, key, version, candidate))
        if expected is REFUSED or got is REFUSED:
            assert got is expected
        else:
            assert got[0] == expected[0]
            assert typed(got[1]) == typed(expected[1])


# --------------------------------------------------------------------------- __consumer_offsets


def _versioned(version: int, body: bytes) -> bytes:
    return struct.pack(">h", version) + body


def _agree(fast: Callable[[bytes], Any], reference: Callable[[bytes], Any], data: bytes) -> None:
    expected = outcome(lambda: reference(data))
    got = outcome(lambda: fast(data))
    if expected is REFUSED or got is REFUSED:
        assert got is expected
    else:
        assert typed(got) == typed(expected) and got == expected


@quick(40)
@given(data=st.data())
def test_consumer_offsets_codecs(data: st.DataObject) -> None:
    key = data.draw(st.sampled_from([OffsetCommitKey, GroupMetadataKey,
                                     *(k for k, _ in co.CONSUMER_GROUP_RECORDS.values())]))
    key_version = data.draw(st.sampled_from(list(versions_of(key))))
    value_message = data.draw(st.sampled_from([OffsetCommitValue, GroupMetadataValue]))
    value_version = data.draw(st.sampled_from(list(versions_of(value_message))))
    raw_key = _versioned(
        key_version, encode_body_reference(key, key_version, data.draw(value_for(key, key_version)))
    )
    raw_value = _versioned(
        value_version,
        encode_body_reference(
            value_message, value_version, data.draw(value_for(value_message, value_version))
        ),
    )
    decode_value = co.decode_offset_value if value_message is OffsetCommitValue else co.decode_group_value
    reference_value = (
        co.decode_offset_value_reference
        if value_message is OffsetCommitValue
        else co.decode_group_value_reference
    )
    noise = data.draw(st.binary(max_size=24))
    for candidate in (
        raw_key,
        raw_key[:-1],
        raw_key + b"\x00",
        noise,
        raw_key[:2] + noise,
        b"\x00\x07" + noise,  # a consumer group key (KIP-848) version
        b"\x00\x0b" + noise,  # a key version this coordinator does not use
    ):
        _agree(co.decode_key, co.decode_key_reference, candidate)
    for candidate in (raw_value, raw_value[:-1], raw_value + b"\x00\x01", noise, raw_value[:2] + noise):
        _agree(decode_value, reference_value, candidate)
    edits = data.draw(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3))
    for index, byte in edits:
        for raw, fast, reference in (
            (raw_key, co.decode_key, co.decode_key_reference),
            (raw_value, decode_value, reference_value),
        ):
            corrupted = bytearray(raw)
            corrupted[index % len(raw)] = byte
            _agree(fast, reference, bytes(corrupted))


@quick(40)
@given(
    group=st.text(max_size=12),
    topic=st.text(max_size=12),
    partition=st.integers(-(2**31), 2**31 - 1),
    offset=st.integers(-(2**63), 2**63 - 1),
    epoch=st.integers(-(2**31), 2**31 - 1),
    metadata=st.text(max_size=12),
    stamps=st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1)),
)
def test_consumer_offsets_encoders_match_reference(
    group: str, topic: str, partition: int, offset: int, epoch: int, metadata: str, stamps: tuple[int, int]
) -> None:
    key = co.OffsetKey(group, topic, partition)
    body = {"group": group, "topic": topic, "partition": partition}
    assert co.encode_key(key) == _versioned(1, encode_body_reference(OffsetCommitKey, 1, body))
    assert co.decode_key(co.encode_key(key)) == key
    assert co.encode_key(co.GroupKey(group)) == _versioned(
        2, encode_body_reference(GroupMetadataKey, 2, {"group": group})
    )
    value = co.OffsetValue(offset, epoch, metadata, *stamps)
    version = 1 if value.expire_timestamp >= 0 else 3
    fields = {
        "offset": offset,
        "leader_epoch": epoch,
        "metadata": metadata,
        "commit_timestamp": stamps[0],
        "expire_timestamp": stamps[1],
    }
    encoded = co.encode_offset_value(value)
    assert encoded == _versioned(version, encode_body_reference(OffsetCommitValue, version, fields))
    assert co.decode_offset_value(encoded) == co.decode_offset_value_reference(encoded)


def test_group_value_encoder_matches_reference() -> None:
    for seed in range(5):
        value = example_for(GroupMetadataValue, co.GROUP_VALUE_VERSION, seed=seed)
        encoded = co.encode_group_value(value)
        assert encoded == _versioned(3, encode_body_reference(GroupMetadataValue, 3, value))
        assert typed(co.decode_group_value(encoded)) == typed(co.decode_group_value_reference(encoded))


# --------------------------------------------------------------------------- records

optional_bytes = st.none() | st.binary(max_size=40)
record_st = st.builds(
    Record,
    attributes=st.integers(-128, 127),
    timestamp_delta=st.one_of(st.integers(-100, 100), st.integers(-(2**63), 2**63 - 1)),
    offset_delta=st.one_of(st.integers(0, 300), st.integers(-(2**31), 2**31 - 1)),
    key=optional_bytes,
    value=st.none() | st.binary(max_size=200),
    headers=st.lists(st.tuples(st.text(max_size=8), optional_bytes), max_size=3),
)


def records_alike(section: bytes, count: int) -> None:
    expected = outcome(
        lambda: _parse_records_reference(section, count), (construct.ConstructError, RecordBatchError)
    )
    got = outcome(lambda: _parse_records(section, count), (RecordBatchError,))
    if expected is REFUSED or got is REFUSED:
        assert got is expected, f"reference {'refused' if expected is REFUSED else 'accepted'} {section!r}"
    else:
        assert got == expected


@quick(150)
@given(records=st.lists(record_st, max_size=5), data=st.data())
def test_record_loop_matches_reference(records: list[Record], data: st.DataObject) -> None:
    section = _encode_records_reference(records)
    assert _encode_records(records) == section
    assert _parse_records(section, len(records)) == records
    records_alike(section, len(records))
    records_alike(section, len(records) + 1)
    records_alike(section, len(records) - 1)
    records_alike(section + b"\x00", len(records))
    for cut in data.draw(st.lists(st.integers(0, max(len(section) - 1, 0)), max_size=4)):
        records_alike(section[:cut], len(records))
    if section:
        for index, byte in data.draw(
            st.lists(st.tuples(st.integers(0, len(section) - 1), st.integers(0, 255)), min_size=1, max_size=6)
        ):
            corrupted = bytearray(section)
            corrupted[index] = byte
            records_alike(bytes(corrupted), len(records))


@quick(200)
@given(section=st.binary(max_size=60), count=st.integers(-2, 5))
def test_record_loop_on_random_bytes(section: bytes, count: int) -> None:
    records_alike(section, count)


@pytest.mark.parametrize(
    "piece",
    [
        b"\x00\x00\x00\x03\x01\x01",  # key length -2
        b"\x00\x00\x00\x01\x01\x01",  # header count -1
        b"\x00\x00\x00\x01\x01\x02\x04\xff\xfe\x01",  # header key not UTF-8
        b"\x00" + b"\xff" * 11,  # overlong varlong
        b"\x00\x00" + b"\xff" * 4 + b"\x0f\x01\x01\x00",  # offset delta beyond 32 bits
        b"\x00\x00\x00\x01\x01\x02\x03\x00\x01",  # header key length -2
        b"\x00\x00\x00\x01\x01\x00\x00",  # body longer than its fields
        b"\x00\x00\x00\x01\x01",  # body shorter than its fields (count read past it)
    ],
)
def test_record_loop_refuses_what_the_reference_refuses(piece: bytes) -> None:
    section = bytes([len(piece) << 1]) + piece + b"\x00"  # a neighbour byte after the body
    records_alike(section, 1)
    with pytest.raises(RecordBatchError):
        _parse_records(section, 1)


def test_record_encoders_refuse_alike() -> None:
    bad: list[Any] = [
        Record(key="text"),  # type: ignore[arg-type]
        Record(offset_delta=2**31),
        Record(timestamp_delta=2**63),
        Record(attributes=128),
        Record(headers=[(b"bytes-key", b"v")]),  # type: ignore[list-item]
        Record(headers=[("k", "str-value")]),  # type: ignore[list-item]
        Record(headers=[("k",)]),  # type: ignore[list-item]
        Record(headers=[("\ud800", b"")]),
        Record(offset_delta=1.0),  # type: ignore[arg-type]
        "not a record",
    ]
    for record in bad:
        with pytest.raises(RecordBatchError):
            _encode_records([record])
        with pytest.raises(RecordBatchError):
            _encode_records_reference([record])
        with pytest.raises(RecordBatchError):
            encode_batch([record])
    flag = Record(offset_delta=True)
    assert _encode_records([flag]) == _encode_records_reference([flag])


@quick(60)
@given(
    records=st.lists(record_st, max_size=6),
    base_offset=st.integers(0, 2**40),
    base_timestamp=st.integers(-1, 2**42),
    attributes=st.sampled_from([0, 0x08, Compression.GZIP, Compression.GZIP | 0x08]),
    data=st.data(),
)
def test_iter_records_matches_decode_batch(
    records: list[Record], base_offset: int, base_timestamp: int, attributes: int, data: st.DataObject
) -> None:
    try:
        batch_bytes = encode_batch(
            records, base_offset=base_offset, base_timestamp=base_timestamp, attributes=attributes
        )
    except RecordBatchError:
        return  # offsets/timestamps overflowing the header fields
    batch = decode_batch(batch_bytes)
    assert batch.records is not None
    expected = [(batch.offset_of(r), batch.timestamp_of(r), r.key, r.value) for r in batch.records]
    assert list(iter_records(batch_bytes)) == expected
    assert list(iter_records(memoryview(batch_bytes))) == expected
    edits = data.draw(
        st.lists(st.tuples(st.integers(0, len(batch_bytes) - 1), st.integers(0, 255)), max_size=3)
    )
    corrupted = bytearray(batch_bytes)
    for index, byte in edits:
        corrupted[index] = byte
    for verify in (True, False):
        whole = outcome(functools.partial(decode_batch, bytes(corrupted), verify), (RecordBatchError,))
        fast = outcome(
            functools.partial(lambda v: list(iter_records(bytes(corrupted), verify_crc=v)), verify),
            (RecordBatchError,),
        )
        if whole is REFUSED or whole.records is None:
            assert fast is REFUSED
        else:
            assert fast == [
                (whole.offset_of(r), whole.timestamp_of(r), r.key, r.value) for r in whole.records
            ]


def test_iter_records_refuses_opaque_codecs_and_validates_first() -> None:
    batch = encode_batch([Record(key=b"k", value=b"v")] * 3)
    lz4 = bytearray(batch)
    struct.pack_into(">h", lz4, 21, Compression.LZ4)
    with pytest.raises(RecordBatchError):
        iter_records(bytes(lz4), verify_crc=False)
    # A bad last record refuses the whole batch before anything is yielded.
    broken = bytearray(batch)
    broken[-1] = 0x03  # header count -2
    with pytest.raises(RecordBatchError):
        iter_records(bytes(broken), verify_crc=False)
    gz = encode_batch(
        [Record(key=b"k", value=b"v", offset_delta=i) for i in range(4)], attributes=Compression.GZIP
    )
    assert [offset for offset, _, _, _ in iter_records(gz)] == [0, 1, 2, 3]
    assert gzip.decompress(decode_batch(gz).raw_records)
