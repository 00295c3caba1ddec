"""The kernel's asynchronous fdatasync (``storage.aio``), and the kernel flusher on a real
coordinator log. Runs against the real kernel; skipped where it offers no AIO."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

import pytest
import trio

from storage import aio
from storage.aio import AsyncDatasync
from storage.coordinator_log import CoordinatorLog
from storage.group_commit import GroupCommit
from storage.journal import Flushable, Journal
from storage.partition import PartitionLog
from tests.support.group_commit import PolledCommit, SplitJournal, eventually, reply

pytestmark = pytest.mark.skipif(not aio.available(), reason="this kernel offers no AIO")


def wait_reaped(kernel: AsyncDatasync, seconds: float = 10.0) -> list[tuple[int, int]]:
    results: list[tuple[int, int]] = []
    deadline = time.monotonic() + seconds
    while kernel.in_flight:
        assert time.monotonic() < deadline, "the kernel never reported the sync"
        select.select([kernel.fileno()], [], [], 1.0)
        results += kernel.reap()
    return results


def test_a_submitted_fdatasync_reports_on_the_eventfd(tmp_path: Path) -> None:
    kernel = AsyncDatasync.open()
    assert kernel is not None
    fds = [os.open(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT) for i in range(2)]
    try:
        for round_ in range(3):
            for fd in fds:
                os.pwrite(fd, b"x" * 4096, 4096 * round_)
            kernel.submit(fds)
            assert kernel.in_flight == 2
            assert sorted(wait_reaped(kernel)) == [(0, 0), (1, 0)]
        assert kernel.reap() == [], "nothing more to report"
    finally:
        kernel.close()
        for fd in fds:
            os.close(fd)


def test_a_file_without_fsync_is_refused_with_nothing_queued() -> None:
    """An eventfd cannot be fsynced: io_submit says EINVAL, which the flusher takes as
    "no asynchronous fsync here" and hands over to a thread."""
    kernel = AsyncDatasync.open()
    assert kernel is not None
    try:
        with pytest.raises(OSError) as info:
            kernel.submit([kernel.fileno()])
        assert info.value.errno == 22 and kernel.in_flight == 0
    finally:
        kernel.close()


def test_one_batch_at_a_time() -> None:
    kernel = AsyncDatasync.open()
    assert kernel is not None
    try:
        with pytest.raises(ValueError):
            kernel.submit([])
    finally:
        kernel.close()


@pytest.mark.parametrize("polled", [False, True], ids=["task", "polled"])
async def test_the_coordinator_log_is_synced_by_the_kernel_and_checkpoints_when_due(
    tmp_path: Path, polled: bool
) -> None:
    """With its rounds on the flusher's task, or on a read poller's as the server runs them
    (the checkpoint is then handed to the flusher task)."""
    log = CoordinatorLog(tmp_path, 4, 1 << 20, journal_bytes=16 << 10)
    try:
        assert log.splits_sync
        commit = (PolledCommit if polled else GroupCommit)(log, wait_seconds=0.002)
        async with trio.open_nursery() as nursery:
            await nursery.start(commit.run)
            assert commit.flusher == "kernel" and commit.polled == polled
            replies = []
            for n in range(200):
                r = reply(n)
                commit.reply_when_durable(log.append(f"g{n % 7}", [(b"k%d" % n, b"v" * 100)], 1), r)
                commit.appended()
                replies.append(r)
                if n % 20 == 0:
                    await eventually(r.event.is_set)
            await eventually(lambda: all(r.event.is_set() for r in replies))
            assert commit.flusher == "kernel", "the kernel ran every sync"
            assert commit.durable_seq == log.durable_seq == 200
            assert commit.syncs >= 10
            # 200 batches of over 100 bytes passed 16 KiB: the flusher checkpointed.
            await eventually(lambda: not log.checkpoint_due)
            assert commit.polled == polled
            nursery.cancel_scope.cancel()
    finally:
        log.close()
    reopened = CoordinatorLog(tmp_path, 4, 1 << 20)
    try:
        assert sum(plog.next_offset for p in range(4) if (plog := reopened.partition_log(p))) == 200
    finally:
        reopened.close()


class EventfdJournal(SplitJournal):
    """A split sync whose "file" is an eventfd, which the kernel will not fsync."""

    def __init__(self, root: Path) -> None:
        super().__init__(Journal(), [PartitionLog.open(root / "t-0", 1 << 20)])
        self.log = self.logs[0]
        self.flushes = 0
        self.unsyncable = os.eventfd(0)
        flush = self.log.flush

        def counted() -> None:
            self.flushes += 1
            flush()

        self.log.flush = counted  # type: ignore[method-assign]

    def append(self) -> int:
        self.log.append([(b"k", b"v")], 1)
        return self.journal.mark(self.log)

    def descriptors(self, dirty: list[Flushable]) -> tuple[list[int], list[Path]]:
        return ([self.unsyncable], [Path("eventfd")]) if dirty else ([], [])

    def close(self) -> None:
        self.log.close()
        os.close(self.unsyncable)


@pytest.mark.parametrize("polled", [False, True], ids=["task", "polled"])
@pytest.mark.parametrize("wait_seconds", [0.0, 0.002])
async def test_a_kernel_that_refuses_the_sync_hands_over_to_a_thread(
    tmp_path: Path, wait_seconds: float, polled: bool
) -> None:
    journal = EventfdJournal(tmp_path)
    try:
        commit = (PolledCommit if polled else GroupCommit)(journal, wait_seconds=wait_seconds)
        async with trio.open_nursery() as nursery:
            await nursery.start(commit.run)
            assert commit.polled == polled
            first = reply(0)
            commit.reply_when_durable(journal.append(), first)
            commit.appended()
            await eventually(first.event.is_set)  # the refused round, redone in the thread
            assert commit.flusher == ("waiting" if wait_seconds else "thread") and not commit.polled
            assert journal.flushes == 1, "the refused round's log was still to be synced, and was"
            second = reply(1)
            commit.reply_when_durable(journal.append(), second)
            commit.appended()
            await eventually(second.event.is_set)
            assert commit.durable_seq == 2 and commit.failure is None and journal.flushes == 2
            nursery.cancel_scope.cancel()
    finally:
        journal.close()
