"""The coordinator log's journal file: a sync fsyncs it alone, and a power cut loses nothing synced.

The fault-injecting filesystem's ``crash()`` keeps only what was durable (fsynced file
contents, fsynced directory entries), the strictest outcome POSIX allows; every test reopens
the log from what it left.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from protocol.consumer_offsets import partition_for
from protocol.records import encode_key_value_batch
from storage import wal
from storage.coordinator_log import CoordinatorLog
from storage.faultfs import MUTATIONS, Fault, FaultyFileSystem
from storage.fs import REAL_FS
from storage.layout import journal_file
from storage.partition import CorruptLogError
from storage.wal import DATA_START, WriteAheadJournal
from storage.walker import walk_bytes
from tests.support.journal import journal_entries

PARTITIONS = 4
GROUPS = [f"group-{i}" for i in range(12)]


def by_partition(log: CoordinatorLog) -> dict[int, list[tuple[bytes, bytes | None]]]:
    return {p: [(k, v) for k, v, _ in log.replay_partition(p)] for p in range(PARTITIONS)}


class Workload:
    """Appends over every partition, a sync every few, and the journal small enough to
    checkpoint several times; remembers what each sync made durable."""

    def __init__(self) -> None:
        self.appended: dict[int, list[tuple[int, tuple[bytes, bytes | None]]]] = {p: [] for p in range(PARTITIONS)}
        self.durable = 0

    def run(self, root: Path, fs: FaultyFileSystem | None = None) -> None:
        log = CoordinatorLog(root, PARTITIONS, 600, fs=fs or FaultyFileSystem(), journal_bytes=900)
        for i in range(60):
            group = GROUPS[i % len(GROUPS)]
            record = (f"{group}/{i}".encode(), None if i % 7 == 6 else b"v%d" % i)
            seq = log.append(group, [record], i)
            self.appended[partition_for(group, PARTITIONS)].append((seq, record))
            if i % 4 == 3:
                self.durable = log.sync()
        log.close()


def test_a_sync_fsyncs_the_journal_alone_and_a_power_cut_keeps_every_synced_batch(tmp_path: Path) -> None:
    fs = FaultyFileSystem(tmp_path)
    log = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20, fs=fs)
    fsynced: list[str] = []
    fs.before("fsync", lambda path: fsynced.append(Path(path).name), times=None)
    for i, group in enumerate(GROUPS):
        log.append(group, [(group.encode(), b"v%d" % i)], i)
    assert len({partition_for(g, PARTITIONS) for g in GROUPS}) == PARTITIONS
    log.sync()
    assert fsynced == ["__consumer_offsets.journal"], "one fsync for four partitions"
    expected = by_partition(log)
    log.close()
    fs.crash()
    segments = [s for p in range(PARTITIONS) for s in (tmp_path / f"__consumer_offsets-{p}").glob("*.log")]
    assert all(s.stat().st_size == 0 for s in segments), "the segments themselves were never fsynced"
    reopened = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    assert by_partition(reopened) == expected
    assert journal_entries(tmp_path) == [], "recovery ends with a checkpoint"
    reopened.close()
    again = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    assert by_partition(again) == expected
    again.close()


def test_a_crash_at_every_change_keeps_what_was_synced_and_a_prefix_of_the_rest(tmp_path: Path) -> None:
    """Crash the filesystem at each change the workload makes (appends, syncs, segment rolls,
    checkpoints); every reopened log holds, per partition, every batch a sync reported
    durable and otherwise a prefix of what was appended, and takes new appends."""
    counting = FaultyFileSystem(tmp_path / "count")
    (tmp_path / "count").mkdir()
    steps = counting.inject(Fault(MUTATIONS, times=0))
    complete = Workload()
    complete.run(tmp_path / "count", counting)
    journal = WriteAheadJournal(REAL_FS, journal_file(tmp_path / "count"))
    assert steps.seen > 60 and journal.generation >= 4, "the crash points cover several checkpoints"
    journal.close()
    for step in range(1, steps.seen + 1):
        root = tmp_path / f"crash-{step:04d}"
        root.mkdir()
        fs = FaultyFileSystem(root)
        fs.inject(Fault(MUTATIONS, nth=step, crash=True))
        workload = Workload()
        with pytest.raises(OSError):
            workload.run(root, fs)
        fs.crash()
        log = CoordinatorLog(root, PARTITIONS, 600)
        got = by_partition(log)
        for p in range(PARTITIONS):
            appended = workload.appended[p]
            records = [record for _, record in appended]
            assert got[p] == records[: len(got[p])], f"crash at step {step}: partition {p} is not a prefix"
            synced = [record for seq, record in appended if seq <= workload.durable]
            assert len(got[p]) >= len(synced), f"crash at step {step}: partition {p} lost a synced batch"
        log.append(GROUPS[0], [(b"after", b"crash")], 1)
        log.sync()
        log.close()
        shutil.rmtree(root)


def test_a_partition_cut_back_does_not_get_its_journalled_batches_back(tmp_path: Path) -> None:
    """A follower's truncation checkpoints first: the journal's older entries for the
    partition must not be laid back at the next start."""
    group = GROUPS[0]
    p = partition_for(group, PARTITIONS)
    log = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    for i in range(5):
        log.append(group, [(b"k%d" % i, b"v")], i)
    log.sync()
    plog = log.partition_log(p)
    assert plog is not None
    assert plog.truncate_to(2) == 2
    log.close()
    reopened = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    assert [k for k, _, _ in reopened.replay_partition(p)] == [b"k0", b"k1"]
    reopened.close()


def test_a_dropped_partition_does_not_come_back_from_the_journal(tmp_path: Path) -> None:
    group = GROUPS[0]
    p = partition_for(group, PARTITIONS)
    log = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    log.append(group, [(b"k", b"v")], 1)
    log.sync()
    log.drop_partition(p)
    log.close()
    reopened = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    assert reopened.partition_log(p) is None
    assert not (tmp_path / f"__consumer_offsets-{p}").exists()
    reopened.close()


def test_a_torn_last_entry_ends_the_journal_and_the_entries_before_it_are_kept(tmp_path: Path) -> None:
    fs = FaultyFileSystem(tmp_path)
    log = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20, fs=fs)
    appended: list[tuple[int, tuple[bytes, bytes]]] = []
    for i, group in enumerate(GROUPS[:6]):
        record = (group.encode(), b"v%d" % i)
        log.append(group, [record], i)
        appended.append((partition_for(group, PARTITIONS), record))
    log.sync()
    log.close()
    fs.crash()
    entries = journal_entries(tmp_path)
    assert len(entries) == 6
    end = DATA_START + sum(16 + len(batch) for _, batch in entries)
    with journal_file(tmp_path).open("r+b") as f:  # the last entry's write cut short
        f.seek(end - 3)
        f.write(b"\x00\x00\x00")
    reopened = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    expected: dict[int, list[tuple[bytes, bytes | None]]] = {p: [] for p in range(PARTITIONS)}
    for partition, record in appended[:-1]:
        expected[partition].append(record)
    assert by_partition(reopened) == expected
    reopened.append(GROUPS[0], [(b"after", b"1")], 1)
    reopened.sync()
    reopened.close()
    again = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    expected[partition_for(GROUPS[0], PARTITIONS)].append((b"after", b"1"))
    assert by_partition(again) == expected
    again.close()


def test_entries_of_an_older_generation_end_the_journal(tmp_path: Path) -> None:
    """A reset only starts a new generation; what the old one left on disk is not read."""
    journal = WriteAheadJournal(REAL_FS, journal_file(tmp_path))
    for n in range(3):
        journal.add(n, encode_key_value_batch([(b"old", b"%d" % n)], base_offset=n, base_timestamp=1))
    journal.flush()
    journal.reset()
    journal.add(0, encode_key_value_batch([(b"new", b"0")], base_offset=0, base_timestamp=1))
    journal.flush()
    journal.close()
    assert [partition for partition, _ in journal_entries(tmp_path)] == [0]
    again = WriteAheadJournal(REAL_FS, journal_file(tmp_path))
    assert again.generation == 2
    again.close()


def test_a_torn_header_falls_back_to_the_other_slot(tmp_path: Path) -> None:
    journal = WriteAheadJournal(REAL_FS, journal_file(tmp_path))
    journal.reset()  # generation 2, in slot 0; generation 1 stays in slot 512
    journal.close()
    with journal_file(tmp_path).open("r+b") as f:
        f.seek(5)
        f.write(b"\xff")
    again = WriteAheadJournal(REAL_FS, journal_file(tmp_path))
    assert again.generation == 1
    again.close()


def test_a_flush_changes_no_file_size_until_the_space_runs_out(tmp_path: Path) -> None:
    """The space is written ahead, so a flush's sync has no size to commit."""
    journal = WriteAheadJournal(REAL_FS, journal_file(tmp_path))
    path = journal_file(tmp_path)
    allocated = path.stat().st_size
    batch = encode_key_value_batch([(b"k", b"v" * 100)], base_offset=0, base_timestamp=1)
    written = 0
    while written + 16 + len(batch) <= allocated - DATA_START:
        journal.add(0, batch)
        journal.flush()
        written += 16 + len(batch)
        assert path.stat().st_size == allocated
    journal.add(0, batch)
    journal.flush()
    assert path.stat().st_size >= 2 * allocated - DATA_START, "grown ahead by doubling"
    journal.close()


