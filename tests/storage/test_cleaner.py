"""The log cleaner: what survives compaction, offsets kept, reads across gaps, crash-safe swap."""

from __future__ import annotations

import errno
import itertools
import shutil
import struct
import tempfile
import threading
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.consumer_offsets import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    encode_group_value,
    encode_key,
    encode_offset_value,
    partition_for,
)
from protocol.records import Record, encode_batch, iter_batches, peek_batch_header
from storage.coordinator_log import CoordinatorLog
from storage.faultfs import MUTATIONS, Fault, FaultyFileSystem
from storage.layout import CLEANED_SUFFIX, SWAP_SUFFIX, parse_segment_name
from storage.partition import CorruptLogError, PartitionLog

Entry = tuple[int, bytes | None, bytes | None]  # (offset, key, value)


class Model:
    """Everything appended, so tests can say exactly what compaction must keep."""

    def __init__(self) -> None:
        self.appended: list[tuple[int, bytes | None, bytes | None, int]] = []  # + timestamp

    def append(self, log: PartitionLog, records: list[tuple[bytes | None, bytes | None]], ts: int) -> None:
        base, _ = log.append(records, ts)
        self.appended.extend((base + i, k, v, ts) for i, (k, v) in enumerate(records))

    def state(self) -> dict[bytes, bytes]:
        """The key -> latest non-null value map a replay must rebuild."""
        out: dict[bytes, bytes] = {}
        for _, key, value, _ in self.appended:
            if key is None:
                continue
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out

    def survivors(self, active_base: int, now_ms: int, retention_ms: int, seen: int | None = None) -> list[Entry]:
        """What a clean keeps: below ``active_base`` the latest per key minus old tombstones.

        ``seen`` is the log end when the clean began: later appends are not in its key map.
        """
        latest = {
            key: offset for offset, key, _, _ in self.appended
            if key is not None and (seen is None or offset < seen)
        }
        return [
            (offset, key, value)
            for offset, key, value, ts in self.appended
            if offset >= active_base
            or (
                key is not None
                and latest[key] == offset
                and not (value is None and now_ms - ts > retention_ms)
            )
        ]


def records(log: PartitionLog, start: int = 0) -> list[Entry]:
    out: list[Entry] = []
    for _, batch in log.read_batches(start):
        assert batch.records is not None
        out.extend((batch.offset_of(r), r.key, r.value) for r in batch.records)
    return out


def replay(log: PartitionLog) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for _, key, value in records(log):
        assert key is not None
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def active_base(log: PartitionLog) -> int:
    base = parse_segment_name(log.segments[-1].name)
    assert base is not None
    return base


def temp_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX)))


def build(
    directory: Path, n: int = 120, keys: int = 6, segment_bytes: int = 400, fs: FaultyFileSystem | None = None
) -> tuple[PartitionLog, Model]:
    """A log of updates to a few keys, with a tombstone every 7th record, over many segments."""
    log = PartitionLog.open(directory, segment_bytes) if fs is None else PartitionLog.open(directory, segment_bytes, fs=fs)
    model = Model()
    for i in range(n):
        key = b"key-%d" % (i % keys)
        model.append(log, [(key, None if i % 7 == 3 else b"value-%d" % i)], 1000 + i)
    log.flush()
    assert len(log.segments) > 4
    return log, model


# --- what survives ------------------------------------------------------------------------


def test_latest_value_per_key_survives_with_its_offset(tmp_path: Path) -> None:
    log, model = build(tmp_path / "p")
    before = records(log)
    end = log.next_offset
    base = active_base(log)
    result = log.compact(now_ms=1000, delete_retention_ms=10**9)
    after = records(log)
    assert after == model.survivors(base, 1000, 10**9)
    assert set(after) <= set(before), "every survivor is an original record at its original offset"
    sealed_keys = [key for offset, key, _ in after if offset < base]
    assert len(sealed_keys) == len(set(sealed_keys)), "one record per key in the cleaned part"
    assert replay(log) == model.state()
    assert log.next_offset == end and log.log_start_offset == 0
    assert result.records_before == base and result.records_after == len([e for e in after if e[0] < base])
    assert result.bytes_after < result.bytes_before
    assert result.segments_after == len(log.segments) - 1 < result.segments_before + 1
    assert result.cleaned_up_to == base
    assert temp_files(tmp_path / "p") == []
    log.close()


