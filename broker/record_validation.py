"""What a topic's configs demand of produced batches, as Kafka's LogValidator checks it.

Sans-IO: batches and the topic's rules in, the batches to append (or a refusal) out.

- ``max.message.bytes``: a batch larger than it is MESSAGE_TOO_LARGE, checked as sent
  and again after recompression (``UnifiedLog.analyzeAndValidateRecords`` and ``append``);
  batches larger together than ``segment.bytes`` are RECORD_LIST_TOO_LARGE.
- A compacted topic refuses a record without a key; ``message.timestamp.before.max.ms``
  and ``after.max.ms`` (with ``message.timestamp.difference.max.ms`` standing in while
  they are unset, as Kafka 3.6+ does) bound CreateTime timestamps, and a producer may not
  claim LogAppendTime. Each bad record is named by its index in its batch (KIP-467:
  Produce v8+ carries these ``record_errors``); one bad record refuses the whole batch,
  with INVALID_TIMESTAMP if any record's timestamp is out of bounds, else INVALID_RECORD.
- ``compression.type`` other than ``producer`` recompresses every batch whose codec
  differs (``uncompressed`` means none), keeping its records, producer fields and
  timestamps; ``message.timestamp.type=LogAppendTime`` stamps the broker's time.

Records are decoded only when a rule needs them, so a topic with Kafka's defaults appends
the producer's bytes untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.topics import Topic
from protocol.errors import ErrorCode
from protocol.records import (
    BatchHeader,
    Compression,
    RecordBatch,
    RecordBatchError,
    TimestampType,
    set_log_append_time,
)
from protocol.records.codecs import decode_all_records, encode_compressed_batch

__all__ = ["Refused", "TopicRules", "validate"]

NO_TIMESTAMP = -1
LONG_MAX = 2**63 - 1
CODECS = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
LEVEL_CONFIGS = {Compression.GZIP: "compression.gzip.level", Compression.LZ4: "compression.lz4.level",
                 Compression.ZSTD: "compression.zstd.level"}


@dataclass(frozen=True)
class TopicRules:
    """The configs of one topic that produce checks read, taken once per request."""

    name: str
    compacted: bool = False
    log_append_time: bool = False
    before_max_ms: int = LONG_MAX
    after_max_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    segment_bytes: int = 1073741824
    compression: Compression | None = None  # None: keep the producer's
    level: int | None = None

    @classmethod
    def of(cls, topic: Topic) -> TopicRules:
        difference = int(topic.config("message.timestamp.difference.max.ms"))
        before = int(topic.config("message.timestamp.before.max.ms"))
        after = int(topic.config("message.timestamp.after.max.ms"))
        compression = CODECS.get(topic.config("compression.type"))
        level_config = LEVEL_CONFIGS.get(compression) if compression is not None else None
        return cls(
            name=topic.name,
            compacted="compact" in topic.policies,
            log_append_time=topic.config("message.timestamp.type") == "LogAppendTime",
            before_max_ms=difference if before == LONG_MAX else before,
            after_max_ms=difference if after == LONG_MAX else after,
            max_message_bytes=int(topic.config("max.message.bytes")),
            segment_bytes=int(topic.config("segment.bytes")),
            compression=compression,
            level=int(topic.config(level_config)) if level_config is not None else None,
        )

    @property
    def checks_records(self) -> bool:
        return self.compacted or self.before_max_ms != LONG_MAX or self.after_max_ms != LONG_MAX


@dataclass
class Refused:
    """The partition's answer when a batch is refused."""

    error: ErrorCode
    message: str
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)