def test_a_journal_entry_past_a_gap_refuses_to_start(tmp_path: Path) -> None:
    CoordinatorLog(tmp_path, PARTITIONS, 1 << 20).close()
    journal = WriteAheadJournal(FaultyFileSystem(), journal_file(tmp_path))
    journal.add(1, encode_key_value_batch([(b"k", b"v")], base_offset=5, base_timestamp=1))
    journal.flush()
    journal.close()
    with pytest.raises(CorruptLogError, match="log ends at offset 0 but the journal's next batch for it starts at 5"):
        CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    assert len(journal_entries(tmp_path)) == 1, "nothing is thrown away"


def test_entries_are_read_a_chunk_at_a_time_across_chunk_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Recovery never holds the whole journal: entries straddling a chunk's end, and ones
    larger than a chunk, come out whole and in order."""
    monkeypatch.setattr(wal, "READ_CHUNK", 700)
    journal = WriteAheadJournal(REAL_FS, journal_file(tmp_path))
    written = []
    for n in range(40):
        batch = encode_key_value_batch([(b"k%d" % n, b"v" * (n * 37 % 1500))], base_offset=n, base_timestamp=1)
        journal.add(n % PARTITIONS, batch)
        written.append((n % PARTITIONS, batch))
    journal.flush()
    journal.close()
    assert journal_entries(tmp_path) == written


def _lose_segments(root: Path) -> None:
    """What a power cut does to segments written since the last checkpoint: gone."""
    for segment in root.glob("__consumer_offsets-*/*.log"):
        segment.write_bytes(b"")


def test_an_entry_after_an_unreadable_one_never_comes_back(tmp_path: Path) -> None:
    """A crash may keep a later entry of a flush and lose an earlier one. Opening starts a new
    generation whatever it found, so writing from the start again cannot make the later,
    never acknowledged entry readable."""
    log = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    log.append("g", [(b"a", b"1")], 1)
    log.append("g", [(b"b", b"2")], 1)
    log.sync()
    log.close()
    entries = journal_entries(tmp_path)
    first = 16 + len(entries[0][1])
    with journal_file(tmp_path).open("r+b") as f:  # the first entry's page never reached the disk
        f.seek(DATA_START)
        f.write(bytes(first))
    _lose_segments(tmp_path)
    log = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    assert by_partition(log)[partition_for("g", PARTITIONS)] == []
    log.append("g", [(b"c", b"3")], 1)  # the same size: it lands exactly where the lost one was
    log.sync()
    log.close()
    _lose_segments(tmp_path)
    log = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    assert by_partition(log)[partition_for("g", PARTITIONS)] == [(b"c", b"3")]
    log.close()


def test_without_journalling_a_sync_fsyncs_the_partitions(tmp_path: Path) -> None:
    """``log.flush.policy=os``: nothing waits for syncs, so the journal would only grow."""
    fs = FaultyFileSystem()
    log = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20, fs=fs, journal=False)
    fsynced: list[str] = []
    fs.before("fsync", lambda path: fsynced.append(Path(path).parent.name), times=None)
    for group in GROUPS[:4]:
        log.append(group, [(group.encode(), b"v")], 1)
    log.sync()
    log.close()
    assert journal_entries(tmp_path) == []
    assert sorted(set(fsynced)) == sorted({f"__consumer_offsets-{partition_for(g, PARTITIONS)}" for g in GROUPS[:4]})


def test_a_closed_journal_refuses_to_flush(tmp_path: Path) -> None:
    journal = WriteAheadJournal(REAL_FS, journal_file(tmp_path))
    journal.add(0, encode_key_value_batch([(b"k", b"v")], base_offset=0, base_timestamp=1))
    journal.close()
    assert journal.closed
    with pytest.raises(ValueError, match="journal is closed"):
        journal.flush()


def _hole_in_the_middle(root: Path, partition: int) -> None:
    """Out-of-order writeback: the second batch of the partition's only segment never
    reached the disk (zeros), the batches after it did."""
    segment = next((root / f"__consumer_offsets-{partition}").glob("*.log"))
    data = bytearray(segment.read_bytes())
    start, second = list(walk_bytes(data))[1]
    data[start : start + second.size] = bytes(second.size)
    segment.write_bytes(bytes(data))


def _five_batches_then_a_hole(root: Path, *, checkpoint: bool) -> int:
    """Five batches of one group, synced (and checkpointed, if asked), then a hole made in
    its partition's segment; the partition."""
    group = GROUPS[0]
    log = CoordinatorLog(root, PARTITIONS, 1 << 20)
    for i in range(5):
        log.append(group, [(b"k%d" % i, b"v%d" % i)], i)
    log.sync()
    if checkpoint:
        log.checkpoint()
    log.close()
    p = partition_for(group, PARTITIONS)
    _hole_in_the_middle(root, p)
    return p


