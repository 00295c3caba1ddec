"""CoordinatorLog: group routing, replay order, group-commit accounting, fixed partition count."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from protocol.consumer_offsets import partition_for
from storage.coordinator_log import CoordinatorLog, PartitionCountError
from storage.faultfs import FaultyFileSystem
from storage.partition import PartitionLog

GROUPS = [f"group-{i}" for i in range(40)] + ["", "é-group", "console-consumer-12345"]


def _records(group: str, n: int) -> list[tuple[bytes, bytes | None]]:
    return [(f"{group}/{n}".encode(), None if n % 3 == 2 else f"v{n}".encode())]


def test_groups_routed_to_their_partition(tmp_path: Path) -> None:
    log = CoordinatorLog(tmp_path, 5, 4096)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["__consumer_offsets.journal", "__consumer_offsets.meta.json"]
    for group in GROUPS:
        log.append(group, [(group.encode(), b"x")], 1)
    used = {partition_for(g, 5) for g in GROUPS}
    assert len(used) > 1
    for p in range(5):
        plog = log.partition_log(p)
        assert (plog is not None) == (p in used)
        assert (tmp_path / f"__consumer_offsets-{p}").is_dir() == (p in used)
        if plog is not None:
            keys = [r.key for _, b in plog.read_batches() for r in b.records or []]
            assert keys == [g.encode() for g in GROUPS if partition_for(g, 5) == p]
    assert log.partition_of("my-group") == partition_for("my-group", 5)
    log.close()


def test_replay_in_partition_order_with_tombstones(tmp_path: Path) -> None:
    log = CoordinatorLog(tmp_path, 4, 300)
    expected: dict[int, list[tuple[bytes, bytes | None, int]]] = {p: [] for p in range(4)}
    for n in range(60):
        group = GROUPS[n % 7]
        recs = _records(group, n) + [(b"meta/" + group.encode(), b"m")]
        log.append(group, recs, 1000 + n)
        expected[partition_for(group, 4)].extend((k, v, 1000 + n) for k, v in recs)
    assert log.written_seq == 60
    want = [item for p in range(4) for item in expected[p]]
    assert list(log.replay()) == want
    assert any(v is None for _, v, _ in want)
    assert log.sync() == 60
    log.close()
    again = CoordinatorLog(tmp_path, 4, 300)
    assert list(again.replay()) == want
    # Several segments per partition were in play.
    plog = again.partition_log(partition_for(GROUPS[0], 4))
    assert plog is not None and len(plog.segments) > 1
    assert again.written_seq == 0 and again.durable_seq == 0
    again.close()


def test_empty_log_replays_nothing(tmp_path: Path) -> None:
    log = CoordinatorLog(tmp_path, 3, 4096)
    assert list(log.replay()) == []
    assert log.sync() == 0
    log.close()
    with pytest.raises(ValueError):
        log.append("g", _records("g", 0), 1)
    assert not any(p.is_dir() for p in tmp_path.iterdir()), "no partition created after close"


def test_sync_returns_increasing_durable_seqs(tmp_path: Path) -> None:
    log = CoordinatorLog(tmp_path, 3, 4096)
    seen = []
    for round_ in range(5):
        for n in range(round_ + 1):
            seq = log.append(GROUPS[n], _records(GROUPS[n], n), 1)
            assert seq == log.written_seq
        assert log.durable_seq < log.written_seq
        seen.append(log.sync())
        assert log.durable_seq == log.written_seq == seen[-1]
    assert seen == [1, 3, 6, 10, 15]
    assert log.sync() == 15  # nothing new
    log.close()


def test_partition_count_is_fixed(tmp_path: Path) -> None:
    log = CoordinatorLog(tmp_path, 4, 4096)
    log.append("g", _records("g", 0), 1)
    log.sync()
    log.close()
    with pytest.raises(PartitionCountError, match="4 partitions but 8"):
        CoordinatorLog(tmp_path, 8, 4096)
    with pytest.raises(PartitionCountError):
        CoordinatorLog(tmp_path, 2, 4096)
    same = CoordinatorLog(tmp_path, 4, 4096)
    assert len(list(same.replay())) == 1
    same.close()


def test_partition_dirs_without_metadata_are_checked(tmp_path: Path) -> None:
    PartitionLog.open(tmp_path / "__consumer_offsets-7", 4096).close()
    with pytest.raises(PartitionCountError, match=r"\[7\]"):
        CoordinatorLog(tmp_path, 4, 4096)
    assert not (tmp_path / "__consumer_offsets.meta.json").exists()


def test_append_racing_a_sync_is_left_for_the_next_sync(tmp_path: Path) -> None:
    """The seq a sync reports covers only what it captured before fsyncing; a sync fsyncs the
    journal alone, however many partitions were written."""
    fs = FaultyFileSystem()
    log = CoordinatorLog(tmp_path, 8, 4096, fs=fs)
    a, b = "group-0", next(g for g in GROUPS if partition_for(g, 8) != partition_for("group-0", 8))
    log.append(a, _records(a, 0), 1)

    entered, release = threading.Event(), threading.Event()
    flushed: list[str] = []

    def slow_fsync(path: str) -> None:
        flushed.append(Path(path).name)
        entered.set()
        assert release.wait(timeout=10)

    fs.before("fsync", slow_fsync, path="__consumer_offsets", times=None)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(log.sync()))
    thread.start()
    try:
        assert entered.wait(timeout=10)
        assert log.append(b, _records(b, 1), 1) == 2  # new partition, mid-sync
        assert log.append(a, _records(a, 2), 1) == 3  # same partition, mid-sync
        assert log.durable_seq == 0
    finally:
        release.set()
        thread.join(timeout=10)
    assert result == [1]
    assert flushed == ["__consumer_offsets.journal"]
    flushed.clear()
    assert log.sync() == 3
    assert flushed == ["__consumer_offsets.journal"]  # two partitions written, one fsync
    log.close()


def test_concurrent_appends_and_syncs(tmp_path: Path) -> None:
    log = CoordinatorLog(tmp_path, 4, 2048)
    stop = threading.Event()
    results: list[int] = []
    errors: list[BaseException] = []

    def syncer() -> None:
        try:
            while not stop.is_set():
                results.append(log.sync())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=syncer)
    thread.start()
    try:
        for n in range(300):
            log.append(GROUPS[n % 11], _records(GROUPS[n % 11], n), n)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert errors == [] and not thread.is_alive()
    assert results == sorted(results) and all(r <= 300 for r in results)
    assert log.sync() == 300 == log.durable_seq
    log.close()
    again = CoordinatorLog(tmp_path, 4, 2048)
    assert len(list(again.replay())) == 300
    again.close()
