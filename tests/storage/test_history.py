"""History retention: retired coordinator-log segments age out by their newest record."""

from __future__ import annotations

from pathlib import Path

from storage.history import history_dir_for, newest_timestamp, prune_history
from storage.partition import PartitionLog


def _segment(folder: Path, base: int, timestamps: list[int]) -> Path:
    """A segment file with one batch per timestamp, written by the real partition log."""
    scratch = folder.parent.parent / f"scratch-{folder.name}-{base}"
    log = PartitionLog.open(scratch, 1 << 20)
    for ts in timestamps:
        log.append([(b"k", b"v")], ts)
    log.flush()
    data = log.segments[0].read_bytes()
    log.close()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{base:020d}.log"
    path.write_bytes(data)
    return path


def test_history_is_off_at_zero_and_lives_under_the_data_dir(tmp_path: Path) -> None:
    assert history_dir_for(tmp_path, 0) is None
    assert history_dir_for(tmp_path, -1) == tmp_path / "history"
    assert history_dir_for(tmp_path, 1000) == tmp_path / "history"


def test_newest_timestamp_reads_batch_headers(tmp_path: Path) -> None:
    path = _segment(tmp_path / "h" / "__consumer_offsets-0", 0, [5000, 9000, 7000])
    assert newest_timestamp(path) == 9000
    path = _segment(tmp_path / "h" / "__consumer_offsets-0", 3, [5000, 7000, 9000])
    path.write_bytes(path.read_bytes()[:-3])  # a torn last batch is not read
    assert newest_timestamp(path) == 7000
    path.write_bytes(b"")
    assert newest_timestamp(path) is None


def test_prune_removes_only_segments_whose_newest_record_is_past_retention(tmp_path: Path) -> None:
    history = tmp_path / "history"
    old = _segment(history / "__consumer_offsets-0", 0, [1000, 2000])
    straddling = _segment(history / "__consumer_offsets-0", 10, [2000, 8000])
    young = _segment(history / "__consumer_offsets-1", 0, [9500])
    (history / "__consumer_offsets-1" / "notes.txt").write_text("not a segment")
    result = prune_history(history, now_ms=10_000, retention_ms=5000)
    assert (result.files_removed, result.files_kept) == (1, 2)
    assert result.bytes_removed > 0
    assert not old.exists() and straddling.exists() and young.exists()
    assert (history / "__consumer_offsets-1" / "notes.txt").exists()


def test_negative_retention_keeps_history_forever(tmp_path: Path) -> None:
    history = tmp_path / "history"
    path = _segment(history / "__consumer_offsets-0", 0, [1])
    result = prune_history(history, now_ms=10**12, retention_ms=-1)
    assert path.exists() and result.files_removed == 0 and result.files_kept == 1


def test_prune_of_a_missing_history_dir_is_a_no_op(tmp_path: Path) -> None:
    result = prune_history(tmp_path / "nothing", now_ms=10**12, retention_ms=1)
    assert (result.files_removed, result.files_kept) == (0, 0)