def test_a_hole_before_valid_batches_is_filled_from_the_journal(tmp_path: Path) -> None:
    p = _five_batches_then_a_hole(tmp_path, checkpoint=False)
    reopened = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    assert [k for k, _, _ in reopened.replay_partition(p)] == [b"k%d" % i for i in range(5)]
    reopened.close()


def test_a_hole_the_journal_does_not_cover_refuses_to_start(tmp_path: Path) -> None:
    """After a checkpoint the segment was fsynced: damage there is not a write the crash lost."""
    _five_batches_then_a_hole(tmp_path, checkpoint=True)
    with pytest.raises(CorruptLogError, match="the journal does not hold the batches from there on"):
        CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)


def test_an_append_during_a_checkpoint_is_durable_once_reported(tmp_path: Path) -> None:
    """The checkpoint's first pass runs with appends going on; an append made then is
    fsynced by its second pass before the journal starts over."""
    fs = FaultyFileSystem(tmp_path)
    log = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20, fs=fs)
    a, b = GROUPS[0], next(g for g in GROUPS if partition_for(g, PARTITIONS) != partition_for(GROUPS[0], PARTITIONS))
    log.append(a, [(b"a", b"1")], 1)
    log.sync()
    seqs: list[int] = []

    def append_meanwhile(_path: str) -> None:
        if not seqs:
            seqs.append(log.append(b, [(b"b", b"2")], 1))

    fs.before("fsync", append_meanwhile, path="__consumer_offsets-", times=None)
    log.checkpoint()
    fs.clear()
    assert seqs and log.sync() >= seqs[0]
    log.close()
    fs.crash()
    reopened = CoordinatorLog(tmp_path, PARTITIONS, 1 << 20)
    assert by_partition(reopened)[partition_for(b, PARTITIONS)] == [(b"b", b"2")]
    reopened.close()
