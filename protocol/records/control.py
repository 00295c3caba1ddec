"""Control batches: the COMMIT and ABORT markers that end a transaction in a partition.

A marker is a batch of its own, flagged transactional and control, carrying the producer
id and epoch of the transaction it ends and exactly one record (Kafka's
``EndTransactionMarker`` and ``ControlRecordType``):

- key: version int16 (0) | type int16 (0 ABORT, 1 COMMIT; other types are Raft's);
- value: version int16 (0) | coordinator epoch int32.

Its base sequence is -1: markers are not part of the producer's sequence.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from protocol.records.batch import Record, RecordBatch, encode_batch
from protocol.records.header import RecordBatchError

__all__ = [
    "CONTROL_BIT",
    "TRANSACTIONAL_BIT",
    "ControlRecordType",
    "EndTransactionMarker",
    "encode_marker_batch",
    "marker_of",
    "read_marker",
]

#: Attribute bits of a batch (Kafka's DefaultRecordBatch): part of a transaction; a control batch.
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_CURRENT_VERSION = 0


class ControlRecordType(enum.IntEnum):
    """The type in a control record's key; transactions use the first two."""

    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """What a marker says: how the producer's transaction ended, and who decided it."""

    commit: bool
    coordinator_epoch: int

    @property
    def type(self) -> ControlRecordType:
        return ControlRecordType.COMMIT if self.commit else ControlRecordType.ABORT


def read_marker(key: bytes | None, value: bytes | None) -> EndTransactionMarker | None:
    """The marker in one control record; None for a control record of another type.

    Raises ``RecordBatchError`` for bytes that cannot be a control record at all.
    """
    if key is None or len(key) < _KEY.size:
        raise RecordBatchError("control record without a version and type")
    version, kind = _KEY.unpack_from(key)
    if version < 0:
        raise RecordBatchError(f"control record key version {version}")
    if kind not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return None
    if value is None or len(value) < _VALUE.size:
        raise RecordBatchError("end transaction marker without a version and coordinator epoch")
    value_version, coordinator_epoch = _VALUE.unpack_from(value)
    if value_version < 0:
        raise RecordBatchError(f"end transaction marker version {value_version}")
    return EndTransactionMarker(kind == ControlRecordType.COMMIT, coordinator_epoch)


def marker_of(batch: RecordBatch) -> EndTransactionMarker | None:
    """The marker a decoded control batch holds, or None (not a marker, or not readable)."""
    if not batch.is_control or not batch.records:
        return None
    record = batch.records[0]
    return read_marker(record.key, record.value)


def encode_marker_batch(producer_id: int, producer_epoch: int, marker: EndTransactionMarker, timestamp_ms: int,
                        base_offset: int = 0, partition_leader_epoch: int = -1) -> bytes:
    """One control batch holding ``marker``, as Kafka's MemoryRecords.withEndTransactionMarker builds it."""
    record = Record(
        key=_KEY.pack(_CURRENT_VERSION, int(marker.type)),
        value=_VALUE.pack(_CURRENT_VERSION, marker.coordinator_epoch),
    )
    return encode_batch(
        [record], base_offset=base_offset, base_timestamp=timestamp_ms, max_timestamp=timestamp_ms,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
        partition_leader_epoch=partition_leader_epoch, attributes=TRANSACTIONAL_BIT | CONTROL_BIT,
    )
