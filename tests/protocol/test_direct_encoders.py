"""The commit path's direct encoders write exactly what the general codecs write.

``encode_key_value_batch`` is ``encode_batch(build_records(...))`` without the ``Record``
objects; ``encode_offset_key`` and ``encode_offset_commit_value`` pack what the compiled
``__consumer_offsets`` codecs build, and the commit path's ``encode_all`` writes both with
them; ``encode_batch_records`` writes a commit's plain offsets straight into the batch's
records section. Same bytes for every input, and the same refusals.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from broker.coordinator.records import (
    GroupMetadataRecord,
    OffsetCommitRecord,
    encode_all,
    encode_batch_records,
)
from protocol import consumer_offsets
from protocol.codec import encode_response, encode_response_body, response_frame
from protocol.consumer_offsets import (
    OffsetKey,
    OffsetValue,
    encode_key,
    encode_offset_commit_value,
    encode_offset_key,
    encode_offset_value,
    encode_plain_offset_records,
    offset_key_prefix,
)
from protocol.errors import ProtocolError
from protocol.records import (
    EncodedRecords,
    RecordBatchError,
    build_records,
    encode_batch,
    encode_key_value_batch,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Mostly short (the one-byte varint paths), sometimes long enough for two- and three-byte lengths.
PAYLOAD = st.one_of(st.none(), st.binary(max_size=80), st.integers(16380, 16400).map(lambda n: b"x" * n))


@given(records=st.lists(st.tuples(PAYLOAD, PAYLOAD), min_size=1, max_size=70),
       base_offset=st.integers(0, 2**62), timestamp=st.integers(-1, 2**45))
def test_key_value_batch_is_the_general_encoding(
    records: list[tuple[bytes | None, bytes | None]], base_offset: int, timestamp: int
) -> None:
    expected = encode_batch(build_records(records), base_offset=base_offset, base_timestamp=timestamp)
    assert encode_key_value_batch(records, base_offset=base_offset, base_timestamp=timestamp) == expected


def test_key_value_batch_of_many_records_and_other_buffers() -> None:
    many = [(b"k%d" % i, b"v" * (i % 90)) for i in range(17000)]  # offset deltas past the varint table
    assert encode_key_value_batch(many, base_offset=7, base_timestamp=1) == encode_batch(
        build_records(many), base_offset=7, base_timestamp=1)
    odd = [(bytearray(b"key"), memoryview(b"value"))]
    assert encode_key_value_batch(odd) == encode_batch(build_records(odd))  # type: ignore[arg-type]


def test_a_header_out_of_range_is_refused_as_the_general_encoder_refuses_it() -> None:
    pairs = [(b"k", b"v")]
    for base_offset, leader_epoch in ((2**63, -1), (-(2**63) - 1, -1), (0, 2**31)):
        with pytest.raises(RecordBatchError, match="cannot encode batch header"):
            encode_batch(build_records(pairs), base_offset=base_offset, partition_leader_epoch=leader_epoch)
        with pytest.raises(RecordBatchError, match="cannot encode batch header"):
            encode_key_value_batch(pairs, base_offset=base_offset, partition_leader_epoch=leader_epoch)


@given(group=st.text(max_size=40), topic=st.text(max_size=40), partition=INT32)
def test_offset_key_is_the_compiled_encoding(group: str, topic: str, partition: int) -> None:
    expected = encode_key(OffsetKey(group, topic, partition))
    assert encode_offset_key(group, topic, partition) == expected
    assert encode_offset_key(group, topic, partition, offset_key_prefix(group, topic)) == expected


@given(offset=INT64, epoch=INT32, metadata=st.text(max_size=40), commit=INT64,
       expire=st.one_of(st.just(-1), INT64))
@example(offset=42, epoch=7, metadata="", commit=1_700_000_000_000, expire=-1)  # the one-pack path
@example(offset=42, epoch=7, metadata="", commit=1_700_000_000_000, expire=0)
def test_offset_value_is_the_compiled_encoding(offset: int, epoch: int, metadata: str, commit: int,
                                               expire: int) -> None:
    value = OffsetValue(offset, epoch, metadata, commit, expire)
    assert encode_offset_commit_value(value) == encode_offset_value(value)


@given(group=st.text(max_size=20), topic=st.text(max_size=20), partition=INT32, offset=INT64, epoch=INT32,
       metadata=st.text(max_size=20), commit=INT64, expire=st.one_of(st.just(-1), INT64), tombstone=st.booleans())
@example(group="g", topic="t", partition=3, offset=42, epoch=7, metadata="", commit=1_700_000_000_000, expire=-1,
         tombstone=False)
def test_an_offset_record_as_the_commit_path_writes_it_is_the_compiled_key_and_value(
        group: str, topic: str, partition: int, offset: int, epoch: int, metadata: str, commit: int, expire: int,
        tombstone: bool) -> None:
    value = None if tombstone else OffsetValue(offset, epoch, metadata, commit, expire)
    expected = (encode_key(OffsetKey(group, topic, partition)), None if value is None else encode_offset_value(value))
    record = OffsetCommitRecord(group, topic, partition, value)
    assert encode_all([record]) == [expected]
    assert encode_all([record, record]) == [expected, expected], "the shared key prefix too"


@pytest.mark.parametrize(("key", "value"), [
    (("g" * 40000, "t", 0), None), (("g", "t", 2**31), None), (("\ud800", "t", 0), None),
    (("g", "t", 0), OffsetValue(2**63, -1, "", 0, -1)), (("g", "t", 0), OffsetValue(0, -1, "\ud800", 0, -1)),
])
def test_the_commit_path_refuses_what_the_codec_refuses(key: tuple[str, str, int],
                                                                value: OffsetValue | None) -> None:
    with pytest.raises(ProtocolError) as general:
        encode_key(OffsetKey(*key))
        assert value is not None
        encode_offset_value(value)
    with pytest.raises(ProtocolError) as direct:
        encode_all([OffsetCommitRecord(*key, value)])
    assert str(direct.value) == str(general.value)


@pytest.mark.parametrize("key", [("g" * 40000, "t", 0), ("g", "t", 2**31), ("\ud800", "t", 0)])
def test_offset_keys_the_codec_refuses_are_refused_the_same_way(key: tuple[str, str, int]) -> None:
    with pytest.raises(ProtocolError) as general:
        encode_key(OffsetKey(*key))
    with pytest.raises(ProtocolError) as direct:
        encode_offset_key(*key)
    assert str(direct.value) == str(general.value)


def test_offset_values_the_codec_refuses_are_refused_the_same_way() -> None:
    value = OffsetValue(2**63, -1, "", 0, -1)
    with pytest.raises(ProtocolError) as general:
        encode_offset_value(value)
    with pytest.raises(ProtocolError) as direct:
        encode_offset_commit_value(value)
    assert str(direct.value) == str(general.value)


@pytest.mark.parametrize(("api_key", "version", "body"), [
    (8, 7, {"throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}]}),
    (8, 8, {"throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [{"partition_index": 3, "error_code": 27}]}]}),
    (12, 3, {"throttle_time_ms": 0, "error_code": 0}),
    (12, 4, {"throttle_time_ms": 0, "error_code": 22}),
    (18, 3, {"error_code": 35, "api_keys": [], "throttle_time_ms": 0}),
])
def test_a_response_frame_of_an_encoded_body_is_the_whole_encoding(api_key: int, version: int,
                                                                    body: dict[str, object]) -> None:
    assert response_frame(api_key, version, 77, encode_response_body(api_key, version, body)) == encode_response(
        api_key, version, 77, body)


def _batch(records: list[OffsetCommitRecord], encoded: object) -> tuple[bytes, bytes]:
    """The batch written from ``encoded``, and the one written from the records' own keys and values."""
    pairs = [(encode_offset_key(g, t, p), None if v is None else encode_offset_commit_value(v)) for g, t, p, v in records]
    general = encode_batch(build_records(pairs), base_offset=11, base_timestamp=5, partition_leader_epoch=2)
    return encode_key_value_batch(encoded, base_offset=11, base_timestamp=5,  # type: ignore[arg-type]
                                  partition_leader_epoch=2), general


