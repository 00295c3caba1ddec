"""Group commit: replies go out in order, only once durable, sharing fsyncs; timeouts; failures.

Real partition logs on a real disk; the filesystem is the fault-injecting one, used to hold
an fsync open (so the test decides when a sync ends) or to make one fail. The kernel
flusher runs here against ``ThreadDatasync``, a stand-in for ``storage.aio`` that runs each
fsync through that file system in a thread; ``tests/storage/test_aio.py`` runs it against
the kernel's own.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker.slots import Slot
from storage import group_commit
from storage.faultfs import FaultyFileSystem
from storage.group_commit import GroupCommit
from storage.journal import Journal
from storage.partition import PartitionLog
from tests.support.group_commit import PolledCommit, SplitJournal, eventually, reply


class ThreadDatasync:
    """Unit-test stand-in for ``storage.aio.AsyncDatasync``: flushes the logs named by the
    submitted indexes in a thread (through the fault-injecting file system, so a test can
    hold or fail them) and reports each on a real eventfd."""

    def __init__(self, logs: list[PartitionLog]) -> None:
        self.logs = logs
        self.in_flight = 0
        self._eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._lock = threading.Lock()
        self._done: list[tuple[int, int]] = []
        self.closed = False

    def fileno(self) -> int:
        return self._eventfd

    def submit(self, fds: list[int]) -> None:
        self.in_flight += len(fds)
        threading.Thread(target=self._run, args=(list(fds),), daemon=True).start()

    def _run(self, fds: list[int]) -> None:
        for i, fd in enumerate(fds):
            try:
                self.logs[fd].flush()
                result = 0
            except OSError as exc:
                result = -(exc.errno or errno.EIO)
            with self._lock:
                self._done.append((i, result))
                if self.closed:
                    return
                os.eventfd_write(self._eventfd, 1)

    def reap(self) -> list[tuple[int, int]]:
        try:
            os.eventfd_read(self._eventfd)
        except BlockingIOError:
            return []
        with self._lock:
            done, self._done = self._done, []
        self.in_flight -= len(done)
        return done

    def close(self) -> None:
        with self._lock:
            if not self.closed:
                self.closed = True
                os.close(self._eventfd)


class Disk:
    """A journal over two partition logs whose fsyncs can be held and let through one by one."""

    def __init__(self, root: Path) -> None:
        self.fs = FaultyFileSystem()
        self.journal = Journal()
        self.logs = [PartitionLog.open(root / f"t-{p}", 1 << 20, fs=self.fs) for p in range(2)]
        self.fsyncs = 0
        self.wait_seconds = 0.0
        self.kernel: ThreadDatasync | None = None
        self.polled = False  # the kernel flusher's rounds on a ReadPoller's task (PolledCommit)
        self.kind = "thread"
        self.entered = threading.Event()
        self._permits = threading.Semaphore(0)
        self._held = False
        self.fs.before("fsync", self._fsync, times=None)

    def _fsync(self, _path: str) -> None:
        self.fsyncs += 1
        self.entered.set()
        if self._held:
            assert self._permits.acquire(timeout=30), "a held fsync was never let through"

    def hold(self) -> None:
        """Make fsyncs wait until ``allow`` or ``release``."""
        self.entered.clear()
        self._held = True

    def allow(self, fsyncs: int) -> None:
        """Let ``fsyncs`` held fsyncs go ahead."""
        self.entered.clear()
        self._permits.release(fsyncs)

    def release(self) -> None:
        self._held = False
        self._permits.release(1000)

    def append(self, partition: int = 0) -> int:
        log = self.logs[partition]
        log.append([(b"k", b"v%d" % log.next_offset)], 1)
        return self.journal.mark(log)

    def commit(self, **options: Any) -> GroupCommit:
        """A GroupCommit over this disk, with the flusher the fixture chose."""
        if self.kernel is not None:
            kernel = self.kernel
            kind = PolledCommit if self.polled else GroupCommit
            return kind(SplitJournal(self.journal, self.logs), datasync=lambda: kernel, **options)
        return GroupCommit(self.journal, wait_seconds=self.wait_seconds, **options)

    async def held_sync(self, commit: GroupCommit, partition: int) -> Slot:
        """Hold fsyncs, append to ``partition`` with a reply waiting for it, and return that
        reply once the sync for it is under way (held)."""
        self.hold()
        waiting = reply(0)
        commit.reply_when_durable(self.append(partition), waiting)
        commit.appended()
        await thread_entered(self.entered)
        return waiting

    def close(self) -> None:
        self.release()
        for log in self.logs:
            log.close()
        if self.kernel is not None:
            self.kernel.close()


@pytest.fixture(params=["thread", "waiting", "kernel", "polled"])
def disk(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """Every test runs with the three flushers: the free-running thread, the one the event
    loop waits on (``wait_seconds``), which a held fsync outlasts, and the kernel one, with
    its rounds on its own task or on a read poller's ("polled", as the server runs it)."""
    d = Disk(tmp_path)
    d.kind = request.param
    if request.param == "waiting":
        d.wait_seconds = 0.002
    elif request.param in ("kernel", "polled"):
        d.kernel = ThreadDatasync(d.logs)
        d.kind = "kernel"
        d.polled = request.param == "polled"
    yield d
    d.close()


