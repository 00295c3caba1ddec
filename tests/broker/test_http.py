"""The HTTP surface over loopback: /metrics, /healthz, and hostile clients bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from broker import http
from broker.config import Config
from broker.metrics import gauge, registry
from tests.support.prometheus import parse

IDLE = 1.0


class Surface:
    def __init__(self) -> None:
        self.healthy = True
        self.port = 0
        self.broken = False

    def families(self) -> list:
        if self.broken:
            raise RuntimeError("a bug")
        return [gauge("kcoord_up", "Up.", 1)]


@pytest.fixture
async def surface(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Surface]:
    state = Surface()
    context = http.HttpContext(bootstrap="127.0.0.1:9", data_dir=tmp_path, config=Config(),
                               http_host="127.0.0.1", registry=registry(state.families), healthy=lambda: state.healthy,
                               offsets_committed=lambda: 0)
    extra = [Route("/hello", lambda _request: PlainTextResponse("hello\n"))]
    sock = http.bind("127.0.0.1", 0)
    state.port = sock.getsockname()[1]
    await nursery.start(http.serve, http.build_app(context, extra), sock, http.hypercorn_config(idle_timeout=IDLE))
    yield state


async def _exchange(port: int, data: bytes, shut: bool = True) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(data)
        if shut:
            await stream.send_eof()
        reply = bytearray()
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                reply += chunk
    return bytes(reply)


def _body(reply: bytes) -> bytes:
    return reply.split(b"\r\n\r\n", 1)[1]


async def test_metrics_and_health(surface: Surface) -> None:
    reply = await _exchange(surface.port, b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 ")
    assert b"content-type: text/plain; version=" in reply.lower()
    exposition = parse(_body(reply).decode())
    assert exposition.get("kcoord_up") == 1 and "process_open_fds" in exposition.types
    openmetrics = await _exchange(surface.port, b"GET /metrics HTTP/1.1\r\nHost: a\r\n"
                                                b"Accept: application/openmetrics-text; version=1.0.0\r\n\r\n")
    assert b"application/openmetrics-text" in openmetrics and openmetrics.endswith(b"# EOF\n")
    assert _body(await _exchange(surface.port, b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")) == b"ok\n"
    surface.healthy = False
    assert (await _exchange(surface.port, b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")).startswith(b"HTTP/1.1 503 ")
    head = await _exchange(surface.port, b"HEAD /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and _body(head) == b""


async def test_routes_a_command_adds_are_served(surface: Surface) -> None:
    assert _body(await _exchange(surface.port, b"GET /hello HTTP/1.1\r\nHost: a\r\n\r\n")) == b"hello\n"


async def test_unknown_paths_and_methods(surface: Surface) -> None:
    assert (await _exchange(surface.port, b"GET /admin HTTP/1.1\r\nHost: a\r\n\r\n")).startswith(b"HTTP/1.1 404 ")
    assert (await _exchange(surface.port, b"DELETE /metrics HTTP/1.1\r\nHost: a\r\n\r\n")).startswith(
        b"HTTP/1.1 405 ")


async def test_a_failing_collector_is_a_500_not_a_crash(surface: Surface) -> None:
    surface.broken = True
    assert (await _exchange(surface.port, b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")).startswith(b"HTTP/1.1 500 ")
    surface.broken = False
    assert (await _exchange(surface.port, b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")).startswith(b"HTTP/1.1 200 ")


async def test_hostile_input_gets_errors(surface: Surface) -> None:
    port = surface.port
    assert (await _exchange(port, b"\x00\xff garbage\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
    assert (await _exchange(port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n")).startswith(
        b"HTTP/1.1 400 ")  # a TLS hello
    huge = b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n"
    assert (await _exchange(port, huge)).startswith(b"HTTP/1.1 431 ")
    post = b"POST /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000
    assert (await _exchange(port, post)).startswith(b"HTTP/1.1 405 ")
    # Gone half way: the connection ends with a 400 (or nothing, had the peer vanished).
    assert (await _exchange(port, b"GET /metrics HTTP/1.1\r\n")).startswith(b"HTTP/1.1 400 ")


async def test_a_slowloris_client_is_dropped_and_others_are_still_served(surface: Surface) -> None:
    port = surface.port
    slow = await trio.open_tcp_stream("127.0.0.1", port)
    async with slow:
        with trio.fail_after(IDLE * 10):
            closed = False
            for piece in (b"GET /me", b"tr", b"ics HTTP/1.1\r\n", b"X-A: 1\r\n", b"X-B: 2\r\n") * 20:
                assert (await _exchange(port, b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")).endswith(b"ok\n")
                try:
                    await slow.send_all(piece)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    closed = True
                    break
                await trio.sleep(IDLE / 4)
                with trio.move_on_after(0):
                    if await slow.receive_some(1) == b"":
                        closed = True
                        break
            assert closed, "the server kept a connection that never finished its request head"
