"""Crash recovery: torn tails are cut, damage anywhere else refuses to start."""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from protocol.records import peek_batch_header
from storage.layout import segment_name
from storage.partition import CorruptLogError, PartitionLog
from tests.storage.util import all_records, check_contents, fill, flip_bit

REPO = Path(__file__).resolve().parents[2]
# Bytes 12..15 (partition_leader_epoch) are neither CRC-covered nor checked, so
# flipping them leaves a batch Kafka itself would accept.
_EPOCH = range(12, 16)


def _make_log(directory: Path, batch_sizes: list[int], segment_bytes: int = 1 << 20) -> list[tuple[int, int]]:
    log = PartitionLog.open(directory, segment_bytes)
    spans = fill(log, batch_sizes)
    log.flush()
    log.close()
    return spans


def _batch_positions(path: Path) -> list[int]:
    data = path.read_bytes()
    positions, pos = [], 0
    while pos < len(data):
        positions.append(pos)
        pos += peek_batch_header(data, pos).size
    return positions


def test_torn_tail_at_every_byte(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "p"
    spans = _make_log(directory, [2, 1, 3, 2, 4])
    path = directory / segment_name(0)
    original = path.read_bytes()
    last_pos = _batch_positions(path)[-1]
    last_base = spans[-1][0]
    caplog.set_level(logging.WARNING, logger="kcoord.storage")
    for cut in range(last_pos, len(original)):
        path.write_bytes(original[:cut])
        log = PartitionLog.open(directory, 1 << 20)
        assert log.recovery.truncated_bytes == cut - last_pos
        assert path.stat().st_size == last_pos
        assert log.next_offset == last_base
        check_contents(log)
        assert fill(log, [3]) == [(last_base, last_base + 3)]
        log.flush()
        log.close()
        again = PartitionLog.open(directory, 1 << 20)
        assert again.recovery.truncated_bytes == 0
        assert again.next_offset == last_base + 3
        check_contents(again)
        again.close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "kcoord.storage"]
    assert len(warnings) == len(original) - last_pos - 1  # every cut but the clean one
    assert f"dropping {len(original) - 1 - last_pos} bytes" in warnings[-1]
    assert str(path) in warnings[-1]