async def thread_entered(event: threading.Event) -> None:
    await eventually(event.is_set)


async def test_replies_wait_for_their_fsync_and_are_released_in_order(disk: Disk) -> None:
    commit = disk.commit()
    async with trio.open_nursery() as nursery:
        await nursery.start(commit.run)
        await eventually(lambda: commit.flusher == disk.kind)
        disk.hold()
        replies = []
        for n in range(2):
            replies.append(reply(n))
            commit.reply_when_durable(disk.append(0), replies[-1])
        commit.appended()
        await thread_entered(disk.entered)  # sync 1 covers appends 1-2 (partition 0)
        for n in range(2, 5):
            replies.append(reply(n))
            commit.reply_when_durable(disk.append(n % 2), replies[-1])
        commit.appended()
        await trio.testing.wait_all_tasks_blocked()
        assert not any(r.event.is_set() for r in replies), "released before the fsync returned"
        assert commit.waiting == 5
        disk.allow(1)  # sync 1's one fsync returns; sync 2 starts and is held
        await eventually(lambda: replies[1].event.is_set())
        await thread_entered(disk.entered)
        assert [r.event.is_set() for r in replies] == [True, True, False, False, False]
        assert commit.durable_seq == 2
        disk.allow(2)  # sync 2 fsyncs both partitions
        await eventually(lambda: replies[4].event.is_set())
        assert all(r.event.is_set() for r in replies)
        assert commit.durable_seq == 5 == disk.journal.durable_seq and commit.waiting == 0
        nursery.cancel_scope.cancel()


async def test_appends_made_during_an_fsync_share_the_next_one(disk: Disk) -> None:
    released: list[list[int]] = []

    def release(replies: list[Any]) -> None:  # records what each sync released, and releases it
        released.append([r.correlation_id for r in replies])
        for r in replies:
            r.event.set()

    commit = disk.commit(release=release)
    async with trio.open_nursery() as nursery:
        await nursery.start(commit.run)
        disk.hold()
        first = reply(0)
        commit.reply_when_durable(disk.append(), first)
        commit.appended()
        await thread_entered(disk.entered)  # sync 1 is running: 1 append, 1 partition
        later = []
        for n in range(1, 41):  # 40 more, over both partitions, while it runs
            r = reply(n)
            commit.reply_when_durable(disk.append(n % 2), r)
            commit.appended()
            later.append(r)
        before = disk.fsyncs
        disk.release()
        await eventually(lambda: all(r.event.is_set() for r in later))
        assert first.event.is_set()
        assert commit.syncs == 2, "one sync for the first append, one shared by the other forty"
        assert released == [[0], list(range(1, 41))], "each sync's replies released together, in order"
        assert disk.fsyncs - before <= 2, "the second sync fsynced each partition once"
        nursery.cancel_scope.cancel()


async def test_a_reply_already_durable_is_released_at_once(disk: Disk) -> None:
    commit = disk.commit()
    async with trio.open_nursery() as nursery:
        await nursery.start(commit.run)
        seq = disk.append()
        commit.appended()
        waiting = reply(0)
        commit.reply_when_durable(seq, waiting)
        await eventually(waiting.event.is_set)
        syncs = commit.syncs
        again = reply(1)
        commit.reply_when_durable(seq, again)  # a read that depends only on durable records
        assert again.event.is_set() and commit.waiting == 0
        assert commit.syncs == syncs
        nursery.cancel_scope.cancel()


