"""A reply that is not ready yet: the connection writer waits on it in request order."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from broker.metrics import ApiStats


class Slot:
    """One request's place in its connection's reply order.

    The router stamps ``started`` and ``stats`` so the writer can time the request when
    its reply goes out (``Router.finished``); ``client_id`` is kept only for the request log;
    ``amend`` is applied to the frame when it goes out.
    """

    __slots__ = ("amend", "api_key", "client_id", "correlation_id", "event", "frame", "started", "stats", "version")

    def __init__(self, api_key: int, version: int, correlation_id: int) -> None:
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.frame: bytes | None = None
        self.event = trio.Event()
        self.stats: ApiStats | None = None
        self.started = 0.0
        self.client_id: str | None = None
        #: Set by the router's authorization step: rewrites the frame before it is sent
        #: (denied items added back, silent filtering, authorized operations).
        self.amend: Callable[[bytes], bytes] | None = None

    def fill(self, frame: bytes | None) -> None:
        self.frame = frame
        self.event.set()