def test_torn_tail_in_a_later_segment(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    _make_log(directory, [2] * 12, segment_bytes=300)
    log = PartitionLog.open(directory, 300)
    last = log.segments[-1]
    end = log.next_offset
    log.close()
    data = last.read_bytes()
    last_pos = _batch_positions(last)[-1]
    last.write_bytes(data[: last_pos + 30])
    log = PartitionLog.open(directory, 300)
    assert log.next_offset == end - 2
    assert log.recovery.truncated_bytes == 30
    assert log.recovery.truncated_file == last
    check_contents(log)
    log.close()


def test_bit_flips_in_last_batch(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    spans = _make_log(directory, [2, 3, 1, 2])
    path = directory / segment_name(0)
    original = path.read_bytes()
    last_pos = _batch_positions(path)[-1]
    kept = dropped = 0
    for bit in range(last_pos * 8, len(original) * 8):
        path.write_bytes(original)
        flip_bit(path, bit)
        log = PartitionLog.open(directory, 1 << 20)
        if (bit // 8 - last_pos) in _EPOCH:
            kept += 1
            assert log.next_offset == spans[-1][1] and log.recovery.truncated_bytes == 0
        else:
            dropped += 1
            assert log.next_offset == spans[-1][0]
            assert log.recovery.truncated_bytes == len(original) - last_pos
        check_contents(log)
        log.close()
    assert kept == 32 and dropped > 400


def test_bit_flips_in_middle_batch_refuse_to_start(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    _make_log(directory, [2, 3, 1, 2, 2])
    path = directory / segment_name(0)
    original = path.read_bytes()
    positions = _batch_positions(path)
    start, stop = positions[2], positions[3]
    refused = 0
    for bit in range(start * 8, stop * 8):
        if (bit // 8 - start) in _EPOCH:
            continue
        path.write_bytes(original)
        flip_bit(path, bit)
        with pytest.raises(CorruptLogError) as info:
            PartitionLog.open(directory, 1 << 20)
        assert str(path) in str(info.value)
        assert "byte" in str(info.value)
        refused += 1
    assert refused == (stop - start - 4) * 8
    assert path.read_bytes() != original, "a refused log must be left untouched"


def test_corrupt_batch_followed_by_copied_valid_batch_is_refused(tmp_path: Path) -> None:
    """Damage then good data at an odd position (not where the bad header points)."""
    directory = tmp_path / "p"
    _make_log(directory, [2, 2, 2])
    path = directory / segment_name(0)
    positions = _batch_positions(path)
    data = bytearray(path.read_bytes())
    data[positions[1] + 8 : positions[1] + 12] = (10**6).to_bytes(4, "big")  # absurd length
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match=f"byte {positions[2]}"):
        PartitionLog.open(directory, 1 << 20)
    # Garbage followed by a valid batch five bytes later.
    path.write_bytes(bytes(data[: positions[1]]) + b"\x07" * 5 + bytes(data[positions[1] :]))
    log_bytes = path.read_bytes()
    with pytest.raises(CorruptLogError):
        PartitionLog.open(directory, 1 << 20)
    assert path.read_bytes() == log_bytes


def test_stale_older_batch_in_tail_is_treated_as_torn(tmp_path: Path) -> None:
    """A valid batch with offsets we already have (e.g. a record value holding a batch) is noise."""
    directory = tmp_path / "p"
    spans = _make_log(directory, [2, 2, 2])
    path = directory / segment_name(0)
    data = path.read_bytes()
    first = data[: _batch_positions(path)[1]]
    path.write_bytes(data + b"\xff" * 7 + first)
    log = PartitionLog.open(directory, 1 << 20)
    assert log.next_offset == spans[-1][1]
    assert log.recovery.truncated_bytes == 7 + len(first)
    check_contents(log)
    log.close()


def test_zero_filled_tail_is_truncated(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    spans = _make_log(directory, [1, 2, 3])
    path = directory / segment_name(0)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(bytes(4096))
    log = PartitionLog.open(directory, 1 << 20)
    assert log.recovery.truncated_bytes == 4096
    assert path.stat().st_size == size
    assert log.next_offset == spans[-1][1]
    assert fill(log, [1]) == [(6, 7)]
    check_contents(log)
    log.close()


def test_zero_filled_torn_batch(tmp_path: Path) -> None:
    """Preallocated file with the last batch half written, the rest zeros."""
    directory = tmp_path / "p"
    spans = _make_log(directory, [1, 2, 3])
    path = directory / segment_name(0)
    data = path.read_bytes()
    last_pos = _batch_positions(path)[-1]
    path.write_bytes(data[: last_pos + 20] + bytes(8192))
    log = PartitionLog.open(directory, 1 << 20)
    assert log.next_offset == spans[-1][0]
    assert path.stat().st_size == last_pos
    log.close()


def _three_segments(directory: Path) -> list[Path]:
    _make_log(directory, [2] * 12, segment_bytes=300)
    log = PartitionLog.open(directory, 300)
    segments = log.segments
    log.close()
    assert len(segments) >= 3
    return segments


def test_corrupt_non_last_segment_refuses_to_start(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    segments = _three_segments(directory)
    first = segments[0]
    original = first.read_bytes()
    last_pos = _batch_positions(first)[-1]
    # A flipped CRC-covered bit in the last batch of a sealed segment.
    flip_bit(first, (last_pos + 30) * 8)
    with pytest.raises(CorruptLogError, match="non-last segment") as info:
        PartitionLog.open(directory, 300)
    assert str(first) in str(info.value)
    # A short (torn) sealed segment is just as fatal.
    first.write_bytes(original[:-5])
    with pytest.raises(CorruptLogError, match=str(first)):
        PartitionLog.open(directory, 300)
    assert first.stat().st_size == len(original) - 5, "must not truncate a sealed segment"
    # Trailing zeros on a sealed segment too.
    first.write_bytes(original + bytes(100))
    with pytest.raises(CorruptLogError):
        PartitionLog.open(directory, 300)


def test_missing_middle_segment_refuses_to_start(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    segments = _three_segments(directory)
    segments[1].unlink()
    with pytest.raises(CorruptLogError, match="previous segment ends"):
        PartitionLog.open(directory, 300)


def test_segment_whose_name_disagrees_with_its_batches(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    segments = _three_segments(directory)
    segments[0].rename(directory / segment_name(1))
    with pytest.raises(CorruptLogError):
        PartitionLog.open(directory, 300)


def test_unrelated_files_are_ignored(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    spans = _make_log(directory, [2, 2])
    (directory / "00000000000000000000.index").write_bytes(b"junk")
    (directory / "notes.txt").write_text("hello")
    log = PartitionLog.open(directory, 1 << 20)
    assert log.next_offset == spans[-1][1] and len(log.segments) == 1
    log.close()


_CHILD = """
import sys
from pathlib import Path
from storage.partition import PartitionLog
from tests.storage.util import payload

log = PartitionLog.open(Path(sys.argv[1]), int(sys.argv[2]))
print("open", log.next_offset, flush=True)
n = 0
while True:
    n += 1
    base = log.next_offset
    log.append([payload(base + i, 30) for i in range(1 + n % 4)], 1000)
    log.flush()
    print(log.next_offset, flush=True)
"""


def _pump(stream: object, lines: queue.Queue[str | None]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.put(line)
    lines.put(None)


def test_kill_9_mid_write_keeps_every_acknowledged_offset(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    acknowledged = 0
    for cycle in range(5):
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(directory), "700"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        lines: queue.Queue[str | None] = queue.Queue()
        reader = threading.Thread(target=_pump, args=(child.stdout, lines), daemon=True)
        reader.start()
        try:
            opened = lines.get(timeout=30)
            assert opened is not None, child.stderr.read() if child.stderr else ""
            assert int(opened.split()[1]) >= acknowledged
            for _ in range(15 + 7 * cycle):
                line = lines.get(timeout=30)
                assert line is not None, child.stderr.read() if child.stderr else ""
                acked = int(line)
                assert acked > acknowledged
                acknowledged = acked
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
            reader.join(timeout=30)
            for stream in (child.stdout, child.stderr):
                if stream is not None:
                    stream.close()
        assert child.returncode == -signal.SIGKILL
        log = PartitionLog.open(directory, 700)
        assert log.next_offset >= acknowledged
        check_contents(log, value_size=30)
        assert len(all_records(log)) == log.next_offset
        log.close()
    assert acknowledged > 5 * 15
