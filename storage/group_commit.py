"""Group commit: replies wait for the fsync that makes their appends durable, and share it.

The one bridge between the trio event loop and the blocking log, used by the coordinator
(``broker.group_service``) and by acks=-1 Produce (``broker.data_service``). The log numbers
its appends (``storage.journal``); a reply that may only go out once append N is durable
waits here on N:

- ``appended()`` after writing wakes the flusher's thread, which runs ``log.sync()`` and
  hands the result back to the flusher task. Everything appended while one fsync runs
  shares the next one: however many requests arrive, at most one sync runs and at most
  one more is due. The thread lives as long as the flusher, so a sync costs no thread
  hand-off beyond its wake-up and its result;
- when a sync returns, waiting replies whose number it covers are released in the order
  they were queued, all in one call of ``release`` (the broker's ``broker.slots.set_all``
  marks them all ready before any connection sends, so the replies a connection has
  waiting on one sync leave in one write); a reply whose number is already durable is
  released at once and never queued;
- a log that can split its sync (``CoordinatorLog``: write the journal file, then
  fdatasync it) gets the *kernel* flusher where Linux offers asynchronous fdatasync
  (``storage.aio``): the write is made on the event loop and the kernel runs the
  fdatasync, reporting on an eventfd that trio waits for like a socket; no thread and no
  GIL hand-off takes part (see ``_kernel_flusher``). While the server's read poller runs,
  these rounds run on its task instead (``poller_started``): a read pass ends by starting
  the sync, and the completion is one more descriptor in the poller's epoll;
- otherwise, with ``wait_seconds`` (the coordinator's logs, whose sync is one fsync of a
  journal file) the flusher task hands each sync to the thread and waits for it on the
  spot, up to that long, instead of being woken through trio when it ends; a longer sync
  is left to finish in the background like the other kind (see ``_waiting_flusher``);
- with ``durable=False`` (``log.flush.policy=os``) nothing waits and nothing is fsynced;
- with a ``timeout``, a waiter that carries an ``on_timeout`` callable and is still not
  released after that many seconds gets ``reply.frame = on_timeout(reply, context)`` and
  goes out as that error instead (the broker uses it for ``offsets.commit.timeout.ms``).
  The engine does not know what the frames say;
- a sync that raises ``OSError`` is fatal: ``on_failure`` is called, nothing is released
  again, and the flusher stops. Linux may already have dropped the pages that failed, so
  no later fsync could make those appends durable.

A reply is anything with a ``frame`` and a trio ``event`` (the broker's ``Slot``): setting
the event hands the frame to the connection's writer. This path runs for every request
the coordinator answers, so ``reply_when_durable`` allocates nothing beyond the queue
entries of a reply that actually has to wait.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

import trio

from storage.aio import AsyncDatasync
from storage.fs import located
from storage.journal import PendingSync

__all__ = ["GroupCommit", "KernelSync", "Observer", "Poller", "Reply", "Signal", "SplitSyncable", "Syncable"]

log = logging.getLogger("kcoord.storage")

#: ``io_submit`` errors that mean "no asynchronous fsync here", not a failing disk.
_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})


class Signal(Protocol):
    """What a reply's ``event`` must do: a ``trio.Event``, or anything with the same two calls."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...


class Reply(Protocol):
    """A reply that goes out when its event is set."""

    frame: bytes | None

    @property
    def event(self) -> Signal: ...


class Syncable(Protocol):
    """A log with numbered appends (``storage.journal.Journal``, ``CoordinatorLog``)."""

    @property
    def written_seq(self) -> int: ...

    def sync(self) -> int:
        """Blocking: fsync everything appended so far; returns the durable number."""


class SplitSyncable(Syncable, Protocol):
    """A log whose sync can be split around an fdatasync run elsewhere (``CoordinatorLog``)."""

    @property
    def splits_sync(self) -> bool: ...

    def sync_start(self) -> PendingSync | None: ...

    def sync_finish(self, pending: PendingSync, synced: bool) -> int: ...

    @property
    def checkpoint_due(self) -> bool: ...

    def checkpoint(self) -> None: ...


