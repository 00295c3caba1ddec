"""The fixed 61-byte header of a v2 record batch, and the hot paths that never read past it.

The broker mostly treats batches as opaque bytes: storage frames and CRC-checks them on
recovery, Produce stamps offsets and log-append time into them, Fetch hands them back.
Everything here reads or patches the fixed header with ``struct`` and never decodes a
record, so it stays cheap whatever the batch holds.

Layout (all big-endian)::

    base_offset int64 | batch_length int32 | partition_leader_epoch int32 | magic int8
    crc uint32 | attributes int16 | last_offset_delta int32 | base_timestamp int64
    max_timestamp int64 | producer_id int64 | producer_epoch int16 | base_sequence int32
    records_count int32 | records...

``batch_length`` counts the bytes after itself; the CRC-32C covers ``attributes`` to the
end, so base offset and leader epoch can be rewritten without recomputing it (Kafka's
``DefaultRecordBatch``).
"""

from __future__ import annotations

import enum
import struct
from typing import TYPE_CHECKING, Any, NamedTuple

import construct
import crc32c
from construct import Construct

from protocol.types import INT8, INT16, INT32, INT64, UINT32

__all__ = [
    "BATCH_HEADER",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "MIN_BATCH_LENGTH",
    "NO_TIMESTAMP",
    "BatchAttributes",
    "BatchHeader",
    "Compression",
    "CorruptBatchError",
    "RecordBatchError",
    "TimestampType",
    "peek_batch_header",
    "rewrite_base_offset",
    "scan_batches",
    "set_log_append_time",
]

MAGIC = 2
HEADER_SIZE = 61
NO_TIMESTAMP = -1
#: Bytes before ``batch_length`` ends: base_offset + batch_length. Framing needs only these.
LOG_OVERHEAD = 12
#: Smallest legal ``batch_length``: the header after the length field, with no records.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
_LEADER_EPOCH_OFFSET = 12
_MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20
_DELETE_HORIZON_BIT = 0x40


class RecordBatchError(ValueError):
    """The bytes are not a well-formed v2 record batch (or cannot be encoded as one)."""


class CorruptBatchError(RecordBatchError):
    """The batch is well framed but its CRC-32C does not match: the bytes were damaged.

    Kept distinct because Kafka answers it with CORRUPT_MESSAGE and storage treats it
    as the end of the valid log, while other errors are client bugs.
    """


class Compression(enum.IntEnum):
    """Codec in attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(enum.IntEnum):
    """Attribute bit 3: who chose ``max_timestamp`` (and thus the record timestamps)."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


#: Every value of the three codec bits; 5-7 name no codec.
_CODECS: tuple[Compression | None, ...] = (*Compression, None, None, None)
assert len(_CODECS) == COMPRESSION_MASK + 1


# One table drives both the construct (the documented layout, and a way to build a
# header by hand) and the ``struct`` format the hot paths use, so the two cannot drift.
_HEADER_FIELDS: tuple[tuple[str, Construct, str], ...] = (
    ("base_offset", INT64, "q"),
    ("batch_length", INT32, "i"),
    ("partition_leader_epoch", INT32, "i"),
    ("magic", INT8, "b"),
    ("crc", UINT32, "I"),
    ("attributes", INT16, "h"),
    ("last_offset_delta", INT32, "i"),
    ("base_timestamp", INT64, "q"),
    ("max_timestamp", INT64, "q"),
    ("producer_id", INT64, "q"),
    ("producer_epoch", INT16, "h"),
    ("base_sequence", INT32, "i"),
    ("records_count", INT32, "i"),
)

BATCH_HEADER: Any = construct.Struct(*(name / con for name, con, _ in _HEADER_FIELDS))
#: The header as one ``struct`` format: ``HEADER.pack(*fields)`` / ``unpack_from``.
HEADER = struct.Struct(">" + "".join(fmt for _, _, fmt in _HEADER_FIELDS))
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
assert HEADER.size == HEADER_SIZE


