"""Kafka record batch v2 (magic 2): sans-IO decode, encode and cheap in-place edits.

A record batch is what producers send in a Produce request, what the log stores
verbatim and what Fetch returns. Three layers, each importing only those below it:

* ``header``: the fixed 61-byte header, and the hot paths that read or patch only it
  (``peek_batch_header``, ``scan_batches``, ``rewrite_base_offset``,
  ``set_log_append_time``);
* ``scanner``: the generated loop that reads the records of a section, and
  ``iter_records``, the replay path;
* ``batch``: ``RecordBatch``, ``decode_batch`` (the strict validator), ``encode_batch``
  and the ``RECORD`` construct the record loop is tested against;
* ``control``: the COMMIT and ABORT markers that end transactions (control batches).

This package re-exports their public names; modules inside it import the submodules
directly, never this file.
"""

from protocol.records.batch import (
    RECORD,
    RECORD_VARINTS,
    EncodedRecords,
    Record,
    RecordBatch,
    build_records,
    decode_batch,
    encode_batch,
    encode_key_value_batch,
    iter_batches,
)
from protocol.records.control import (
    CONTROL_BIT,
    TRANSACTIONAL_BIT,
    ControlRecordType,
    EndTransactionMarker,
    encode_marker_batch,
    marker_of,
    read_marker,
)
from protocol.records.header import (
    BATCH_HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    BatchAttributes,
    BatchHeader,
    Compression,
    CorruptBatchError,
    RecordBatchError,
    TimestampType,
    peek_batch_header,
    rewrite_base_offset,
    scan_batches,
    set_log_append_time,
)
from protocol.records.scanner import DEFAULT_MAX_UNCOMPRESSED, iter_records

__all__ = [
    "BATCH_HEADER",
    "CONTROL_BIT",
    "DEFAULT_MAX_UNCOMPRESSED",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "MIN_BATCH_LENGTH",
    "NO_TIMESTAMP",
    "RECORD",
    "RECORD_VARINTS",
    "TRANSACTIONAL_BIT",
    "BatchAttributes",
    "BatchHeader",
    "Compression",
    "ControlRecordType",
    "CorruptBatchError",
    "EncodedRecords",
    "EndTransactionMarker",
    "Record",
    "RecordBatch",
    "RecordBatchError",
    "TimestampType",
    "build_records",
    "decode_batch",
    "encode_batch",
    "encode_key_value_batch",
    "encode_marker_batch",
    "iter_batches",
    "iter_records",
    "marker_of",
    "peek_batch_header",
    "read_marker",
    "rewrite_base_offset",
    "scan_batches",
    "set_log_append_time",
]
