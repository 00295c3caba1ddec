"""Record batch v2 codec: round trips, CRC, hostile input, framing and kafka-python interop."""

from __future__ import annotations

import gzip
import io
import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol import types as t
from protocol.records import (
    BATCH_HEADER,
    HEADER_SIZE,
    BatchHeader,
    Compression,
    CorruptBatchError,
    Record,
    RecordBatchError,
    TimestampType,
    build_records,
    decode_batch,
    encode_batch,
    iter_batches,
    peek_batch_header,
    rewrite_base_offset,
    scan_batches,
    set_log_append_time,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Independent of protocol.records: the header layout written out by hand.
_HEADER = struct.Struct(">qiibIhiqqqhii")


def frame(section: bytes, count: int, attributes: int = 0, *, magic: int = 2, base_offset: int = 0) -> bytes:
    """A batch around an arbitrary records section, with correct length and CRC."""
    head = bytearray(
        _HEADER.pack(base_offset, 49 + len(section), -1, magic, 0, attributes, max(count - 1, 0), 0, 0, -1, -1, -1, count)
    )
    body = head + section
    struct.pack_into(">I", body, 17, crc32c.crc32c(bytes(body[21:])))
    return bytes(body)


def varint(value: int) -> bytes:
    stream = io.BytesIO()
    t.VARINT._build(value, stream, None, "")
    return stream.getvalue()


def sample_records() -> list[Record]:
    return [
        Record(0, 0, 0, b"key", b"value", [("h1", b"v1"), ("h2", None)]),
        Record(0, 5, 1, None, b"", []),
        Record(0, -3, 2, b"", None, [("", b"")]),
        Record(0, 7, 3, None, None, [("ключ", b"\x00\xff")]),
    ]


optional_bytes = st.none() | st.binary(max_size=64)
headers_st = st.lists(st.tuples(st.text(max_size=12), optional_bytes), max_size=4)
record_st = st.builds(
    Record,
    attributes=st.integers(-128, 127),
    timestamp_delta=st.integers(-(2**40), 2**40),
    offset_delta=st.integers(INT32_MIN, INT32_MAX),
    key=optional_bytes,
    value=optional_bytes,
    headers=headers_st,
)


# --- layout and round trips -----------------------------------------------------------


def test_header_construct_and_peek_agree_on_layout() -> None:
    data = encode_batch(sample_records(), base_offset=42, base_timestamp=1_700_000_000_000, producer_id=9)
    assert BATCH_HEADER.sizeof() == HEADER_SIZE == 61
    parsed = BATCH_HEADER.parse(data[:HEADER_SIZE])
    peeked = peek_batch_header(data)
    assert {k: v for k, v in parsed.items() if not k.startswith("_")} == peeked._asdict()
    assert peeked.size == len(data)
    assert _HEADER.unpack_from(data) == tuple(peeked)


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(record_st, max_size=8),
    codec=st.sampled_from([Compression.NONE, Compression.GZIP]),
    base_offset=st.integers(0, 2**62),
    base_timestamp=st.integers(-1, 2**45),
    producer=st.tuples(st.integers(-1, 2**62), st.integers(-1, 2**15 - 1), st.integers(-1, INT32_MAX)),
    leader_epoch=st.integers(-1, INT32_MAX),
    flags=st.sampled_from([0, 0x10, 0x20, 0x30]),
)
def test_round_trip(
    records: list[Record],
    codec: Compression,
    base_offset: int,
    base_timestamp: int,
    producer: tuple[int, int, int],
    leader_epoch: int,
    flags: int,
) -> None:
    producer_id, producer_epoch, base_sequence = producer
    data = encode_batch(
        records,
        base_offset=base_offset,
        base_timestamp=base_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=leader_epoch,
        attributes=codec | flags,
    )
    batch = decode_batch(data)
    assert batch.records == records
    assert batch.size == len(data)
    assert batch.magic == 2
    assert batch.compression is codec
    assert batch.is_transactional == bool(flags & 0x10)
    assert batch.is_control == bool(flags & 0x20)
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert (batch.base_offset, batch.base_timestamp, batch.partition_leader_epoch) == (
        base_offset,
        base_timestamp,
        leader_epoch,
    )
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == producer
    assert batch.records_count == len(records)
    expected_last = records[-1].offset_delta if records else -1
    assert batch.last_offset_delta == expected_last
    assert batch.last_offset == base_offset + expected_last
    assert batch.next_offset == base_offset + expected_last + 1
    assert batch.max_timestamp == base_timestamp + max((r.timestamp_delta for r in records), default=0)
    assert batch.raw_records == data[HEADER_SIZE:]
    if codec is Compression.GZIP:
        assert gzip.decompress(batch.raw_records) == encode_batch(records)[HEADER_SIZE:]
    # Decoding is a faithful inverse: re-encoding the decoded batch gives the same bytes.
    assert encode_batch(
        batch.records,
        base_offset=batch.base_offset,
        base_timestamp=batch.base_timestamp,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        partition_leader_epoch=batch.partition_leader_epoch,
        attributes=batch.attributes,
    ) == data