# Names from one byte to past the one-byte varint of the key's length; offsets over the full range.
NAME = st.one_of(st.sampled_from(["g", "orders", "t\u00e9"]), st.text(min_size=1, max_size=70))
PLAIN = st.builds(OffsetValue, INT64, INT32, st.just(""), INT64, st.just(-1))


@given(group=NAME, runs=st.lists(st.tuples(NAME, st.lists(st.tuples(st.integers(0, 2**31 - 1), PLAIN), min_size=1,
                                                          max_size=80)), min_size=1, max_size=3))
@example(group="g", runs=[("t", [(i, OffsetValue(i, 1, "", 1_700_000_000_000, -1)) for i in range(70)])])
def test_plain_offsets_straight_into_the_records_section_are_the_general_batch(
        group: str, runs: list[tuple[str, list[tuple[int, OffsetValue]]]]) -> None:
    records = [OffsetCommitRecord(group, topic, partition, value) for topic, offsets in runs for partition, value in offsets]
    encoded = encode_batch_records(records)
    assert isinstance(encoded, EncodedRecords)
    assert len(encoded) == len(records)
    written, general = _batch(records, encoded)
    assert written == general


def test_the_leads_kept_by_prefix_grow_and_stay_bounded() -> None:
    for count in (3, 70, 5, 300):  # longer than the leads kept for the prefix, then shorter
        records = [OffsetCommitRecord("g", "t", i, OffsetValue(i, 0, "", 1, -1)) for i in range(count)]
        encoded = encode_batch_records(records)
        assert isinstance(encoded, EncodedRecords)
        written, general = _batch(records, encoded)
        assert written == general
    for n in range(40):  # 40 topics of 1,000 offsets each: more than are kept in all
        records = [OffsetCommitRecord("g", f"topic-{n}", i, OffsetValue(i, 0, "", 1, -1)) for i in range(1000)]
        written, general = _batch(records, encode_batch_records(records))
        assert written == general
        held = sum(map(len, consumer_offsets._LEADS.values()))
        assert held == consumer_offsets._leads_held <= consumer_offsets._LEADS_KEPT


