"""Every codec both ways, agreeing with kafka-python's codecs (what clients send and read)."""

from __future__ import annotations

import os

import kafka.codec as kp
import pytest

from protocol.records import Compression, Record, RecordBatchError, decode_batch, encode_batch
from protocol.records.codecs import compress, decode_all_records, decompress, encode_compressed_batch

PAYLOAD = b"kcoord " * 5000 + os.urandom(2000)
CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]

KP_ENCODE = {Compression.GZIP: kp.gzip_encode, Compression.SNAPPY: kp.snappy_encode,
             Compression.LZ4: kp.lz4_encode, Compression.ZSTD: kp.zstd_encode}
KP_DECODE = {Compression.GZIP: kp.gzip_decode, Compression.SNAPPY: kp.snappy_decode,
             Compression.LZ4: kp.lz4_decode, Compression.ZSTD: kp.zstd_decode}


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_round_trip(codec: Compression) -> None:
    assert decompress(codec, compress(codec, PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_reads_ours(codec: Compression) -> None:
    assert KP_DECODE[codec](compress(codec, PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_we_read_kafka_pythons(codec: Compression) -> None:
    assert decompress(codec, KP_ENCODE[codec](PAYLOAD)) == PAYLOAD


def test_raw_snappy_is_read_too() -> None:
    assert decompress(Compression.SNAPPY, kp.snappy_encode(PAYLOAD, xerial_compatible=False)) == PAYLOAD


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_a_bomb_stops_at_the_limit(codec: Compression) -> None:
    bomb = compress(codec, bytes(1_000_000))
    with pytest.raises(RecordBatchError, match="inflate beyond"):
        decompress(codec, bomb, limit=100_000)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_garbage_is_a_record_batch_error(codec: Compression) -> None:
    with pytest.raises(RecordBatchError):
        decompress(codec, b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x09garbage!!"
                   if codec is Compression.SNAPPY else b"garbage, not compressed")


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_compressed_batches_decode_with_records(codec: Compression) -> None:
    records = [Record(offset_delta=i, key=None if i == 1 else b"k%d" % i, value=b"v" * i) for i in range(4)]
    data = encode_compressed_batch(records, codec, base_offset=7, base_timestamp=1_700_000_000_000)
    batch = decode_batch(data)  # valid framing and CRC
    assert batch.compression is codec
    full = decode_all_records(data)
    assert [(r.key, r.value) for r in full.records or []] == [(r.key, r.value) for r in records]
    assert full.base_offset == 7 and full.records_count == 4


def test_uncompressed_batch_is_encode_batch() -> None:
    records = [Record(key=b"k", value=b"v")]
    assert encode_compressed_batch(records, Compression.NONE) == encode_batch(records)
