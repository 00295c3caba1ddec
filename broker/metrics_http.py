"""A small HTTP/1.1 endpoint for Prometheus: ``GET /metrics`` and ``GET /healthz``.

One request per connection (``Connection: close``). What a client can cost the broker is
bounded: the request head is capped at ``MAX_HEAD`` bytes (431 beyond), every exchange at
``TIMEOUT`` seconds, and at most ``MAX_CONNECTIONS`` are served at once (503 beyond). Any
failure ends only that HTTP connection. The parsing and the responses are plain functions
(``parse_head``, ``respond``) so they can be tested without sockets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from broker.metrics import CONTENT_TYPE

log = logging.getLogger("kcoord.metrics")

MAX_HEAD = 8192
TIMEOUT = 10.0
LINGER = 1.0  # after replying, how long to drain what the client still sends
MAX_CONNECTIONS = 16
_RECEIVE = 4096

REASONS = {
    200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
    408: "Request Timeout", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
    503: "Service Unavailable", 505: "HTTP Version Not Supported",
}


@dataclass(frozen=True, slots=True)
class Head:
    """A parsed request line: the method and the path (query string dropped)."""

    method: str
    path: str


def head_end(data: bytes | bytearray) -> int | None:
    """Where the request head ends (after its blank line), or None if it has not yet."""
    ends = [i + len(mark) for mark in (b"\r\n\r\n", b"\n\n") if (i := data.find(mark)) >= 0]
    return min(ends) if ends else None


def parse_head(data: bytes | bytearray) -> Head | int:
    """The request line of a complete request head, or the status code refusing it."""
    line = bytes(data).split(b"\n", 1)[0].rstrip(b"\r")
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        return 400
    parts = text.split(" ")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        return 400
    method, target, version = parts
    if not version.startswith("HTTP/"):
        return 400
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        return 505
    if not method.isascii() or not method.isalpha() or not method.isupper():
        return 400
    if not target.startswith("/"):
        return 400
    return Head(method, target.split("?", 1)[0])


def respond(status: int, body: bytes = b"", content_type: str = "text/plain; charset=utf-8",
            head_only: bool = False, allow: str | None = None) -> bytes:
    """A complete HTTP/1.1 response that closes the connection."""
    lines = [
        f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if allow is not None:
        lines.append(f"Allow: {allow}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
    return head if head_only else head + body


@dataclass
class MetricsEndpoint:
    """Serves ``render()`` at /metrics and ``healthy()`` at /healthz."""

    render: Callable[[], str]
    healthy: Callable[[], bool]
    timeout: float = TIMEOUT
    max_connections: int = MAX_CONNECTIONS
    listeners: list[trio.SocketListener] = field(default_factory=list)
    active: int = 0

    async def bind(self, host: str, port: int) -> tuple[str, int]:
        """Open the listening sockets; returns the address bound (port 0 picks one)."""
        self.listeners = await trio.open_tcp_listeners(port, host=host)
        sockname = self.listeners[0].socket.getsockname()
        return str(sockname[0]), int(sockname[1])

    def answer(self, head: Head | int) -> bytes:
        """The response to one request head (sans-IO)."""
        if isinstance(head, int):
            return respond(head, f"{REASONS.get(head, 'Error')}\n".encode())
        head_only = head.method == "HEAD"
        if head.method not in ("GET", "HEAD"):
            return respond(405, b"method not allowed\n", allow="GET, HEAD")
        if head.path == "/metrics":
            try:
                body = self.render().encode()
            except Exception:
                log.exception("rendering metrics failed")
                return respond(500, b"rendering metrics failed\n", head_only=head_only)
            return respond(200, body, CONTENT_TYPE, head_only=head_only)
        if head.path == "/healthz":
            if self.healthy():
                return respond(200, b"ok\n", head_only=head_only)
            return respond(503, b"not serving\n", head_only=head_only)
        return respond(404, b"not found: try /metrics or /healthz\n", head_only=head_only)

    async def serve(self) -> None:
        await trio.serve_listeners(self.handle, self.listeners)

    async def handle(self, stream: trio.abc.HalfCloseableStream) -> None:
        """One HTTP connection; nothing it does can escape into the broker."""
        self.active += 1
        try:
            with trio.move_on_after(self.timeout):
                if self.active > self.max_connections:
                    await stream.send_all(respond(503, b"too many connections\n"))
                else:
                    await self._exchange(stream)
                await self._close_politely(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.debug("metrics connection ended: %r", exc)
        except Exception:
            log.exception("metrics connection failed")
        finally:
            self.active -= 1
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    async def _exchange(self, stream: trio.abc.HalfCloseableStream) -> None:
        data = bytearray()
        reply: bytes | None = self.answer(408)
        with trio.move_on_after(self.timeout / 2):
            while True:
                end = head_end(data)
                if end is not None:
                    reply = self.answer(parse_head(data[:end]) if end <= MAX_HEAD else 431)
                    break
                if len(data) > MAX_HEAD:
                    reply = self.answer(431)
                    break
                chunk = await stream.receive_some(_RECEIVE)
                if not chunk:  # gone before a whole request head: nobody to answer
                    reply = None
                    break
                data += chunk
        if reply is not None:
            await stream.send_all(reply)

    @staticmethod
    async def _close_politely(stream: trio.abc.HalfCloseableStream) -> None:
        """Half-close, then read (and drop) what the client still sends for a moment, so the
        reply is not lost to a reset caused by unread input."""
        try:
            await stream.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return
        with trio.move_on_after(LINGER):
            drained = 0
            while drained < 1 << 20:
                chunk = await stream.receive_some(_RECEIVE)
                if not chunk:
                    return
                drained += len(chunk)
