"""The one varint implementation: known encodings, round trips and the bounds Kafka enforces."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.types import UNSIGNED_VARINT, VARINT, VARLONG
from protocol.varint import (
    SMALL_VARINTS,
    ZIGZAG_ONE_BYTE,
    VarintError,
    decode_uvarint,
    decode_varint,
    decode_varlong,
    encode_uvarint,
    encode_varint,
    encode_varlong,
    read_uvarint,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
     (2**32 - 1, b"\xff\xff\xff\xff\x0f")],
)
def test_unsigned_varint_known_encodings(value: int, encoded: bytes) -> None:
    assert encode_uvarint(value) == encoded
    assert decode_uvarint(encoded + b"junk", 0) == (value, len(encoded))


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"), (64, b"\x80\x01"),
     (2**31 - 1, b"\xfe\xff\xff\xff\x0f"), (-(2**31), b"\xff\xff\xff\xff\x0f")],
)
def test_varint_known_encodings(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(encoded, 0) == (value, len(encoded))


@given(INT32)
def test_varint_round_trips_and_matches_the_construct(value: int) -> None:
    encoded = encode_varint(value)
    assert decode_varint(b"\x00" + encoded, 1) == (value, 1 + len(encoded))
    assert VARINT.build(value) == encoded


@given(INT64)
def test_varlong_round_trips_and_matches_the_construct(value: int) -> None:
    encoded = encode_varlong(value)
    assert decode_varlong(encoded, 0) == (value, len(encoded))
    assert VARLONG.build(value) == encoded
    assert VARLONG.parse(encoded) == value


@given(st.integers(0, 2**32 - 1))
def test_unsigned_varint_round_trips_from_buffers_and_streams(value: int) -> None:
    encoded = encode_uvarint(value)
    assert decode_uvarint(encoded, 0) == (value, len(encoded))
    assert read_uvarint(iter(encoded).__next__) == value
    assert UNSIGNED_VARINT.build(value) == encoded


def test_one_byte_tables_agree_with_the_encoder() -> None:
    assert all(encode_varint(v) == encoded for v, encoded in SMALL_VARINTS.items())
    assert all(decode_varint(bytes((raw,)), 0)[0] == v for raw, v in enumerate(ZIGZAG_ONE_BYTE))
    assert sorted(SMALL_VARINTS) == list(range(-64, 64))


def test_too_long_and_too_wide_varints_are_refused() -> None:
    with pytest.raises(VarintError, match="longer than 5 bytes"):
        decode_uvarint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(VarintError, match="longer than 5 bytes"):
        decode_varint(b"\xff\xff\xff\xff\xff\x01", 0)
    with pytest.raises(VarintError, match="exceeds 32 bits"):
        decode_varint(b"\xff\xff\xff\xff\x1f", 0)
    with pytest.raises(VarintError, match="exceeds 64 bits"):
        decode_varlong(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 0)
    assert decode_varlong(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 0) == (-(2**63), 10)


def test_truncated_varints_run_off_the_buffer() -> None:
    with pytest.raises(IndexError):
        decode_uvarint(b"\x80\x80", 0)
    with pytest.raises(IndexError):
        decode_varlong(b"", 0)


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 1.5, "1", None])
def test_values_a_varint_cannot_hold_are_refused(value: object) -> None:
    with pytest.raises(VarintError, match="out of range"):
        encode_varint(value)  # type: ignore[arg-type]


def test_negative_unsigned_varint_is_refused() -> None:
    with pytest.raises(VarintError):
        encode_uvarint(-1)
