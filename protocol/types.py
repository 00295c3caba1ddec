"""Kafka's primitive wire types as construct building blocks.

Every type of the Kafka protocol is one small construct here; messages are assembled
from them by ``protocol.builder``. Parsing problems raise ``construct.ConstructError``
subclasses (never anything else); ``protocol.codec`` turns those into ``ProtocolError``.
The varint arithmetic itself is ``protocol.varint``'s.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import construct
from construct import Construct, StreamError, stream_read, stream_write

from protocol.varint import (
    UVARINT_MAX_BYTES,
    VARINT_MAX_BYTES,
    VARLONG_MAX_BYTES,
    VarintError,
    encode_uvarint,
    encode_zigzag,
    read_uvarint,
    unzigzag,
)

__all__ = [
    "BOOLEAN",
    "FLOAT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "UINT16",
    "UINT32",
    "UNSIGNED_VARINT",
    "UUID",
    "VARINT",
    "VARLONG",
    "KafkaArray",
    "KafkaBytes",
    "KafkaString",
    "WireError",
]


class WireError(construct.ConstructError):
    """A value on the wire breaks a rule of the Kafka type it claims to be."""


class _Fixed(Construct):
    """A fixed-width big-endian number, parsed with one ``struct`` call."""

    def __init__(self, fmt: str, name: str) -> None:
        super().__init__()
        self._packer = struct.Struct(">" + fmt)
        self._size = self._packer.size
        self._kind = name

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        return self._packer.unpack(stream_read(stream, self._size, path))[0]  # int or float

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        try:
            data = self._packer.pack(obj)
        except (struct.error, TypeError) as exc:
            raise WireError(f"{self._kind}: cannot encode {obj!r}: {exc}", path=path) from None
        stream_write(stream, data, self._size, path)
        return obj

    def _sizeof(self, context: Any, path: str) -> int:
        return self._size


class _Boolean(Construct):
    """Kafka BOOLEAN: one byte, zero is false and anything else is true."""

    def _parse(self, stream: Any, context: Any, path: str) -> bool:
        return bool(stream_read(stream, 1, path) != b"\x00")

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> bool:
        stream_write(stream, b"\x01" if obj else b"\x00", 1, path)
        return bool(obj)

    def _sizeof(self, context: Any, path: str) -> int:
        return 1


def _read_uvarint(stream: Any, max_bytes: int, path: str) -> int:
    try:
        return read_uvarint(lambda: stream_read(stream, 1, path)[0], max_bytes)
    except VarintError as exc:
        raise WireError(str(exc), path=path) from None


class _UnsignedVarint(Construct):
    """Kafka UNSIGNED_VARINT: LEB128, at most 5 bytes, value fits in 32 bits."""

    def _parse(self, stream: Any, context: Any, path: str) -> int:
        value = _read_uvarint(stream, UVARINT_MAX_BYTES, path)
        if value > 0xFFFFFFFF:
            raise WireError("unsigned varint exceeds 32 bits", path=path)
        return value

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> int:
        if not isinstance(obj, int) or not 0 <= obj <= 0xFFFFFFFF:
            raise WireError(f"unsigned varint out of range: {obj!r}", path=path)
        data = encode_uvarint(obj)
        stream_write(stream, data, len(data), path)
        return obj


class _ZigZag(Construct):
    """Kafka VARINT / VARLONG: zig-zag encoded signed LEB128."""

    def __init__(self, bits: int) -> None:
        super().__init__()
        self._bits = bits
        self._max_bytes = VARINT_MAX_BYTES if bits == 32 else VARLONG_MAX_BYTES

    def _parse(self, stream: Any, context: Any, path: str) -> int:
        raw = _read_uvarint(stream, self._max_bytes, path)
        try:
            return unzigzag(raw, self._bits)
        except VarintError as exc:
            raise WireError(str(exc), path=path) from None

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        try:
            data = encode_zigzag(obj, self._bits)
        except VarintError as exc:
            raise WireError(str(exc), path=path) from None
        stream_write(stream, data, len(data), path)
        return obj


class _Uuid(Construct):
    """Kafka UUID: 16 raw bytes, presented as ``uuid.UUID``."""

    def _parse(self, stream: Any, context: Any, path: str) -> uuid.UUID:
        return uuid.UUID(bytes=stream_read(stream, 16, path))

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> uuid.UUID:
        if not isinstance(obj, uuid.UUID):
            raise WireError(f"uuid expected, got {obj!r}", path=path)
        stream_write(stream, obj.bytes, 16, path)
        return obj

    def _sizeof(self, context: Any, path: str) -> int:
        return 16


BOOLEAN = _Boolean()
INT8 = _Fixed("b", "int8")
INT16 = _Fixed("h", "int16")
INT32 = _Fixed("i", "int32")
INT64 = _Fixed("q", "int64")
UINT16 = _Fixed("H", "uint16")
UINT32 = _Fixed("I", "uint32")
FLOAT64 = _Fixed("d", "float64")
UUID = _Uuid()
UNSIGNED_VARINT = _UnsignedVarint()
VARINT = _ZigZag(32)
VARLONG = _ZigZag(64)

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def _read_length(stream: Any, compact: bool, wide: bool, path: str) -> int:
    """Read a length prefix; -1 means null. Compact lengths are stored plus one."""
    if compact:
        return _read_uvarint(stream, UVARINT_MAX_BYTES, path) - 1
    if wide:
        return int(_INT32.unpack(stream_read(stream, 4, path))[0])
    return int(_INT16.unpack(stream_read(stream, 2, path))[0])


def _write_length(stream: Any, length: int, compact: bool, wide: bool, path: str) -> None:
    if compact:
        data = encode_uvarint(length + 1)
    elif wide:
        data = _INT32.pack(length)
    else:
        if length > 0x7FFF:
            raise WireError(f"string of {length} bytes is longer than int16 allows", path=path)
        data = _INT16.pack(length)
    stream_write(stream, data, len(data), path)


class KafkaString(Construct):
    """STRING, NULLABLE_STRING, COMPACT_STRING and COMPACT_NULLABLE_STRING (UTF-8)."""

    def __init__(self, nullable: bool = False, compact: bool = False) -> None:
        super().__init__()
        self.nullable = nullable
        self.compact = compact

    def _parse(self, stream: Any, context: Any, path: str) -> str | None:
        length = _read_length(stream, self.compact, False, path)
        if length < 0:
            if length == -1 and self.nullable:
                return None
            raise WireError(f"invalid string length {length}", path=path)
        raw = stream_read(stream, length, path)
        try:
            text: str = raw.decode("utf-8")
            return text
        except UnicodeDecodeError:
            raise WireError("string is not valid UTF-8", path=path) from None

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if obj is None:
            if not self.nullable:
                raise WireError("null given for a non-nullable string", path=path)
            _write_length(stream, -1, self.compact, False, path)
            return obj
        if not isinstance(obj, str):
            raise WireError(f"string expected, got {obj!r}", path=path)
        raw = obj.encode("utf-8")
        _write_length(stream, len(raw), self.compact, False, path)
        stream_write(stream, raw, len(raw), path)
        return obj


class KafkaBytes(Construct):
    """BYTES, NULLABLE_BYTES, COMPACT_BYTES and COMPACT_NULLABLE_BYTES (also RECORDS)."""

    def __init__(self, nullable: bool = False, compact: bool = False) -> None:
        super().__init__()
        self.nullable = nullable
        self.compact = compact

    def _parse(self, stream: Any, context: Any, path: str) -> bytes | None:
        length = _read_length(stream, self.compact, True, path)
        if length < 0:
            if length == -1 and self.nullable:
                return None
            raise WireError(f"invalid bytes length {length}", path=path)
        return bytes(stream_read(stream, length, path))

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if obj is None:
            if not self.nullable:
                raise WireError("null given for non-nullable bytes", path=path)
            _write_length(stream, -1, self.compact, True, path)
            return obj
        if not isinstance(obj, (bytes, bytearray, memoryview)):
            raise WireError(f"bytes expected, got {type(obj).__name__}", path=path)
        _write_length(stream, len(obj), self.compact, True, path)
        stream_write(stream, bytes(obj), len(obj), path)
        return obj


class KafkaArray(Construct):
    """ARRAY and COMPACT_ARRAY of any element type, nullable or not."""

    def __init__(self, element: Construct, nullable: bool = False, compact: bool = False) -> None:
        super().__init__()
        self.element = element
        self.nullable = nullable
        self.compact = compact

    def _parse(self, stream: Any, context: Any, path: str) -> list[Any] | None:
        count = _read_length(stream, self.compact, True, path)
        if count < 0:
            if count == -1 and self.nullable:
                return None
            raise WireError(f"invalid array length {count}", path=path)
        element = self.element
        # Every Kafka element is at least one byte, so a lying count runs out of stream
        # after at most len(frame) iterations; StreamError stops it there.
        return [element._parsereport(stream, context, path) for _ in range(count)]

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if obj is None:
            if not self.nullable:
                raise WireError("null given for a non-nullable array", path=path)
            _write_length(stream, -1, self.compact, True, path)
            return obj
        if isinstance(obj, (str, bytes, dict)):
            raise WireError(f"array expected, got {type(obj).__name__}", path=path)
        _write_length(stream, len(obj), self.compact, True, path)
        element = self.element
        for item in obj:
            element._build(item, stream, context, path)
        return obj


def parse_uvarint(stream: Any, path: str = "(uvarint)") -> int:
    """Read an unsigned varint of at most 5 bytes from a stream (tagged-field sections)."""
    return _read_uvarint(stream, UVARINT_MAX_BYTES, path)


__all__ += ["StreamError", "parse_uvarint"]
