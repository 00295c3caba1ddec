"""Kafka record batch v2 (magic 2): sans-IO decode, encode and cheap in-place edits.

A record batch is what producers send in a Produce request, what the log stores
verbatim and what Fetch returns. The broker mostly treats batches as opaque bytes,
so the hot paths (``peek_batch_header``, ``scan_batches``, ``rewrite_base_offset``,
``set_log_append_time``) read or patch the fixed 61-byte header with ``struct`` and
never touch the records. ``decode_batch`` is the full, strict validator: whatever the
input bytes, it returns a ``RecordBatch`` or raises ``RecordBatchError``;
``iter_records`` is as strict but yields bare ``(offset, timestamp, key, value)``
tuples, for replaying logs. Records are read and written by a generated straight-line
loop; the ``RECORD`` construct documents the layout and is the reference it is tested
against.

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
import re
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import construct
import crc32c
from construct import Construct, stream_read, stream_write

from protocol import types as t
from protocol.varint import SMALL_VARINTS, ZIGZAG_ONE_BYTE, VarintError, encode_zigzag, zigzag_tail

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
    "iter_records",
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
_INT8 = struct.Struct(">b")
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


def _parse_records_reference(section: bytes, count: int) -> list[Record]:
    """The records of a section through the ``RECORD`` construct: the reference."""
    stream = io.BytesIO(section)
    # Each record is at least one byte, so a lying count ends in StreamError, not a hang.
    records = [RECORD._parse(stream, None, "(records)") for _ in range(count)]
    if stream.tell() != len(section):
        raise RecordBatchError(
            f"{len(section) - stream.tell()} bytes left after {count} records"
        )
    return records


def _encode_records_reference(records: Iterable[Record]) -> bytes:
    """The records section through the ``RECORD`` construct: the reference."""
    stream = io.BytesIO()
    try:
        for record in records:
            RECORD._build(record, stream, None, "(records)")
    except construct.ConstructError as exc:
        raise RecordBatchError(f"cannot encode record: {exc}") from None
    return stream.getvalue()


# --- fast record loop -----------------------------------------------------------------
#
# The layout ``RECORD`` declares, read by one straight loop over the section: varints
# are decoded inline when they fit in one byte (nearly always: lengths, deltas and
# counts of small records), with the same bounds as the construct (VARINT at most 5
# bytes and 32 bits, VARLONG 10 bytes and 64 bits, lengths below -1 refused, header keys
# UTF-8). A record's fields are read from the section itself rather than from a copy of
# its body; reading past the body's end can only happen while parsing an invalid record,
# and is then caught by the final "body used exactly ``length`` bytes" check (positions
# only move forward), so exactly the records the construct refuses are refused. Tests
# check this loop against ``RECORD`` on valid, truncated and corrupted sections.


class _Malformed(RecordBatchError):
    """A record the fast loop refuses (message mentions "malformed" like the reference's)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"malformed record batch: {reason}")


# (base_offset, base_timestamp, log_append_time or None): produce (offset, timestamp,
# key, value) tuples instead of ``Record`` objects.
_Placement = tuple[int, int, int | None]


# The loop's source: ``$VARINT(name, max_bytes, bits)`` lines expand to an inline
# zig-zag varint read (one- and two-byte values without a call; ``zigzag_tail`` beyond).
_SCAN_SOURCE = """
def scan(buf, count, place):
    size = len(buf)
    if count > size:  # every record takes at least one byte
        raise _Malformed(f"{count} records cannot fit in {size} bytes")
    out = []
    append = out.append
    pos = 0
    for _ in range(count):
        $VARINT(length, 5, 32)
        if length < 0:
            raise _Malformed(f"invalid record length {length}")
        start = pos
        end = pos + length
        if end > size:
            raise _Malformed(f"record length {length} but {size - pos} bytes left")
        attributes = buf[pos]
        if attributes > 127:
            attributes -= 256
        pos += 1
        $VARINT(timestamp_delta, 10, 64)
        $VARINT(offset_delta, 5, 32)
        $VARINT(n, 5, 32)
        if n < 0:
            if n != -1:
                raise _Malformed(f"invalid bytes length {n}")
            key = None
        else:
            stop = pos + n
            if stop > end:
                raise _Malformed(f"key of {n} bytes overruns its record")
            key = buf[pos:stop]
            pos = stop
        $VARINT(n, 5, 32)
        if n < 0:
            if n != -1:
                raise _Malformed(f"invalid bytes length {n}")
            value = None
        else:
            stop = pos + n
            if stop > end:
                raise _Malformed(f"value of {n} bytes overruns its record")
            value = buf[pos:stop]
            pos = stop
        $VARINT(n, 5, 32)
        headers = []
        if n:
            if n < 0:
                raise _Malformed(f"invalid header count {n}")
            if n > end - pos:  # each header takes at least two bytes
                raise _Malformed(f"{n} headers cannot fit in their record")
            for _ in range(n):
                $VARINT(n, 5, 32)
                if n < 0:
                    raise _Malformed(f"invalid header key length {n}")
                stop = pos + n
                if stop > end:
                    raise _Malformed(f"header key of {n} bytes overruns its record")
                name = buf[pos:stop].decode()
                pos = stop
                $VARINT(n, 5, 32)
                if n < 0:
                    if n != -1:
                        raise _Malformed(f"invalid bytes length {n}")
                    data = None
                else:
                    stop = pos + n
                    if stop > end:
                        raise _Malformed(f"header value of {n} bytes overruns its record")
                    data = buf[pos:stop]
                    pos = stop
                headers.append((name, data))
        if pos != end:
            raise _Malformed(f"record length {length} but body used {pos - start} bytes")
        if place is None:
            append(Record(attributes, timestamp_delta, offset_delta, key, value, headers))
        else:
            base_offset, base_timestamp, append_time = place
            timestamp = base_timestamp + timestamp_delta if append_time is None else append_time
            append((base_offset + offset_delta, timestamp, key, value))
    if pos != size:
        raise RecordBatchError(f"{size - pos} bytes left after {count} records")
    return out
"""

_VARINT_SOURCE = """\
byte = buf[pos]
if byte < 0x80:
    {name} = _ZIGZAG[byte]
    pos += 1
else:
    raw = buf[pos + 1]
    if raw < 0x80:
        raw = (byte & 0x7F) | (raw << 7)
        {name} = (raw >> 1) ^ -(raw & 1)
        pos += 2
    else:
        {name}, pos = _zigzag_tail(buf, pos + 1, byte, {limit}, {bits})"""


def _expand_varints(source: str) -> str:
    def expand(match: re.Match[str]) -> str:
        indent, name, limit, bits = match.groups()
        code = _VARINT_SOURCE.format(name=name, limit=limit, bits=bits)
        return "\n".join(indent + line for line in code.splitlines())

    return re.sub(r"^( *)\$VARINT\((\w+), (\d+), (\d+)\)$", expand, source, flags=re.MULTILINE)


def _build_scan() -> Callable[[bytes, int, _Placement | None], list[Any]]:
    namespace: dict[str, Any] = {
        "_Malformed": _Malformed,
        "RecordBatchError": RecordBatchError,
        "Record": Record,
        "_ZIGZAG": ZIGZAG_ONE_BYTE,
        "_zigzag_tail": zigzag_tail,
    }
    exec(compile(_expand_varints(_SCAN_SOURCE), "<records scan>", "exec"), namespace)
    scan: Callable[[bytes, int, _Placement | None], list[Any]] = namespace["scan"]
    return scan


#: ``_scan_records(section, count, place)``: decode ``count`` records filling ``section``
#: exactly, as ``Record``s, or with ``place`` as (offset, timestamp, key, value) tuples.
_scan_records = _build_scan()


def _scan(section: bytes, count: int, place: _Placement | None) -> list[Any]:
    try:
        return _scan_records(section, count, place)
    except RecordBatchError:
        raise
    except VarintError as exc:
        raise _Malformed(str(exc)) from None
    except (IndexError, ValueError) as exc:  # ran off the end; bad UTF-8 in a header key
        raise _Malformed(f"{type(exc).__name__}: {exc}") from None


def _parse_records(section: bytes, count: int) -> list[Record]:
    """The records of a (decompressed) section, by the fast loop."""
    return _scan(section, count, None)


def _zigzag(value: Any, bits: int) -> bytes:
    """VARINT (32) / VARLONG (64), refused as a record that cannot be encoded."""
    try:
        return encode_zigzag(value, bits)
    except VarintError as exc:
        raise _Unencodable(str(exc)) from None


class _Unencodable(RecordBatchError):
    def __init__(self, reason: str) -> None:
        super().__init__(f"cannot encode record: {reason}")


def _var_bytes(value: Any) -> bytes:
    if value is None:
        return b"\x01"  # varint -1
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise _Unencodable(f"bytes expected, got {type(value).__name__}")
    data = bytes(value)
    return _zigzag(len(data), 32) + data


def _int8(value: Any) -> bytes:
    try:
        return _INT8.pack(value)
    except (struct.error, TypeError) as exc:
        raise _Unencodable(f"int8: cannot encode {value!r}: {exc}") from None


def _encode_records(records: Iterable[Record]) -> bytes:
    """The records section, exactly as ``RECORD._build`` writes each record.

    Small ints and short plain ``bytes`` (the usual case) take inline one-byte paths;
    anything else goes through the checked helpers.
    """
    out = bytearray()
    small = SMALL_VARINTS
    for record in records:
        if not isinstance(record, Record):
            raise _Unencodable(f"Record expected, got {type(record).__name__}")
        value: Any = record.attributes
        body = bytearray(_int8(value) if type(value) is not int or not -128 <= value < 128 else (value & 0xFF,))
        value = record.timestamp_delta
        body += small[value] if type(value) is int and -64 <= value < 64 else _zigzag(value, 64)
        value = record.offset_delta
        body += small[value] if type(value) is int and -64 <= value < 64 else _zigzag(value, 32)
        value = record.key
        if type(value) is bytes and len(value) < 64:
            body.append(len(value) << 1)
            body += value
        else:
            body += _var_bytes(value)
        value = record.value
        if type(value) is bytes and len(value) < 64:
            body.append(len(value) << 1)
            body += value
        else:
            body += _var_bytes(value)
        headers = record.headers
        if not headers and type(headers) is list:
            body.append(0)
        else:
            body += _zigzag(len(headers), 32)
            for item in headers:
                if not isinstance(item, tuple) or len(item) != 2:
                    raise _Unencodable(f"header must be a (key, value) pair, got {item!r}")
                name = item[0]
                if not isinstance(name, str):
                    raise _Unencodable(f"header key must be str, got {type(name).__name__}")
                try:
                    raw = name.encode("utf-8")
                except UnicodeEncodeError:
                    raise _Unencodable("header key is not encodable as UTF-8") from None
                body += _zigzag(len(raw), 32)
                body += raw
                body += _var_bytes(item[1])
        size = len(body)
        if size < 64:
            out.append(size << 1)
        else:
            out += _zigzag(size, 32)
        out += body
    return bytes(out)


# --- public API -----------------------------------------------------------------------


def peek_batch_header(data: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Fixed header at ``pos``, unvalidated; the cheap read storage and the broker use."""
    if pos < 0:
        raise RecordBatchError(f"negative position {pos}")
    try:
        return BatchHeader._make(_HEADER.unpack_from(data, pos))
    except struct.error:
        raise RecordBatchError(f"fewer than {HEADER_SIZE} bytes at position {pos}") from None


def _records_section(view: memoryview, header: BatchHeader, max_uncompressed: int) -> tuple[bytes, bytes | None]:
    """The raw records section and, for NONE/GZIP, the bytes the records are read from."""
    codec = header.attributes & _COMPRESSION_MASK
    if codec > Compression.ZSTD:
        raise RecordBatchError(f"unknown compression codec {codec}")
    if header.records_count < 0:
        raise RecordBatchError(f"negative records_count {header.records_count}")
    raw = bytes(view[HEADER_SIZE:])
    if codec == Compression.NONE:
        return raw, raw
    if codec == Compression.GZIP:
        return raw, _gunzip(raw, max_uncompressed)
    return raw, None


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
        raw, section = _records_section(view, header, max_uncompressed)
        records = None if section is None else _parse_records(section, header.records_count)
    except RecordBatchError:
        raise
    except (construct.ConstructError, zlib.error, struct.error, ValueError, TypeError) as exc:
        raise RecordBatchError(f"malformed record batch: {exc}") from None
    return RecordBatch(*header, records=records, raw_records=raw)


def iter_records(
    data: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """``(offset, timestamp, key, value)`` of every record of exactly one batch.

    The replay path: as strict as ``decode_batch`` (same checks, same errors) but builds
    neither ``Record`` objects nor header lists. The whole batch is validated before the
    first record is returned, so a bad batch never yields a partial result. Timestamps
    follow ``RecordBatch.timestamp_of`` (log-append time: the batch's ``max_timestamp``).
    Batches compressed with a codec kept opaque (snappy, lz4, zstd) raise
    ``RecordBatchError``.
    """
    try:
        view = _as_view(data)
        header = _check_frame(view)
        if verify_crc:
            _check_crc(view, header.crc)
        _, section = _records_section(view, header, max_uncompressed)
        if section is None:
            codec = Compression(header.attributes & _COMPRESSION_MASK)
            raise RecordBatchError(f"cannot read records compressed with {codec.name}")
        append_time = header.max_timestamp if header.attributes & _TIMESTAMP_TYPE_BIT else None
        place = (header.base_offset, header.base_timestamp, append_time)
        records = _scan(section, header.records_count, place)
    except RecordBatchError:
        raise
    except (zlib.error, struct.error, ValueError, TypeError) as exc:
        raise RecordBatchError(f"malformed record batch: {exc}") from None
    return iter(records)


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
        section = _encode_records(records)
    except RecordBatchError:
        raise
    except (ValueError, TypeError, OverflowError) as exc:
        raise RecordBatchError(f"cannot encode record: {exc}") from None
    if codec == Compression.GZIP:
        section = gzip.compress(section, mtime=0)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset_delta if records else -1
    if max_timestamp is None:
        max_timestamp = base_timestamp + max((r.timestamp_delta for r in records), default=0)
    try:
        buf = bytearray(
            _HEADER.pack(
                base_offset,
                HEADER_SIZE - LOG_OVERHEAD + len(section),
                partition_leader_epoch,
                MAGIC,
                0,  # crc, filled in below
                attributes,
                last_offset_delta,
                base_timestamp,
                max_timestamp,
                producer_id,
                producer_epoch,
                base_sequence,
                len(records),
            )
        )
    except struct.error as exc:
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
