"""storage.walker: one walk over batch framing, from bytes (CRC-checked) or a file (headers only)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.records import BatchHeader, build_records, encode_batch, peek_batch_header, scan_batches
from storage.walker import BatchWalk, scan_bytes, walk_bytes, walk_file


def batches(sizes: list[int], value: int = 20) -> bytes:
    """Concatenated batches with contiguous offsets; batch i holds sizes[i] records."""
    out = bytearray()
    offset = 0
    for i, count in enumerate(sizes):
        records = build_records([(b"k%d" % (offset + j), b"v" * value) for j in range(count)])
        out += encode_batch(records, base_offset=offset, base_timestamp=1000 + 10 * i)
        offset += count
    return bytes(out)


def file_walk(
    path: Path, *, verify_crc: bool = False, chunk: int = 64 << 10
) -> tuple[BatchWalk, list[tuple[int, BatchHeader]], list[int]]:
    """Walk a real file through pread: the walk, what it found, and the length of each pread."""
    reads: list[int] = []
    fd = os.open(path, os.O_RDONLY)

    def pread(length: int, offset: int) -> bytes:
        reads.append(length)
        return os.pread(fd, length, offset)

    walk = walk_file(pread, path.stat().st_size, verify_crc=verify_crc, chunk=chunk)
    headers = walk.headers()
    os.close(fd)
    return walk, headers, reads


def test_bytes_walk_agrees_with_the_protocol_scanner() -> None:
    data = batches([1, 3, 2, 5, 1])
    headers, valid = scan_bytes(data)
    assert (headers, valid) == scan_batches(data)
    assert [h.base_offset for _, h in headers] == [0, 1, 4, 6, 11]
    assert valid == len(data)
    assert walk_bytes(data).describe_stop() is None


def test_a_walk_stops_at_the_first_bad_batch_and_says_why() -> None:
    data = batches([2, 2, 2])
    third = [pos for pos, _ in scan_bytes(data)[0]][2]
    torn = walk_bytes(data[:-5])
    assert [pos for pos, _ in torn] == [0, [p for p, _ in scan_bytes(data)[0]][1]]
    assert torn.valid_bytes == third
    assert torn.describe_stop() == f"batch at byte {third} claims {len(data) - third} bytes but only {len(data) - 5 - third} remain"
    flipped = bytearray(data)
    flipped[third + 40] ^= 1
    crc = walk_bytes(bytes(flipped))
    assert len(crc.headers()) == 2 and crc.describe_stop() == f"CRC mismatch in batch at byte {third}"
    assert len(walk_bytes(bytes(flipped), verify_crc=False).headers()) == 3, "without CRC checks: framing only"
    zeros = walk_bytes(data + bytes(100))
    assert len(zeros.headers()) == 3 and zeros.describe_stop() == f"100 zero bytes at byte {len(data)} (preallocated or unwritten tail)"
    short = walk_bytes(data + b"\x01\x02")
    short.headers()
    assert short.describe_stop() == f"only 2 bytes at byte {len(data)}, short of a 61-byte batch header"
    magic = bytearray(data)
    magic[third + 16] = 1
    bad = walk_bytes(bytes(magic))
    assert len(bad.headers()) == 2 and bad.describe_stop() == f"bad magic 1 at byte {third}"


_DATA = batches([1, 3, 2, 5, 1, 4])


@settings(max_examples=300, deadline=None)
@given(
    flips=st.lists(st.tuples(st.integers(0, len(_DATA) - 1), st.integers(1, 255)), max_size=3),
    cut=st.integers(0, len(_DATA)),
    tail=st.binary(max_size=80),
    start_batch=st.integers(0, 2),
)
def test_the_columns_of_a_walk_are_what_iterating_it_finds(
    flips: list[tuple[int, int]], cut: int, tail: bytes, start_batch: int
) -> None:
    """``columns`` (recovery's fast scan) takes exactly the batches iterating takes, and
    ends with the same valid length and the same reason, whatever the damage: bytes
    flipped anywhere (magic, lengths, offsets, CRC, records), a cut, trailing junk."""
    data = bytearray(_DATA[:cut] + tail)
    for at, mask in flips:
        if at < len(data):
            data[at] ^= mask
    start = [pos for pos, _ in scan_bytes(_DATA)[0]][start_batch]
    iterated = walk_bytes(bytes(data), start=start)
    headers = iterated.headers()
    fast = walk_bytes(bytes(data), start=start)
    assert fast.columns() == ([pos for pos, _ in headers], [h.base_offset for _, h in headers],
                              [h.last_offset_delta for _, h in headers])
    assert fast.valid_bytes == iterated.valid_bytes
    assert fast.describe_stop() == iterated.describe_stop()


@pytest.mark.parametrize("chunk", [61, 100, 1000, 64 << 10])
def test_a_file_walk_finds_the_same_headers_as_a_bytes_walk(tmp_path: Path, chunk: int) -> None:
    data = batches([1, 2, 1, 4, 1, 1, 3] * 20)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    expected = scan_bytes(data)[0]
    for verify in (False, True):
        walk, headers, _ = file_walk(path, verify_crc=verify, chunk=chunk)
        assert headers == expected and walk.valid_bytes == len(data)


def test_a_header_walk_reads_small_batches_in_chunks_and_large_ones_header_by_header(tmp_path: Path) -> None:
    small = tmp_path / "small.log"
    small.write_bytes(batches([1] * 500))  # ~100-byte batches
    _, headers, reads = file_walk(small)
    assert len(headers) == 500
    assert len(reads) <= small.stat().st_size // (64 << 10) + 2, "many headers per read"
    large = tmp_path / "large.log"
    large.write_bytes(batches([1] * 6, value=200_000))  # batches bigger than a chunk
    _, headers, reads = file_walk(large)
    assert len(headers) == 6
    assert sum(reads) < 6 * (64 << 10), "the records of a large batch are not read"


def test_a_file_walk_stops_at_a_torn_tail(tmp_path: Path) -> None:
    data = batches([2, 2, 2])
    path = tmp_path / "torn.log"
    path.write_bytes(data[:-7])
    walk, headers, _ = file_walk(path)
    assert len(headers) == 2 and walk.valid_bytes == headers[-1][0] + headers[-1][1].size
    assert walk.describe_stop() is not None and "claims" in walk.describe_stop()  # type: ignore[operator]


def test_a_walk_can_start_part_way_and_stop_at_a_size() -> None:
    data = batches([1, 1, 1, 1])
    positions = [pos for pos, _ in scan_bytes(data)[0]]
    walk = BatchWalk(data=data, start=positions[1], size=positions[3])
    assert [pos for pos, _ in walk] == positions[1:3]
    assert peek_batch_header(data, positions[1]).base_offset == 1


def test_a_walk_needs_one_source() -> None:
    with pytest.raises(ValueError):
        BatchWalk()
    with pytest.raises(ValueError):
        BatchWalk(pread=lambda n, o: b"")
