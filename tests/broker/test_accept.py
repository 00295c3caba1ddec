"""The accept loop takes every queued connection at once, not one per scheduling round."""

from __future__ import annotations

import socket

import trio

from broker.server import accept_connections

QUEUED = 50


async def test_connections_queued_while_busy_are_all_accepted_in_one_wake_up() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    listener = listeners[0]
    port = listener.socket.getsockname()[1]
    accepted: list[trio.SocketStream] = []
    all_in = trio.Event()
    rounds = 0

    async def handler(stream: trio.SocketStream) -> None:
        accepted.append(stream)
        if len(accepted) == QUEUED:
            all_in.set()
        await trio.sleep_forever()

    async def busy() -> None:
        # Another task that is always runnable: each of its checkpoints is one scheduling round.
        nonlocal rounds
        while True:
            rounds += 1
            await trio.lowlevel.checkpoint()

    # The clients connect before the broker accepts: the kernel queues them in the backlog.
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(QUEUED)]
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(busy)
            nursery.start_soon(accept_connections, listener, handler, nursery)
            with trio.fail_after(10):
                await all_in.wait()
            taken = rounds
            nursery.cancel_scope.cancel()
        # One accept through trio, the other 49 straight from the backlog: a few rounds, not 50.
        assert taken < 10, taken
    finally:
        for client in clients:
            client.close()
        await listener.aclose()
