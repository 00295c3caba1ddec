"""Kafka's variable-length integers: unsigned varints and zig-zag VARINT / VARLONG.

An unsigned varint is LEB128: seven bits a byte, low group first, the top bit set on
every byte but the last. It carries compact lengths and the tagged-field section of
flexible messages (KIP-482). VARINT (32 bits, at most 5 bytes) and VARLONG (64 bits, at
most 10 bytes) zig-zag a signed value first, so small negatives stay short; they carry
the lengths and deltas inside records (Kafka's ``ByteUtils.writeVarint`` and
``readVarint``).

This is the only implementation in ``protocol``: the construct building blocks, the
generated message codecs and the record loop all call it. It knows nothing of those
layers, so it raises ``VarintError`` (a ``ValueError``) and each caller reports it as its
own error. A buffer that ends inside a varint raises ``IndexError``, as indexing past the
end does on the callers' inlined one-byte paths.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "SMALL_VARINTS",
    "UVARINT_MAX_BYTES",
    "VARINT_MAX_BYTES",
    "VARLONG_MAX_BYTES",
    "ZIGZAG_ONE_BYTE",
    "VarintError",
    "decode_uvarint",
    "decode_varint",
    "decode_varlong",
    "encode_uvarint",
    "encode_varint",
    "encode_varlong",
    "encode_zigzag",
    "read_uvarint",
    "unzigzag",
    "uvarint_tail",
    "zigzag",
    "zigzag_tail",
]

#: Longest UNSIGNED_VARINT Kafka reads (``ByteUtils.readUnsignedVarint``).
UVARINT_MAX_BYTES = 5
VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10


class VarintError(ValueError):
    """A varint that is too long or too wide, or a value no varint of its kind can hold."""


# --------------------------------------------------------------------------- unsigned


def encode_uvarint(value: int) -> bytes:
    """``value`` (any non-negative int) as an unsigned varint."""
    if 0 <= value <= 0x7F:
        return bytes((value,))
    if value < 0:
        raise VarintError(f"unsigned varint cannot hold {value}")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def uvarint_tail(buf: bytes, pos: int, first: int, limit: int = UVARINT_MAX_BYTES) -> tuple[int, int]:
    """Finish an unsigned varint whose first byte, ``first`` (>= 0x80), is already read.

    For decoders that read the common one-byte case inline: ``pos`` is just past
    ``first``. Returns (value, new position).
    """
    result = first & 0x7F
    shift = 7
    for _ in range(limit - 1):
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise VarintError(f"varint longer than {limit} bytes")


def decode_uvarint(buf: bytes, pos: int, limit: int = UVARINT_MAX_BYTES) -> tuple[int, int]:
    """The unsigned varint of at most ``limit`` bytes at ``pos``: (value, new position)."""
    first = buf[pos]
    if first < 0x80:
        return first, pos + 1
    return uvarint_tail(buf, pos + 1, first, limit)


def read_uvarint(next_byte: Callable[[], int], limit: int = UVARINT_MAX_BYTES) -> int:
    """An unsigned varint from a byte source read one byte at a time (a stream)."""
    result = 0
    shift = 0
    for _ in range(limit):
        byte = next_byte()
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
        shift += 7
    raise VarintError(f"varint longer than {limit} bytes")


# --------------------------------------------------------------------------- zig-zag


def zigzag(value: int, bits: int) -> int:
    """The unsigned form of a signed ``bits``-wide value (0, -1, 1, -2... -> 0, 1, 2, 3...)."""
    if not isinstance(value, int) or not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise VarintError(f"varint{bits} out of range: {value!r}")
    return ((value << 1) ^ (value >> (bits - 1))) & ((1 << bits) - 1)


def unzigzag(raw: int, bits: int) -> int:
    """The signed value of a decoded unsigned form, which must fit in ``bits`` bits."""
    if raw >> bits:
        raise VarintError(f"varint exceeds {bits} bits")
    return (raw >> 1) ^ -(raw & 1)


#: Encoded VARINT/VARLONG of every value that takes one byte (-64 to 63).
SMALL_VARINTS: dict[int, bytes] = {v: bytes((((v << 1) ^ (v >> 63)) & 0xFF,)) for v in range(-64, 64)}
#: Value of every one-byte VARINT/VARLONG, indexed by the byte (0 to 127).
ZIGZAG_ONE_BYTE: tuple[int, ...] = tuple((raw >> 1) ^ -(raw & 1) for raw in range(128))


def encode_zigzag(value: int, bits: int) -> bytes:
    """A signed ``bits``-wide value as a zig-zag varint (VARINT: 32, VARLONG: 64)."""
    small = SMALL_VARINTS.get(value) if type(value) is int else None
    if small is not None:
        return small
    return encode_uvarint(zigzag(value, bits))


def encode_varint(value: int) -> bytes:
    """Kafka VARINT."""
    return encode_zigzag(value, 32)


def encode_varlong(value: int) -> bytes:
    """Kafka VARLONG."""
    return encode_zigzag(value, 64)


def zigzag_tail(buf: bytes, pos: int, first: int, limit: int, bits: int) -> tuple[int, int]:
    """Finish a zig-zag varint whose first byte, ``first`` (>= 0x80), is already read."""
    raw, pos = uvarint_tail(buf, pos, first, limit)
    return unzigzag(raw, bits), pos


def decode_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Kafka VARINT at ``pos``: (value, new position)."""
    first = buf[pos]
    if first < 0x80:
        return ZIGZAG_ONE_BYTE[first], pos + 1
    return zigzag_tail(buf, pos + 1, first, VARINT_MAX_BYTES, 32)


def decode_varlong(buf: bytes, pos: int) -> tuple[int, int]:
    """Kafka VARLONG at ``pos``: (value, new position)."""
    first = buf[pos]
    if first < 0x80:
        return ZIGZAG_ONE_BYTE[first], pos + 1
    return zigzag_tail(buf, pos + 1, first, VARLONG_MAX_BYTES, 64)
