"""Kafka record batch v2 (magic 2): sans-IO decode, encode and cheap in-place edits.

A record batch is what producers send in a Produce request, what the log stores
verbatim and what Fetch returns. The broker mostly treats batches as opaque bytes,
so the hot paths (``peek_batch_header``, ``scan_batches``, ``rewrite_base_offset``,
``set_log_append_time``) read or patch the fixed 61-byte header with ``struct`` and
never touch the records. ``decode_batch`` is the full, strict validator: whatever the
input bytes, it returns a ``RecordBatch`` or raises ``RecordBatchError``.

Layout (all big-endian)::

    base_offset int64 | batch_length int32 | partition_leader_epoch int32 | magic int8
    crc uint32 | attributes int16 | last_offset_delta int32 | base_timestamp int64
    max_timestamp int64 | producer_id int64 | producer_epoch int16 | base_sequence int32
    records_count int32 | records...

``batch_length`` counts the bytes after itself; the CRC-32C covers ``attributes``
to the end, so base offset and leader epoch can be rewritten without recomputing it.
"""

from __future__ import annotations

import enum
import gzip
import io
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import construct
import crc32c
from construct import Construct, stream_read, stream_write

from protocol import types as t

__all__ = [
    "BATCH_HEADER",
    "HEADER_SIZE",
    "MAGIC",
    "NO_TIMESTAMP",
    "RECORD",
    "BatchHeader",
    "Compression",
    "CorruptBatchError",
    "Record",
    "RecordBatch",
    "RecordBatchError",
    "TimestampType",
    "build_records",
    "decode_batch",
    "encode_batch",
    "iter_batches",
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
#: Default ceiling for a decompressed records section, so a tiny gzip bomb cannot
#: make the broker allocate gigabytes.
DEFAULT_MAX_UNCOMPRESSED = 64 * 1024 * 1024

_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_MAX_TIMESTAMP_OFFSET = 35

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
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


# --- fixed header ---------------------------------------------------------------------

# One table drives both the construct (used to build, and as the documented layout)
# and the ``struct`` format the hot paths use, so the two cannot drift apart.
_HEADER_FIELDS: tuple[tuple[str, Construct, str], ...] = (
    ("base_offset", t.INT64, "q"),
    ("batch_length", t.INT32, "i"),
    ("partition_leader_epoch", t.INT32, "i"),
    ("magic", t.INT8, "b"),
    ("crc", t.UINT32, "I"),
    ("attributes", t.INT16, "h"),
    ("last_offset_delta", t.INT32, "i"),
    ("base_timestamp", t.INT64, "q"),
    ("max_timestamp", t.INT64, "q"),
    ("producer_id", t.INT64, "q"),
    ("producer_epoch", t.INT16, "h"),
    ("base_sequence", t.INT32, "i"),
    ("records_count", t.INT32, "i"),
)

BATCH_HEADER: Any = construct.Struct(*(name / con for name, con, _ in _HEADER_FIELDS))
_HEADER = struct.Struct(">" + "".join(fmt for _, _, fmt in _HEADER_FIELDS))
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
assert _HEADER.size == HEADER_SIZE


class BatchHeader(NamedTuple):
    """The fixed fields of a batch, read without touching (or validating) the records."""

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

    @property
    def size(self) -> int:
        """Total bytes of the batch on the wire, length prefix included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def compression(self) -> int:
        """Raw codec bits (an int, since an unvalidated header may hold codec 5-7)."""
        return self.attributes & _COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & _TIMESTAMP_TYPE_BIT) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


# --- records --------------------------------------------------------------------------


@dataclass(slots=True)
class Record:
    """One record as stored inside a batch; offset and timestamp are deltas from it."""

    attributes: int = 0
    timestamp_delta: int = 0
    offset_delta: int = 0
    key: bytes | None = None
    value: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


class _VarBytes(Construct):
    """Record BYTES: zig-zag varint length then data; -1 means null when allowed."""

    def __init__(self, nullable: bool) -> None:
        super().__init__()
        self.nullable = nullable

    def _parse(self, stream: Any, context: Any, path: str) -> bytes | None:
        length = t.VARINT._parse(stream, context, path)
        if length < 0:
            if length == -1 and self.nullable:
                return None
            raise t.WireError(f"invalid bytes length {length}", path=path)
        return bytes(stream_read(stream, length, path))

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if obj is None:
            if not self.nullable:
                raise t.WireError("null given for non-nullable bytes", path=path)
            t.VARINT._build(-1, stream, context, path)
            return obj
        if not isinstance(obj, (bytes, bytearray, memoryview)):
            raise t.WireError(f"bytes expected, got {type(obj).__name__}", path=path)
        data = bytes(obj)
        t.VARINT._build(len(data), stream, context, path)
        stream_write(stream, data, len(data), path)
        return obj


class _VarString(Construct):
    """Record header key: zig-zag varint length then UTF-8; never null."""

    def _parse(self, stream: Any, context: Any, path: str) -> str:
        length = t.VARINT._parse(stream, context, path)
        if length < 0:
            raise t.WireError(f"invalid header key length {length}", path=path)
        try:
            return bytes(stream_read(stream, length, path)).decode("utf-8")
        except UnicodeDecodeError:
            raise t.WireError("header key is not valid UTF-8", path=path) from None

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if not isinstance(obj, str):
            raise t.WireError(f"header key must be str, got {type(obj).__name__}", path=path)
        try:
            data = obj.encode("utf-8")
        except UnicodeEncodeError:
            raise t.WireError("header key is not encodable as UTF-8", path=path) from None
        t.VARINT._build(len(data), stream, context, path)
        stream_write(stream, data, len(data), path)
        return obj


_NULLABLE_VARBYTES = _VarBytes(nullable=True)
_HEADER_KEY = _VarString()


class _RecordCodec(Construct):
    """One length-prefixed record <-> ``Record``.

    The body is cut out by its length prefix first and parsed from its own stream, so
    a record can never read into its neighbour and a wrong length is always caught.
    """

    def _parse(self, stream: Any, context: Any, path: str) -> Record:
        length = t.VARINT._parse(stream, context, path)
        if length < 0:
            raise t.WireError(f"invalid record length {length}", path=path)
        body = io.BytesIO(stream_read(stream, length, path))
        attributes = t.INT8._parse(body, context, path)
        timestamp_delta = t.VARLONG._parse(body, context, path)
        offset_delta = t.VARINT._parse(body, context, path)
        key = _NULLABLE_VARBYTES._parse(body, context, path)
        value = _NULLABLE_VARBYTES._parse(body, context, path)
        count = t.VARINT._parse(body, context, path)
        if count < 0:
            raise t.WireError(f"invalid header count {count}", path=path)
        # Each header is at least two bytes, so a lying count hits StreamError quickly.
        headers = [
            (_HEADER_KEY._parse(body, context, path), _NULLABLE_VARBYTES._parse(body, context, path))
            for _ in range(count)
        ]
        if body.tell() != length:
            raise t.WireError(
                f"record length {length} but body used {body.tell()} bytes", path=path
            )
        return Record(attributes, timestamp_delta, offset_delta, key, value, headers)

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if not isinstance(obj, Record):
            raise t.WireError(f"Record expected, got {type(obj).__name__}", path=path)
        body = io.BytesIO()
        t.INT8._build(obj.attributes, body, context, path)
        t.VARLONG._build(obj.timestamp_delta, body, context, path)
        t.VARINT._build(obj.offset_delta, body, context, path)
        _NULLABLE_VARBYTES._build(obj.key, body, context, path)
        _NULLABLE_VARBYTES._build(obj.value, body, context, path)
        t.VARINT._build(len(obj.headers), body, context, path)
        for item in obj.headers:
            if not isinstance(item, tuple) or len(item) != 2:
                raise t.WireError(f"header must be a (key, value) pair, got {item!r}", path=path)
            _HEADER_KEY._build(item[0], body, context, path)
            _NULLABLE_VARBYTES._build(item[1], body, context, path)
        data = body.getvalue()
        t.VARINT._build(len(data), stream, context, path)
        stream_write(stream, data, len(data), path)
        return obj


RECORD: Any = _RecordCodec()


# --- decoded batch --------------------------------------------------------------------


@dataclass(slots=True)
class RecordBatch:
    """A fully decoded batch.

    ``records`` is None when the codec is one we keep opaque (snappy, lz4, zstd);
    ``raw_records`` is always the records section exactly as on the wire.
    """

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
    records: list[Record] | None
    raw_records: bytes

    @property
    def size(self) -> int:
        """Total bytes of the batch on the wire, length prefix included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & _COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & _TIMESTAMP_TYPE_BIT) >> 3)

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

    def offset_of(self, record: Record) -> int:
        """Absolute offset of ``record`` (records only store a delta)."""
        return self.base_offset + record.offset_delta

    def timestamp_of(self, record: Record) -> int:
        """Record timestamp; with log-append time the broker's ``max_timestamp`` wins."""
        if self.attributes & _TIMESTAMP_TYPE_BIT:
            return self.max_timestamp
        return self.base_timestamp + record.timestamp_delta


