"""Records over the Kafka protocol: what ``kcoord produce`` and ``kcoord consume`` do.

A small producer and a small assign-mode consumer on the admin client's connections,
like kcat's default modes: no consumer group, each partition read from a chosen
position. Keys choose partitions the way Kafka's Java client does (murmur2 of the key,
made positive, modulo the partition count), so a key lands where a Java or librdkafka
(``murmur2_random``) producer would put it; records without a key go to one partition
per run, chosen at random, as a sticky partitioner would.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from admin.client import (
    EARLIEST_TIMESTAMP,
    FETCH,
    LATEST_TIMESTAMP,
    PRODUCE,
    AdminClient,
)
from admin.errors import BrokerError, UsageError, error_name
from protocol.errors import ErrorCode
from protocol.records import Compression, Record, RecordBatchError, iter_batches
from protocol.records.codecs import decode_all_records, encode_compressed_batch

E = ErrorCode
CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
#: Records per produced batch; a batch also stays under ``BATCH_BYTES`` before compression.
BATCH_RECORDS = 500
BATCH_BYTES = 512 * 1024


@dataclass(frozen=True)
class OutRecord:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass
class Produced:
    """Where one partition's records went: first offset and count."""

    partition: int
    base_offset: int
    count: int


@dataclass(frozen=True)
class InRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default_factory=tuple)


# ---------------------------------------------------------------------- partitioning


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = length - rest
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner for a keyed record: ``toPositive(murmur2(key)) % n``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


# ---------------------------------------------------------------------- produce


def produce(client: AdminClient, topic: str, records: Iterable[OutRecord], *, partition: int | None = None,
            acks: int = -1, compression: str = "none", timeout_ms: int = 30000) -> list[Produced]:
    """Send ``records`` to ``topic``; per partition, where they went. Refusals raise ``BrokerError``."""
    partitions = client.partitions_of([topic])[topic]
    if partition is not None and partition not in partitions:
        raise UsageError(f"topic {topic!r} has partitions 0-{len(partitions) - 1}; no partition {partition}")
    sticky = random.choice(partitions)
    by_partition: dict[int, list[OutRecord]] = {}
    for record in records:
        if partition is not None:
            target = partition
        elif record.key is not None:
            target = partition_for_key(record.key, len(partitions))
        else:
            target = sticky
        by_partition.setdefault(target, []).append(record)
    codec = CODECS[compression]
    results = []
    for target, pending in sorted(by_partition.items()):
        first = -1
        for chunk in _chunks(pending):
            base = _send(client, topic, target, chunk, acks, codec, timeout_ms)
            if first < 0:
                first = base
        results.append(Produced(target, first, len(pending)))
    return results