def validate(records: bytes, batches: list[tuple[int, BatchHeader]], rules: TopicRules, partition: int,
             now_ms: int) -> list[bytes] | Refused:
    """The batches to append, in order, or why the partition's records are refused."""
    where = f"{rules.name}-{partition}"
    out: list[bytes] = []
    for pos, header in batches:
        raw = records[pos : pos + header.size]
        if header.size > rules.max_message_bytes:
            return Refused(ErrorCode.MESSAGE_TOO_LARGE,
                           f"The record batch size in the append to {where} is {header.size} bytes which exceeds "
                           f"the maximum configured value of {rules.max_message_bytes}.")
        claimed = _claims_log_append_time(header, rules)
        if claimed is not None:
            return claimed
        target = rules.compression
        recompress = target is not None and header.compression is not target
        if rules.checks_records or recompress:
            try:
                batch = decode_all_records(raw)
            except RecordBatchError as exc:
                return Refused(ErrorCode.CORRUPT_MESSAGE, f"record batch in {where} cannot be read: {exc}")
            refused = _check_records(batch, rules, where, now_ms)
            if refused is not None:
                return refused
            if recompress:
                assert target is not None and batch.records is not None
                raw = encode_compressed_batch(
                    batch.records, target, rules.level, base_offset=0, base_timestamp=batch.base_timestamp,
                    max_timestamp=batch.max_timestamp, producer_id=batch.producer_id,
                    producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
                    partition_leader_epoch=batch.partition_leader_epoch, attributes=batch.attributes,
                    last_offset_delta=batch.last_offset_delta)
                if len(raw) > rules.max_message_bytes:
                    return Refused(ErrorCode.MESSAGE_TOO_LARGE,
                                   f"Message batch size is {len(raw)} bytes in append to partition {where} which "
                                   f"exceeds the maximum configured size of {rules.max_message_bytes}.")
        if rules.log_append_time:
            raw = set_log_append_time(raw, now_ms, verify_crc=False)
        out.append(bytes(raw))
    total = sum(len(b) for b in out)
    if total > rules.segment_bytes:
        return Refused(ErrorCode.RECORD_LIST_TOO_LARGE,
                       f"Message batch size is {total} bytes in append to partition {where}, which exceeds the "
                       f"maximum configured segment size of {rules.segment_bytes}.")
    return out


def _claims_log_append_time(header: BatchHeader, rules: TopicRules) -> Refused | None:
    """A producer may not stamp LogAppendTime itself (LogValidator.validateTimestamp).

    On a CreateTime topic the batch's timestamp is then checked like any other, so only a
    batch with no timestamp at all is refused there.
    """
    if header.timestamp_type is not TimestampType.LOG_APPEND_TIME:
        return None
    if not rules.log_append_time and header.max_timestamp != NO_TIMESTAMP:
        return None
    message = "Invalid timestamp type in message. Producer should not set timestamp type to LogAppendTime."
    return Refused(ErrorCode.INVALID_TIMESTAMP, "One or more records have been rejected due to invalid timestamp",
                   [(index, message) for index in range(header.records_count)])


def _check_records(batch: RecordBatch, rules: TopicRules, where: str, now_ms: int) -> Refused | None:
    assert batch.records is not None
    errors: list[tuple[int, str | None]] = []
    bad_timestamp = False
    for index, record in enumerate(batch.records):
        if rules.compacted and record.key is None:
            errors.append((index, f"Compacted topic cannot accept message without key in topic partition {where}"))
            continue
        timestamp = batch.timestamp_of(record)
        if rules.log_append_time or timestamp == NO_TIMESTAMP:
            continue
        if now_ms - timestamp > rules.before_max_ms or timestamp - now_ms > rules.after_max_ms:
            bad_timestamp = True
            errors.append((index, f"Timestamp {timestamp} of message with offset {record.offset_delta} is out "
                                  f"of range. The timestamp should be within [{now_ms - rules.before_max_ms}, "
                                  f"{now_ms + rules.after_max_ms}]"))
    if not errors:
        return None
    if bad_timestamp:
        return Refused(ErrorCode.INVALID_TIMESTAMP,
                       "One or more records have been rejected due to invalid timestamp", errors)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return Refused(ErrorCode.INVALID_RECORD,
                   f"One or more records have been rejected due to {len(errors)} record errors in total, and only "
                   f"showing the first three errors at most: [{shown}]", errors)
