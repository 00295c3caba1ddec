"""Hostile bytes: decoding raises ProtocolError or returns a value, never anything else.

Covers every declared (message, version) with random bytes, with every truncation of a
valid encoding and with single-byte corruptions of one; whole request frames through
``decode_request``; the consumer-protocol blobs; and ``FrameDecoder``'s size checks and
its reassembly of frames split at arbitrary chunk boundaries.
"""

from __future__ import annotations

import io
import itertools
import struct

import pytest
from construct import Container
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.builder import build_struct
from protocol.codec import (
    Request,
    decode_body,
    decode_request,
    decode_response,
    encode_body,
)
from protocol.consumer_protocol import decode_assignment, decode_subscription, subscribed_topics
from protocol.errors import ProtocolError, UnsupportedRequest
from protocol.frames import DEFAULT_MAX_FRAME, MIN_REQUEST_FRAME, FrameDecoder, FrameTooLarge, FrameTooSmall
from protocol.messages import (
    PAIRS,
    REQUESTS,
    RESPONSES,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    RequestHeader,
    ResponseHeader,
)
from protocol.schema import Array, Field, Message, Struct, default_struct
from tests.protocol.strategies import plain, value_for, versions_of

MESSAGES: list[Message] = [m for pair in PAIRS for m in pair] + [
    RequestHeader,
    ResponseHeader,
    ConsumerProtocolSubscription,
    ConsumerProtocolAssignment,
]
CASES = [(m, v) for m in MESSAGES for v in versions_of(m)]
IDS = [f"{m.name}-v{v}" for m, v in CASES]


