"""api_key -> handler, and the decision what to do with each frame.

The router is where a frame becomes a reply. It stays free of sockets: the connection
hands it bytes and gets back an ``Outcome``: bytes to send, nothing to send, or "close".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.context import BrokerContext
from broker.handlers import cluster
from broker.slots import Slot
from protocol.codec import (
    API_VERSIONS_KEY,
    ProtocolError,
    Request,
    UnsupportedRequest,
    decode_request,
    encode_response,
    peek,
)
from protocol.messages import REQUESTS
from protocol.schema import Message

log = logging.getLogger("kcoord.router")

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

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.handlers: dict[int, Handler] = {}
        self.register(API_VERSIONS_KEY, lambda r, _: cluster.handle_api_versions(ctx, r, self.served))
        self.register(10, lambda r, _: cluster.handle_find_coordinator(ctx, r))

    def register(self, api_key: int, handler: Handler) -> None:
        self.handlers[api_key] = handler

    @property
    def served(self) -> dict[int, Message]:
        """The declared messages that have a handler: what ApiVersions advertises."""
        return {key: REQUESTS[key] for key in self.handlers}

    def route(self, frame: bytes, peer: str) -> Outcome:
        """Handle one request frame (without its size prefix)."""
        try:
            request = decode_request(frame, self.served)
        except UnsupportedRequest as exc:
            if exc.api_key == API_VERSIONS_KEY:
                # KIP-511: answer with a v0 body so the client can step down.
                return encode_response(
                    API_VERSIONS_KEY, 0, exc.correlation_id,
                    cluster.unsupported_api_versions_body(self.served),
                )
            return Close(f"{exc} from {peer}")
        except ProtocolError as exc:
            try:
                api_key, api_version, correlation_id = peek(frame)
                what = f"api_key={api_key} api_version={api_version} correlation_id={correlation_id}"
            except ProtocolError:
                what = "unreadable header"
            return Close(f"malformed request from {peer} ({what}): {exc}")
        header = request.header
        try:
            body = self.handlers[header.api_key](request, peer)
        except Exception:
            # A bug, not bad input: log it loudly, drop this connection, keep serving others.
            log.exception("handler for api_key=%d v%d failed (request from %s)",
                          header.api_key, header.api_version, peer)
            return Close(f"internal error handling api_key={header.api_key}")
        if body is None or isinstance(body, Slot):
            return body
        return encode_response(header.api_key, header.api_version, header.correlation_id, body)
