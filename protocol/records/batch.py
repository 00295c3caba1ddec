"""Whole record batches: ``RecordBatch``, strict decode, encode, and the record codec.

``decode_batch`` is the full validator: whatever the input bytes, it returns a
``RecordBatch`` or raises ``RecordBatchError``. Records are read by the generated loop
of ``protocol.records.scanner`` and written by ``_encode_records``; the ``RECORD``
construct documents the record layout and is the reference both are tested against.
The hot paths that only read or patch the fixed header live in
``protocol.records.header``.
"""

from __future__ import annotations

import gzip
import io
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import construct
from construct import Construct, stream_read, stream_write

from protocol.records.header import (
    COMPRESSION_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    BatchAttributes,
    Compression,
    RecordBatchError,
    as_view,
    check_crc,
    check_frame,
    write_crc,
)
from protocol.records.scanner import DEFAULT_MAX_UNCOMPRESSED, records_section, scan_records
from protocol.types import INT8, VARINT, VARLONG, WireError
from protocol.varint import SMALL_VARINTS, VarintError, encode_zigzag

__all__ = [
    "RECORD",
    "RECORD_VARINTS",
    "EncodedRecords",
    "Record",
    "RecordBatch",
    "build_records",
    "decode_batch",
    "encode_batch",
    "encode_key_value_batch",
    "iter_batches",
]

_INT8 = struct.Struct(">b")
_INT32 = struct.Struct(">i")


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
        length = VARINT._parse(stream, context, path)
        if length < 0:
            if length == -1 and self.nullable:
                return None
            raise WireError(f"invalid bytes length {length}", path=path)
        return bytes(stream_read(stream, length, path))

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if obj is None:
            if not self.nullable:
                raise WireError("null given for non-nullable bytes", path=path)
            VARINT._build(-1, stream, context, path)
            return obj
        if not isinstance(obj, (bytes, bytearray, memoryview)):
            raise WireError(f"bytes expected, got {type(obj).__name__}", path=path)
        data = bytes(obj)
        VARINT._build(len(data), stream, context, path)
        stream_write(stream, data, len(data), path)
        return obj


class _VarString(Construct):
    """Record header key: zig-zag varint length then UTF-8; never null."""

    def _parse(self, stream: Any, context: Any, path: str) -> str:
        length = VARINT._parse(stream, context, path)
        if length < 0:
            raise WireError(f"invalid header key length {length}", path=path)
        try:
            return bytes(stream_read(stream, length, path)).decode("utf-8")
        except UnicodeDecodeError:
            raise WireError("header key is not valid UTF-8", path=path) from None

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if not isinstance(obj, str):
            raise WireError(f"header key must be str, got {type(obj).__name__}", path=path)
        try:
            data = obj.encode("utf-8")
        except UnicodeEncodeError:
            raise WireError("header key is not encodable as UTF-8", path=path) from None
        VARINT._build(len(data), stream, context, path)
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
        length = VARINT._parse(stream, context, path)
        if length < 0:
            raise WireError(f"invalid record length {length}", path=path)
        body = io.BytesIO(stream_read(stream, length, path))
        attributes = INT8._parse(body, context, path)
        timestamp_delta = VARLONG._parse(body, context, path)
        offset_delta = VARINT._parse(body, context, path)
        key = _NULLABLE_VARBYTES._parse(body, context, path)
        value = _NULLABLE_VARBYTES._parse(body, context, path)
        count = VARINT._parse(body, context, path)
        if count < 0:
            raise WireError(f"invalid header count {count}", path=path)
        # Each header is at least two bytes, so a lying count hits StreamError quickly.
        headers = [
            (_HEADER_KEY._parse(body, context, path), _NULLABLE_VARBYTES._parse(body, context, path))
            for _ in range(count)
        ]
        if body.tell() != length:
            raise WireError(
                f"record length {length} but body used {body.tell()} bytes", path=path
            )
        return Record(attributes, timestamp_delta, offset_delta, key, value, headers)

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if not isinstance(obj, Record):
            raise WireError(f"Record expected, got {type(obj).__name__}", path=path)
        body = io.BytesIO()
        INT8._build(obj.attributes, body, context, path)
        VARLONG._build(obj.timestamp_delta, body, context, path)
        VARINT._build(obj.offset_delta, body, context, path)
        _NULLABLE_VARBYTES._build(obj.key, body, context, path)
        _NULLABLE_VARBYTES._build(obj.value, body, context, path)
        VARINT._build(len(obj.headers), body, context, path)
        for item in obj.headers:
            if not isinstance(item, tuple) or len(item) != 2:
                raise WireError(f"header must be a (key, value) pair, got {item!r}", path=path)
            _HEADER_KEY._build(item[0], body, context, path)
            _NULLABLE_VARBYTES._build(item[1], body, context, path)
        data = body.getvalue()
        VARINT._build(len(data), stream, context, path)
        stream_write(stream, data, len(data), path)
        return obj


RECORD: Any = _RecordCodec()


# --- decoded batch --------------------------------------------------------------------


