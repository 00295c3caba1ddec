"""A partition's log copied from its leader keeps the leader's offsets, gaps included."""

from __future__ import annotations

from pathlib import Path

from storage.partition import PartitionLog
from storage.replica_copy import CopySource, LogCopy

SOURCE = CopySource("topic-id", 7)


def leader_log(tmp_path: Path, batches: int, compact: bool = False) -> PartitionLog:
    log = PartitionLog.open(tmp_path / "leader", 300)
    for i in range(batches):
        log.append([(f"k{i % 3}".encode(), f"v{i}".encode())], 1000 + i)
    if compact:
        log.compact(now_ms=10_000, delete_retention_ms=0)
    return log


def copy_all(leader: PartitionLog, copy: LogCopy, chunk: int = 200) -> None:
    while copy.next_offset < leader.next_offset:
        copy.append(leader.read_raw(copy.next_offset, chunk))
        copy.sync()


def records(log: PartitionLog) -> list[tuple[int, list[bytes | None]]]:
    return [(batch.base_offset, [r.value for r in batch.records or []]) for _, batch in log.read_batches(0)]


def test_a_copied_log_installs_as_the_same_log(tmp_path: Path) -> None:
    leader = leader_log(tmp_path, 20)
    copy = LogCopy(tmp_path / "copy", 300)
    copy.begin(SOURCE, leader.log_start_offset)
    copy_all(leader, copy)
    assert copy.next_offset == leader.next_offset
    copy.install(tmp_path / "installed")
    installed = PartitionLog.open(tmp_path / "installed", 300)
    assert records(installed) == records(leader)
    assert installed.next_offset == 20
    installed.append([(b"k", b"after")], 5000)  # the installed log takes appends at its end
    assert installed.next_offset == 21
    assert not (tmp_path / "copy").exists()


def test_gaps_left_by_the_leaders_cleaner_are_kept(tmp_path: Path) -> None:
    leader = leader_log(tmp_path, 30, compact=True)
    before = records(leader)
    assert len(before) < 30  # compaction made gaps
    copy = LogCopy(tmp_path / "copy", 300)
    copy.begin(SOURCE, leader.log_start_offset)
    copy_all(leader, copy)
    copy.install(tmp_path / "installed")
    installed = PartitionLog.open(tmp_path / "installed", 300)
    assert records(installed) == before
    assert installed.next_offset == leader.next_offset


def test_a_copy_resumes_after_a_restart(tmp_path: Path) -> None:
    leader = leader_log(tmp_path, 20)
    copy = LogCopy(tmp_path / "copy", 300)
    copy.begin(SOURCE, 0)
    copy.append(leader.read_raw(0, 200))
    copy.sync()
    half = copy.next_offset
    copy.close()
    again = LogCopy(tmp_path / "copy", 300)
    assert again.source == SOURCE and again.next_offset == half
    copy_all(leader, again)
    again.install(tmp_path / "installed")
    assert records(PartitionLog.open(tmp_path / "installed", 300)) == records(leader)


def test_batches_already_copied_are_skipped(tmp_path: Path) -> None:
    leader = leader_log(tmp_path, 3)
    copy = LogCopy(tmp_path / "copy", 1 << 20)
    copy.begin(SOURCE, 0)
    first = leader.read_raw(0, 1 << 20)
    assert copy.append(first) == copy.next_offset > 0
    assert copy.append(first) == 0


def test_a_log_that_starts_past_zero_keeps_its_start(tmp_path: Path) -> None:
    leader = leader_log(tmp_path, 10)
    leader.advance_log_start(4)
    copy = LogCopy(tmp_path / "copy", 1 << 20)
    copy.begin(SOURCE, leader.log_start_offset)
    copy_all(leader, copy)
    copy.install(tmp_path / "installed")
    installed = PartitionLog.open(tmp_path / "installed", 1 << 20)
    assert installed.log_start_offset == 4
    assert installed.next_offset == 10


def test_an_empty_leader_log_installs_empty_at_its_end(tmp_path: Path) -> None:
    copy = LogCopy(tmp_path / "copy", 1 << 20)
    copy.begin(SOURCE, 0)
    copy.skip_to(0)
    copy.install(tmp_path / "installed")
    assert PartitionLog.open(tmp_path / "installed", 1 << 20).next_offset == 0


def test_discarding_forgets_the_copy(tmp_path: Path) -> None:
    copy = LogCopy(tmp_path / "copy", 1 << 20)
    copy.begin(SOURCE, 0)
    copy.discard()
    assert not copy.started and not (tmp_path / "copy").exists()