def test_key_whose_latest_record_is_in_the_active_segment_leaves_the_sealed_ones(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", 200)
    model = Model()
    for i in range(30):
        model.append(log, [(b"hot", b"v%d" % i), (b"cold-%d" % i, b"c")], 5)
    base = active_base(log)
    log.compact(now_ms=5, delete_retention_ms=0)
    hot = [offset for offset, key, _ in records(log) if key == b"hot"]
    assert hot and all(offset >= base for offset in hot)
    assert replay(log) == model.state()
    log.close()


def test_tombstones_kept_while_young_dropped_once_older_than_retention(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", 150)
    log.append([(b"a", b"1"), (b"b", b"1")], 1000)
    log.append([(b"a", None)], 2000)  # offset 2: tombstone written at t=2000
    for i in range(10):
        log.append([(b"filler-%d" % i, b"x" * 40)], 2000)
    assert active_base(log) > 2
    tombstone = (2, b"a", None)
    young = log.compact(now_ms=2500, delete_retention_ms=500)  # age 500: not older than 500
    assert tombstone in records(log) and young.tombstones_dropped == 0
    assert (0, b"a", b"1") not in records(log)
    old = log.compact(now_ms=2501, delete_retention_ms=500)
    assert tombstone not in records(log) and old.tombstones_dropped == 1
    assert b"a" not in replay(log) and replay(log)[b"b"] == b"1"
    log.close()
    again = PartitionLog.open(tmp_path / "p", 150)
    assert b"a" not in replay(again)
    again.close()


def test_null_keys_dropped_control_and_opaque_batches_kept(tmp_path: Path) -> None:
    """A batch the cleaner cannot read might hide an older value, so tombstones then stay."""
    log = PartitionLog.open(tmp_path / "p", 250)
    log.append([(b"k", b"old"), (None, b"no key")], 10)
    control = encode_batch([Record(key=b"\x00\x00\x00\x01", value=b"\x00\x00\x00\x00\x00\x00")], attributes=0x30)
    log.append_batch(control)
    log.append_batch(_zstd_flagged(encode_batch([Record(key=b"z", value=b"?")], base_timestamp=10)))
    log.append([(b"k", None)], 10)
    for _ in range(6):
        log.append([(b"pad", b"x" * 50)], 10)
    assert active_base(log) > 4
    raw_before = {b.base_offset: b.raw_records for _, b in log.read_batches() if b.attributes & 0x27}
    log.compact(now_ms=10**6, delete_retention_ms=0)
    batches = {b.base_offset: b for _, b in log.read_batches()}
    assert {o: batches[o].raw_records for o in raw_before} == raw_before, "copied verbatim"
    assert batches[2].is_control and batches[3].records is None
    kept = [(batch.offset_of(r), r.key, r.value) for batch in batches.values() for r in batch.records or []]
    assert (1, None, b"no key") not in kept and (0, b"k", b"old") not in kept
    assert (4, b"k", None) in kept, "an opaque sealed batch blocks tombstone removal"
    log.close()


def _zstd_flagged(batch: bytes) -> bytes:
    """Mark a batch as zstd-compressed (it is not: the cleaner must not read it anyway)."""
    buf = bytearray(batch)
    struct.pack_into(">h", buf, 21, 4)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def test_timestamps_and_producer_fields_survive_filtering(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", 300)
    batch = encode_batch(
        [Record(offset_delta=i, timestamp_delta=i * 10, key=b"k%d" % (i % 2), value=b"v%d" % i) for i in range(4)],
        base_timestamp=5000, producer_id=77, producer_epoch=3, base_sequence=40,
    )
    log.append_batch(batch)
    while active_base(log) == 0:
        log.append([(b"pad", b"x" * 60)], 1)
    log.compact(now_ms=0, delete_retention_ms=0)
    first = next(b for _, b in log.read_batches())
    assert (first.base_offset, first.last_offset_delta) == (0, 3), "the batch still spans its offsets"
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (77, 3, 40)
    assert [(first.offset_of(r), first.timestamp_of(r), r.value) for r in first.records or []] == [
        (2, 5020, b"v2"), (3, 5030, b"v3"),
    ]
    log.close()


# --- offsets, reads, appends, reopening -----------------------------------------------


def test_reads_by_offset_across_gaps_return_the_next_survivor(tmp_path: Path) -> None:
    log, _ = build(tmp_path / "p")
    log.compact(now_ms=1000, delete_retention_ms=10**9)
    everything = records(log)
    offsets = {offset for offset, _, _ in everything}
    assert len(offsets) < log.next_offset, "compaction left gaps"
    for start in range(log.next_offset + 1):
        batches = list(log.read_batches(start))
        expected = [e for e in everything if e[0] >= start]
        assert [e for e in records(log, start) if e[0] >= start] == expected
        if batches:
            assert batches[0][1].next_offset > start, "never starts with a batch wholly before start"
        raw = log.read_raw(start, 1)
        if start < log.next_offset:
            first = next(b for _, b in iter_batches(raw))
            assert first.next_offset > start
            survivors = [o for o, _, _ in expected]
            if survivors and first.records:
                assert min(first.offset_of(r) for r in first.records if first.offset_of(r) >= start) == survivors[0]
        else:
            assert raw == b""
    log.close()


def test_appends_continue_after_compaction_and_reopen_recovers_the_gaps(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    log, model = build(directory)
    end = log.next_offset
    log.compact(now_ms=1000, delete_retention_ms=10**9)
    compacted = records(log)
    model.append(log, [(b"key-0", b"after"), (b"new", b"n")], 5000)
    assert records(log)[-2:] == [(end, b"key-0", b"after"), (end + 1, b"new", b"n")]
    log.flush()
    log.close()
    again = PartitionLog.open(directory, 400)
    assert again.recovery.truncated_bytes == 0 and again.recovery.swaps_completed == 0
    assert records(again) == compacted + [(end, b"key-0", b"after"), (end + 1, b"new", b"n")]
    assert replay(again) == model.state()
    assert again.next_offset == end + 2
    model.append(again, [(b"more", b"m")], 6000)
    assert records(again)[-1] == (end + 2, b"more", b"m")
    again.close()


def test_recompaction_merges_segments_and_converges(tmp_path: Path) -> None:
    log, model = build(tmp_path / "p", n=200)
    first = log.compact(now_ms=1000, delete_retention_ms=10**9)
    once = records(log)
    second = log.compact(now_ms=1000, delete_retention_ms=10**9)
    assert records(log) == once
    assert second.segments_after < first.segments_after, "small cleaned segments merge"
    third = log.compact(now_ms=1000, delete_retention_ms=10**9)
    assert records(log) == once and third.bytes_after == third.bytes_before
    names = sorted(p.name for p in (tmp_path / "p").iterdir())
    fourth = log.compact(now_ms=1000, delete_retention_ms=10**9)
    assert fourth.bytes_after == fourth.bytes_before and sorted(p.name for p in (tmp_path / "p").iterdir()) == names
    assert replay(log) == model.state()
    log.close()


def test_dirty_ratio_counts_sealed_bytes_since_the_last_clean(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", 300)
    assert log.dirty_ratio() == 0.0
    nothing = log.compact(now_ms=1, delete_retention_ms=0)
    assert (nothing.segments_before, nothing.records_before, nothing.bytes_after) == (0, 0, 0)
    for i in range(40):
        log.append([(b"k%d" % (i % 3), b"v" * 30)], 1)
    assert log.dirty_ratio() == 1.0
    log.compact(now_ms=1, delete_retention_ms=0)
    assert log.dirty_ratio() == 0.0
    while log.dirty_ratio() == 0.0:
        log.append([(b"k0", b"v" * 30)], 1)
    assert 0.0 < log.dirty_ratio() < 1.0
    log.close()


def test_appends_are_not_blocked_while_a_clean_is_running(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log, model = build(tmp_path / "p", fs=fs)
    base, seen = active_base(log), log.next_offset
    appended: list[bool] = []

    def append_from_another_thread(_path: str) -> None:
        # Mid-clean (the first cleaned file is about to be created): another thread appends
        # enough to roll segments.
        def writer() -> None:
            for _ in range(20):
                model.append(log, [(b"key-1", b"x" * 60)], 9000)

        worker = threading.Thread(target=writer)
        worker.start()
        worker.join(timeout=10)
        appended.append(not worker.is_alive())

    fs.before("create", append_from_another_thread, path=CLEANED_SUFFIX)
    result = log.compact(now_ms=1000, delete_retention_ms=10**9)
    assert appended == [True], "an append waited for the cleaner"
    assert result.cleaned_up_to == base < active_base(log)
    assert records(log) == model.survivors(base, 1000, 10**9, seen)
    assert replay(log) == model.state()
    log.close()
    again = PartitionLog.open(tmp_path / "p", 400)
    assert replay(again) == model.state()
    again.close()


def test_history_dir_keeps_every_original_segment(tmp_path: Path) -> None:
    directory, history = tmp_path / "p", tmp_path / "history"
    log, model = build(directory)
    log.close()
    log = PartitionLog.open(directory, 400, history_dir=history)
    originals = {p.name: p.read_bytes() for p in log.segments[:-1]}
    log.compact(now_ms=1000, delete_retention_ms=10**9)
    kept = {p.name: p.read_bytes() for p in (history / "p").iterdir()}
    assert kept == originals, "moved byte for byte under a per-partition folder"
    for _ in range(30):
        model.append(log, [(b"key-2", b"y" * 40)], 3000)
    newly_sealed = {p.name: p.read_bytes() for p in log.segments[:-1] if p.name not in kept}
    log.compact(now_ms=3000, delete_retention_ms=10**9)
    again = {p.name: p.read_bytes() for p in (history / "p").iterdir()}
    assert again == originals | newly_sealed, "originals are never overwritten by cleaned copies"
    raw = [(b.offset_of(r), r.key, r.value) for name in sorted(again)
           for _, b in iter_batches(again[name]) for r in b.records or []]
    assert raw == [(o, k, v) for o, k, v, _ in model.appended if o < active_base(log)]
    log.close()


# --- the property ---------------------------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(
    segment_bytes=st.integers(90, 900),
    batches=st.lists(
        st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]),
                           st.one_of(st.none(), st.binary(min_size=0, max_size=12))),
                 min_size=1, max_size=3),
        min_size=1, max_size=50,
    ),
    retention=st.integers(0, 60),
)
def test_compaction_preserves_replay_property(
    segment_bytes: int, batches: list[list[tuple[bytes, bytes | None]]], retention: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "p"
        log = PartitionLog.open(directory, segment_bytes)
        model = Model()
        for i, batch in enumerate(batches):
            model.append(log, list(batch), i)
        now = len(batches)
        assert replay(log) == model.state()
        base = active_base(log)
        log.compact(now, retention)
        once = records(log)
        assert once == model.survivors(base, now, retention)
        assert replay(log) == model.state()
        log.compact(now, retention)
        assert records(log) == once, "compaction is idempotent"
        for start in range(0, log.next_offset + 1, 3):
            assert [e for e in records(log, start) if e[0] >= start] == [e for e in once if e[0] >= start]
        end = log.next_offset
        log.flush()
        log.close()
        again = PartitionLog.open(directory, segment_bytes)
        assert records(again) == once and again.next_offset == end
        assert replay(again) == model.state()
        again.close()


# --- crashes during compaction --------------------------------------------------------


@pytest.mark.parametrize("use_history", [False, True])
def test_crash_at_every_step_of_the_swap_loads_old_or_new_state(tmp_path: Path, use_history: bool) -> None:
    """Crash the filesystem at each change a clean makes; what survives loads old or new.

    A crash keeps only what was durable at that instant (fsynced contents, fsynced
    directory entries), the strictest outcome POSIX allows.
    """
    before = tmp_path / "before"
    directory = before / "p"
    log, model = build(directory, n=90, segment_bytes=350)
    log.compact(now_ms=1000, delete_retention_ms=10**9)  # so the next clean also merges
    middle = records(log)
    for i in range(40):
        model.append(log, [(b"key-%d" % (i % 3), None if i % 5 == 0 else b"late-%d" % i)], 1200 + i)
    log.flush()
    old = records(log)
    log.close()

    def open_copy(name: str) -> tuple[Path, FaultyFileSystem, PartitionLog]:
        root = tmp_path / name
        shutil.copytree(before, root)
        fs = FaultyFileSystem(root)
        history = root / "history" if use_history else None
        return root, fs, PartitionLog.open(root / "p", 350, history_dir=history, fs=fs)

    _, counting, log = open_copy("complete")
    steps = counting.inject(Fault(MUTATIONS, times=0))  # counts the changes, fails none
    log.compact(now_ms=1500, delete_retention_ms=100)
    new = records(log)
    log.close()
    assert new != old and middle != old
    assert steps.seen > 10

    seen = {"old": 0, "new": 0}
    states: list[str] = []
    leftovers: set[str] = set()
    for step in range(1, steps.seen + 1):
        root, fs, log = open_copy(f"crash-{step:03d}")
        fs.inject(Fault(MUTATIONS, nth=step, crash=True))
        with pytest.raises(OSError, match=r"injected|crashed"):
            log.compact(now_ms=1500, delete_retention_ms=100)
        fs.crash()
        leftovers.update(suffix for name in temp_files(root / "p")
                         for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX) if name.endswith(suffix))
        recovered = PartitionLog.open(root / "p", 350, history_dir=root / "history" if use_history else None)
        got = records(recovered)
        assert got in (old, new), f"crash at step {step}: neither the old nor the new log"
        seen["old" if got == old else "new"] += 1
        states.append("old" if got == old else "new")
        assert replay(recovered) == model.state()
        assert temp_files(root / "p") == []
        end = recovered.next_offset
        assert recovered.append([(b"after-crash", b"1")], 1)[0] == end
        recovered.close()
        if use_history and got == new:
            assert (root / "history" / "p").is_dir() and any((root / "history" / "p").iterdir())
        shutil.rmtree(root)
    assert seen["old"] > 0 and seen["new"] > 0
    assert states == sorted(states, reverse=True), "once a crash point loads the new state, all later ones do"
    assert leftovers == {CLEANED_SUFFIX, SWAP_SUFFIX}, "crash points cover both kinds of leftovers"


def _cleaned_output(tmp_path: Path) -> tuple[Path, Model, list[Entry], dict[str, bytes], dict[str, bytes]]:
    """A log before and after one clean: (dir, model, old records, old files, new files)."""
    directory = tmp_path / "p"
    log, model = build(directory)
    log.close()
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    log = PartitionLog.open(directory, 400)
    old = records(log)
    log.compact(now_ms=1000, delete_retention_ms=10**9)
    log.close()
    after = {p.name: p.read_bytes() for p in directory.iterdir()}
    return directory, model, old, before, after


def _lay_out(directory: Path, files: dict[str, bytes]) -> None:
    shutil.rmtree(directory)
    directory.mkdir()
    for name, data in files.items():
        (directory / name).write_bytes(data)


def test_leftover_cleaned_files_are_deleted_and_the_old_log_loads(tmp_path: Path) -> None:
    directory, model, old, before, after = _cleaned_output(tmp_path)
    changed = sorted(name for name in after if after[name] != before.get(name))
    # One complete and one torn .cleaned file, next to the untouched old segments.
    files = dict(before)
    files[changed[0] + CLEANED_SUFFIX] = after[changed[0]]
    files[changed[1] + CLEANED_SUFFIX] = after[changed[1]][:-7]
    _lay_out(directory, files)
    log = PartitionLog.open(directory, 400)
    assert log.recovery.temp_files_removed == 2 and log.recovery.swaps_completed == 0
    assert records(log) == old and replay(log) == model.state()
    assert sorted(p.name for p in directory.iterdir()) == sorted(before)
    log.close()


def test_cleaned_and_swap_files_together_mean_no_commit(tmp_path: Path) -> None:
    directory, model, old, before, after = _cleaned_output(tmp_path)
    changed = sorted(name for name in after if after[name] != before.get(name))
    files = dict(before)
    files[changed[0] + SWAP_SUFFIX] = after[changed[0]]
    files[changed[1] + CLEANED_SUFFIX] = after[changed[1]]
    _lay_out(directory, files)
    log = PartitionLog.open(directory, 400)
    assert log.recovery.temp_files_removed == 2
    assert records(log) == old and replay(log) == model.state()
    log.close()


def test_leftover_swap_files_complete_the_swap(tmp_path: Path) -> None:
    directory, model, _, before, after = _cleaned_output(tmp_path)
    changed = sorted(name for name in after if after[name] != before.get(name))
    new_log = PartitionLog.open(directory, 400)
    new = records(new_log)
    new_log.close()
    # Crash after the commit: every .swap exists, some originals already gone.
    files = {name: data for name, data in before.items() if name not in changed[:2]}
    for name in changed:
        files[name + SWAP_SUFFIX] = after[name]
    _lay_out(directory, files)
    log = PartitionLog.open(directory, 400)
    assert log.recovery.swaps_completed == len(changed)
    assert records(log) == new and replay(log) == model.state()
    assert sorted(p.name for p in directory.iterdir()) == sorted(after)
    log.close()


def test_invalid_swap_file_refuses_to_start(tmp_path: Path) -> None:
    directory, _, _, before, after = _cleaned_output(tmp_path)
    changed = sorted(name for name in after if after[name] != before.get(name))
    files = dict(before)
    files[changed[0] + SWAP_SUFFIX] = after[changed[0]][:-3]
    _lay_out(directory, files)
    with pytest.raises(CorruptLogError, match=r"\.swap"):
        PartitionLog.open(directory, 400)


def test_failure_before_the_commit_rolls_back(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    fs = FaultyFileSystem()
    log, model = build(directory, fs=fs)
    old = records(log)
    fs.fail("rename", path=CLEANED_SUFFIX, nth=2)  # the second .cleaned -> .swap rename
    with pytest.raises(OSError, match="injected"):
        log.compact(now_ms=1000, delete_retention_ms=10**9)
    assert temp_files(directory) == [], "uncommitted files are removed"
    assert records(log) == old
    model.append(log, [(b"key-1", b"still appending")], 5000)
    base = active_base(log)
    log.compact(now_ms=1000, delete_retention_ms=10**9)
    assert records(log) == model.survivors(base, 1000, 10**9)
    log.close()
    again = PartitionLog.open(directory, 400)
    assert replay(again) == model.state()
    again.close()


def test_failure_while_writing_cleaned_files_rolls_back_and_the_next_clean_succeeds(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    fs = FaultyFileSystem()
    log, model = build(directory, fs=fs)
    old = records(log)
    fs.fail("fsync", path=CLEANED_SUFFIX, nth=2, errno=errno.ENOSPC)
    with pytest.raises(OSError, match="No space left"):
        log.compact(now_ms=1000, delete_retention_ms=10**9)
    assert temp_files(directory) == [] and records(log) == old
    base = active_base(log)
    log.compact(now_ms=1000, delete_retention_ms=10**9)
    assert records(log) == model.survivors(base, 1000, 10**9)
    log.close()


def test_failure_after_the_commit_is_finished_by_the_next_clean(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    fs = FaultyFileSystem()
    log, model = build(directory, fs=fs)
    base = active_base(log)
    expected = model.survivors(base, 1000, 10**9)
    fs.fail("rename", path=SWAP_SUFFIX, times=None)  # every .swap -> .log rename
    with pytest.raises(OSError, match="injected"):
        log.compact(now_ms=1000, delete_retention_ms=10**9)
    fs.clear()
    assert records(log) == expected, "in memory the clean took effect"
    assert any(name.endswith(SWAP_SUFFIX) for name in temp_files(directory))
    model.append(log, [(b"key-4", b"z")], 5000)
    log.compact(now_ms=1000, delete_retention_ms=10**9)
    assert temp_files(directory) == []
    assert replay(log) == model.state()
    log.flush()
    log.close()
    again = PartitionLog.open(directory, 400)
    assert again.recovery.swaps_completed == 0 and replay(again) == model.state()
    again.close()


def test_closing_the_log_mid_clean_leaves_the_old_state(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    fs = FaultyFileSystem()
    log, model = build(directory, fs=fs)
    old = records(log)
    # Close the log just before the cleaned files' names are made durable.
    fs.before("fsync_dir", lambda _path: log.close())
    with pytest.raises(ValueError, match="closed"):
        log.compact(now_ms=1000, delete_retention_ms=10**9)
    assert temp_files(directory) == []
    again = PartitionLog.open(directory, 400)
    assert records(again) == old and replay(again) == model.state()
    again.close()


# --- recovery stays strict ------------------------------------------------------------


def test_compacted_log_still_detects_damage(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    log, _ = build(directory, n=200)
    for _ in range(2):  # the second clean merges, so cleaned segments hold several batches
        log.compact(now_ms=1000, delete_retention_ms=10**9)
    segments = log.segments
    log.close()
    assert len(segments) >= 3
    # A batch that goes back in offsets (its base offset is outside the CRC).
    sealed = next(p for p in segments[:-1] if len(list(iter_batches(p.read_bytes()))) >= 2)
    data = sealed.read_bytes()
    second = [pos for pos, _ in iter_batches(data)][1]
    damaged = bytearray(data)
    struct.pack_into(">q", damaged, second, 0)
    sealed.write_bytes(bytes(damaged))
    with pytest.raises(CorruptLogError, match="at least"):
        PartitionLog.open(directory, 400)
    sealed.write_bytes(data)
    # A missing cleaned segment still breaks the chain of segments.
    middle = segments[len(segments) // 2]
    saved = middle.read_bytes()
    middle.unlink()
    with pytest.raises(CorruptLogError, match="previous segment ends"):
        PartitionLog.open(directory, 400)
    middle.write_bytes(saved)
    # The active segment stays contiguous: a gap there is damage. In its last batch that
    # is cut as a torn tail; before a valid batch it refuses to start.
    last = segments[-1]
    tail = last.read_bytes()
    positions = [pos for pos, _ in iter_batches(tail)]
    assert len(positions) >= 2
    for pos in positions[-2:]:
        skipped = bytearray(tail)
        struct.pack_into(">q", skipped, pos, peek_batch_header(tail, pos).base_offset + 1)
        last.write_bytes(bytes(skipped))
        if pos != positions[-1]:
            with pytest.raises(CorruptLogError, match="not a torn tail"):
                PartitionLog.open(directory, 400)
            continue
        reopened = PartitionLog.open(directory, 400)
        assert reopened.next_offset == peek_batch_header(tail, pos).base_offset
        assert reopened.recovery.truncated_bytes == len(tail) - pos
        reopened.close()


def test_every_cleaned_segment_ends_where_the_next_begins(tmp_path: Path) -> None:
    log, _ = build(tmp_path / "p", n=200)
    log.compact(now_ms=1000, delete_retention_ms=0)
    paths = log.segments
    for path, following in itertools.pairwise(paths):
        batches = [b for _, b in iter_batches(path.read_bytes())]
        assert batches, f"{path.name} is empty"
        assert batches[-1].next_offset == parse_segment_name(following.name)
        assert all(a.next_offset <= b.base_offset for a, b in itertools.pairwise(batches))
    log.close()


# --- the coordinator log --------------------------------------------------------------


def test_coordinator_log_compaction_keeps_the_committed_state(tmp_path: Path) -> None:
    groups = ["orders", "billing", "audit", "search"]
    clog = CoordinatorLog(tmp_path, 3, 600)
    state: dict[bytes, bytes] = {}
    ts = 0

    def write(group: str, recs: list[tuple[bytes, bytes | None]]) -> None:
        clog.append(group, recs, ts)
        for key, value in recs:
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value

    for round_ in range(40):
        ts = 1000 + round_ * 100
        for group in groups:
            commits: list[tuple[bytes, bytes | None]] = [
                (encode_key(OffsetKey(group, "topic", p)),
                 encode_offset_value(OffsetValue(round_ * 10 + p, -1, "", ts, -1)))
                for p in range(3)
            ]
            write(group, commits)
            meta = {"protocol_type": "consumer", "generation": round_, "protocol": "range",
                    "leader": "m", "current_state_timestamp": ts, "members": []}
            write(group, [(encode_key(GroupKey(group)), encode_group_value(meta))])
    # "audit" is deleted early (offset and group tombstones); "search" only just now.
    ts = 5100
    deletes: list[tuple[bytes, bytes | None]] = [(encode_key(OffsetKey("audit", "topic", p)), None) for p in range(3)]
    write("audit", [*deletes, (encode_key(GroupKey("audit")), None)])
    for i in range(30):  # more traffic so the tombstones end up in sealed segments
        ts = 5200 + i
        write("orders", [(encode_key(OffsetKey("orders", "topic", 0)),
                          encode_offset_value(OffsetValue(10_000 + i, -1, "", ts, -1)))])
        write("search", [(encode_key(OffsetKey("search", "other", i % 4)),
                          encode_offset_value(OffsetValue(i, -1, "", ts, -1)))])
    ts = 9000
    write("search", [(encode_key(GroupKey("search")), None)])
    for i in range(15):
        write("search", [(encode_key(OffsetKey("search", "pad", i)), encode_offset_value(OffsetValue(i, -1, "x" * 40, ts, -1)))])
    clog.sync()

    def replayed() -> dict[bytes, bytes]:
        return replayed_from(clog)

    assert replayed() == state
    size_before = sum(p.stat().st_size for p in tmp_path.rglob("*.log"))
    assert clog.dirty_ratio() == 1.0
    results = clog.compact_all(now_ms=9000 + 1000, delete_retention_ms=2000)
    assert set(results) == {partition_for(g, 3) for g in groups}
    assert replayed() == state
    assert sum(r.records_after for r in results.values()) < sum(r.records_before for r in results.values())
    assert sum(p.stat().st_size for p in tmp_path.rglob("*.log")) < size_before
    keys = [key for key, _, _ in clog.replay()]
    audit = [encode_key(OffsetKey("audit", "topic", p)) for p in range(3)] + [encode_key(GroupKey("audit"))]
    assert not set(audit) & set(keys), "old tombstones and everything they deleted are gone"
    search_tombstone = [v for k, v, _ in clog.replay() if k == encode_key(GroupKey("search"))]
    assert search_tombstone == [None], "a young tombstone is kept, once"
    assert clog.compact_all(now_ms=10_000, delete_retention_ms=2000, min_dirty_ratio=0.5) == {}
    compacted = list(clog.replay())
    clog.close()
    again = CoordinatorLog(tmp_path, 3, 600)
    assert list(again.replay()) == compacted
    assert replayed_from(again) == state
    again.close()


def replayed_from(clog: CoordinatorLog) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for key, value, _ in clog.replay():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def test_compact_all_cleans_the_other_partitions_when_one_fails(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    clog = CoordinatorLog(tmp_path, 4, 200, fs=fs)
    groups = [f"g{i}" for i in range(12)]
    for n in range(20):
        for group in groups:
            clog.append(group, [(group.encode(), b"v%d" % n + b"x" * 30)], n)
    used = sorted({partition_for(g, 4) for g in groups})
    assert len(used) >= 2
    broken = clog.partition_log(used[0])
    assert broken is not None
    # Every cleaned file of that one partition fails to be created.
    fs.fail("create", path=f"{broken.directory}/", times=None, errno=errno.ENOSPC)
    with pytest.raises(OSError, match="No space left"):
        clog.compact_all(now_ms=100, delete_retention_ms=0)
    for p in used[1:]:
        plog = clog.partition_log(p)
        assert plog is not None and plog.dirty_ratio() == 0.0, "the other partitions were cleaned"
    assert broken.dirty_ratio() == 1.0
    assert replayed_from(clog) == {g.encode(): b"v19" + b"x" * 30 for g in groups}
    clog.close()