class KernelSync(Protocol):
    """What the kernel flusher needs of ``storage.aio.AsyncDatasync``."""

    @property
    def in_flight(self) -> int: ...

    def fileno(self) -> int: ...

    def submit(self, fds: list[int]) -> None: ...

    def reap(self) -> list[tuple[int, int]]: ...

    def close(self) -> None: ...


class Observer(Protocol):
    def observe(self, value: float) -> None: ...


class Poller(Protocol):
    """What the kernel flusher needs of the server's ``broker.poller.ReadPoller`` to run its
    rounds on the poller's task (``GroupCommit.poller_started``)."""

    @property
    def in_pass(self) -> bool:
        """Whether the poller is handling ready sockets now (its ``after_pass`` hooks follow)."""

    def add(self, fd: int, on_readable: Callable[[], None]) -> None: ...

    def remove(self, fd: int) -> None: ...


#: Builds the frame a timed-out waiter is answered with: ``on_timeout(reply, context)``.
TimeoutReply = Callable[[Any, Any], bytes]


def _set_each(replies: list[Reply]) -> None:
    for reply in replies:
        reply.event.set()


def _reraise(exc: OSError) -> None:
    raise exc


class GroupCommit:
    """Releases replies in order once the appends they depend on are durable."""

    def __init__(
        self,
        log: Syncable,
        *,
        durable: bool = True,
        timeout: float | None = None,
        on_failure: Callable[[OSError], None] = _reraise,
        fsync_seconds: Observer | None = None,
        name: str = "log",
        wait_seconds: float = 0.0,
        datasync: Callable[[], KernelSync | None] | None = AsyncDatasync.open,
        release: Callable[[list[Reply]], None] | None = None,
    ) -> None:
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.log = log
        self.durable = durable
        self.timeout = timeout
        self.on_failure = on_failure
        self.fsync_seconds = fsync_seconds
        self.name = name
        self.wait_seconds = wait_seconds
        self.datasync = datasync
        self._release = release if release is not None else _set_each
        #: Which flusher runs: "kernel" (``_kernel_flusher``), "waiting" or "thread"; set by ``run``.
        self.flusher = ""
        #: The highest append number known durable (with durable=False: nothing is awaited).
        self.durable_seq = 0
        #: fsync rounds run, waiters answered with their timeout reply, and the failure, if any.
        self.syncs = 0
        self.timeouts = 0
        self.failure: OSError | None = None
        #: Set by ``appended`` (on the event loop), cleared by the sync thread as it starts a sync.
        self._flush_needed = threading.Event()
        self._waiting: deque[tuple[int, Reply]] = deque()
        self._timed: deque[tuple[float, Reply, TimeoutReply, Any]] = deque()
        self._clock: trio.abc.Clock | None = None
        #: The flusher task, idle until an append (or, for the kernel flusher, a poller's
        #: offer or a job the poller hands over).
        self._wake: trio.Event | None = None
        # The kernel flusher's rounds (``_start_round``), on the poller's task while one runs them.
        self._split: SplitSyncable | None = None
        self._kernel: KernelSync | None = None
        self._offered: Poller | None = None  # a poller that started; the flusher task takes it up
        self._poller: Poller | None = None  # the poller running the rounds now
        self._pending: PendingSync | None = None  # its sync under way in the kernel
        self._pending_started = 0.0
        self._pending_failure: OSError | None = None
        self._task_job: str | None = None  # what a round handed to the flusher task

    # --- the event loop's side: called for every request -------------------------------------

    def appended(self) -> None:
        """Appends were made: make sure a sync is due (one is enough for any number)."""
        if not self._flush_needed.is_set():
            self._flush_needed.set()
            poller = self._poller
            if poller is not None:
                if not poller.in_pass:  # a timer's or another task's appends: no pass ends after them
                    self._start_round()
                return
            self._wake_task()

    def durable_by(self, seq: int) -> bool:
        """Whether a reply waiting for append ``seq`` would be released at once."""
        return seq <= self.durable_seq or not self.durable

    def reply_when_durable(
        self, seq: int, reply: Reply, on_timeout: TimeoutReply | None = None, context: Any = None
    ) -> None:
        """Release ``reply`` once append ``seq`` (and so every earlier one) is durable."""
        if self.durable_by(seq):
            reply.event.set()
            return
        self._waiting.append((seq, reply))
        if on_timeout is not None and self.timeout is not None:
            clock = self._clock
            now = clock.current_time() if clock is not None else trio.current_time()
            self._timed.append((now + self.timeout, reply, on_timeout, context))

    @property
    def polled(self) -> bool:
        """Whether the poller's task runs the kernel flusher's rounds now (``poller_started``)."""
        return self._poller is not None

    @property
    def waiting(self) -> int:
        """Replies queued for durability."""
        return len(self._waiting)

    # --- background tasks --------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The flusher (and, with a timeout, the expirer); runs until cancelled or a sync fails."""
        self._clock = trio.lowlevel.current_clock()
        async with trio.open_nursery() as nursery:
            if self.durable:
                nursery.start_soon(self._choose_flusher())
                if self.timeout is not None:
                    nursery.start_soon(self._expirer, self.timeout)
            task_status.started()

    def _choose_flusher(self) -> Callable[[], Awaitable[None]]:
        """The kernel flusher where the log can split its sync and the kernel runs fdatasync
        asynchronously (``datasync`` gives a context); else a thread one."""
        if self.datasync is not None and getattr(self.log, "splits_sync", False):
            kernel = self.datasync()
            if kernel is not None:
                self.flusher = "kernel"
                self._split = split = cast(SplitSyncable, self.log)
                self._kernel = kernel
                return functools.partial(self._kernel_flusher, split, kernel)
        return self._thread_flusher

    async def _thread_flusher(self) -> None:
        if self.wait_seconds > 0:
            self.flusher = "waiting"
            await self._waiting_flusher()
        else:
            self.flusher = "thread"
            await self._flusher()

    async def _kernel_flusher(self, split: SplitSyncable, kernel: KernelSync) -> None:
        """Write on the event loop and let the kernel run the fdatasync (``storage.aio``).

        No thread takes part: a round (``_start_round``) writes the journal's buffer with one
        ``pwrite`` and queues its fdatasync with AIO, and the completion is read from an
        eventfd (``_kernel_readable``) like any socket while the loop serves other
        requests, whose appends share the next sync. While the server's read poller runs,
        the poller's task runs the rounds (``poller_started``); otherwise this task does.
        Either way this task does what must be awaited (``_task_job``): a sync while a
        blocking one holds the log, the journal's checkpoint. A disk that hangs holds
        only the sync, not the event loop (unless a checkpoint holds the log's locks
        meanwhile), so the commit timeout still fires. If the kernel turns the sync down
        as unsupported, the thread flushers take over for the rest of the run.
        """
        try:
            outcome = await self._kernel_rounds(split, kernel)
        finally:
            self._detach()
            self._kernel = None
            kernel.close()
        if outcome == "unsupported":
            self._flush_needed.set()  # the round the kernel turned down is the thread flusher's first
            await self._thread_flusher()

    async def _kernel_rounds(self, split: SplitSyncable, kernel: KernelSync) -> str:
        """Run the kernel flusher until a sync fails ("stop") or the kernel has no
        asynchronous fdatasync ("unsupported")."""
        while True:
            offered = self._offered
            if offered is not None:  # the poller runs the rounds from now on
                self._offered = None
                self._poller = offered
                offered.add(kernel.fileno(), self._kernel_readable)
                self._start_round()  # what was appended before
            job = self._task_job  # kept until done: no round starts meanwhile
            if job == "stop" or job == "unsupported":
                return job
            if job is not None:
                try:
                    if job == "blocking":
                        durable, seconds = await trio.to_thread.run_sync(self._timed_sync)
                        self._synced(durable, seconds)
                    else:
                        await trio.to_thread.run_sync(split.checkpoint)
                except OSError as exc:
                    self._sync_failed(exc)
                    return "stop"
                self._task_job = None
                if self._poller is not None:
                    self._start_round()  # what was appended while the task worked
                continue
            if self._poller is None:  # the rounds are this task's
                if self._pending is not None:
                    await trio.lowlevel.wait_readable(kernel.fileno())
                    self._kernel_readable()
                    continue
                if self._flush_needed.is_set():
                    self._start_round()
                    continue
            self._wake = wake = trio.Event()
            await wake.wait()

    async def _round_due(self) -> None:
        """Return once appends were made since the last round began (``appended``)."""
        needed = self._flush_needed
        while not needed.is_set():
            self._wake = wake = trio.Event()
            await wake.wait()
        needed.clear()

    # --- the kernel flusher's rounds, on the poller's task or the flusher task's ----------------

    def poller_started(self, poller: Poller) -> None:
        """The server's poller (``broker.poller``) runs: let it run the kernel flusher's rounds.

        A request read by the poller and answered only once durable otherwise costs three
        scheduling rounds of the event loop: the poller's, the flusher task's to start the
        sync, and the flusher task's again to take its completion. On the poller's task, a
        round starts at the end of the read pass that made the appends (``after_pass``), and
        the completion is one more ready descriptor in the poller's own epoll, read like a
        socket: two rounds per request, both the poller's. The flusher task keeps what must
        not run on the event loop: a sync while a blocking one holds the log, the journal's
        checkpoint, the hand-over to a thread where the kernel turns the sync down, and a
        sync still under way when the poller stops (``poller_stopped``).
        """
        if self._kernel is None or self.failure is not None:
            return
        self._offered = poller
        self._wake_task()

    def poller_stopped(self) -> None:
        """The poller stopped (its epoll is closed): the flusher task takes the rounds back."""
        self._offered = None
        if self._poller is not None:
            self._poller = None
            self._wake_task()  # a sync in flight is the task's to finish now

    def awaiting(self) -> bool:
        """Whether a sync the poller started is in flight (its completion is coming)."""
        return self._pending is not None

    def after_pass(self) -> None:
        """The poller ends each pass with this: start a sync if its reads made appends."""
        if self._poller is not None:
            self._start_round()

    def _start_round(self) -> None:
        """Start a sync if appends were made and none is under way; a round that cannot run
        on the event loop is handed to the task (``_task_job``)."""
        if self._pending is not None or self._task_job is not None:
            return
        needed = self._flush_needed
        if not needed.is_set():
            return
        needed.clear()
        split = self._split
        kernel = self._kernel
        assert split is not None and kernel is not None
        try:
            pending = split.sync_start()
        except OSError as exc:
            self._round_failed(exc)
            return
        if pending is None:  # a blocking sync holds the log: the task syncs after it, in a thread
            self._hand_to_task("blocking")
            return
        if not pending.fds:
            self._round_done(pending, None)
            return
        try:
            kernel.submit(pending.fds)
        except BaseException as exc:
            split.sync_finish(pending, False)  # never leave the journal's sync lock held
            if not isinstance(exc, OSError):
                raise
            if not kernel.in_flight and exc.errno in _UNSUPPORTED:
                log.info("%s: the kernel has no asynchronous fdatasync here (%s); syncs run in a thread",
                         self.name, exc.strerror)
                needed.set()
                self._hand_to_task("unsupported")
            else:
                self._round_failed(exc)
            return
        self._pending = pending
        self._pending_started = time.perf_counter()

    def _kernel_readable(self) -> None:
        """The kernel reported on its eventfd: take the results, and finish the sync once all are
        in (on the poller's task, or the flusher task's when no poller runs the rounds)."""
        kernel = self._kernel
        assert kernel is not None
        pending = self._pending
        try:
            results = kernel.reap()
        except BaseException as exc:
            self._pending = None
            if pending is not None and self._split is not None:
                self._split.sync_finish(pending, False)  # never leave the journal's sync lock held
            if not isinstance(exc, OSError):
                raise
            self._round_failed(exc)
            return
        for index, result in results:
            if result < 0 and self._pending_failure is None and pending is not None:
                self._pending_failure = located(OSError(-result, os.strerror(-result)), pending.paths[index])
        if pending is None or kernel.in_flight:
            return
        self._pending = None
        failure, self._pending_failure = self._pending_failure, None
        self._round_done(pending, failure)

    def _round_done(self, pending: PendingSync, failure: OSError | None) -> None:
        split = self._split
        assert split is not None
        durable = split.sync_finish(pending, failure is None)
        if failure is not None:
            self._round_failed(failure)
            return
        self._synced(durable, time.perf_counter() - self._pending_started)
        if split.checkpoint_due:
            self._hand_to_task("checkpoint")

    def _round_failed(self, exc: OSError) -> None:
        self._sync_failed(exc)
        self._hand_to_task("stop")

    def _hand_to_task(self, job: str) -> None:
        """Leave ``job`` to the flusher task: what must be awaited, or the end of the rounds."""
        self._task_job = job
        self._wake_task()

    def _wake_task(self) -> None:
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set()

    def _detach(self) -> None:
        """The kernel flusher ends: the poller may no longer start syncs or read its eventfd,
        and a sync still under way (its task cancelled) leaves what it covers to the next one."""
        self._offered = None
        poller, self._poller = self._poller, None
        if poller is not None and self._kernel is not None:
            poller.remove(self._kernel.fileno())
        pending, self._pending = self._pending, None
        if pending is not None and self._split is not None:
            self._split.sync_finish(pending, False)

    async def _flusher(self) -> None:
        """Run syncs in one long-lived thread and release replies as each one returns.

        The thread syncs whenever appends were made since its last sync (``appended`` wakes
        it) and hands each result back with one ``run_sync_soon``: under load it goes from
        one sync to the next without waiting to be woken, and no sync pays for a worker
        thread being found, started and joined, the way ``trio.to_thread.run_sync`` would.
        """
        thread = _SyncThread(self)
        thread.start()
        try:
            while self._took(await thread.next_result()):
                pass
        finally:
            thread.stop()

    async def _waiting_flusher(self) -> None:
        """Hand each sync to the thread and wait for it right there, up to ``wait_seconds``.

        For a log whose sync is one short fsync (the coordinator's journal) this is cheaper
        than going back to the event loop: the replies wait for the fsync anyway, and a
        result handed over directly costs two thread wake-ups instead of a trip through
        trio's wake-up socket and a new scheduling round. Requests that arrive meanwhile are
        read right after it and share the next sync. A sync still running after
        ``wait_seconds`` is left to finish in the background and delivered like any other
        thread's result, so a stuck disk never stops the event loop (and the commit
        timeout still fires); after such a sync the next ones are not waited for until one
        is quick again.
        """
        thread = _HandOffThread(self)
        thread.start()
        wait = self.wait_seconds
        try:
            while True:
                await self._round_due()
                result = thread.sync(wait)
                if result is None:
                    result = await thread.next_result()
                if not self._took(result):
                    return
                assert not isinstance(result, BaseException)
                wait = self.wait_seconds if result[1] <= self.wait_seconds else 0.0
                await trio.lowlevel.checkpoint()  # read what arrived meanwhile before the next sync
        finally:
            thread.stop()

    def _took(self, result: tuple[int, float] | BaseException) -> bool:
        """A thread's sync result: release what it made durable (True), or fail (False: the
        flusher stops); an exception other than ``OSError`` is raised."""
        if isinstance(result, OSError):
            self._sync_failed(result)
            return False
        if isinstance(result, BaseException):
            raise result
        self._synced(*result)
        return True

    async def sync_now(self) -> bool:
        """Sync in a worker thread and release what became durable; False if the sync failed."""
        if self.failure is not None:
            return False
        try:
            durable, seconds = await trio.to_thread.run_sync(self._timed_sync)
        except OSError as exc:
            self._sync_failed(exc)
            return False
        self._synced(durable, seconds)
        return True

    def _sync_failed(self, exc: OSError) -> None:
        self.failure = exc
        self._waiting.clear()
        self._timed.clear()
        self.on_failure(exc)

    def _synced(self, durable: int, seconds: float) -> None:
        """A sync returned: everything numbered up to ``durable`` is on disk."""
        self.syncs += 1
        if self.fsync_seconds is not None:
            self.fsync_seconds.observe(seconds)
        if durable > self.durable_seq:
            self.durable_seq = durable
        waiting = self._waiting
        if waiting and waiting[0][0] <= durable:
            released = []
            while waiting and waiting[0][0] <= durable:
                released.append(waiting.popleft()[1])
            self._release(released)
        timed = self._timed  # released waiters are a prefix of the timed ones too
        while timed and timed[0][1].event.is_set():
            timed.popleft()

    def _timed_sync(self) -> tuple[int, float]:
        started = time.perf_counter()
        durable = self.log.sync()
        return durable, time.perf_counter() - started

    async def _expirer(self, timeout: float) -> None:
        """Answer waiters still queued ``timeout`` seconds on with their timeout reply.

        Deadlines grow in queue order (one timeout for all), so only the head is watched;
        with nothing queued it sleeps a whole timeout, which no later deadline can precede.
        """
        timed = self._timed
        while True:
            now = trio.current_time()
            expired = 0
            while timed and timed[0][0] <= now:
                _, reply, on_timeout, context = timed.popleft()
                if not reply.event.is_set():
                    reply.frame = on_timeout(reply, context)
                    reply.event.set()
                    expired += 1
            if expired:
                self.timeouts += expired
                log.warning("%s: %d replies not durable within %.0f ms were answered with a timeout error "
                            "(%d queued)", self.name, expired, timeout * 1000, len(self._waiting))
            await trio.sleep_until(timed[0][0] if timed else now + timeout)


