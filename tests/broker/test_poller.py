"""The broker's read poller calls a connection as its socket becomes readable, and only then."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

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
