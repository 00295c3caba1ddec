"""Every record batch codec, both ways, for the broker's own reading and recompression.

``decode_batch`` keeps snappy, lz4 and zstd sections opaque: storing and serving a batch
never needs its records. The broker needs them in two places: checking each record of a
batch produced to a topic whose configs look at records (a compacted topic's keys,
timestamp bounds), and recompressing to a topic's ``compression.type``. This module
decompresses any codec with a ceiling on the output (a small bomb cannot allocate
gigabytes) and compresses the way Kafka's clients read back:

- gzip: a gzip member (Java's GZIPInputStream reads several members too);
- snappy: the xerial framing Kafka's Java client writes and reads (magic, version, then
  length-prefixed raw blocks); raw snappy is read as well, as librdkafka may send it;
- lz4: the LZ4 frame format with independent 64 KiB blocks and no block checksums,
  which is what Kafka's Lz4BlockInputStream accepts;
- zstd: one standard frame (several are read).

The codec libraries (cramjam for snappy, lz4, zstandard) load on first use.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Sequence
from typing import Any

from protocol.records.batch import RecordBatch, _encode_records, _parse_records, decode_batch, encode_batch
from protocol.records.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    Compression,
    RecordBatchError,
    write_crc,
)
from protocol.records.scanner import DEFAULT_MAX_UNCOMPRESSED, _gunzip

__all__ = ["compress", "decode_all_records", "decompress", "encode_compressed_batch"]

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")
_LZ4_BLOCK = 64 * 1024


def decompress(codec: Compression, data: bytes, limit: int = DEFAULT_MAX_UNCOMPRESSED) -> bytes:
    """The records section inside ``data``; ``RecordBatchError`` if it is bad or inflates past ``limit``."""
    try:
        if codec == Compression.NONE:
            return data
        if codec == Compression.GZIP:
            return _gunzip(data, limit)
        if codec == Compression.SNAPPY:
            return _unsnappy(data, limit)
        if codec == Compression.LZ4:
            return _unlz4(data, limit)
        if codec == Compression.ZSTD:
            return _unzstd(data, limit)
    except RecordBatchError:
        raise
    except Exception as exc:  # each library has its own error types
        raise RecordBatchError(f"cannot decompress the {codec.name.lower()} records: {exc}") from None
    raise RecordBatchError(f"unknown compression codec {codec}")


def compress(codec: Compression, data: bytes, level: int | None = None) -> bytes:
    """``data`` compressed with ``codec`` (``level`` None or -1: the codec's default)."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return gzip.compress(data, compresslevel=6 if level in (None, -1) else level, mtime=0)
    if codec == Compression.SNAPPY:
        import cramjam

        out = bytearray(_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1))
        for start in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
            out += _INT32.pack(len(block)) + block
        return bytes(out)
    if codec == Compression.LZ4:
        import lz4.frame

        return bytes(lz4.frame.compress(
            data, compression_level=min(9 if level is None else level, 16),
            block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False, content_checksum=False,
            block_checksum=False, store_size=False))
    if codec == Compression.ZSTD:
        import zstandard

        return bytes(zstandard.ZstdCompressor(level=3 if level is None else level).compress(data))
    raise RecordBatchError(f"unknown compression codec {codec}")


def decode_all_records(data: bytes, *, limit: int = DEFAULT_MAX_UNCOMPRESSED) -> RecordBatch:
    """Decode one batch strictly, with its records whatever the codec."""
    batch = decode_batch(data, max_uncompressed=limit)
    if batch.records is None:
        codec = Compression(batch.attributes & COMPRESSION_MASK)
        section = decompress(codec, batch.raw_records, limit)
        try:
            batch.records = _parse_records(section, batch.records_count)
        except RecordBatchError:
            raise
        except Exception as exc:
            raise RecordBatchError(f"malformed record batch: {exc}") from None
    return batch


def encode_compressed_batch(records: Sequence[Any], codec: Compression, level: int | None = None,
                            **header: Any) -> bytes:
    """``encode_batch`` for any codec: the records section compressed with ``codec``."""
    attributes = int(header.pop("attributes", 0)) & ~COMPRESSION_MASK
    if codec in (Compression.NONE, Compression.GZIP) and level in (None, -1):
        return encode_batch(records, attributes=attributes | codec, **header)
    plain = encode_batch(records, attributes=attributes, **header)
    section = compress(codec, _encode_records(records), level)
    buf = bytearray(plain[:HEADER_SIZE]) + section
    struct.pack_into(">i", buf, 8, len(buf) - LOG_OVERHEAD)
    struct.pack_into(">h", buf, ATTRIBUTES_OFFSET, attributes | codec)
    write_crc(buf)
    return bytes(buf)


# --- decompressors ----------------------------------------------------------------------------


def _too_big(codec: str, limit: int) -> RecordBatchError:
    return RecordBatchError(f"{codec} records inflate beyond {limit} bytes")


def _raw_snappy_length(block: bytes) -> int:
    """The uncompressed length a raw snappy block declares (its leading varint)."""
    result = shift = 0
    for i, byte in enumerate(block[:5]):
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
        shift += 7
        if i == 4:
            break
    raise RecordBatchError("snappy block has a bad length")


def _unsnappy(data: bytes, limit: int) -> bytes:
    import cramjam

    def raw(block: bytes, budget: int) -> bytes:
        if _raw_snappy_length(block) > budget:
            raise _too_big("snappy", limit)
        return bytes(cramjam.snappy.decompress_raw(block))

    if not data.startswith(_XERIAL_MAGIC):
        return raw(data, limit)
    out = bytearray()
    pos = _XERIAL_HEADER.size
    while pos < len(data):
        if pos + 4 > len(data):
            raise RecordBatchError("snappy (xerial) block length is truncated")
        (size,) = _INT32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise RecordBatchError("snappy (xerial) block is truncated")
        out += raw(data[pos : pos + size], limit - len(out))
        pos += size
    return bytes(out)


def _unlz4(data: bytes, limit: int) -> bytes:
    import lz4.frame

    out = bytearray()
    rest = data
    while rest:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        out += decompressor.decompress(rest, max_length=limit - len(out) + 1)
        if len(out) > limit:
            raise _too_big("lz4", limit)
        if not decompressor.eof:
            raise RecordBatchError("lz4 records section is truncated")
        rest = decompressor.unused_data
    return bytes(out)


def _unzstd(data: bytes, limit: int) -> bytes:
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    out = reader.read(limit + 1)
    if len(out) > limit:
        raise _too_big("zstd", limit)
    return bytes(out)