def test_null_and_empty_are_distinct() -> None:
    batch = decode_batch(encode_batch(sample_records()))
    assert batch.records is not None
    assert [(r.key, r.value) for r in batch.records] == [
        (b"key", b"value"),
        (None, b""),
        (b"", None),
        (None, None),
    ]
    assert batch.records[0].headers == [("h1", b"v1"), ("h2", None)]
    assert batch.records[3].headers == [("ключ", b"\x00\xff")]


def test_extreme_field_values_round_trip() -> None:
    records = [
        Record(-128, INT64_MIN, INT32_MIN, b"", None, []),
        Record(127, INT64_MAX, INT32_MAX, None, b"x" * 300, [("k" * 200, b"v" * 200)]),
    ]
    data = encode_batch(records, base_timestamp=0, max_timestamp=0, base_offset=INT64_MAX)
    batch = decode_batch(data)
    assert batch.records == records
    assert batch.base_offset == INT64_MAX


def test_explicit_max_timestamp_and_empty_batch() -> None:
    data = encode_batch([], base_offset=10, base_timestamp=5, max_timestamp=99, last_offset_delta=3)
    batch = decode_batch(data)
    assert batch.records == []
    assert (batch.records_count, batch.max_timestamp, batch.next_offset) == (0, 99, 14)
    assert len(data) == HEADER_SIZE


def test_build_records_assigns_consecutive_offset_deltas() -> None:
    records = build_records([(b"a", b"1"), (None, b"2"), (b"c", None)], headers=[("h", b"x")])
    assert [r.offset_delta for r in records] == [0, 1, 2]
    assert [(r.key, r.value) for r in records] == [(b"a", b"1"), (None, b"2"), (b"c", None)]
    assert all(r.headers == [("h", b"x")] and r.timestamp_delta == 0 for r in records)
    batch = decode_batch(encode_batch(records, base_offset=100))
    assert batch.last_offset == 102


def test_gzip_encoding_is_deterministic() -> None:
    first = encode_batch(sample_records(), attributes=Compression.GZIP)
    assert first == encode_batch(sample_records(), attributes=Compression.GZIP)
    assert first[HEADER_SIZE : HEADER_SIZE + 2] == b"\x1f\x8b"


def test_accepts_bytearray_and_memoryview() -> None:
    data = encode_batch(sample_records())
    expected = decode_batch(data)
    assert decode_batch(bytearray(data)) == expected
    assert decode_batch(memoryview(b"junk" + data)[4:]) == expected


@pytest.mark.parametrize(
    "bad",
    [
        Record(key="text"),  # type: ignore[arg-type]
        Record(offset_delta=INT32_MAX + 1),
        Record(timestamp_delta=INT64_MAX + 1),
        Record(attributes=128),
        Record(headers=[(b"bytes-key", b"v")]),  # type: ignore[list-item]
        Record(headers=[("k", "str-value")]),  # type: ignore[list-item]
    ],
)
def test_encode_rejects_unencodable_records(bad: Record) -> None:
    with pytest.raises(RecordBatchError):
        encode_batch([bad])


def test_encode_rejects_bad_header_fields_and_codecs() -> None:
    with pytest.raises(RecordBatchError):
        encode_batch([], producer_epoch=2**15)
    with pytest.raises(RecordBatchError):
        encode_batch([], base_offset=INT64_MAX + 1)
    for codec in (Compression.SNAPPY, Compression.LZ4, Compression.ZSTD, 5):
        with pytest.raises(RecordBatchError):
            encode_batch(sample_records(), attributes=codec)


