"""The filesystem seam: the real one, and the one that fails on cue and forgets what was not fsynced."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from storage.faultfs import Fault, FaultyFileSystem
from storage.fs import REAL_FS, RealFileSystem, located
from storage.partition import PartitionLog

# --- the real filesystem ------------------------------------------------------------------


def test_real_files_append_read_truncate_and_dup(tmp_path: Path) -> None:
    fs = RealFileSystem()
    path = tmp_path / "f"
    file = fs.open(path, create=True)
    assert file.write(b"hello ") == 6 and file.write(b"world") == 5
    file.fsync()
    assert file.size() == 11 and file.pread(5, 6) == b"world" and file.pread(100, 6) == b"world"
    second = file.dup()
    file.truncate(5)
    assert second.pread(100, 0) == b"hello"
    file.close()
    file.close()  # idempotent
    assert file.closed and not second.closed
    second.close()
    with pytest.raises(FileExistsError):
        fs.open(path, create=True)
    assert fs.open(path).pread(5, 0) == b"hello"


def test_real_directory_operations(tmp_path: Path) -> None:
    fs = REAL_FS
    assert fs.make_dirs(tmp_path / "a" / "b") and not fs.make_dirs(tmp_path / "a" / "b")
    assert fs.is_dir(tmp_path / "a" / "b") and not fs.is_file(tmp_path / "a")
    fs.write_atomically(tmp_path / "a" / "x.json", b"{}")
    fs.write_atomically(tmp_path / "a" / "x.json", b"[1]")
    assert fs.read_bytes(tmp_path / "a" / "x.json") == b"[1]"
    assert sorted(fs.listdir(tmp_path / "a")) == ["b", "x.json"], "no temporary file left"
    fs.rename(tmp_path / "a" / "x.json", tmp_path / "a" / "b" / "y.json")
    fs.fsync_directory(tmp_path / "a")
    fs.unlink(tmp_path / "a" / "nothing", missing_ok=True)
    with pytest.raises(FileNotFoundError):
        fs.unlink(tmp_path / "a" / "nothing")
    fs.remove_tree(tmp_path / "a")
    assert not fs.exists(tmp_path / "a")


def test_errors_name_the_file() -> None:
    error = located(OSError(errno.EIO, "Input/output error"), "/data/x.log")
    assert error.errno == errno.EIO and error.filename == "/data/x.log"
    assert "/data/x.log" in str(error)


# --- faults -------------------------------------------------------------------------------


def test_the_nth_matching_call_fails_with_the_chosen_errno(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    fault = fs.fail("write", path="b.log", nth=2, errno=errno.ENOSPC)
    a, b = fs.open(tmp_path / "a.log", create=True), fs.open(tmp_path / "b.log", create=True)
    for _ in range(3):
        a.write(b"x")  # another path: never matches
    b.write(b"1")
    with pytest.raises(OSError) as info:
        b.write(b"2")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "b.log")
    b.write(b"3")  # times=1: only the second call failed
    assert (fault.seen, fault.fired) == (3, 1)
    assert (tmp_path / "b.log").read_bytes() == b"13"
    assert fs.calls["write"] == 6


def test_several_operations_times_and_clearing(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    fs.inject(Fault(("rename", "unlink"), times=None))
    (tmp_path / "f").write_bytes(b"")
    for call in (lambda: fs.rename(tmp_path / "f", tmp_path / "g"), lambda: fs.unlink(tmp_path / "f")):
        with pytest.raises(OSError, match="injected"):
            call()
    fs.clear()
    fs.rename(tmp_path / "f", tmp_path / "g")
    with pytest.raises(ValueError, match="unknown"):
        Fault("chmod")


def test_a_hook_runs_before_the_call_and_the_call_goes_ahead(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    seen: list[tuple[str, bool]] = []
    fs.before("fsync", lambda path: seen.append((path, threading.current_thread() is threading.main_thread())))
    file = fs.open(tmp_path / "f", create=True)
    file.write(b"x")
    file.fsync()
    file.fsync()
    assert seen == [(str(tmp_path / "f"), True)]


def test_a_crash_fault_kills_the_filesystem(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    fs.fail("fsync", crash=True)
    file = fs.open(tmp_path / "f", create=True)
    with pytest.raises(OSError, match="injected"):
        file.fsync()
    with pytest.raises(OSError, match="crashed"):
        file.write(b"after")
    with pytest.raises(OSError, match="crashed"):
        fs.listdir(tmp_path)
    file.close()  # closing never fails


# --- the crash model ------------------------------------------------------------------------


def test_a_crash_keeps_fsynced_contents_and_entries_only(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    (root / "old").write_bytes(b"there before")
    fs = FaultyFileSystem(root)
    synced = fs.open(root / "synced", create=True)
    synced.write(b"durable")
    synced.fsync()
    synced.write(b" and not")
    fs.make_dirs(root / "sub")  # fsyncs root: "synced" is named durably too
    (fs.open(root / "sub" / "file", create=True)).fsync()
    fs.fsync_directory(root / "sub")
    unnamed = fs.open(root / "unnamed", create=True)  # its directory entry is never fsynced
    unnamed.write(b"x")
    unnamed.fsync()
    fs.unlink(root / "old")  # not durable: the file comes back
    fs.crash()
    assert sorted(p.name for p in root.iterdir()) == ["old", "sub", "synced"]
    assert (root / "synced").read_bytes() == b"durable"
    assert (root / "old").read_bytes() == b"there before"
    assert [p.name for p in (root / "sub").iterdir()] == ["file"]


def test_a_rename_is_durable_only_with_its_directory(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    fs = FaultyFileSystem(root)
    fs.write_atomically(root / "topics.json", b"v1")
    fs.write_atomically(root / "producer_ids.json", b"p1")
    tmp = root / "topics.json.tmp"
    file = fs.open(tmp, create=True)
    file.write(b"v2")
    file.fsync()
    fs.rename(tmp, root / "topics.json")  # crash before the directory fsync
    fs.crash()
    assert (root / "topics.json").read_bytes() == b"v1"
    assert (root / "producer_ids.json").read_bytes() == b"p1"


def test_a_crashed_partition_log_recovers_to_its_last_flush(tmp_path: Path) -> None:
    fs = FaultyFileSystem(tmp_path)
    log = PartitionLog.open(tmp_path / "t-0", 300, fs=fs)
    for i in range(30):
        log.append([(b"k", b"v%d" % i)], 1)  # rolls: sealed segments are fsynced on the way
    log.flush()
    durable = log.next_offset
    for i in range(5):
        log.append([(b"k", b"late %d" % i)], 1)  # a roll fsyncs some; the active tail is lost
    fs.crash()
    recovered = PartitionLog.open(tmp_path / "t-0", 300)
    assert durable <= recovered.next_offset < durable + 5
    values = [b.records[0].value for _, b in recovered.read_batches() if b.records]
    assert values == [b"v%d" % i for i in range(30)] + [b"late %d" % i for i in range(recovered.next_offset - 30)]
    recovered.close()