@dataclass(slots=True)
class RecordBatch(BatchAttributes):
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

    def offset_of(self, record: Record) -> int:
        """Absolute offset of ``record`` (records only store a delta)."""
        return self.base_offset + record.offset_delta

    def timestamp_of(self, record: Record) -> int:
        """Record timestamp; with log-append time the broker's ``max_timestamp`` wins."""
        if self.attributes & TIMESTAMP_TYPE_BIT:
            return self.max_timestamp
        return self.base_timestamp + record.timestamp_delta


# --- reading and writing records -----------------------------------------------------


def _parse_records(section: bytes, count: int) -> list[Record]:
    """The records of a (decompressed) section, by the fast loop."""
    return scan_records(section, count, Record)


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
        view = as_view(data)
        header = check_frame(view)
        if verify_crc:
            check_crc(view, header.crc)
        raw, section = records_section(view, header, max_uncompressed)
        records = None if section is None else _parse_records(section, header.records_count)
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
    view = as_view(data)
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
    codec = attributes & COMPRESSION_MASK
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
            HEADER.pack(
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
    write_crc(buf)
    return bytes(buf)


#: Zig-zag varints of 0..16383 (record sizes, key and value lengths, offset deltas).
RECORD_VARINTS = tuple(encode_zigzag(i, 32) for i in range(16384))


class EncodedRecords:
    """A plain batch's records section, encoded by its caller: what ``encode_key_value_batch``
    builds from ``(key, value)`` pairs before the header.

    ``parts[0]`` is a placeholder for the header; after it, each of the ``count`` records as
    its size's varint followed by the record (attributes 0, timestamp delta 0, offset deltas
    0..count-1 in order, no headers), in any split into bytes objects. Encoding the batch
    replaces ``parts[0]`` (with room for the header, packed into the joined batch).
    """

    __slots__ = ("count", "parts")

    def __init__(self, parts: list[bytes | bytearray], count: int) -> None:
        self.parts = parts
        self.count = count

    def __len__(self) -> int:
        return self.count


def encode_key_value_batch(
    records: Sequence[tuple[bytes | None, bytes | None]] | EncodedRecords, *, base_offset: int = 0,
    base_timestamp: int = NO_TIMESTAMP, partition_leader_epoch: int = -1,
) -> bytes:
    """``encode_batch(build_records(records), base_offset=..., base_timestamp=...)``, byte for byte.

    The log's own appends (the coordinator's records) are plain ``(key, value)`` pairs with
    no headers and one timestamp; this writes them without building a ``Record`` each: a
    record is its size's varint and one join of its pieces, and the batch one join of the
    records. Anything else goes the general way (and its checks): keys or values that are
    not ``bytes``/None, and lengths or offset deltas beyond the varint table (16,383).
    ``EncodedRecords`` are taken as they are: only the header is added.
    """
    if isinstance(records, EncodedRecords):
        return _framed(records.parts, records.count, base_offset, base_timestamp, partition_leader_epoch)
    table = RECORD_VARINTS
    join = b"".join
    parts: list[bytes | bytearray] = [b""]  # the header, packed once the size is known
    try:
        for i, (key, value) in enumerate(records):
            # The key and the value take the same steps, written out twice: a helper would be
            # a call per record on the commit path.
            if type(key) is bytes:
                key_head = table[len(key)]
            elif key is None:
                key, key_head = b"", b"\x01"
            else:
                raise _NotPlain
            if type(value) is bytes:
                value_head = table[len(value)]
            elif value is None:
                value, value_head = b"", b"\x01"
            else:
                raise _NotPlain
            # attributes and timestamp delta (2 bytes), the offset delta, key, value, no headers (1 byte)
            record = join((b"\x00\x00", table[i], key_head, key, value_head, value, b"\x00"))
            parts += (table[len(record)], record)
    except (_NotPlain, IndexError):
        return encode_batch(build_records(records), base_offset=base_offset, base_timestamp=base_timestamp,
                            partition_leader_epoch=partition_leader_epoch)
    return _framed(parts, len(records), base_offset, base_timestamp, partition_leader_epoch)


_BLANK_HEADER = bytes(HEADER_SIZE)


def _framed(parts: list[bytes | bytearray], count: int, base_offset: int, base_timestamp: int,
            partition_leader_epoch: int) -> bytes:
    """The batch of ``count`` plain records whose size-prefixed bytes are ``parts[1:]``."""
    # Joined behind a blank header first, then the header packed in place: the batch's size
    # is the joined length (summing the parts' lengths took another pass over them all).
    parts[0] = _BLANK_HEADER
    out = bytearray().join(parts)
    try:
        HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC, 0, 0,
                         count - 1, base_timestamp, base_timestamp, -1, -1, -1, count)
    except struct.error as exc:
        raise RecordBatchError(f"cannot encode batch header: {exc}") from None
    write_crc(out)
    return bytes(out)


class _NotPlain(Exception):
    """A key or value ``encode_key_value_batch`` leaves to the general encoder."""


def build_records(
    values: Iterable[tuple[bytes | None, bytes | None]],
    headers: list[tuple[str, bytes | None]] | None = None,
) -> list[Record]:
    """``(key, value)`` pairs as records with offset deltas 0..n-1 and timestamp delta 0."""
    return [
        Record(offset_delta=i, key=key, value=value, headers=list(headers or ()))
        for i, (key, value) in enumerate(values)
    ]
