"""The coordinator snapshot file: what is written is read back, and anything else is refused.

A snapshot cut short anywhere, or with any bit flipped, is ``SnapshotUnusable`` (the
checksum covers every byte); so is one of another format or partition count. Writing goes
through a ``.tmp`` file, so a failed write leaves the previous snapshot whole.
"""

from __future__ import annotations

import errno
from pathlib import Path

import crc32c
import pytest

from storage import coordinator_snapshot
from storage.coordinator_snapshot import (
    FORMAT,
    PartitionMark,
    SnapshotHeader,
    SnapshotUnusable,
    SnapshotWriter,
)
from storage.faultfs import FaultyFileSystem
from storage.fs import REAL_FS
from storage.layout import coordinator_snapshot_file, temp_file

HEADER = SnapshotHeader(1_700_000_000_123, (PartitionMark(0), PartitionMark(17, 12, 0xDEADBEEF)))
PAYLOAD = [b"group records", b"", b"offsets" * 5]


def _written(tmp_path: Path) -> bytes:
    coordinator_snapshot.write(REAL_FS, tmp_path, HEADER, PAYLOAD)
    return coordinator_snapshot_file(tmp_path).read_bytes()


def test_what_is_written_is_read_back(tmp_path: Path) -> None:
    size = coordinator_snapshot.write(REAL_FS, tmp_path, HEADER, PAYLOAD)
    assert coordinator_snapshot_file(tmp_path).stat().st_size == size
    found = coordinator_snapshot.read(REAL_FS, tmp_path, 2)
    assert found is not None
    header, payload = found
    assert header == HEADER
    assert bytes(payload) == b"".join(PAYLOAD)
    assert not temp_file(coordinator_snapshot_file(tmp_path)).exists()


def test_no_snapshot_is_none_and_remove_is_durable_and_idempotent(tmp_path: Path) -> None:
    assert coordinator_snapshot.read(REAL_FS, tmp_path, 2) is None
    _written(tmp_path)
    coordinator_snapshot.remove(REAL_FS, tmp_path)
    coordinator_snapshot.remove(REAL_FS, tmp_path)
    assert coordinator_snapshot.read(REAL_FS, tmp_path, 2) is None


def test_a_snapshot_cut_at_any_byte_is_unusable(tmp_path: Path) -> None:
    whole = _written(tmp_path)
    path = coordinator_snapshot_file(tmp_path)
    for size in range(len(whole)):
        path.write_bytes(whole[:size])
        with pytest.raises(SnapshotUnusable):
            coordinator_snapshot.read(REAL_FS, tmp_path, 2)


def test_a_snapshot_with_any_bit_flipped_is_unusable(tmp_path: Path) -> None:
    whole = _written(tmp_path)
    path = coordinator_snapshot_file(tmp_path)
    for position in range(len(whole)):
        for bit in range(8):
            damaged = bytearray(whole)
            damaged[position] ^= 1 << bit
            path.write_bytes(bytes(damaged))
            with pytest.raises(SnapshotUnusable):
                coordinator_snapshot.read(REAL_FS, tmp_path, 2)


def test_another_partition_count_or_format_is_unusable(tmp_path: Path) -> None:
    whole = _written(tmp_path)
    with pytest.raises(SnapshotUnusable, match="2 partitions, the log has 3"):
        coordinator_snapshot.read(REAL_FS, tmp_path, 3)
    newer = bytearray(whole)
    newer[7] = FORMAT + 1
    body = bytes(newer[:-4])
    coordinator_snapshot_file(tmp_path).write_bytes(body + crc32c.crc32c(body).to_bytes(4, "little"))
    with pytest.raises(SnapshotUnusable, match=f"format {FORMAT + 1}"):
        coordinator_snapshot.read(REAL_FS, tmp_path, 2)


def test_a_failed_write_leaves_the_previous_snapshot(tmp_path: Path) -> None:
    _written(tmp_path)
    fs = FaultyFileSystem()
    fs.fail("fsync", path=".tmp", errno=errno.EIO)
    with pytest.raises(OSError):
        coordinator_snapshot.write(fs, tmp_path, SnapshotHeader(5, (PartitionMark(1), PartitionMark(2))), [b"new"])
    found = coordinator_snapshot.read(REAL_FS, tmp_path, 2)
    assert found is not None and found[0] == HEADER
    assert not temp_file(coordinator_snapshot_file(tmp_path)).exists()


def test_an_aborted_writer_changes_nothing_and_a_stale_tmp_is_replaced(tmp_path: Path) -> None:
    _written(tmp_path)
    writer = SnapshotWriter(REAL_FS, tmp_path, SnapshotHeader(5, (PartitionMark(1), PartitionMark(2))))
    writer.write([b"half of it"])
    writer.abort()
    found = coordinator_snapshot.read(REAL_FS, tmp_path, 2)
    assert found is not None and found[0] == HEADER
    temp_file(coordinator_snapshot_file(tmp_path)).write_bytes(b"left by a crash")
    assert coordinator_snapshot.write(REAL_FS, tmp_path, HEADER, [b"x"]) > 0
    found = coordinator_snapshot.read(REAL_FS, tmp_path, 2)
    assert found is not None and bytes(found[1]) == b"x"


def test_a_prefetched_read_is_the_read(tmp_path: Path) -> None:
    """Start-up reads the file on a thread while the log opens; what ``read`` makes of those
    bytes is what it makes of the file: the snapshot, None, or the reading error."""
    assert not coordinator_snapshot.Prefetch(REAL_FS, tmp_path).threaded
    assert coordinator_snapshot.read(REAL_FS, tmp_path, 2, coordinator_snapshot.Prefetch(REAL_FS, tmp_path)) is None
    whole = _written(tmp_path)
    found = coordinator_snapshot.read(REAL_FS, tmp_path, 2, coordinator_snapshot.Prefetch(REAL_FS, tmp_path))
    assert found is not None
    assert found[0] == HEADER and bytes(found[1]) == b"".join(PAYLOAD)
    coordinator_snapshot_file(tmp_path).write_bytes(whole[:-1])
    with pytest.raises(SnapshotUnusable):
        coordinator_snapshot.read(REAL_FS, tmp_path, 2, coordinator_snapshot.Prefetch(REAL_FS, tmp_path))
    fs = FaultyFileSystem()
    fs.fail("read", path=coordinator_snapshot_file(tmp_path).name, errno=errno.EIO)
    prefetch = coordinator_snapshot.Prefetch(fs, tmp_path)
    with pytest.raises(OSError) as raised:
        coordinator_snapshot.read(fs, tmp_path, 2, prefetch)
    assert raised.value.errno == errno.EIO


def test_a_snapshot_under_the_prefetch_size_is_read_in_line(tmp_path: Path) -> None:
    """A small snapshot is read when asked for, on the caller's thread, with the same result."""
    whole = _written(tmp_path)
    assert coordinator_snapshot.Prefetch(REAL_FS, tmp_path, len(whole)).threaded
    small = coordinator_snapshot.Prefetch(REAL_FS, tmp_path, len(whole) + 1)
    assert not small.threaded
    coordinator_snapshot.remove(REAL_FS, tmp_path)
    assert coordinator_snapshot.read(REAL_FS, tmp_path, 2, small) is None, "read when asked, not before"
    _written(tmp_path)
    found = coordinator_snapshot.read(REAL_FS, tmp_path, 2, coordinator_snapshot.Prefetch(REAL_FS, tmp_path, 1 << 30))
    assert found is not None and found[0] == HEADER and bytes(found[1]) == b"".join(PAYLOAD)