# --- helpers --------------------------------------------------------------------------


def _as_view(data: bytes | bytearray | memoryview) -> memoryview:
    """A flat byte view of ``data`` without copying it."""
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view


def _check_frame(view: memoryview) -> BatchHeader:
    """Header of a buffer that must hold exactly one v2 batch; raises if it does not."""
    if len(view) < HEADER_SIZE:
        raise RecordBatchError(f"truncated batch: {len(view)} bytes, header needs {HEADER_SIZE}")
    header = BatchHeader._make(_HEADER.unpack_from(view, 0))
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


def _check_crc(view: memoryview, expected: int) -> None:
    actual = crc32c.crc32c(view[_ATTRIBUTES_OFFSET:])
    if actual != expected:
        raise CorruptBatchError(f"CRC mismatch: header says {expected:#010x}, data {actual:#010x}")


def _gunzip(data: bytes, limit: int) -> bytes:
    """Inflate gzip data (possibly several members, as GZIPInputStream allows), bounded."""
    out = bytearray()
    rest = data
    while True:
        inflater = zlib.decompressobj(wbits=31)
        out += inflater.decompress(rest, limit - len(out) + 1)
        if len(out) > limit or inflater.unconsumed_tail:
            raise RecordBatchError(f"gzip records inflate beyond {limit} bytes")
        if not inflater.eof:
            raise RecordBatchError("gzip records section is truncated")
        rest = inflater.unused_data
        if not rest:
            return bytes(out)


