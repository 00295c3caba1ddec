"""A cluster node's replication-offset-checkpoint: Kafka's format, replaced whole, and a file
that cannot be read counts as no checkpoint."""

from __future__ import annotations

from pathlib import Path

from storage.hw_checkpoint import HighWatermarkCheckpoint, decode, encode
from storage.layout import replication_checkpoint_file, temp_file


def test_the_checkpoint_is_kafkas_offset_checkpoint_file() -> None:
    raw = encode({("orders", 1): 42, ("__consumer_offsets", 7): 0})
    assert raw == b"0\n2\n__consumer_offsets 7 0\norders 1 42\n"
    assert decode(raw) == {("orders", 1): 42, ("__consumer_offsets", 7): 0}


def test_high_watermarks_survive_a_restart(tmp_path: Path) -> None:
    HighWatermarkCheckpoint(tmp_path).write({("t", 0): 10, ("t", 1): 3})
    assert HighWatermarkCheckpoint(tmp_path).read() == {("t", 0): 10, ("t", 1): 3}
    assert replication_checkpoint_file(tmp_path).name == "replication-offset-checkpoint"


def test_an_unchanged_checkpoint_is_not_written_again(tmp_path: Path) -> None:
    checkpoint = HighWatermarkCheckpoint(tmp_path)
    assert checkpoint.write({("t", 0): 10})
    assert not checkpoint.write({("t", 0): 10})
    assert checkpoint.write({("t", 0): 11})


def test_a_temp_file_left_by_a_crash_does_not_replace_the_checkpoint(tmp_path: Path) -> None:
    HighWatermarkCheckpoint(tmp_path).write({("t", 0): 10})
    temp_file(replication_checkpoint_file(tmp_path)).write_bytes(b"0\n1\nt 0 99")  # torn, never renamed
    assert HighWatermarkCheckpoint(tmp_path).read() == {("t", 0): 10}
    HighWatermarkCheckpoint(tmp_path).write({("t", 0): 12})
    assert HighWatermarkCheckpoint(tmp_path).read() == {("t", 0): 12}


def test_a_checkpoint_that_cannot_be_read_counts_as_none(tmp_path: Path) -> None:
    assert HighWatermarkCheckpoint(tmp_path).read() == {}
    path = replication_checkpoint_file(tmp_path)
    for garbage in (b"", b"1\n1\nt 0 5\n", b"0\n2\nt 0 5\n", b"0\n1\nt zero 5\n", b"\xff\xfe"):
        path.write_bytes(garbage)
        assert HighWatermarkCheckpoint(tmp_path).read() == {}, garbage