def quick(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


def decodes_or_refuses(message: Message, version: int, data: bytes) -> bool:
    """Decode; a value must survive encode/decode unchanged. True when it decoded."""
    try:
        value = decode_body(message, version, data)
    except ProtocolError:
        return False
    again = decode_body(message, version, encode_body(message, version, value))
    assert plain(again) == plain(value)
    return True


@pytest.mark.parametrize(("message", "version"), CASES, ids=IDS)
@quick(30)
@given(data=st.binary(max_size=80))
def test_random_bytes(message: Message, version: int, data: bytes) -> None:
    decodes_or_refuses(message, version, data)


@pytest.mark.parametrize(("message", "version"), CASES, ids=IDS)
@quick(5)
@given(data=st.data())
def test_truncations_and_corruptions(message: Message, version: int, data: st.DataObject) -> None:
    value = data.draw(value_for(message, version), label="value")
    encoded = encode_body(message, version, value)
    # The encoding is prefix-free, so every proper prefix must be refused.
    for cut in range(len(encoded)):
        with pytest.raises(ProtocolError):
            decode_body(message, version, encoded[:cut])
    if not encoded:
        return
    flips = data.draw(
        st.lists(st.tuples(st.integers(0, len(encoded) - 1), st.integers(0, 255)), min_size=1, max_size=8),
        label="corruptions",
    )
    for index, byte in flips:
        corrupted = bytearray(encoded)
        corrupted[index] = byte
        decodes_or_refuses(message, version, bytes(corrupted))
    assert decodes_or_refuses(message, version, encoded)


def _array_elements(fields: tuple[Field, ...], version: int, flexible: bool) -> list[tuple[str, Struct]]:
    found: list[tuple[str, Struct]] = []
    for decl in fields:
        if not decl.present_in(version):
            continue
        base = decl.type.of if isinstance(decl.type, Array) else decl.type
        if isinstance(base, Struct):
            if isinstance(decl.type, Array):
                found.append((decl.name, base))
            found.extend(_array_elements(base.fields, version, flexible))
    return found


@pytest.mark.parametrize(("message", "version"), CASES, ids=IDS)
def test_every_array_element_takes_at_least_one_byte(message: Message, version: int) -> None:
    """KafkaArray relies on this: a lying element count then runs out of bytes, not time."""
    flexible = message.is_flexible(version)
    for name, element in _array_elements(message.fields, version, flexible):
        smallest = encode_body_of(element, version, flexible)
        assert len(smallest) >= 1, f"{message.name} v{version}: {name}[] elements can be empty"


def encode_body_of(element: Struct, version: int, flexible: bool) -> bytes:
    """The encoding of an element with every field at its default (the smallest one)."""
    stream = io.BytesIO()
    build_struct(element.fields, version, flexible)._build(
        default_struct(element.fields, version), stream, Container(), "(element)"
    )
    return stream.getvalue()


@pytest.mark.parametrize("compact", [False, True])
def test_huge_array_count_is_refused_quickly(compact: bool) -> None:
    # Metadata v1 (int32 count) / v9 (compact uvarint count) claiming ~2**31 topics, followed
    # by 32 well-formed empty-named topics: decoding stops where the bytes do.
    version = 9 if compact else 1
    count = b"\xff\xff\xff\xff\x07" if compact else b"\x7f\xff\xff\xff"
    topic = b"\x01\x00" if compact else b"\x00\x00"
    with pytest.raises(ProtocolError):
        decode_body(REQUESTS[3], version, count + topic * 32)
    one = b"\x02" + topic if compact else b"\x00\x00\x00\x01" + topic
    tail = b"\x01\x00\x00\x00" if compact else b""  # v9: three bools, then the tag section
    assert decode_body(REQUESTS[3], version, one + tail).topics == [{"name": ""}]


# --------------------------------------------------------------------------- whole frames


def _served_prefix() -> st.SearchStrategy[bytes]:
    keyed = st.sampled_from(sorted(REQUESTS)).flatmap(
        lambda key: st.tuples(
            st.just(key),
            st.integers(REQUESTS[key].min_version, REQUESTS[key].max_version),
            st.integers(-(2**31), 2**31 - 1),
        )
    )
    return keyed.map(lambda t: struct.pack(">hhi", *t))


@quick(400)
@given(
    frame=st.one_of(
        st.binary(max_size=64),
        st.tuples(_served_prefix(), st.binary(max_size=64)).map(lambda parts: parts[0] + parts[1]),
    )
)
def test_random_request_frames(frame: bytes) -> None:
    try:
        request = decode_request(frame)
    except UnsupportedRequest as exc:
        assert len(frame) >= 8
        assert exc.api_key not in REQUESTS or not (
            REQUESTS[exc.api_key].min_version <= exc.api_version <= REQUESTS[exc.api_key].max_version
        )
        return
    except ProtocolError:
        return
    assert isinstance(request, Request)
    assert request.message is REQUESTS[request.header.api_key]


@quick(200)
@given(
    key=st.sampled_from(sorted(RESPONSES)),
    data=st.data(),
    frame=st.binary(max_size=64),
)
def test_random_response_frames(key: int, data: st.DataObject, frame: bytes) -> None:
    message = RESPONSES[key]
    version = data.draw(st.integers(message.min_version, message.max_version))
    try:
        correlation_id, _ = decode_response(key, version, frame)
    except ProtocolError:
        return
    assert struct.unpack_from(">i", frame)[0] == correlation_id


@quick(300)
@given(blob=st.binary(max_size=48))
def test_random_consumer_protocol_blobs(blob: bytes) -> None:
    for decode in (decode_subscription, decode_assignment):
        try:
            decoded = decode(blob)
        except ProtocolError:
            continue
        assert 0 <= decoded.version <= 3
    topics = subscribed_topics(blob)
    assert topics is None or all(isinstance(topic, str) for topic in topics)


# --------------------------------------------------------------------------- FrameDecoder


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@quick(150)
@given(
    frames=st.lists(st.binary(min_size=MIN_REQUEST_FRAME, max_size=60), max_size=6),
    cuts=st.lists(st.integers(0, 400), max_size=12),
)
def test_frames_split_anywhere_come_back_whole_and_in_order(frames: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(framed(f) for f in frames)
    points = sorted({c for c in cuts if c <= len(stream)} | {0, len(stream)})
    decoder = FrameDecoder()
    got: list[bytes] = []
    for start, end in itertools.pairwise(points):
        got.extend(decoder.feed(memoryview(stream)[start:end]))
    assert got == frames
    assert decoder.buffered == 0


@quick(150)
@given(
    frames=st.lists(st.binary(min_size=MIN_REQUEST_FRAME, max_size=60), max_size=6),
    cuts=st.lists(st.integers(0, 400), max_size=12),
    views=st.lists(st.booleans(), max_size=13),
)
def test_reads_of_bytes_and_views_mixed_give_the_same_frames(frames: list[bytes], cuts: list[int],
                                                             views: list[bool]) -> None:
    # A read that starts at a frame boundary with nothing held (bytes, as os.read gives)
    # is sliced in place; anything else goes through the buffer. Both must agree.
    stream = b"".join(framed(f) for f in frames)
    points = sorted({c for c in cuts if c <= len(stream)} | {0, len(stream)})
    decoder = FrameDecoder()
    got: list[bytes] = []
    for i, (start, end) in enumerate(itertools.pairwise(points)):
        chunk = stream[start:end]
        got.extend(decoder.feed(memoryview(chunk) if i < len(views) and views[i] else chunk))
    assert got == frames
    assert all(type(f) is bytes for f in got)
    assert decoder.buffered == 0


def test_size_checks_hold_for_a_fresh_read_too() -> None:
    with pytest.raises(FrameTooLarge):
        FrameDecoder(max_size=1000).feed(framed(b"a" * 10) + struct.pack(">i", 1001))
    with pytest.raises(FrameTooSmall):
        FrameDecoder().feed(framed(b"a" * 10) + struct.pack(">i", MIN_REQUEST_FRAME - 1))
    decoder = FrameDecoder()
    assert decoder.feed(framed(b"a" * 10) + framed(b"b" * 20)[:7]) == [b"a" * 10]
    assert decoder.buffered == 3
    assert decoder.feed(framed(b"b" * 20)[7:]) == [b"b" * 20]


def test_byte_at_a_time() -> None:
    frames = [bytes(range(10)), b"x" * 300, b"\x00" * 10]
    stream = b"".join(framed(f) for f in frames)
    decoder = FrameDecoder()
    got: list[bytes] = []
    for i in range(len(stream)):
        got.extend(decoder.feed(stream[i : i + 1]))
        # A frame is handed over as soon as its last byte arrives.
        done = sum(1 for end in _ends(frames) if end <= i + 1)
        assert len(got) == done
    assert got == frames


def _ends(frames: list[bytes]) -> list[int]:
    ends, pos = [], 0
    for f in frames:
        pos += 4 + len(f)
        ends.append(pos)
    return ends


def test_too_large_is_refused_on_the_fourth_size_byte() -> None:
    decoder = FrameDecoder(max_size=1000)
    prefix = struct.pack(">i", 1001)
    for byte in prefix[:3]:
        assert decoder.feed(bytes([byte])) == []
    with pytest.raises(FrameTooLarge):
        decoder.feed(prefix[3:])


def test_limits_are_inclusive() -> None:
    decoder = FrameDecoder(max_size=1000, min_size=12)
    assert decoder.feed(framed(b"a" * 1000)) == [b"a" * 1000]
    assert decoder.feed(framed(b"b" * 12)) == [b"b" * 12]
    with pytest.raises(FrameTooSmall):
        FrameDecoder(max_size=1000, min_size=12).feed(framed(b"c" * 11))


def test_two_gib_prefix_with_default_limits() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameTooLarge):
        decoder.feed(b"\x7f\xff\xff\xff")
    assert DEFAULT_MAX_FRAME < 0x7FFFFFFF


def test_oversized_prefix_after_a_whole_frame() -> None:
    decoder = FrameDecoder(max_size=100)
    assert decoder.feed(framed(b"z" * 20)) == [b"z" * 20]
    with pytest.raises(FrameTooLarge):
        decoder.feed(struct.pack(">i", 101))


@pytest.mark.parametrize("size", [MIN_REQUEST_FRAME - 1, 0, -1, -(2**31)])
def test_small_and_negative_prefixes_are_refused(size: int) -> None:
    with pytest.raises(FrameTooSmall):
        FrameDecoder().feed(struct.pack(">i", size))


@quick(200)
@given(size=st.integers(-(2**31), 2**31 - 1), max_size=st.integers(MIN_REQUEST_FRAME, 4096))
def test_every_size_prefix_is_judged_on_arrival(size: int, max_size: int) -> None:
    decoder = FrameDecoder(max_size=max_size)
    prefix = struct.pack(">i", size)
    if size > max_size:
        with pytest.raises(FrameTooLarge):
            decoder.feed(prefix)
    elif size < MIN_REQUEST_FRAME:
        with pytest.raises(FrameTooSmall):
            decoder.feed(prefix)
    else:
        assert decoder.feed(prefix) == []
        assert decoder.buffered == 0
        assert decoder.feed(b"\x00" * (size - 1)) == []
        assert decoder.feed(b"\x01") == [b"\x00" * (size - 1) + b"\x01"]