# --- CRC ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP])
def test_every_bit_flip_in_crc_covered_range_is_detected(codec: Compression) -> None:
    data = encode_batch(sample_records()[:2], base_timestamp=123, attributes=codec)
    # Bytes 17..21 are the CRC itself, 21.. are covered by it.
    for bit in range(17 * 8, len(data) * 8):
        damaged = bytearray(data)
        damaged[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CorruptBatchError):
            decode_batch(bytes(damaged))


def test_bit_flips_outside_crc_range() -> None:
    data = encode_batch(sample_records(), base_offset=1000, partition_leader_epoch=3)
    for bit in range(0, 17 * 8):
        damaged = bytearray(data)
        damaged[bit // 8] ^= 1 << (bit % 8)
        if bit < 8 * 8 or 12 * 8 <= bit < 16 * 8:
            # base_offset and leader epoch are not covered by the CRC (so they can be rewritten).
            batch = decode_batch(bytes(damaged))
            assert (batch.base_offset, batch.partition_leader_epoch) != (1000, 3)
            assert batch.records == sample_records()
        else:
            # batch_length or magic: structurally wrong, reported as malformed, not as corrupt.
            with pytest.raises(RecordBatchError) as info:
                decode_batch(bytes(damaged))
            assert not isinstance(info.value, CorruptBatchError)


def test_verify_crc_false_skips_the_check() -> None:
    data = bytearray(encode_batch([Record(value=b"hello")]))
    data[-2] ^= 0x01  # last byte of the value (the final byte is the header count)
    with pytest.raises(CorruptBatchError):
        decode_batch(bytes(data))
    batch = decode_batch(bytes(data), verify_crc=False)
    assert batch.records == [Record(value=b"helln")]


# --- hostile input --------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200), verify=st.booleans())
def test_random_bytes_raise_only_record_batch_error(data: bytes, verify: bool) -> None:
    try:
        batch = decode_batch(data, verify_crc=verify)
    except RecordBatchError:
        return
    assert batch.size == len(data)


@settings(max_examples=300, deadline=None)
@given(
    section=st.binary(max_size=120),
    count=st.integers(INT32_MIN, 40),
    attributes=st.integers(-(2**15), 2**15 - 1),
)
def test_random_records_section_with_valid_crc(section: bytes, count: int, attributes: int) -> None:
    data = frame(section, count, attributes)
    try:
        batch = decode_batch(data)
    except RecordBatchError as exc:
        assert not isinstance(exc, CorruptBatchError)
        return
    assert batch.raw_records == section
    if batch.records is not None:
        assert len(batch.records) == count
    else:
        assert batch.compression in (Compression.SNAPPY, Compression.LZ4, Compression.ZSTD)


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(record_st, min_size=1, max_size=4),
    codec=st.sampled_from([Compression.NONE, Compression.GZIP]),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_mutated_records_with_fixed_crc_raise_only_record_batch_error(
    records: list[Record], codec: Compression, edits: list[tuple[int, int]]
) -> None:
    data = bytearray(encode_batch(records, attributes=codec))
    for pos, byte in edits:
        data[pos % len(data)] = byte
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    try:
        decode_batch(bytes(data))
    except RecordBatchError as exc:
        assert not isinstance(exc, CorruptBatchError)


@settings(max_examples=40, deadline=None)
@given(records=st.lists(record_st, max_size=3), codec=st.sampled_from([Compression.NONE, Compression.GZIP]))
def test_every_truncation_raises_record_batch_error(records: list[Record], codec: Compression) -> None:
    data = encode_batch(records, attributes=codec)
    for cut in range(len(data)):
        with pytest.raises(RecordBatchError):
            decode_batch(data[:cut])
    with pytest.raises(RecordBatchError):
        decode_batch(data + b"\x00")


def test_record_count_mismatch_and_trailing_garbage() -> None:
    section = encode_batch(sample_records()[:2])[HEADER_SIZE:]
    assert len(decode_batch(frame(section, 2)).records or []) == 2
    with pytest.raises(RecordBatchError, match="malformed"):
        decode_batch(frame(section, 3))  # claims more records than present
    with pytest.raises(RecordBatchError, match="left after"):
        decode_batch(frame(section, 1))  # second record becomes trailing garbage
    with pytest.raises(RecordBatchError, match="negative"):
        decode_batch(frame(section, -1))


def test_record_length_prefix_must_match_body() -> None:
    body = bytes([0]) + varint(0) + varint(0) + varint(-1) + varint(-1) + varint(0)
    assert decode_batch(frame(varint(len(body)) + body, 1)).records == [Record()]
    with pytest.raises(RecordBatchError, match="length"):
        decode_batch(frame(varint(len(body) + 1) + body + b"\x00", 1))
    with pytest.raises(RecordBatchError):
        decode_batch(frame(varint(len(body) - 1) + body, 1))


@pytest.mark.parametrize(
    ("piece", "why"),
    [
        (varint(-2), "key length below -1"),
        (varint(-1) + varint(-1) + varint(-1), "negative header count"),
        (varint(-1) + varint(-1) + varint(1) + varint(-1) + varint(-1), "null header key"),
        (varint(-1) + varint(-1) + varint(1) + varint(2) + b"\xff\xfe" + varint(-1), "header key not UTF-8"),
        (b"\xff" * 11, "overlong varint"),
    ],
)
def test_malformed_record_fields(piece: bytes, why: str) -> None:
    body = bytes([0]) + varint(0) + varint(0) + piece
    with pytest.raises(RecordBatchError):
        decode_batch(frame(varint(len(body)) + body, 1))


def test_bad_magic_and_unknown_codec() -> None:
    with pytest.raises(RecordBatchError, match="magic"):
        decode_batch(frame(b"", 0, magic=1))
    with pytest.raises(RecordBatchError, match="codec"):
        decode_batch(frame(b"", 0, attributes=5))


def test_opaque_codecs_keep_raw_records() -> None:
    payload = b"\x04\x22\x4d\x18 pretend-lz4 frame"
    batch = decode_batch(frame(payload, 3, attributes=Compression.LZ4))
    assert batch.records is None
    assert batch.raw_records == payload
    assert batch.compression is Compression.LZ4
    assert batch.records_count == 3


def test_gzip_garbage_and_bombs_are_rejected() -> None:
    plain = encode_batch(sample_records())[HEADER_SIZE:]
    with pytest.raises(RecordBatchError):
        decode_batch(frame(b"not gzip at all", 4, attributes=Compression.GZIP))
    with pytest.raises(RecordBatchError, match="truncated"):
        decode_batch(frame(gzip.compress(plain)[:-5], 4, attributes=Compression.GZIP))
    with pytest.raises(RecordBatchError, match="inflate beyond"):
        decode_batch(frame(gzip.compress(b"\x00" * 100_000), 1, attributes=Compression.GZIP), max_uncompressed=10_000)
    # Several gzip members concatenated are one stream, as Java's GZIPInputStream reads them.
    members = gzip.compress(plain[:10]) + gzip.compress(plain[10:])
    assert decode_batch(frame(members, 4, attributes=Compression.GZIP)).records == sample_records()


# --- framing: iter_batches / scan_batches / peek --------------------------------------


def _three_batches() -> tuple[list[bytes], bytes]:
    batches = [
        encode_batch(build_records([(b"a", b"1")]), base_offset=0),
        encode_batch(build_records([(b"b", b"2"), (b"c", b"3")]), base_offset=1, attributes=Compression.GZIP),
        encode_batch(build_records([(None, b"4")]), base_offset=3),
    ]
    return batches, b"".join(batches)


def test_iter_batches_yields_complete_batches_and_stops_at_truncated_tail() -> None:
    batches, blob = _three_batches()
    positions = [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    tail = encode_batch(build_records([(b"z", b"tail")]), base_offset=4)
    for cut in range(len(tail)):
        got = list(iter_batches(blob + tail[:cut]))
        assert [pos for pos, _ in got] == positions
        assert [b.base_offset for _, b in got] == [0, 1, 3]
        assert [[r.value for r in b.records or []] for _, b in got] == [[b"1"], [b"2", b"3"], [b"4"]]
        headers, valid = scan_batches(blob + tail[:cut])
        assert valid == len(blob)
        assert [(pos, h.base_offset, h.size) for pos, h in headers] == [
            (p, o, len(b)) for p, o, b in zip(positions, [0, 1, 3], batches, strict=True)
        ]
    assert len(list(iter_batches(blob + tail))) == 4
    assert scan_batches(blob + tail)[1] == len(blob) + len(tail)
    assert list(iter_batches(b"")) == []
    assert scan_batches(b"") == ([], 0)


def test_corrupt_batch_in_the_middle() -> None:
    batches, blob = _three_batches()
    damaged = bytearray(blob)
    damaged[len(batches[0]) + HEADER_SIZE + 2] ^= 0x40
    got = []
    with pytest.raises(CorruptBatchError):
        for pos, batch in iter_batches(bytes(damaged)):
            got.append((pos, batch.base_offset))
    assert got == [(0, 0)]
    headers, valid = scan_batches(bytes(damaged))
    assert [pos for pos, _ in headers] == [0]
    assert valid == len(batches[0])
    # Without CRC checks the scan frames all three, since the structure is intact.
    assert scan_batches(bytes(damaged), verify_crc=False)[1] == len(blob)


def test_zero_filled_tail() -> None:
    _, blob = _three_batches()
    padded = blob + bytes(100)  # a preallocated segment file
    headers, valid = scan_batches(padded)
    assert (len(headers), valid) == (3, len(blob))
    with pytest.raises(RecordBatchError, match="too small"):
        list(iter_batches(padded))


def test_peek_batch_header() -> None:
    batches, blob = _three_batches()
    header = peek_batch_header(blob, len(batches[0]))
    assert isinstance(header, BatchHeader)
    full = decode_batch(batches[1])
    assert tuple(header) == (
        full.base_offset,
        full.batch_length,
        full.partition_leader_epoch,
        full.magic,
        full.crc,
        full.attributes,
        full.last_offset_delta,
        full.base_timestamp,
        full.max_timestamp,
        full.producer_id,
        full.producer_epoch,
        full.base_sequence,
        full.records_count,
    )
    assert (header.last_offset, header.next_offset, header.compression) == (2, 3, Compression.GZIP)
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert not header.is_transactional and not header.is_control
    with pytest.raises(RecordBatchError):
        peek_batch_header(blob, len(blob) - 60)
    with pytest.raises(RecordBatchError):
        peek_batch_header(blob, -1)


@pytest.mark.parametrize("attributes", [0, 1, 4, 0x08 | 1, 0x10, 0x20, 0x40 | 2, 0x78 | 3])
def test_header_and_decoded_batch_read_attributes_alike(attributes: int) -> None:
    section = gzip.compress(b"", mtime=0) if attributes & 7 == Compression.GZIP else b""
    data = frame(section, 0, attributes)
    header = peek_batch_header(data)
    full = decode_batch(data)
    names = ("size", "compression", "timestamp_type", "is_transactional", "is_control",
             "has_delete_horizon", "last_offset", "next_offset")
    assert [getattr(header, n) for n in names] == [getattr(full, n) for n in names]
    assert header.compression is full.compression is Compression(attributes & 7)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_header_with_undefined_codec_bits_is_safe_to_read(codec: int) -> None:
    """Bits 5-7 name no codec: a peeked header says so; decoding refuses the batch."""
    data = frame(b"", 0, codec | 0x20)
    header = peek_batch_header(data)
    assert header.compression is None
    assert header.is_control and header.timestamp_type is TimestampType.CREATE_TIME
    assert scan_batches(data) == ([(0, header)], len(data))
    with pytest.raises(RecordBatchError, match="unknown compression codec"):
        decode_batch(data)


# --- header rewrites ------------------------------------------------------------------


def test_rewrite_base_offset_keeps_crc_valid() -> None:
    data = encode_batch(sample_records(), base_offset=0)
    moved = rewrite_base_offset(data, 123_456, partition_leader_epoch=7)
    assert moved[16:] == data[16:]  # magic, CRC and everything after untouched
    batch = decode_batch(moved)
    assert (batch.base_offset, batch.partition_leader_epoch, batch.last_offset) == (123_456, 7, 123_459)
    assert batch.records == sample_records()
    assert rewrite_base_offset(bytearray(data), 5)[12:] == data[12:]
    with pytest.raises(RecordBatchError):
        rewrite_base_offset(data[:30], 1)
    with pytest.raises(RecordBatchError):
        rewrite_base_offset(data, INT64_MAX + 1)


def test_set_log_append_time() -> None:
    data = encode_batch(sample_records(), base_timestamp=1_000, attributes=Compression.GZIP | 0x10, producer_id=1)
    stamped = set_log_append_time(data, 1_700_000_000_123)
    batch = decode_batch(stamped)
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == 1_700_000_000_123
    assert batch.compression is Compression.GZIP and batch.is_transactional
    assert batch.records == sample_records()
    assert [batch.timestamp_of(r) for r in batch.records] == [1_700_000_000_123] * 4
    reader = DefaultRecordBatch(stamped)
    assert reader.validate_crc()
    assert reader.timestamp_type == 1
    assert [r.timestamp for r in reader] == [1_700_000_000_123] * 4
    damaged = bytearray(data)
    damaged[-1] ^= 1
    with pytest.raises(CorruptBatchError):
        set_log_append_time(bytes(damaged), 5)
    with pytest.raises(RecordBatchError):
        set_log_append_time(data[:-1], 5)


# --- interop with kafka-python --------------------------------------------------------

kp_record_st = st.tuples(
    st.integers(0, 2**20),  # timestamp offset from the first record's
    optional_bytes,
    optional_bytes,
    st.lists(st.tuples(st.text(max_size=10), optional_bytes), max_size=3),
)


def _kafka_python_build(entries: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]], codec: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for offset, (ts, key, value, headers) in enumerate(entries):
        assert builder.append(offset, 1_600_000_000_000 + ts, key, value, headers) is not None
    return bytes(builder.build())


@settings(max_examples=100, deadline=None)
@given(entries=st.lists(kp_record_st, min_size=1, max_size=6), codec=st.sampled_from([0, 1]))
def test_decode_batches_built_by_kafka_python(
    entries: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]], codec: int
) -> None:
    data = _kafka_python_build(entries, codec)
    batch = decode_batch(data)
    # kafka-python falls back to no compression when gzip would not shrink the data.
    assert batch.compression == DefaultRecordBatch(data).compression_type
    assert batch.records is not None
    assert [batch.offset_of(r) for r in batch.records] == list(range(len(entries)))
    assert [batch.timestamp_of(r) for r in batch.records] == [1_600_000_000_000 + e[0] for e in entries]
    assert [(r.key, r.value, r.headers) for r in batch.records] == [(e[1], e[2], e[3]) for e in entries]
    assert batch.max_timestamp == 1_600_000_000_000 + max(e[0] for e in entries)
    assert batch.last_offset == len(entries) - 1


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP])
def test_decode_fixed_kafka_python_batch(codec: Compression) -> None:
    entries = [(i, f"key-{i}".encode(), b"value " * 50, [("trace", b"abc"), ("empty", None)]) for i in range(10)]
    batch = decode_batch(_kafka_python_build(entries, codec))
    assert batch.compression is codec
    assert batch.records is not None and len(batch.records) == 10
    assert batch.records[9] == Record(0, 9, 9, b"key-9", b"value " * 50, [("trace", b"abc"), ("empty", None)])