class _SyncThread:
    """The flusher's thread: syncs while there are appends, hands each result to trio."""

    def __init__(self, commit: GroupCommit) -> None:
        self._commit = commit
        self._needed = commit._flush_needed
        self._token = trio.lowlevel.current_trio_token()
        self._results: deque[tuple[int, float] | BaseException] = deque()
        self._arrived: trio.Event | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=f"kcoord-sync-{commit.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Let the thread end after the sync it may be in (it is never waited for)."""
        self._stopped = True
        self._needed.set()

    async def next_result(self) -> tuple[int, float] | BaseException:
        while not self._results:
            self._arrived = trio.Event()
            await self._arrived.wait()
        return self._results.popleft()

    def _deliver(self, result: tuple[int, float] | BaseException) -> None:  # on the event loop
        self._results.append(result)
        arrived = self._arrived
        if arrived is not None:
            self._arrived = None
            arrived.set()

    def _run(self) -> None:  # in the thread
        needed = self._needed
        while True:
            needed.wait()
            needed.clear()
            if self._stopped:
                return
            result: tuple[int, float] | BaseException
            try:
                result = self._commit._timed_sync()
            except BaseException as exc:  # handed to the flusher task, which decides
                result = exc
            try:
                self._token.run_sync_soon(self._deliver, result)
            except trio.RunFinishedError:
                return
            if isinstance(result, BaseException):
                return


