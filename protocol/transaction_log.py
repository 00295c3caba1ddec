"""Keys and values of the ``__transaction_state`` log, in Kafka's own format (TransactionLog).

A key is an int16 key version (0) followed by the transactional id; a value is an int16
value version followed by TransactionLogValue; a null value is a tombstone (the
transactional id expired). Writers emit value version 0, as Kafka does until transaction
version 2 is enabled; readers take versions 0 and 1 (whose extra fields are tagged).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocol.compiler import compiled_for
from protocol.errors import ProtocolError
from protocol.messages.transaction_records import TransactionLogKey, TransactionLogValue

__all__ = ["TransactionLogEntry", "decode_key", "decode_value", "encode_key", "encode_value"]

_VERSION = struct.Struct(">h")
KEY_VERSION = 0
VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class TransactionLogEntry:
    """One TransactionLogValue: a transactional id's producer and transaction, as persisted."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    status: int  # TransactionState id: 0 Empty .. 7 PrepareEpochFence
    #: (topic, partitions) in the transaction; None where Kafka writes null (the Empty state).
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1


def encode_key(transactional_id: str) -> bytes:
    out = bytearray(_VERSION.pack(KEY_VERSION))
    compiled_for(TransactionLogKey, KEY_VERSION).encode({"transactional_id": transactional_id}, out)
    return bytes(out)


def decode_key(data: bytes) -> str | None:
    """The transactional id of a key; None for a key version this code does not know."""
    if len(data) < 2:
        raise ProtocolError("transaction log key shorter than its version")
    (version,) = _VERSION.unpack_from(data)
    if version != KEY_VERSION:
        if version < 0:
            raise ProtocolError(f"negative transaction log key version {version}")
        return None
    body, pos = compiled_for(TransactionLogKey, version).decode(data, 2)
    if pos != len(data):
        raise ProtocolError("trailing bytes after a transaction log key")
    return str(body["transactional_id"])


def encode_value(entry: TransactionLogEntry) -> bytes:
    out = bytearray(_VERSION.pack(VALUE_VERSION))
    partitions = None if entry.partitions is None else [
        {"topic": topic, "partition_ids": list(ids)} for topic, ids in entry.partitions]
    compiled_for(TransactionLogValue, VALUE_VERSION).encode({
        "producer_id": entry.producer_id,
        "producer_epoch": entry.producer_epoch,
        "transaction_timeout_ms": entry.transaction_timeout_ms,
        "transaction_status": entry.status,
        "transaction_partitions": partitions,
        "transaction_last_update_timestamp_ms": entry.last_update_timestamp_ms,
        "transaction_start_timestamp_ms": entry.start_timestamp_ms,
    }, out)
    return bytes(out)


def decode_value(data: bytes) -> TransactionLogEntry:
    if len(data) < 2:
        raise ProtocolError("transaction log value shorter than its version")
    (version,) = _VERSION.unpack_from(data)
    if not 0 <= version <= TransactionLogValue.max_version:
        raise ProtocolError(f"unknown transaction log value version {version}")
    body, _ = compiled_for(TransactionLogValue, version).decode(data, 2)
    partitions = body["transaction_partitions"]
    return TransactionLogEntry(
        producer_id=body["producer_id"],
        producer_epoch=body["producer_epoch"],
        transaction_timeout_ms=body["transaction_timeout_ms"],
        status=body["transaction_status"],
        partitions=None if partitions is None else tuple(
            (p["topic"], tuple(p["partition_ids"])) for p in partitions),
        last_update_timestamp_ms=body["transaction_last_update_timestamp_ms"],
        start_timestamp_ms=body["transaction_start_timestamp_ms"],
        previous_producer_id=body.get("previous_producer_id", -1),
        next_producer_id=body.get("next_producer_id", -1),
    )
