"""A reply that is not ready yet: the connection writer waits on it in request order."""

from __future__ import annotations

import trio


class Slot:
    """One request's place in its connection's reply order."""

    __slots__ = ("api_key", "correlation_id", "event", "frame", "version")

    def __init__(self, api_key: int, version: int, correlation_id: int) -> None:
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.frame: bytes | None = None
        self.event = trio.Event()

    def fill(self, frame: bytes | None) -> None:
        self.frame = frame
        self.event.set()