class _HandOffThread:
    """The waiting flusher's thread: one sync per request, its result handed back directly
    to a caller still waiting for it, or through trio once the caller stopped waiting."""

    def __init__(self, commit: GroupCommit) -> None:
        self._commit = commit
        self._token = trio.lowlevel.current_trio_token()
        self._cond = threading.Condition()
        self._requested = False
        self._stopped = False
        self._caller_waiting = False
        self._handed: tuple[int, float] | BaseException | None = None
        self._late: tuple[int, float] | BaseException | None = None
        self._arrived = trio.Event()
        self._thread = threading.Thread(target=self._run, name=f"kcoord-sync-{commit.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Let the thread end after the sync it may be in (it is never waited for)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def sync(self, wait: float) -> tuple[int, float] | BaseException | None:
        """Start a sync and wait up to ``wait`` seconds for it; None: it goes on (``next_result``)."""
        with self._cond:
            self._requested = True
            self._handed = None
            self._arrived = trio.Event()
            self._cond.notify_all()
            if wait <= 0:
                return None
            self._caller_waiting = True
            try:
                self._cond.wait_for(lambda: self._handed is not None, timeout=wait)
            finally:
                self._caller_waiting = False
            handed, self._handed = self._handed, None
            return handed

    async def next_result(self) -> tuple[int, float] | BaseException:
        """The result of the sync ``sync`` stopped waiting for."""
        await self._arrived.wait()
        late, self._late = self._late, None
        assert late is not None
        return late

    def _deliver(self, result: tuple[int, float] | BaseException) -> None:  # on the event loop
        self._late = result
        self._arrived.set()

    def _run(self) -> None:  # in the thread
        cond = self._cond
        while True:
            with cond:
                cond.wait_for(lambda: self._requested or self._stopped)
                if self._stopped:
                    return
                self._requested = False
            result: tuple[int, float] | BaseException
            try:
                result = self._commit._timed_sync()
            except BaseException as exc:  # handed to the flusher task, which decides
                result = exc
            with cond:
                if self._caller_waiting:
                    self._handed = result
                    cond.notify_all()
                    continue
            try:
                self._token.run_sync_soon(self._deliver, result)
            except trio.RunFinishedError:
                return