class BatchAttributes:
    """What the fixed fields say about a batch, for ``BatchHeader`` and ``RecordBatch`` alike.

    Only reads fields, never validates them: a header peeked from damaged bytes must be
    just as safe to ask as a decoded batch.
    """

    __slots__ = ()

    if TYPE_CHECKING:

        @property
        def base_offset(self) -> int: ...
        @property
        def batch_length(self) -> int: ...
        @property
        def attributes(self) -> int: ...
        @property
        def last_offset_delta(self) -> int: ...

    @property
    def size(self) -> int:
        """Total bytes of the batch on the wire, length prefix included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def compression(self) -> Compression | None:
        """The codec of attribute bits 0-2; None for 5-7, which name none.

        Only an unvalidated header can hold 5-7 (``decode_batch`` refuses them), so a
        decoded ``RecordBatch`` always has a codec.
        """
        return _CODECS[self.attributes & COMPRESSION_MASK]

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & TIMESTAMP_TYPE_BIT) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        """Set by compaction: ``base_timestamp`` then holds the tombstone delete horizon."""
        return bool(self.attributes & _DELETE_HORIZON_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


class _HeaderFields(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int


class BatchHeader(_HeaderFields, BatchAttributes):
    """The fixed fields of a batch, read without touching (or validating) the records."""

    __slots__ = ()


#: ``_new_header(BatchHeader, fields)``: a header from its unpacked fields, without the
#: Python call of ``BatchHeader._make`` (recovery builds one per batch of every segment).
_new_header = tuple.__new__


# --- checks shared by the decoders ----------------------------------------------------


def as_view(data: bytes | bytearray | memoryview) -> memoryview:
    """A flat byte view of ``data`` without copying it."""
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view


def check_frame(view: memoryview) -> BatchHeader:
    """Header of a buffer that must hold exactly one v2 batch; raises if it does not."""
    if len(view) < HEADER_SIZE:
        raise RecordBatchError(f"truncated batch: {len(view)} bytes, header needs {HEADER_SIZE}")
    header = _new_header(BatchHeader, HEADER.unpack_from(view, 0))
    if header.magic != MAGIC:
        raise RecordBatchError(f"unsupported magic {header.magic}, only {MAGIC} is handled")
    if header.batch_length < MIN_BATCH_LENGTH:
        raise RecordBatchError(f"batch_length {header.batch_length} below {MIN_BATCH_LENGTH}")
    if header.size != len(view):
        kind = "truncated" if header.size > len(view) else "trailing bytes after"
        raise RecordBatchError(
            f"{kind} batch: batch_length says {header.size} bytes, got {len(view)}"
        )
    return header


def check_crc(view: memoryview, expected: int) -> None:
    actual = crc32c.crc32c(view[ATTRIBUTES_OFFSET:])
    if actual != expected:
        raise CorruptBatchError(f"CRC mismatch: header says {expected:#010x}, data {actual:#010x}")


def write_crc(buf: bytearray) -> None:
    """Compute the CRC-32C of a whole batch in ``buf`` and store it in its header."""
    _UINT32.pack_into(buf, CRC_OFFSET, crc32c.crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))


# --- hot paths ------------------------------------------------------------------------


def peek_batch_header(data: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Fixed header at ``pos``, unvalidated; the cheap read storage and the broker use."""
    if pos < 0:
        raise RecordBatchError(f"negative position {pos}")
    try:
        return _new_header(BatchHeader, HEADER.unpack_from(data, pos))
    except struct.error:
        raise RecordBatchError(f"fewer than {HEADER_SIZE} bytes at position {pos}") from None


def scan_batches(
    data: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> tuple[list[tuple[int, BatchHeader]], int]:
    """Frame and CRC-check batches without decoding records; never raises.

    Returns ``([(position, header), ...], valid_bytes)``: the batches of the longest valid
    prefix and its length. Storage truncates a recovered segment to ``valid_bytes``;
    ``valid_bytes < len(data)`` means a torn or corrupt tail.
    """
    view = as_view(data)
    end = len(view)
    found: list[tuple[int, BatchHeader]] = []
    pos = 0
    while end - pos >= HEADER_SIZE:
        header = _new_header(BatchHeader, HEADER.unpack_from(view, pos))
        if header.magic != MAGIC or header.batch_length < MIN_BATCH_LENGTH:
            break
        stop = pos + header.size
        if stop > end:
            break
        if verify_crc and crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : stop]) != header.crc:
            break
        found.append((pos, header))
        pos = stop
    return found, pos


def rewrite_base_offset(
    batch: bytes | bytearray | memoryview,
    new_base_offset: int,
    *,
    partition_leader_epoch: int | None = None,
) -> bytes:
    """Copy of ``batch`` with a new base offset (and optionally leader epoch).

    Both fields precede the CRC-covered range, so the CRC stays valid untouched.
    """
    buf = bytearray(batch)
    if len(buf) < HEADER_SIZE:
        raise RecordBatchError(f"truncated batch: {len(buf)} bytes, header needs {HEADER_SIZE}")
    try:
        _INT64.pack_into(buf, 0, new_base_offset)
        if partition_leader_epoch is not None:
            _INT32.pack_into(buf, _LEADER_EPOCH_OFFSET, partition_leader_epoch)
    except struct.error as exc:
        raise RecordBatchError(f"cannot rewrite batch header: {exc}") from None
    return bytes(buf)


def set_log_append_time(
    batch: bytes | bytearray | memoryview, timestamp: int, *, verify_crc: bool = True
) -> bytes:
    """Copy of ``batch`` stamped with broker time, as topics with LogAppendTime require.

    Sets ``max_timestamp`` and the timestamp-type bit, then recomputes the CRC. The old
    CRC is checked first by default, so a damaged batch is not given a fresh valid CRC.
    """
    view = as_view(batch)
    header = check_frame(view)
    if verify_crc:
        check_crc(view, header.crc)
    buf = bytearray(view)
    try:
        _INT16.pack_into(buf, ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_BIT)
        _INT64.pack_into(buf, _MAX_TIMESTAMP_OFFSET, timestamp)
    except struct.error as exc:
        raise RecordBatchError(f"cannot set log append time: {exc}") from None
    write_crc(buf)
    return bytes(buf)