def _parse_records(section: bytes, count: int) -> list[Record]:
    stream = io.BytesIO(section)
    # Each record is at least one byte, so a lying count ends in StreamError, not a hang.
    records = [RECORD._parse(stream, None, "(records)") for _ in range(count)]
    if stream.tell() != len(section):
        raise RecordBatchError(
            f"{len(section) - stream.tell()} bytes left after {count} records"
        )
    return records


# --- public API -----------------------------------------------------------------------


def peek_batch_header(data: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Fixed header at ``pos``, unvalidated; the cheap read storage and the broker use."""
    if pos < 0:
        raise RecordBatchError(f"negative position {pos}")
    try:
        return BatchHeader._make(_HEADER.unpack_from(data, pos))
    except struct.error:
        raise RecordBatchError(f"fewer than {HEADER_SIZE} bytes at position {pos}") from None


def decode_batch(
    data: bytes | bytearray | memoryview,
    verify_crc: bool = True,
    *,
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
) -> RecordBatch:
    """Decode exactly one batch, strictly.

    Raises ``CorruptBatchError`` on a CRC mismatch and ``RecordBatchError`` on anything
    else that is wrong; no other exception escapes, whatever the bytes.
    """
    try:
        view = _as_view(data)
        header = _check_frame(view)
        if verify_crc:
            _check_crc(view, header.crc)
        codec = header.attributes & _COMPRESSION_MASK
        if codec > Compression.ZSTD:
            raise RecordBatchError(f"unknown compression codec {codec}")
        if header.records_count < 0:
            raise RecordBatchError(f"negative records_count {header.records_count}")
        raw = bytes(view[HEADER_SIZE:])
        records: list[Record] | None
        if codec == Compression.NONE:
            records = _parse_records(raw, header.records_count)
        elif codec == Compression.GZIP:
            records = _parse_records(_gunzip(raw, max_uncompressed), header.records_count)
        else:
            records = None
    except RecordBatchError:
        raise
    except (construct.ConstructError, zlib.error, struct.error, ValueError, TypeError) as exc:
        raise RecordBatchError(f"malformed record batch: {exc}") from None
    return RecordBatch(*header, records=records, raw_records=raw)


def iter_batches(
    data: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> Iterator[tuple[int, RecordBatch]]:
    """Decode concatenated batches, yielding ``(position, batch)``.

    A final batch cut short (as at the end of a Fetch response or a torn log tail) ends
    iteration quietly; a malformed or corrupt batch raises.
    """
    view = _as_view(data)
    end = len(view)
    pos = 0
    while end - pos >= LOG_OVERHEAD:
        batch_length = _INT32.unpack_from(view, pos + 8)[0]
        if batch_length < MIN_BATCH_LENGTH:
            raise RecordBatchError(f"batch_length {batch_length} at position {pos} is too small")
        size = LOG_OVERHEAD + batch_length
        if pos + size > end:
            return
        yield pos, decode_batch(view[pos : pos + size], verify_crc)
        pos += size


def scan_batches(
    data: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> tuple[list[tuple[int, BatchHeader]], int]:
    """Frame and CRC-check batches without decoding records; never raises.

    Returns ``([(position, header), ...], valid_bytes)``: the batches of the longest valid
    prefix and its length. Storage truncates a recovered segment to ``valid_bytes``;
    ``valid_bytes < len(data)`` means a torn or corrupt tail.
    """
    view = _as_view(data)
    end = len(view)
    found: list[tuple[int, BatchHeader]] = []
    pos = 0
    while end - pos >= HEADER_SIZE:
        header = BatchHeader._make(_HEADER.unpack_from(view, pos))
        if header.magic != MAGIC or header.batch_length < MIN_BATCH_LENGTH:
            break
        stop = pos + header.size
        if stop > end:
            break
        if verify_crc and crc32c.crc32c(view[pos + _ATTRIBUTES_OFFSET : stop]) != header.crc:
            break
        found.append((pos, header))
        pos = stop
    return found, pos


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    base_timestamp: int = NO_TIMESTAMP,
    max_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    attributes: int = 0,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode one batch, computing batch_length, last_offset_delta, max_timestamp and CRC.

    ``attributes`` carries the codec bits; only NONE and GZIP can be produced here.
    ``last_offset_delta`` defaults to the last record's (or -1 for an empty batch).
    """
    codec = attributes & _COMPRESSION_MASK
    if codec not in (Compression.NONE, Compression.GZIP):
        raise RecordBatchError(f"cannot encode with compression codec {codec}")
    try:
        stream = io.BytesIO()
        for record in records:
            RECORD._build(record, stream, None, "(records)")
        section = stream.getvalue()
    except construct.ConstructError as exc:
        raise RecordBatchError(f"cannot encode record: {exc}") from None
    if codec == Compression.GZIP:
        section = gzip.compress(section, mtime=0)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset_delta if records else -1
    if max_timestamp is None:
        max_timestamp = base_timestamp + max((r.timestamp_delta for r in records), default=0)
    fields = {
        "base_offset": base_offset,
        "batch_length": HEADER_SIZE - LOG_OVERHEAD + len(section),
        "partition_leader_epoch": partition_leader_epoch,
        "magic": MAGIC,
        "crc": 0,
        "attributes": attributes,
        "last_offset_delta": last_offset_delta,
        "base_timestamp": base_timestamp,
        "max_timestamp": max_timestamp,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "base_sequence": base_sequence,
        "records_count": len(records),
    }
    try:
        buf = bytearray(BATCH_HEADER.build(fields))
    except construct.ConstructError as exc:
        raise RecordBatchError(f"cannot encode batch header: {exc}") from None
    buf += section
    _UINT32.pack_into(buf, _CRC_OFFSET, crc32c.crc32c(memoryview(buf)[_ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def build_records(
    values: Iterable[tuple[bytes | None, bytes | None]],
    headers: list[tuple[str, bytes | None]] | None = None,
) -> list[Record]:
    """``(key, value)`` pairs as records with offset deltas 0..n-1 and timestamp delta 0."""
    return [
        Record(offset_delta=i, key=key, value=value, headers=list(headers or ()))
        for i, (key, value) in enumerate(values)
    ]


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
            _INT32.pack_into(buf, 12, partition_leader_epoch)
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
    view = _as_view(batch)
    header = _check_frame(view)
    if verify_crc:
        _check_crc(view, header.crc)
    buf = bytearray(view)
    try:
        _INT16.pack_into(buf, _ATTRIBUTES_OFFSET, header.attributes | _TIMESTAMP_TYPE_BIT)
        _INT64.pack_into(buf, _MAX_TIMESTAMP_OFFSET, timestamp)
    except struct.error as exc:
        raise RecordBatchError(f"cannot set log append time: {exc}") from None
    _UINT32.pack_into(buf, _CRC_OFFSET, crc32c.crc32c(memoryview(buf)[_ATTRIBUTES_OFFSET:]))
    return bytes(buf)