def test_a_records_section_past_the_varint_table_is_the_general_batch() -> None:
    records = [OffsetCommitRecord("g", "t", i, OffsetValue(i, 0, "", 1, -1)) for i in range(16500)]
    encoded = encode_batch_records(records)
    assert not isinstance(encoded, EncodedRecords)  # offset deltas past 16,383: the pairs
    assert encode_key_value_batch(encoded) == encode_batch(build_records(encode_all(records)))


@pytest.mark.parametrize("odd", [
    OffsetCommitRecord("g", "t", 1, None),  # a tombstone
    OffsetCommitRecord("g", "t", 1, OffsetValue(5, 0, "meta", 1, -1)),  # metadata
    OffsetCommitRecord("g", "t", 1, OffsetValue(5, 0, "", 1, 99)),  # an expiry (a v1 value)
    OffsetCommitRecord("g", "t", 1, OffsetValue(2**63, 0, "", 1, -1)),  # refused by the codec
    OffsetCommitRecord("g" * 40000, "t", 1, OffsetValue(5, 0, "", 1, -1)),  # a key the codec refuses
    GroupMetadataRecord("g", None),
])
def test_a_commit_with_anything_but_plain_offsets_goes_the_general_way(odd: object) -> None:
    plain = OffsetCommitRecord("g", "t", 0, OffsetValue(5, 0, "", 1, -1))
    records = [plain, odd, plain]
    assert encode_plain_offset_records(records) is None  # type: ignore[arg-type]
    latest: dict[bytes, bytes] = {}
    try:
        expected = encode_all(records, latest)  # type: ignore[arg-type]
    except ProtocolError as exc:
        with pytest.raises(ProtocolError, match=re.escape(str(exc))):
            encode_batch_records(records)  # type: ignore[arg-type]
        return
    assert encode_batch_records(records, latest) == expected  # type: ignore[arg-type]
