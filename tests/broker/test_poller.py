"""The broker's read poller calls a connection as its socket becomes readable, and only then."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import trio
import trio.testing

from broker.poller import ReadPoller


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.setblocking(False)
    yield a, b
    a.close()
    b.close()


async def run_until(poller: ReadPoller, done: trio.Event) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(poller.run)
        with trio.fail_after(10):
            await done.wait()
        nursery.cancel_scope.cancel()


async def test_a_readable_socket_is_handed_to_its_reader_until_drained(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, peer = pair
    poller = ReadPoller()
    received: list[bytes] = []
    done = trio.Event()

    def on_readable() -> None:
        received.append(ours.recv(3))  # less than was sent: the rest is reported again
        if b"".join(received) == b"abcdefg":
            done.set()

    poller.add(ours.fileno(), on_readable)
    peer.sendall(b"abcdefg")
    await run_until(poller, done)
    assert b"".join(received) == b"abcdefg" and len(received) == 3


async def test_a_paused_socket_waits_and_a_resumed_one_is_read(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, peer = pair
    poller = ReadPoller()
    calls: list[bytes] = []
    done = trio.Event()

    def on_readable() -> None:
        calls.append(ours.recv(100))
        done.set()

    poller.add(ours.fileno(), on_readable)
    poller.pause(ours.fileno())
    peer.sendall(b"x")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(poller.run)
        await trio.testing.wait_all_tasks_blocked()
        assert calls == []  # readable, but paused
        poller.resume(ours.fileno())
        with trio.fail_after(10):
            await done.wait()
        nursery.cancel_scope.cancel()
    assert calls == [b"x"]


async def test_a_removed_socket_is_forgotten_and_its_number_may_come_back(
        pair: tuple[socket.socket, socket.socket]) -> None:
    ours, _peer = pair
    poller = ReadPoller()
    old: list[int] = []
    poller.add(ours.fileno(), lambda: old.append(1))
    poller.remove(ours.fileno())
    poller.remove(ours.fileno())  # twice is harmless
    number = ours.fileno()
    ours.close()
    fresh, fresh_peer = socket.socketpair()
    try:
        if fresh.fileno() != number:  # the kernel gave the lowest free number back, as usual
            pytest.skip("the descriptor number was not reused")
        done = trio.Event()
        poller.add(fresh.fileno(), done.set)
        fresh_peer.sendall(b"y")
        await run_until(poller, done)
        assert old == []
    finally:
        fresh.close()
        fresh_peer.close()


class Recorder:
    """Work driven by the poller (``ReadPoller.drive``): records what it was called for."""

    def __init__(self, poller: ReadPoller, calls: list[str]) -> None:
        self.poller = poller
        self.calls = calls

    def poller_started(self, poller: ReadPoller) -> None:
        assert poller is self.poller
        self.calls.append("started")

    def after_pass(self) -> None:
        assert self.poller.in_pass
        self.calls.append("after pass")

    def poller_stopped(self) -> None:
        self.calls.append("stopped")


async def test_driven_work_runs_after_each_pass_once_every_ready_socket_is_read() -> None:
    """Two sockets ready together are read in one pass, and the pass ends with the driven
    work's ``after_pass``; a byte that arrives during the pass is read before it ends."""
    pairs = [socket.socketpair() for _ in range(3)]
    poller = ReadPoller()
    calls: list[str] = []
    poller.drive(Recorder(poller, calls))
    done = trio.Event()

    def reader(n: int, ours: socket.socket) -> Callable[[], None]:
        def on_readable() -> None:
            assert poller.in_pass
            calls.append(f"read {n}: {ours.recv(10).decode()}")
            if n == 0:  # the third socket becomes readable while the pass runs
                pairs[2][1].send(b"late")
            if n == 2:
                done.set()
        return on_readable

    try:
        for n, (ours, _) in enumerate(pairs):
            ours.setblocking(False)
            poller.add(ours.fileno(), reader(n, ours))
        pairs[0][1].send(b"a")
        pairs[1][1].send(b"b")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poller.run)
            with trio.fail_after(10):
                await done.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert not poller.in_pass
            nursery.cancel_scope.cancel()
    finally:
        for a, b in pairs:
            a.close()
            b.close()
    assert calls[0] == "started" and calls[-1] == "stopped"
    assert sorted(calls[1:3]) == ["read 0: a", "read 1: b"]
    assert calls[3:] == ["read 2: late", "after pass", "stopped"]


