"""The broker's one HTTP surface: ``/metrics``, ``/healthz``, and the routes a command adds.

An ASGI application (Starlette) served by Hypercorn's trio worker inside the broker's own
trio run, so it needs no process of its own. ``/metrics`` is prometheus-client's exposition
of ``broker.metrics.registry`` (the text format, or OpenMetrics when the scraper asks for
it); ``/healthz`` answers 200 while the broker accepts Kafka connections. The ``kcoord``
command adds the console through an ``ExtensionFactory``, so this package never
imports the console (which speaks to the broker as an admin client would).

What a client can cost the broker is bounded by Hypercorn's limits, set here: a request
head over ``MAX_HEAD`` bytes gets 431, input that is not HTTP gets 400, a connection that
sends no complete request head within ``IDLE_TIMEOUT`` (slowloris) is closed, and a read
that stalls for ``READ_TIMEOUT`` ends the connection. Nothing that happens on an HTTP
connection reaches the Kafka listener.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config as HypercornConfig
from hypercorn.config import Sockets
from hypercorn.trio.run import worker_serve
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from broker.config import Config

log = logging.getLogger("kcoord.http")

MAX_HEAD = 8192
IDLE_TIMEOUT = 5
READ_TIMEOUT = 10
BACKLOG = 64


@dataclass(frozen=True)
class HttpContext:
    """What an extension of the surface may use: the broker as a client sees it."""

    #: ``host:port`` of this broker's Kafka listener: the console connects to it as any
    #: admin client does, so what it shows and does passes through the Kafka protocol.
    bootstrap: str
    #: The host the HTTP surface listens on (a loopback address or not).
    http_host: str
    data_dir: Path
    config: Config
    registry: CollectorRegistry
    healthy: Callable[[], bool]
    #: Partition offsets stored by OffsetCommit so far (a cheap counter, for rates).
    offsets_committed: Callable[[], int]
    #: The security protocol of the listener at ``bootstrap`` (PLAINTEXT, SSL, SASL_PLAINTEXT
    #: or SASL_SSL): a SASL one makes the console ask for credentials.
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True)
class HttpExtension:
    """Routes a command adds to the surface, and a task to run beside them."""

    routes: Sequence[BaseRoute]
    background: Callable[[], Awaitable[None]] | None = None


#: Builds the extension (the console) once the broker's Kafka listener is bound.
ExtensionFactory = Callable[[HttpContext], HttpExtension]


def build_app(context: HttpContext, routes: Sequence[BaseRoute] = ()) -> Starlette:
    """``/metrics`` and ``/healthz``, then ``routes``."""

    def metrics(request: Request) -> Response:
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        try:
            body = encode(context.registry)
        except Exception:
            log.exception("rendering metrics failed")
            return PlainTextResponse("rendering metrics failed\n", status_code=500)
        return Response(body, media_type=None, headers={"Content-Type": content_type})

    def healthz(_request: Request) -> Response:
        if context.healthy():
            return PlainTextResponse("ok\n")
        return PlainTextResponse("not serving\n", status_code=503)

    own = [Route("/metrics", metrics, methods=["GET"]), Route("/healthz", healthz, methods=["GET"])]
    return Starlette(routes=[*own, *routes])


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (port 0 picks one); ``OSError`` when the address is unusable."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=BACKLOG)
    sock.setblocking(False)
    return sock


def hypercorn_config(idle_timeout: float = IDLE_TIMEOUT, read_timeout: int = READ_TIMEOUT) -> HypercornConfig:
    config = HypercornConfig()
    config.h11_max_incomplete_size = MAX_HEAD
    config.keep_alive_timeout = idle_timeout
    config.read_timeout = read_timeout
    config.graceful_timeout = 1.0
    config.include_server_header = False
    config.accesslog = None
    config.errorlog = log
    config.loglevel = "WARNING"
    return config


async def serve(app: Any, sock: socket.socket, config: HypercornConfig | None = None,
                *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``app`` on ``sock`` until cancelled."""
    sockets = Sockets(secure_sockets=[], insecure_sockets=[sock], quic_sockets=[])
    await worker_serve(ASGIWrapper(app), config or hypercorn_config(), sockets=sockets, task_status=task_status)
