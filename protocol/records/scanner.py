"""Records out of a batch's records section, by one generated straight-line loop.

``decode_batch`` (``protocol.records.batch``) and ``iter_records`` both read records
here: the section is first inflated when gzip-compressed (bounded, so a tiny gzip bomb
cannot make the broker allocate gigabytes), then walked once by a loop generated from
``_SCAN_SOURCE``. ``iter_records`` is the replay path: as strict as ``decode_batch`` but
yielding bare ``(offset, timestamp, key, value)`` tuples.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from protocol.records.header import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    Compression,
    RecordBatchError,
    as_view,
    check_crc,
    check_frame,
)
from protocol.varint import ZIGZAG_ONE_BYTE, VarintError, zigzag_tail

__all__ = ["DEFAULT_MAX_UNCOMPRESSED", "iter_records", "records_section", "scan_records"]

#: Default ceiling for a decompressed records section, so a tiny gzip bomb cannot
#: make the broker allocate gigabytes.
DEFAULT_MAX_UNCOMPRESSED = 64 * 1024 * 1024

T = TypeVar("T")


# --- records section ------------------------------------------------------------------


def records_section(view: memoryview, header: BatchHeader, max_uncompressed: int) -> tuple[bytes, bytes | None]:
    """The raw records section and, for NONE/GZIP, the bytes the records are read from."""
    codec = header.attributes & COMPRESSION_MASK
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


# --- fast record loop -----------------------------------------------------------------
#
# The layout the ``RECORD`` construct (``protocol.records.batch``) declares, read by one
# straight loop over the section: varints are decoded inline when they fit in one byte
# (nearly always: lengths, deltas and counts of small records), with the same bounds as
# the construct (VARINT at most 5 bytes and 32 bits, VARLONG 10 bytes and 64 bits,
# lengths below -1 refused, header keys UTF-8). A record's fields are read from the section itself rather than from a copy of
# its body; reading past the body's end can only happen while parsing an invalid record,
# and is then caught by the final "body used exactly ``length`` bytes" check (positions
# only move forward), so exactly the records the construct refuses are refused. Tests
# check this loop against ``RECORD`` on valid, truncated and corrupted sections.


class _Malformed(RecordBatchError):
    """A record the fast loop refuses (message mentions "malformed" like the reference's)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"malformed record batch: {reason}")


# (base_offset, base_timestamp, log_append_time or None): produce (offset, timestamp,
# key, value) tuples instead of calling ``make``.
_Placement = tuple[int, int, int | None]
_Scan = Callable[[bytes, int, _Placement | None, Callable[..., Any] | None], list[Any]]


_SCAN_SOURCE = """
def scan(buf, count, place, make):
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
            append(make(attributes, timestamp_delta, offset_delta, key, value, headers))
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


def _build_scan() -> _Scan:
    namespace: dict[str, Any] = {
        "_Malformed": _Malformed,
        "RecordBatchError": RecordBatchError,
        "_ZIGZAG": ZIGZAG_ONE_BYTE,
        "_zigzag_tail": zigzag_tail,
    }
    exec(compile(_expand_varints(_SCAN_SOURCE), "<records scan>", "exec"), namespace)
    scan: _Scan = namespace["scan"]
    return scan


#: ``_scan_loop(section, count, place, make)``: decode ``count`` records filling
#: ``section`` exactly, each as ``make(attributes, timestamp_delta, offset_delta, key,
#: value, headers)``, or with ``place`` as (offset, timestamp, key, value) tuples.
_scan_loop = _build_scan()


def _scan(section: bytes, count: int, place: _Placement | None, make: Callable[..., Any] | None) -> list[Any]:
    try:
        return _scan_loop(section, count, place, make)
    except RecordBatchError:
        raise
    except VarintError as exc:
        raise _Malformed(str(exc)) from None
    except (IndexError, ValueError) as exc:  # ran off the end; bad UTF-8 in a header key
        raise _Malformed(f"{type(exc).__name__}: {exc}") from None


def scan_records(section: bytes, count: int, make: Callable[..., T]) -> list[T]:
    """The ``count`` records of a (decompressed) section, each built by ``make``.

    ``make(attributes, timestamp_delta, offset_delta, key, value, headers)`` is called
    once per record, in order (``Record`` itself fits). Raises ``RecordBatchError``
    unless the records fill the section exactly.
    """
    return _scan(section, count, None, make)


# --- replay ---------------------------------------------------------------------------


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
        view = as_view(data)
        header = check_frame(view)
        if verify_crc:
            check_crc(view, header.crc)
        _, section = records_section(view, header, max_uncompressed)
        if section is None:
            codec = Compression(header.attributes & COMPRESSION_MASK)
            raise RecordBatchError(f"cannot read records compressed with {codec.name}")
        append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_BIT else None
        place = (header.base_offset, header.base_timestamp, append_time)
        records = _scan(section, header.records_count, place, None)
    except RecordBatchError:
        raise
    except (zlib.error, struct.error, ValueError, TypeError) as exc:
        raise RecordBatchError(f"malformed record batch: {exc}") from None
    return iter(records)
