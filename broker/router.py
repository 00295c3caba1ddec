"""api_key -> handler, and the decision what to do with each frame.

The router is where a frame becomes a reply. It stays free of sockets: the connection
hands it bytes and gets back an ``Outcome``: bytes to send, nothing to send, or "close".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from broker.context import BrokerContext
from broker.handlers import cluster
from broker.metrics import ERROR_REASONS, ApiStats, Family, counter
from broker.slots import Slot
from protocol.api_keys import ApiKey
from protocol.codec import Request, decode_request, encode_response, peek
from protocol.errors import ProtocolError, UnsupportedRequest
from protocol.messages import REQUESTS
from protocol.schema import Message

log = logging.getLogger("kcoord.router")
request_log = logging.getLogger("kcoord.requests")

# A handler gets the request and the peer address; it returns a response body, None for
# no response, or a Slot that fills in later (parked or waiting for durability).
Handler = Callable[[Request, str], Any]


@dataclass(slots=True)
class Close:
    """Close the connection after flushing earlier replies; ``reason`` goes to the log."""

    reason: str


Outcome = bytes | None | Close | Slot


class Router:
    """Routes decoded requests to handlers and advertises exactly what it can handle."""

    def __init__(self, ctx: BrokerContext, request_logging: bool = False) -> None:
        self.ctx = ctx
        self.handlers: dict[int, Handler] = {}
        self.api_stats: dict[int, ApiStats] = {}  # resolved per API at registration
        self._served: dict[int, Message] | None = None
        self.errors = dict.fromkeys(ERROR_REASONS, 0)
        self.request_logging = request_logging  # one INFO line per request (--request-log)
        self.register(ApiKey.API_VERSIONS, lambda r, _: cluster.handle_api_versions(ctx, r, self.served))
        self.register(ApiKey.FIND_COORDINATOR, lambda r, _: cluster.handle_find_coordinator(ctx, r))

    def register(self, api_key: ApiKey, handler: Handler) -> None:
        self.handlers[api_key] = handler
        self._served = None
        message = REQUESTS[api_key]
        self.api_stats[api_key] = ApiStats(api_key, message.name.removesuffix("Request"), message.max_version)

    @property
    def served(self) -> dict[int, Message]:
        """The declared messages that have a handler: what ApiVersions advertises.

        Built once per registration change (every request consults it). Do not mutate.
        """
        if self._served is None:
            self._served = {key: REQUESTS[key] for key in self.handlers}
        return self._served

    def route(self, frame: bytes, peer: str) -> Outcome:
        """Handle one request frame (without its size prefix)."""
        try:
            request = decode_request(frame, self.served)
        except UnsupportedRequest as exc:
            self.errors["unsupported"] += 1
            if exc.api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer with a v0 body so the client can step down.
                return encode_response(
                    ApiKey.API_VERSIONS, 0, exc.correlation_id,
                    cluster.unsupported_api_versions_body(self.served),
                )
            return Close(f"{exc} from {peer}")
        except ProtocolError as exc:
            self.errors["malformed"] += 1
            try:
                api_key, api_version, correlation_id = peek(frame)
                what = f"api_key={api_key} api_version={api_version} correlation_id={correlation_id}"
            except ProtocolError:
                what = "unreadable header"
            return Close(f"malformed request from {peer} ({what}): {exc}")
        header = request.header
        stats = self.api_stats[header.api_key]
        stats.requests[header.api_version] += 1
        started = perf_counter()
        try:
            body = self.handlers[header.api_key](request, peer)
        except Exception:
            # A bug, not bad input: log it loudly, drop this connection, keep serving others.
            self.errors["internal"] += 1
            log.exception("handler for api_key=%d v%d failed (request from %s)",
                          header.api_key, header.api_version, peer)
            return Close(f"internal error handling api_key={header.api_key}")
        if isinstance(body, Slot):
            body.started = started
            body.stats = stats
            if self.request_logging:
                body.client_id = header.client_id
            return body
        reply = None if body is None else encode_response(
            header.api_key, header.api_version, header.correlation_id, body)
        elapsed = perf_counter() - started
        stats.latency.observe(elapsed)
        if self.request_logging:
            self.log_request(peer, header.client_id, stats.name, header.api_version, header.correlation_id,
                             elapsed, reply)
        return reply

    def finished(self, slot: Slot, peer: str) -> None:
        """A parked or durable-wait reply is ready to send: time it (and log it)."""
        stats = slot.stats
        if stats is None:
            return
        elapsed = perf_counter() - slot.started
        stats.latency.observe(elapsed)
        if self.request_logging:
            self.log_request(peer, slot.client_id, stats.name, slot.version, slot.correlation_id,
                             elapsed, slot.frame)

    @staticmethod
    def log_request(peer: str, client_id: str | None, api: str, version: int, correlation_id: int,
                    elapsed: float, reply: bytes | None) -> None:
        request_log.info("request", extra={
            "peer": peer, "client_id": client_id, "api": api, "version": version,
            "correlation_id": correlation_id, "duration_ms": round(elapsed * 1000, 3),
            "reply_bytes": 0 if reply is None else len(reply),
        })

    def metrics(self) -> list[Family]:
        """Requests by API and version, their latency, and requests refused."""
        requests = counter("kcoord_requests_total", "Requests decoded, by API and version.")
        latency = Family("kcoord_request_duration_seconds", "histogram",
                         "Time from a request being decoded to its reply being ready to send, "
                         "durable wait included.")
        for stats in sorted(self.api_stats.values(), key=lambda s: s.api_key):
            for api_version, count in enumerate(stats.requests):
                if count:
                    requests.add(count, api=stats.name, version=api_version)
            if stats.latency.count:
                latency.add_histogram(stats.latency, api=stats.name)
        errors = counter("kcoord_request_errors_total",
                         "Requests refused: bad frame size, undecodable, unsupported API/version, handler failure.")
        for reason in ERROR_REASONS:
            errors.add(self.errors.get(reason, 0), reason=reason)
        return [requests, latency, errors]
