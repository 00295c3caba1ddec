"""A reply that is not ready yet: its connection sends it, in request order, once it is set."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from broker.metrics import ApiStats


class Slot:
    """One request's place in its connection's reply order.

    The router stamps ``started`` and ``stats`` so the connection can time the request when
    its reply goes out (``Router.finished``); ``client_id`` is kept only for the request log;
    ``amend`` is applied to the frame when it goes out.

    A slot is its own event (``set``, ``is_set`` and ``wait``, as ``trio.Event``), and
    ``event`` is the slot itself: a coordinator request whose reply waits (for its records'
    sync, or parked) has a slot, many of those are set within the same pass, and a
    trio.Event (and its parking lot) is only built when someone waits. A reply ready at
    once needs no slot: the group service hands back its frame (``GroupService.submit``).
    """

    __slots__ = ("_ready", "_waiters", "amend", "api_key", "client_id", "correlation_id", "frame", "on_ready",
                 "started", "stats", "version")

    def __init__(self, api_key: int, version: int, correlation_id: int) -> None:
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.frame: bytes | None = None
        self.stats: ApiStats | None = None
        self.started = 0.0
        self.client_id: str | None = None
        #: Set by the router's authorization step: rewrites the frame before it is sent
        #: (denied items added back, silent filtering, authorized operations).
        self.amend: Callable[[bytes], bytes] | None = None
        #: Called once as the slot is set: its connection sends the replies now ready
        #: (``broker.server.Connection._drain``), with no task woken for it.
        self.on_ready: Callable[[], None] | None = None
        self._ready = False
        self._waiters: trio.Event | None = None

    @property
    def event(self) -> Slot:
        """What storage.group_commit sets (and anyone may wait on): the slot itself."""
        return self

    def set(self) -> None:
        """The reply is ready to go out (``frame`` may be None: nothing to send)."""
        on_ready = self._mark_ready()
        if on_ready is not None:
            on_ready()

    def _mark_ready(self) -> Callable[[], None] | None:
        """Ready, with its waiters woken; returns the connection's ``on_ready``, still to be called."""
        self._ready = True
        waiters = self._waiters
        if waiters is not None:
            waiters.set()
        on_ready = self.on_ready
        self.on_ready = None
        return on_ready

    def is_set(self) -> bool:
        return self._ready

    async def wait(self) -> None:
        if self._ready:
            await trio.lowlevel.checkpoint()
            return
        if self._waiters is None:
            self._waiters = trio.Event()
        await self._waiters.wait()

    def fill(self, frame: bytes | None) -> None:
        self.frame = frame
        self.set()


def set_all(replies: list[Any]) -> None:
    """Release the replies one sync made durable (``storage.group_commit``), in their order.

    Every slot is marked ready before any connection is told, so a connection with several
    of them queued sends them all in one write, not one write (and one wake-up of its
    client) per reply. Replies that are not slots have their event set as usual.
    """
    told: list[Callable[[], None]] = []
    for reply in replies:
        if type(reply) is Slot:
            on_ready = reply._mark_ready()
            if on_ready is not None:
                told.append(on_ready)
        else:
            reply.event.set()
    for on_ready in told:
        on_ready()
