"""Helpers shared by the storage tests."""

from __future__ import annotations

from pathlib import Path

from storage.partition import PartitionLog


def payload(offset: int, size: int = 20) -> tuple[bytes, bytes]:
    """A record that names its own offset, so any misplaced byte is visible."""
    key = b"k%d" % offset
    return key, (key * size)[:size]


def fill(log: PartitionLog, batch_sizes: list[int], value_size: int = 20) -> list[tuple[int, int]]:
    """Append batches of self-describing records; returns each (base, next)."""
    spans: list[tuple[int, int]] = []
    for count in batch_sizes:
        base = log.next_offset
        spans.append(log.append([payload(base + i, value_size) for i in range(count)], 1000 + base))
    return spans


def all_records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record, via read_batches."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    for _, batch in log.read_batches():
        assert batch.records is not None
        out.extend((batch.offset_of(r), r.key, r.value) for r in batch.records)
    return out


def check_contents(log: PartitionLog, value_size: int = 20) -> None:
    """Every offset from log start to log end is present once, holding its own payload."""
    records = all_records(log)
    assert [offset for offset, _, _ in records] == list(range(log.log_start_offset, log.next_offset))
    for offset, key, value in records:
        assert (key, value) == payload(offset, value_size)


def flip_bit(path: Path, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[bit // 8] ^= 1 << (bit % 8)
    path.write_bytes(bytes(data))
