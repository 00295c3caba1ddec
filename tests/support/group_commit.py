"""Helpers for the group-commit tests: replies to release, and waiting on a condition."""

from __future__ import annotations

import time
from collections.abc import Callable

import trio

from broker.slots import Slot


def reply(n: int) -> Slot:
    """A reply whose frame says ``ok n``, released by setting its event."""
    slot = Slot(8, 8, n)
    slot.frame = b"ok %d" % n
    return slot


async def eventually(condition: Callable[[], object], seconds: float = 10.0) -> None:
    """Let trio run until ``condition()`` holds (bounded in real time, whatever the clock)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await trio.sleep(0)