# kafka-python reads the int8 record attributes as a varint, so only 0-127 survive it;
# producers always send 0 anyway.
kp_readable_record_st = st.builds(
    Record,
    attributes=st.just(0),
    timestamp_delta=st.integers(-(2**40), 2**40),
    offset_delta=st.integers(INT32_MIN, INT32_MAX),
    key=optional_bytes,
    value=optional_bytes,
    headers=headers_st,
)


@settings(max_examples=100, deadline=None)
@given(
    records=st.lists(kp_readable_record_st, min_size=1, max_size=6),
    codec=st.sampled_from([Compression.NONE, Compression.GZIP]),
    base_offset=st.integers(0, 2**40),
    base_timestamp=st.integers(0, 2**42),
)
def test_kafka_python_reads_batches_we_encode(
    records: list[Record], codec: Compression, base_offset: int, base_timestamp: int
) -> None:
    data = encode_batch(
        records,
        base_offset=base_offset,
        base_timestamp=base_timestamp,
        producer_id=77,
        producer_epoch=3,
        base_sequence=10,
        attributes=codec,
    )
    reader = DefaultRecordBatch(data)
    assert reader.validate_crc()
    assert (reader.base_offset, reader.compression_type, reader.records_count) == (base_offset, codec, len(records))
    assert (reader.producer_id, reader.producer_epoch, reader.base_sequence) == (77, 3, 10)
    assert reader.first_timestamp == base_timestamp
    assert reader.next_offset == base_offset + records[-1].offset_delta + 1
    read = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in reader]
    assert read == [
        (base_offset + r.offset_delta, base_timestamp + r.timestamp_delta, r.key, r.value, r.headers) for r in records
    ]
