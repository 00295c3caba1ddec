"""Produce-time checks a topic's configs demand, as Kafka's LogValidator makes them."""

from __future__ import annotations

import pytest

from broker.record_validation import LONG_MAX, Refused, TopicRules, validate
from protocol.errors import ErrorCode
from protocol.records import (
    Compression,
    Record,
    TimestampType,
    decode_batch,
    encode_batch,
    peek_batch_header,
    scan_batches,
)
from protocol.records.codecs import decode_all_records, encode_compressed_batch

NOW = 1_700_000_000_000


def batch(*keys: bytes | None, codec: Compression = Compression.NONE, timestamp: int = NOW) -> bytes:
    records = [Record(offset_delta=i, key=k, value=b"value-%d" % i) for i, k in enumerate(keys)]
    return encode_compressed_batch(records, codec, base_timestamp=timestamp, producer_id=5, producer_epoch=1,
                                   base_sequence=9)


def run(data: bytes, rules: TopicRules) -> list[bytes] | Refused:
    batches, _ = scan_batches(data)
    return validate(data, batches, rules, 0, NOW)


def test_default_rules_append_the_producers_bytes_untouched() -> None:
    data = batch(b"a", None, codec=Compression.LZ4)
    assert run(data, TopicRules("t")) == [data]


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
def test_compacted_topic_refuses_null_keys_naming_each_record(codec: Compression) -> None:
    result = run(batch(b"a", None, b"c", None, codec=codec), TopicRules("t", compacted=True))
    assert isinstance(result, Refused)
    assert result.error is ErrorCode.INVALID_RECORD
    assert [index for index, _ in result.record_errors] == [1, 3]
    assert "Compacted topic cannot accept message without key in topic partition t-0" in str(result.record_errors[0][1])
    assert "2 record errors" in result.message


def test_compacted_topic_accepts_keyed_records() -> None:
    data = batch(b"a", b"b")
    assert run(data, TopicRules("t", compacted=True)) == [data]


def test_timestamps_outside_the_bounds_are_invalid_timestamp() -> None:
    rules = TopicRules("t", before_max_ms=60_000, after_max_ms=1_000)
    assert run(batch(b"a", timestamp=NOW - 30_000), rules) == [batch(b"a", timestamp=NOW - 30_000)]
    old = run(batch(b"a", b"b", timestamp=NOW - 120_000), rules)
    assert isinstance(old, Refused) and old.error is ErrorCode.INVALID_TIMESTAMP
    assert [i for i, _ in old.record_errors] == [0, 1]
    future = run(batch(b"a", timestamp=NOW + 5_000), rules)
    assert isinstance(future, Refused) and future.error is ErrorCode.INVALID_TIMESTAMP


def test_difference_max_stands_in_for_unset_bounds() -> None:
    class FakeTopic:
        name = "t"
        policies = {"delete"}

        def config(self, name: str) -> str:
            return {"message.timestamp.difference.max.ms": "1000", "message.timestamp.before.max.ms": str(LONG_MAX),
                    "message.timestamp.after.max.ms": "50", "message.timestamp.type": "CreateTime",
                    "max.message.bytes": "1048588", "segment.bytes": "1073741824",
                    "compression.type": "producer"}[name]

    rules = TopicRules.of(FakeTopic())  # type: ignore[arg-type]
    assert (rules.before_max_ms, rules.after_max_ms) == (1000, 50)


def test_batch_larger_than_max_message_bytes_is_message_too_large() -> None:
    data = batch(b"a" * 100)
    result = run(data, TopicRules("t", max_message_bytes=len(data) - 1))
    assert isinstance(result, Refused) and result.error is ErrorCode.MESSAGE_TOO_LARGE
    assert run(data, TopicRules("t", max_message_bytes=len(data))) == [data]


def test_batches_larger_than_a_segment_are_record_list_too_large() -> None:
    data = batch(b"a" * 100)
    result = run(data, TopicRules("t", segment_bytes=len(data) - 1))
    assert isinstance(result, Refused) and result.error is ErrorCode.RECORD_LIST_TOO_LARGE


@pytest.mark.parametrize("source", list(Compression), ids=lambda c: "from-" + c.name)
@pytest.mark.parametrize("target", list(Compression), ids=lambda c: "to-" + c.name)
def test_recompression_keeps_records_and_producer_fields(source: Compression, target: Compression) -> None:
    data = batch(b"a", None, b"c", codec=source)
    result = run(data, TopicRules("t", compression=target))
    assert isinstance(result, list)
    (out,) = result
    if source is target:
        assert out == data
    header = peek_batch_header(out)
    assert header.compression is target
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, 9)
    original, stored = decode_all_records(data), decode_all_records(out)
    assert stored.records == original.records
    assert (stored.base_timestamp, stored.max_timestamp) == (original.base_timestamp, original.max_timestamp)


def test_log_append_time_stamps_the_broker_time() -> None:
    (out,) = run(batch(b"a", timestamp=NOW - 10**9), TopicRules("t", log_append_time=True))  # type: ignore[misc]
    stamped = decode_batch(out)
    assert stamped.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert stamped.max_timestamp == NOW


def test_a_producer_may_not_claim_log_append_time_without_a_timestamp() -> None:
    data = bytearray(encode_batch([Record(key=b"k", value=b"v")], base_timestamp=-1, max_timestamp=-1,
                                  attributes=0x08))
    result = run(bytes(data), TopicRules("t"))
    assert isinstance(result, Refused) and result.error is ErrorCode.INVALID_TIMESTAMP
    assert run(bytes(data), TopicRules("t", log_append_time=True)) != [bytes(data)]
