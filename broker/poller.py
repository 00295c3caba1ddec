"""One epoll for the sockets of every connection: a readable socket is handled in place.

trio waits for a socket by registering it with its own epoll for one event and parking the
waiting task; the wake-up then reschedules the task. For a broker whose clients keep one
request in flight (most consumers commit and heartbeat that way), that is a registration
change, a task switch and their bookkeeping for every request, and it costs more CPU than
most requests do. Here each connection's socket is registered once, for as long as it is
read, in an epoll of the broker's own; one task waits (through trio) until that epoll has
events, then calls each ready connection's ``on_readable``, which reads the socket and
handles its requests synchronously. Connection tasks run only when something must be
awaited: a reply the socket did not take at once, a delay, the end of the connection.

Level-triggered: a socket with bytes left after one read is reported again on the next
pass, and one pass handles at most ``MAX_EVENTS`` ready sockets before the other tasks run.

The group commits of the logs the kernel fdatasyncs (``storage.group_commit``) run their
rounds here too (``drive``): a pass ends by starting the sync its requests' appends wait
for, and the sync's completion is one more descriptor in this epoll.

With ``linger``, a pass that leaves driven work waiting for a descriptor of this epoll
(a sync in flight: ``Driven.awaiting``) and trio nothing to run is followed by a wait in
this epoll itself, not in trio's loop: the sync's completion, and the requests that
arrive meanwhile, are handled at once, and the passes go on while a sync is in flight,
for ``linger`` seconds in all. The poller goes back to trio once no sync is in flight,
a pass makes a task runnable (a reply a connection task waits for), a thread has handed
trio a callback, trio's next deadline is due, or ``linger`` has passed. So trio's own
descriptors (listening sockets, connections waiting to write, its wake-up socket, which
a thread's result arrives on) wait for their round at most as long as a sync, and never
more than ``linger`` (epoll's timeouts are whole milliseconds, so up to one more). So do
the tasks trio woke in the same round as the poller (a timer that had just fired, a task
whose socket became ready): trio has taken them off its run queue to run them after the
poller, so ``current_statistics`` does not count them as runnable.
"""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Callable
from typing import Protocol

import trio

log = logging.getLogger("kcoord.server")

MAX_EVENTS = 256


class Driven(Protocol):
    """Work run on the poller's task (``storage.group_commit.GroupCommit``)."""

    def poller_started(self, poller: ReadPoller) -> None: ...

    def after_pass(self) -> None: ...

    def awaiting(self) -> bool:
        """Whether it waits for a descriptor in the poller's epoll (a sync in flight)."""

    def poller_stopped(self) -> None: ...


class ReadPoller:
    """The sockets being read, and the task that reads the ready ones (``linger``: see above)."""

    def __init__(self, linger: float = 0.0) -> None:
        self._epoll = select.epoll()
        self.linger = linger
        self._readers: dict[int, Callable[[], None]] = {}
        self._paused: set[int] = set()
        self._driven: list[Driven] = []
        #: True while a pass calls the ready descriptors' readers and then the ``after_pass`` hooks.
        self.in_pass = False

    def drive(self, driven: Driven) -> None:
        """While ``run`` runs, call ``driven.after_pass()`` at the end of every pass; before
        it, ``driven.poller_started(self)``, after it, ``driven.poller_stopped()``."""
        self._driven.append(driven)

    def add(self, fd: int, on_readable: Callable[[], None]) -> None:
        """Call ``on_readable`` (on the poller's task) whenever ``fd`` has bytes or its end."""
        self._readers[fd] = on_readable
        self._epoll.register(fd, select.EPOLLIN)

    def pause(self, fd: int) -> None:
        """Stop reading ``fd`` for now (its replies wait, or its requests wait for a delay)."""
        if fd in self._readers and fd not in self._paused:
            self._paused.add(fd)
            self._epoll.modify(fd, 0)

    def resume(self, fd: int) -> None:
        if fd in self._paused:
            self._paused.discard(fd)
            self._epoll.modify(fd, select.EPOLLIN)

    def remove(self, fd: int) -> None:
        """Forget ``fd``; called before the socket is closed, so a reused number is not confused."""
        if self._readers.pop(fd, None) is not None:
            self._paused.discard(fd)
            try:
                self._epoll.unregister(fd)
            except OSError:  # closed already: the kernel dropped it
                pass

    def close(self) -> None:
        self._epoll.close()

    async def run(self) -> None:
        """Read the ready sockets until cancelled."""
        epoll = self._epoll
        fileno = epoll.fileno()
        driven = self._driven
        try:
            for d in driven:
                d.poller_started(self)
            while True:
                await trio.lowlevel.wait_readable(fileno)
                self.in_pass = True
                try:
                    self._pass(epoll.poll(0, MAX_EVENTS))
                    if self.linger > 0:
                        self._linger(time.monotonic() + self.linger)
                finally:
                    self.in_pass = False
        finally:
            self.close()
            for d in driven:
                d.poller_stopped()

    def _linger(self, until: float) -> None:
        """Wait in the epoll and run passes until ``until`` (real time), while driven work
        awaits one of its descriptors, trio has nothing to run and no deadline comes first."""
        epoll = self._epoll
        driven = self._driven
        while any(d.awaiting() for d in driven):
            stats = trio.lowlevel.current_statistics()
            if stats.tasks_runnable or stats.run_sync_soon_queue_size:
                return
            wait = min(until - time.monotonic(), stats.seconds_to_next_deadline)
            if wait <= 0:
                return
            events = epoll.poll(wait, MAX_EVENTS)
            if not events:
                return
            self._pass(events)

    def _pass(self, events: list[tuple[int, int]]) -> None:
        """Handle the ready sockets, and those that became ready meanwhile (``MAX_EVENTS`` in
        all), then call the driven work's ``after_pass``."""
        readers = self._readers
        driven = self._driven
        handled = 0
        while events:
            for fd, _ in events:
                on_readable = readers.get(fd)
                if on_readable is not None:
                    on_readable()
            handled += len(events)
            # Read what arrived meanwhile before the syncs start: it shares them.
            if not driven or handled >= MAX_EVENTS:
                break
            events = self._epoll.poll(0, MAX_EVENTS - handled)
        for d in driven:
            d.after_pass()