def _chunks(records: list[OutRecord]) -> Iterator[list[OutRecord]]:
    chunk: list[OutRecord] = []
    size = 0
    for record in records:
        weight = len(record.key or b"") + len(record.value or b"") + 32
        if chunk and (len(chunk) >= BATCH_RECORDS or size + weight > BATCH_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(record)
        size += weight
    if chunk:
        yield chunk


def _send(client: AdminClient, topic: str, partition: int, records: list[OutRecord], acks: int,
          codec: Compression, timeout_ms: int) -> int:
    batch = encode_compressed_batch(
        [Record(offset_delta=i, key=r.key, value=r.value, headers=list(r.headers)) for i, r in enumerate(records)],
        codec, base_timestamp=int(time.time() * 1000))
    conn = client.leader_of(topic, partition)
    body = {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
    if acks == 0:
        conn.send_only(PRODUCE, body)
        return -1
    _, reply = conn.request(PRODUCE, body)
    answer = reply.responses[0].partition_responses[0]
    code = int(answer.error_code)
    if code != E.NONE:
        details = [f"record {e.batch_index}: {e.batch_index_error_message}"
                   for e in answer.get("record_errors", []) or []]
        message = answer.get("error_message")
        raise BrokerError(f"Produce to {topic}-{partition} failed"
                          + (f" ({message})" if message else "")
                          + ("; " + "; ".join(details[:5]) if details else ""), code)
    return int(answer.base_offset)


# ---------------------------------------------------------------------- consume


def start_offsets(client: AdminClient, topic: str, partitions: list[int], position: str) -> dict[int, int]:
    """Where each partition is read from: ``beginning``, ``end``, an offset N, or -N (N before the end)."""
    tps = [(topic, p) for p in partitions]
    if position == "beginning":
        found = client.list_offsets({tp: EARLIEST_TIMESTAMP for tp in tps})
        return {p: found[(topic, p)] for p in partitions}
    if position == "end":
        found = client.list_offsets({tp: LATEST_TIMESTAMP for tp in tps})
        return {p: found[(topic, p)] for p in partitions}
    try:
        number = int(position)
    except ValueError:
        raise UsageError(f"--offset {position!r}: expected beginning, end, an offset N or -N") from None
    if number >= 0:
        return dict.fromkeys(partitions, number)
    ranges = client.log_range(tps)
    return {p: max(ranges[(topic, p)][1] + number, ranges[(topic, p)][0]) for p in partitions}


def consume(client: AdminClient, topic: str, positions: dict[int, int], *, count: int | None = None,
            follow: bool = False, max_wait_ms: int = 500) -> Iterator[InRecord]:
    """Records from each partition's position on, in offset order per partition.

    Without ``follow``, stops once every partition has been read up to the end it had
    when the partition was first fetched; with it, waits for more until ``count``.
    """
    positions = dict(positions)
    stop_at: dict[int, int] = {}
    seen = 0
    while positions:
        progressed = False
        for partition in sorted(positions):
            offset = positions[partition]
            records, high_watermark, log_start = _fetch(client, topic, partition, offset,
                                                        max_wait_ms if follow else 0)
            stop_at.setdefault(partition, high_watermark)
            if offset < log_start:
                positions[partition] = log_start
                progressed = True
                continue
            for record in records:
                if record.offset < offset:
                    continue
                yield record
                seen += 1
                positions[partition] = record.offset + 1
                progressed = True
                if count is not None and seen >= count:
                    return
            if records and records[-1].offset + 1 > positions[partition]:
                positions[partition] = records[-1].offset + 1  # batches ending in compacted-away offsets
            if not follow and positions[partition] >= stop_at[partition]:
                del positions[partition]
        if follow and not progressed:
            time.sleep(0.05)


FETCH_BY_NAME_MAX = 12


def _fetch(client: AdminClient, topic: str, partition: int, offset: int,
           max_wait_ms: int) -> tuple[list[InRecord], int, int]:
    conn = client.leader_of(topic, partition)
    # Topics by name: Fetch v12 at most (v13+ names them by id, KIP-516).
    _, reply = conn.request(FETCH, version=min(conn.version(FETCH), FETCH_BY_NAME_MAX), body={
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 8 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
            "partition_max_bytes": 4 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    if reply.get("error_code", 0):
        raise BrokerError(f"Fetch from {topic}-{partition} failed", reply.error_code)
    answer = reply.responses[0].partitions[0]
    code = int(answer.error_code)
    if code == E.OFFSET_OUT_OF_RANGE:
        raise UsageError(f"offset {offset} is outside {topic}-{partition} "
                         f"(log start {answer.log_start_offset}, end {answer.high_watermark}): "
                         f"{error_name(code)}")
    if code != E.NONE:
        raise BrokerError(f"Fetch from {topic}-{partition} failed", code)
    records: list[InRecord] = []
    data = answer.records or b""
    try:
        for pos, batch in iter_batches(data, verify_crc=True):
            if batch.is_control:
                continue
            if batch.records is None:
                batch = decode_all_records(data[pos : pos + batch.size])
            records.extend(
                InRecord(topic, partition, batch.offset_of(r), batch.timestamp_of(r), r.key, r.value,
                         tuple((k, v) for k, v in r.headers))
                for r in batch.records or [])
    except RecordBatchError as exc:
        raise BrokerError(f"cannot read the records of {topic}-{partition} at offset {offset}: {exc}") from None
    return records, int(answer.high_watermark), int(answer.log_start_offset)