class Feeder:
    """Driven work whose ``after_pass`` sends the next byte, ``bytes_`` times in all: the
    socket is ready again as each pass ends, as when a sync completes. It says it awaits
    that (``awaiting``) unless ``awaits`` is False."""

    def __init__(self, peer: socket.socket, bytes_: int, awaits: bool = True) -> None:
        self.peer = peer
        self.left = bytes_
        self.awaits = awaits

    def awaiting(self) -> bool:
        return self.awaits

    def poller_started(self, poller: ReadPoller) -> None:
        pass

    def after_pass(self) -> None:
        if self.left:
            self.left -= 1
            self.peer.send(b"x")

    def poller_stopped(self) -> None:
        pass


def count_wake_ups(poller: ReadPoller, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the poller's waits for its epoll through trio (one per round of trio's loop)."""
    waits: list[int] = []
    real = trio.lowlevel.wait_readable

    async def counted(fd: Any) -> None:
        if fd == poller._epoll.fileno():
            waits.append(fd)
        await real(fd)

    monkeypatch.setattr(trio.lowlevel, "wait_readable", counted)
    return waits


@pytest.mark.parametrize(("linger", "awaits"), [(0.0, True), (5.0, True), (5.0, False)])
async def test_with_linger_what_becomes_ready_while_driven_work_awaits_is_read_without_a_round_of_trio(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch, linger: float, awaits: bool
) -> None:
    ours, peer = pair
    poller = ReadPoller(linger=linger)
    poller.drive(Feeder(peer, 9, awaits))
    waits = count_wake_ups(poller, monkeypatch)
    received: list[bytes] = []
    done = trio.Event()

    def on_readable() -> None:
        received.append(ours.recv(100))
        if len(received) == 10:
            done.set()

    poller.add(ours.fileno(), on_readable)
    peer.send(b"x")
    await run_until(poller, done)
    assert received == [b"x"] * 10
    # Each count includes the last wait, for a round that never comes (the test ends).
    if linger and awaits:
        assert len(waits) == 2, "ten reads, each ready as the last pass ended, in one round"
    else:
        assert len(waits) == 11, "with nothing awaited (or no linger), a round per pass"


async def test_a_lingering_poller_goes_back_to_trio_once_a_task_is_runnable(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass that wakes a task (a reply a connection task waits for) ends the linger."""
    ours, peer = pair
    poller = ReadPoller(linger=5.0)
    poller.drive(Feeder(peer, 1))
    waits = count_wake_ups(poller, monkeypatch)
    reads: list[bytes] = []
    woken = trio.Event()
    ran: list[str] = []
    done = trio.Event()

    def on_readable() -> None:
        reads.append(ours.recv(100))
        woken.set()
        if len(reads) == 2:
            done.set()

    async def waiter() -> None:
        await woken.wait()
        ran.append("task")

    poller.add(ours.fileno(), on_readable)
    peer.send(b"x")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(poller.run)
        with trio.fail_after(10):
            await done.wait()
        nursery.cancel_scope.cancel()
    assert ran == ["task"] and reads == [b"x", b"x"]
    # The first round, the one the poller went back to trio for, and the last, never ended.
    assert len(waits) == 3, "the second byte was read in a round of its own"


async def test_a_lingering_poller_gives_trio_a_round_once_its_linger_is_spent(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that always has the next request ready keeps the poller busy, but it goes
    back to trio once ``linger`` seconds have passed since the round began."""
    ours, peer = pair
    poller = ReadPoller(linger=0.05)
    poller.drive(Feeder(peer, 10**9))
    waits = count_wake_ups(poller, monkeypatch)
    received: list[bytes] = []
    done = trio.Event()
    started = time.monotonic()

    def on_readable() -> None:
        received.append(ours.recv(100))
        if time.monotonic() - started > 0.3:
            done.set()

    poller.add(ours.fileno(), on_readable)
    peer.send(b"x")
    await run_until(poller, done)
    assert len(waits) >= 4, "0.3 s of passes, with a round of trio at least every 0.05 s"
    assert len(received) > len(waits), "passes ran between the rounds"
