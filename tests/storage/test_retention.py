"""Delete-policy retention: whole sealed segments go by age or by size, oldest first."""

from __future__ import annotations

from pathlib import Path

from protocol.records import build_records, encode_batch
from storage.partition import PartitionLog

DAY = 86_400_000


def _fill(log: PartitionLog, batches: int, timestamp_of: object = None) -> None:
    for i in range(batches):
        ts = timestamp_of(i) if callable(timestamp_of) else 1_000_000 + i
        log.append_batch(encode_batch(build_records([(b"k", b"x" * 200)]), base_timestamp=ts))


def test_size_retention_keeps_at_least_retention_bytes_and_never_the_active_segment(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", segment_bytes=1024)
    _fill(log, 40)
    assert len(log.segments) > 4
    before = log.size_bytes
    deleted = log.enforce_retention(now_ms=0, retention_ms=-1, retention_bytes=2048)
    assert deleted > 0
    assert log.size_bytes >= 2048 > log.size_bytes - 1024  # no further segment could go
    assert log.size_bytes < before
    assert log.log_start_offset > 0
    assert next(o for o, _ in log.read_batches(0)) == log.log_start_offset  # reads start at the new start
    assert len(log.segments) >= 1
    assert log.enforce_retention(now_ms=0, retention_ms=-1, retention_bytes=0) >= 0
    assert len(log.segments) == 1  # the active segment always stays
    next_offset = log.next_offset
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0", segment_bytes=1024)
    assert (reopened.log_start_offset, reopened.next_offset) == (log.log_start_offset, next_offset)
    reopened.close()


def test_time_retention_deletes_segments_whose_newest_record_is_old(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", segment_bytes=1024)
    now = 100 * DAY
    _fill(log, 20, lambda i: now - 10 * DAY)  # old
    old_end = log.next_offset
    _fill(log, 20, lambda i: now - 1000)  # recent
    deleted = log.enforce_retention(now_ms=now, retention_ms=7 * DAY, retention_bytes=-1)
    assert deleted > 0
    # Every old record is gone except those sharing a segment with recent ones.
    assert log.log_start_offset <= old_end
    kept = [o for o, _ in log.read_batches(0)]
    assert kept[-1] == log.next_offset - 1
    assert all(o >= log.log_start_offset for o in kept)
    assert log.enforce_retention(now_ms=now, retention_ms=7 * DAY, retention_bytes=-1) == 0


def test_retention_start_says_where_retention_would_move_the_start_without_moving_it(tmp_path: Path) -> None:
    """The broker acts first (group offsets with nearest), then moves the start to exactly there."""
    log = PartitionLog.open(tmp_path / "t-0", segment_bytes=1024)
    twin = PartitionLog.open(tmp_path / "twin-0", segment_bytes=1024)
    now = 100 * DAY
    for target in (log, twin):
        _fill(target, 20, lambda i: now - 10 * DAY)
        _fill(target, 20, lambda i: now - 1000)
    segments = list(log.segments)
    start = log.retention_start(now, 7 * DAY, -1)
    assert start is not None and start > 0
    assert (log.log_start_offset, log.segments) == (0, segments)  # nothing moved yet
    assert log.advance_log_start(start) == start
    twin.enforce_retention(now_ms=now, retention_ms=7 * DAY, retention_bytes=-1)
    assert (log.log_start_offset, [p.name for p in log.segments]) == (
        twin.log_start_offset, [p.name for p in twin.segments])
    assert log.retention_start(now, 7 * DAY, -1) is None
    assert log.retention_start(now, -1, -1) is None


def test_nothing_to_delete_when_both_rules_are_off(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", segment_bytes=1024)
    _fill(log, 20)
    assert log.enforce_retention(now_ms=10**15, retention_ms=-1, retention_bytes=-1) == 0
    assert log.log_start_offset == 0


def test_segment_time_index_skips_segments_older_than_the_timestamp(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", segment_bytes=1024)
    _fill(log, 40, lambda i: 1_000 * i)  # timestamps grow with offsets
    bases = [int(p.name.split(".")[0]) for p in log.segments]
    assert len(bases) > 4
    candidates = list(log.segments_from_timestamp(25_000))
    assert candidates[0] > 0  # earlier segments were skipped
    assert candidates[0] <= 25 < (candidates[1] if len(candidates) > 1 else log.next_offset)
    assert candidates[-1] == bases[-1]  # the active segment is always a candidate
    assert list(log.segments_from_timestamp(0)) == bases
