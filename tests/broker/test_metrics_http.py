"""The metrics HTTP endpoint: request heads in, responses out; hostile clients bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from broker.metrics import CONTENT_TYPE
from broker.metrics_http import MAX_HEAD, Head, MetricsEndpoint, head_end, parse_head, respond

# --- sans-IO ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "parsed"),
    [
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", Head("GET", "/metrics")),
        (b"GET /metrics?name[]=x HTTP/1.0\r\n\r\n", Head("GET", "/metrics")),
        (b"HEAD /healthz HTTP/1.1\n\n", Head("HEAD", "/healthz")),
        (b"POST /metrics HTTP/1.1\r\n\r\n", Head("POST", "/metrics")),
        (b"garbage\r\n\r\n", 400),
        (b"GET /metrics\r\n\r\n", 400),
        (b"GET  /metrics HTTP/1.1\r\n\r\n", 400),
        (b"get /metrics HTTP/1.1\r\n\r\n", 400),
        (b"GET metrics HTTP/1.1\r\n\r\n", 400),
        (b"GET /metrics SPDY/3\r\n\r\n", 400),
        (b"GET /metrics HTTP/2.0\r\n\r\n", 505),
        (b"GET /m\xe9trics HTTP/1.1\r\n\r\n", 400),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),  # a TLS hello
    ],
)
def test_parse_head(head: bytes, parsed: Head | int) -> None:
    assert parse_head(head) == parsed


def test_head_end_accepts_crlf_or_bare_newlines() -> None:
    assert head_end(b"GET / HTTP/1.1\r\nA: b\r\n") is None
    assert head_end(b"GET / HTTP/1.1\r\n\r\nbody") == 18
    assert head_end(b"GET / HTTP/1.1\n\nbody") == 16


def test_responses_close_and_carry_their_length() -> None:
    assert respond(200, b"ok\n") == (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n"
                                     b"Content-Length: 3\r\nConnection: close\r\n\r\nok\n")
    head_only = respond(200, b"ok\n", head_only=True)
    assert head_only.endswith(b"Content-Length: 3\r\nConnection: close\r\n\r\n")
    assert b"Allow: GET, HEAD\r\n" in respond(405, allow="GET, HEAD")


def _endpoint(healthy: bool = True, render: str = "# metrics\n") -> MetricsEndpoint:
    return MetricsEndpoint(render=lambda: render, healthy=lambda: healthy)


def test_answers() -> None:
    endpoint = _endpoint()
    ok = endpoint.answer(Head("GET", "/metrics"))
    assert ok.startswith(b"HTTP/1.1 200 OK\r\n") and ok.endswith(b"\r\n\r\n# metrics\n")
    assert f"Content-Type: {CONTENT_TYPE}\r\n".encode() in ok
    assert endpoint.answer(Head("GET", "/healthz")).endswith(b"\r\n\r\nok\n")
    assert _endpoint(healthy=False).answer(Head("GET", "/healthz")).startswith(b"HTTP/1.1 503 ")
    assert endpoint.answer(Head("GET", "/")).startswith(b"HTTP/1.1 404 ")
    assert endpoint.answer(Head("DELETE", "/metrics")).startswith(b"HTTP/1.1 405 ")
    assert endpoint.answer(Head("HEAD", "/metrics")).endswith(b"Connection: close\r\n\r\n")
    assert endpoint.answer(400).startswith(b"HTTP/1.1 400 Bad Request\r\n")


def test_a_failing_render_is_a_500_not_a_crash() -> None:
    def broken() -> str:
        raise RuntimeError("bug")

    reply = MetricsEndpoint(render=broken, healthy=lambda: True).answer(Head("GET", "/metrics"))
    assert reply.startswith(b"HTTP/1.1 500 ")


# --- over loopback ----------------------------------------------------------------------


@pytest.fixture
async def served(nursery: trio.Nursery) -> AsyncIterator[tuple[MetricsEndpoint, int]]:
    endpoint = MetricsEndpoint(render=lambda: "kcoord_up 1\n", healthy=lambda: True, timeout=1.0,
                               max_connections=4)
    _, port = await endpoint.bind("127.0.0.1", 0)
    nursery.start_soon(endpoint.serve)
    yield endpoint, port


async def _exchange(port: int, data: bytes, shut: bool = False) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(data)
        if shut:
            await stream.send_eof()
        reply = bytearray()
        with trio.fail_after(5):
            while chunk := await stream.receive_some(65536):
                reply += chunk
    return bytes(reply)


async def test_get_metrics_over_a_socket(served: tuple[MetricsEndpoint, int]) -> None:
    _, port = served
    reply = await _exchange(port, b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n") and reply.endswith(b"\r\n\r\nkcoord_up 1\n")


async def test_a_request_split_in_pieces_is_answered(served: tuple[MetricsEndpoint, int]) -> None:
    _, port = served
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        for piece in (b"GET /hea", b"lthz HTTP/1.1\r\n", b"Host: a\r\n", b"\r\n"):
            await stream.send_all(piece)
            await trio.sleep(0.01)
        reply = bytearray()
        with trio.fail_after(5):
            while chunk := await stream.receive_some(65536):
                reply += chunk
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n") and reply.endswith(b"ok\n")


async def test_hostile_input_gets_errors(served: tuple[MetricsEndpoint, int]) -> None:
    _, port = served
    assert (await _exchange(port, b"\x00\xff garbage\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
    huge = b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * (4 * MAX_HEAD) + b"\r\n\r\n"
    assert (await _exchange(port, huge)).startswith(b"HTTP/1.1 431 ")
    # A body the server never reads is drained, so the reply is not lost to a reset.
    post = b"POST /metrics HTTP/1.1\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000
    assert (await _exchange(port, post)).startswith(b"HTTP/1.1 405 ")
    assert (await _exchange(port, b"GET /metrics HTTP/1.1\r\n", shut=True)) == b""  # gone half way


async def test_a_silent_client_times_out_and_others_are_still_served(
        served: tuple[MetricsEndpoint, int]) -> None:
    endpoint, port = served
    silent = await trio.open_tcp_stream("127.0.0.1", port)
    async with silent:
        await silent.send_all(b"GET /metr")
        assert (await _exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
        with trio.fail_after(5):
            reply = await silent.receive_some(65536)
        assert reply.startswith(b"HTTP/1.1 408 ")
    with trio.fail_after(5):
        while endpoint.active:
            await trio.sleep(0.01)


async def test_connections_beyond_the_limit_are_turned_away(served: tuple[MetricsEndpoint, int]) -> None:
    endpoint, port = served
    idle = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(endpoint.max_connections)]
    with trio.fail_after(5):
        while endpoint.active < endpoint.max_connections:
            await trio.sleep(0.01)
    assert (await _exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 503 ")
    for stream in idle:
        await stream.aclose()
    with trio.fail_after(5):
        while endpoint.active:
            await trio.sleep(0.01)
    assert (await _exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
