"""DeleteRecords' storage side: the log start offset moves, durably, and whole segments below it go."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.records import build_records, encode_batch
from storage.layout import log_start_file
from storage.partition import CorruptLogError, OffsetOutOfRangeError, PartitionLog


def _fill(log: PartitionLog, batches: int) -> None:
    for _ in range(batches):
        log.append_batch(encode_batch(build_records([(b"k", b"x" * 200)] * 2), base_timestamp=1))


def test_log_start_moves_inside_a_segment_and_survives_a_restart(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", segment_bytes=1024)
    _fill(log, 20)  # 40 records, several segments
    segments = len(log.segments)
    assert log.advance_log_start(5) == 5
    assert log.log_start_offset == 5
    with pytest.raises(OffsetOutOfRangeError):
        log.read_raw(4, 1000)
    assert log.read_raw(5, 1000)  # the batch holding offset 5 (it starts at 4, as on Kafka)
    assert log.advance_log_start(3) == 5  # never backwards
    assert log.advance_log_start(31) == 31
    assert len(log.segments) < segments  # segments wholly below 31 were deleted
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0", segment_bytes=1024)
    assert (reopened.log_start_offset, reopened.next_offset) == (31, 40)
    reopened.close()


def test_log_start_up_to_the_end_empties_the_log(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", segment_bytes=1024)
    _fill(log, 10)
    assert log.advance_log_start(log.next_offset) == 20
    assert log.read_raw(20, 1000) == b""
    _fill(log, 1)
    assert (log.log_start_offset, log.next_offset) == (20, 22)
    with pytest.raises(OffsetOutOfRangeError):
        log.advance_log_start(23)
    log.close()


def test_a_damaged_log_start_file_is_refused_with_its_name(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", segment_bytes=1024)
    _fill(log, 2)
    log.advance_log_start(1)
    log.close()
    log_start_file(tmp_path / "t-0").write_text("junk")
    with pytest.raises(CorruptLogError, match="log-start-offset"):
        PartitionLog.open(tmp_path / "t-0", segment_bytes=1024)