async def test_with_the_os_flush_policy_nothing_waits_and_nothing_is_fsynced(disk: Disk) -> None:
    commit = disk.commit(durable=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(commit.run)
        for n in range(10):
            r = reply(n)
            commit.reply_when_durable(disk.append(), r)
            commit.appended()
            assert r.event.is_set()
        await trio.testing.wait_all_tasks_blocked()
        assert disk.fsyncs == 0 and commit.syncs == 0
        nursery.cancel_scope.cancel()


def timed_out(slot: Slot, context: Any) -> bytes:
    return b"timed out %d (%s)" % (slot.correlation_id, context)


async def test_a_write_not_durable_within_the_timeout_gets_its_timeout_reply(
    disk: Disk, mock_clock: trio.testing.MockClock
) -> None:
    commit = disk.commit(timeout=5.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(commit.run)
        disk.hold()
        commit_reply, read_reply = reply(1), reply(2)
        commit.reply_when_durable(disk.append(), commit_reply, timed_out, b"ctx")
        commit.reply_when_durable(disk.journal.written_seq, read_reply)  # no timeout reply: waits on
        commit.appended()
        await thread_entered(disk.entered)
        mock_clock.jump(4.9)
        await trio.testing.wait_all_tasks_blocked()
        assert not commit_reply.event.is_set()
        mock_clock.jump(0.2)
        await eventually(commit_reply.event.is_set)
        assert commit_reply.frame == b"timed out 1 (ctx)"
        assert commit.timeouts == 1
        assert not read_reply.event.is_set(), "only waiters with a timeout reply expire"
        # A later write gets its own five seconds.
        late = reply(3)
        commit.reply_when_durable(disk.append(), late, timed_out, b"late")
        commit.appended()
        mock_clock.jump(4.0)
        await trio.testing.wait_all_tasks_blocked()
        assert not late.event.is_set()
        disk.release()
        await eventually(lambda: read_reply.event.is_set() and late.event.is_set())
        assert read_reply.frame == b"ok 2" and late.frame == b"ok 3", "durable in time: the real reply"
        assert commit_reply.frame == b"timed out 1 (ctx)", "an expired reply is not overwritten"
        assert commit.timeouts == 1
        nursery.cancel_scope.cancel()


async def test_a_failed_fsync_is_fatal_and_releases_nothing(disk: Disk) -> None:
    failures: list[OSError] = []
    commit = disk.commit(on_failure=failures.append)
    async with trio.open_nursery() as nursery:
        await nursery.start(commit.run)
        ok = reply(0)
        commit.reply_when_durable(disk.append(), ok)
        commit.appended()
        await eventually(ok.event.is_set)
        disk.fs.fail("fsync", path="t-1", errno=errno.EIO)
        doomed = [reply(n) for n in range(1, 4)]
        for n, r in enumerate(doomed, 1):
            commit.reply_when_durable(disk.append(n % 2), r)
        commit.appended()
        await eventually(lambda: bool(failures))
        assert failures[0].errno == errno.EIO and "t-1" in str(failures[0].filename)
        assert commit.failure is failures[0]
        await trio.testing.wait_all_tasks_blocked()
        assert not any(r.event.is_set() for r in doomed)
        # The flusher has stopped: later appends are never made durable by it.
        after = reply(9)
        commit.reply_when_durable(disk.append(), after)
        commit.appended()
        await trio.testing.wait_all_tasks_blocked()
        assert not after.event.is_set() and commit.syncs == 1
        nursery.cancel_scope.cancel()


async def test_by_default_a_failed_fsync_propagates(disk: Disk) -> None:
    commit = disk.commit()
    disk.fs.fail("fsync", errno=errno.ENOSPC)
    with pytest.raises(ExceptionGroup) as info:
        async with trio.open_nursery() as nursery:
            await nursery.start(commit.run)
            commit.reply_when_durable(disk.append(), reply(0))
            commit.appended()
            await trio.sleep_forever()
    assert info.group_contains(OSError, match="No space left")


async def test_a_quick_sync_is_handed_straight_back_to_the_waiting_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unit: while syncs finish within ``wait_seconds``, no result goes through trio's wake-up."""
    through_trio: list[object] = []
    deliver = group_commit._HandOffThread._deliver
    monkeypatch.setattr(group_commit._HandOffThread, "_deliver",
                        lambda self, result: (through_trio.append(result), deliver(self, result)))
    disk = Disk(tmp_path)
    try:
        commit = GroupCommit(disk.journal, wait_seconds=30.0)
        async with trio.open_nursery() as nursery:
            await nursery.start(commit.run)
            for n in range(20):
                r = reply(n)
                commit.reply_when_durable(disk.append(n % 2), r)
                commit.appended()
                await eventually(r.event.is_set)
            assert commit.syncs == 20 and through_trio == []
            nursery.cancel_scope.cancel()
    finally:
        disk.close()


async def test_a_sync_outlasting_the_wait_leaves_the_loop_free(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stuck fsync holds the waiting flusher only for ``wait_seconds``: the wait gives up
    while the fsync is still held, the result comes through trio, and the next sync is not
    waited for at all until one has been quick again."""
    calls: list[tuple[float, bool]] = []  # (wait asked for, whether the result came straight back)
    sync = group_commit._HandOffThread.sync

    def recording(self: Any, wait: float) -> Any:
        result = sync(self, wait)
        calls.append((wait, result is not None))
        return result

    monkeypatch.setattr(group_commit._HandOffThread, "sync", recording)
    disk = Disk(tmp_path)
    try:
        commit = GroupCommit(disk.journal, wait_seconds=0.05)
        async with trio.open_nursery() as nursery:
            await nursery.start(commit.run)
            disk.hold()
            first = reply(0)
            commit.reply_when_durable(disk.append(), first)
            commit.appended()
            await thread_entered(disk.entered)
            await eventually(lambda: len(calls) == 1)
            assert calls == [(0.05, False)] and not first.event.is_set(), "gave up waiting, fsync still held"
            disk.release()
            await eventually(first.event.is_set)
            for n in (1, 2):
                r = reply(n)
                commit.reply_when_durable(disk.append(), r)
                commit.appended()
                await eventually(r.event.is_set)
            assert [wait for wait, _ in calls] == [0.05, 0.0, 0.05], "after a slow sync, one not waited for"
            nursery.cancel_scope.cancel()
    finally:
        disk.close()


def test_a_log_closed_since_it_was_written_is_skipped_by_the_sync(tmp_path: Path) -> None:
    """A topic deleted between its last produce and the next sync leaves nothing to fsync."""
    journal = Journal()
    kept, deleted = (PartitionLog.open(tmp_path / f"t-{p}", 1 << 20) for p in range(2))
    for log in (kept, deleted):
        log.append([(b"k", b"v")], 1)
        journal.mark(log)
    deleted.close()
    assert journal.sync() == 2
    kept.close()


@pytest.fixture(params=["task", "polled"])
def kernel_disk(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """A Disk for the kernel flusher alone, its rounds on its own task or a poller's."""
    d = Disk(tmp_path)
    d.kernel = ThreadDatasync(d.logs)
    d.polled = request.param == "polled"
    yield d
    d.close()


async def test_a_kernel_sync_cancelled_in_flight_leaves_its_appends_to_the_next_sync(kernel_disk: Disk) -> None:
    """The flusher stopped while the kernel still syncs: the journal's sync lock is free and
    what that sync covered is still marked, so the next sync covers it again."""
    disk = kernel_disk
    commit = disk.commit()
    async with trio.open_nursery() as nursery:
        await nursery.start(commit.run)
        waiting = await disk.held_sync(commit, 1)
        nursery.cancel_scope.cancel()
    assert not waiting.event.is_set()
    started = disk.journal.start_sync()
    assert started is not None, "the sync lock was left held"
    assert started == (1, [disk.logs[1]]), "partition 1 is still to be synced"
    assert disk.journal.finish_sync(*started, True) == 1


async def test_the_kernel_flusher_syncs_in_a_thread_while_a_blocking_sync_holds_the_journal(
    kernel_disk: Disk,
) -> None:
    """A snapshot's blocking sync (in a worker thread) holds the journal: the kernel
    flusher's round then waits for it in a thread instead of splitting."""
    disk = kernel_disk
    commit = disk.commit()
    async with trio.open_nursery() as nursery:
        await nursery.start(commit.run)
        disk.append(0)
        disk.hold()
        blocking = threading.Thread(target=disk.journal.sync, daemon=True)
        blocking.start()  # holds the journal's sync lock inside its held fsync
        await thread_entered(disk.entered)
        later = reply(1)
        commit.reply_when_durable(disk.append(1), later)
        commit.appended()
        await trio.testing.wait_all_tasks_blocked()
        assert not later.event.is_set()
        disk.release()
        await eventually(later.event.is_set)
        assert disk.kernel is not None
        assert commit.durable_seq == 2 and disk.kernel.in_flight == 0
        await trio.to_thread.run_sync(blocking.join, 10)
        nursery.cancel_scope.cancel()


def test_a_blocking_sync_on_the_thread_holding_a_split_one_is_refused(tmp_path: Path) -> None:
    """It would wait for a lock its own thread holds, for ever."""
    journal = Journal()
    log = PartitionLog.open(tmp_path / "t-0", 1 << 20)
    try:
        log.append([(b"k", b"v")], 1)
        journal.mark(log)
        started = journal.start_sync()
        assert started is not None
        with pytest.raises(RuntimeError, match="never end"):
            journal.sync()
        log.flush()
        assert journal.finish_sync(*started, True) == 1
        assert journal.sync() == 1, "once finished, blocking syncs run again"
    finally:
        log.close()


@pytest.fixture
def polled_disk(tmp_path: Path) -> Any:
    """A Disk whose kernel flusher runs its rounds on a read poller's task."""
    d = Disk(tmp_path)
    d.kernel = ThreadDatasync(d.logs)
    d.polled = True
    yield d
    d.close()


async def test_a_poller_pass_starts_one_sync_once_every_ready_socket_has_been_read(polled_disk: Disk) -> None:
    """Requests read in one pass append as they are handled; the sync they wait for starts
    when the pass ends, so it covers all of them."""
    disk = polled_disk
    commit = disk.commit()
    assert isinstance(commit, PolledCommit)
    pairs = [socket.socketpair() for _ in range(3)]
    in_flight_while_read: list[int] = []
    replies: list[Slot] = []

    def reader(n: int, ours: socket.socket) -> Callable[[], None]:
        def on_readable() -> None:
            ours.recv(100)
            assert disk.kernel is not None
            in_flight_while_read.append(disk.kernel.in_flight)
            replies.append(reply(n))
            commit.reply_when_durable(disk.append(n % 2), replies[-1])
            commit.appended()
        return on_readable

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(commit.run)
            assert commit.polled
            for n, (ours, _) in enumerate(pairs):
                ours.setblocking(False)
                commit.poller.add(ours.fileno(), reader(n, ours))
            for _, peer in pairs:
                peer.send(b"x")
            await eventually(lambda: len(replies) == 3 and all(r.event.is_set() for r in replies))
            assert in_flight_while_read == [0, 0, 0], "no sync started before the pass had read every socket"
            assert commit.syncs == 1 and disk.fsyncs == 2, "one sync of both partitions covered the three"
            assert commit.polled and commit.durable_seq == 3
            nursery.cancel_scope.cancel()
    finally:
        for a, b in pairs:
            a.close()
            b.close()


async def test_when_the_poller_stops_its_sync_in_flight_is_finished_by_the_flusher_task(polled_disk: Disk) -> None:
    """The server stops its poller before the last syncs: a sync the poller started is
    taken over, and later appends are synced by the flusher task itself."""
    disk = polled_disk
    commit = disk.commit()
    assert isinstance(commit, PolledCommit)
    async with trio.open_nursery() as nursery:
        await nursery.start(commit.run)
        first = await disk.held_sync(commit, 0)
        assert commit.awaiting(), "the poller waits for the sync it started"
        commit.poller_scope.cancel()
        await eventually(lambda: not commit.polled)
        assert not first.event.is_set()
        disk.release()
        await eventually(first.event.is_set)
        later = reply(1)
        commit.reply_when_durable(disk.append(1), later)
        commit.appended()
        await eventually(later.event.is_set)
        assert commit.syncs == 2 and commit.durable_seq == 2 and commit.failure is None
        assert disk.kernel is not None and disk.kernel.in_flight == 0
        nursery.cancel_scope.cancel()
