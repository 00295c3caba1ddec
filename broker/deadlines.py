"""The task that runs a sans-IO coordinator's timers: it sleeps until the earliest deadline
the coordinator reports and wakes early only when an earlier one appears."""

from __future__ import annotations

from collections.abc import Callable

import trio


class DeadlineTask:
    """``fire(now)`` at each deadline ``next_deadline()`` reports (milliseconds of ``clock``).

    After every change to the coordinator, ``moved()`` wakes the task if the earliest
    deadline is now earlier than what it sleeps until; a later one (a heartbeat pushing a
    session deadline out) needs no wake-up.
    """

    def __init__(self, next_deadline: Callable[[], int | None], fire: Callable[[int], None],
                 clock: Callable[[], int], earliest_new: Callable[[], int | None]) -> None:
        self.next_deadline = next_deadline
        self.fire = fire
        self.clock = clock
        #: The earliest deadline made since its last call (``Timers.take_earliest_new``): only
        #: a new one can make ``next_deadline`` earlier, so ``moved`` compares that alone.
        self.earliest_new = earliest_new
        self._changed = trio.Event()
        self._sleeping_until: int | None = None
        self.stopped = False

    def stop(self) -> None:
        """Fire nothing more: the service is closing its log, and a timer's records
        (a session expiring during shutdown) would have nowhere to go."""
        self.stopped = True
        self._changed.set()

    def moved(self) -> None:
        deadline = self.earliest_new()
        if deadline is not None and (self._sleeping_until is None or deadline < self._sleeping_until):
            self._changed.set()

    async def run(self) -> None:
        while not self.stopped:
            self.earliest_new()  # what was made until now, next_deadline sees
            deadline = self.next_deadline()
            self._changed = trio.Event()
            self._sleeping_until = deadline
            if deadline is None:
                await self._changed.wait()
                continue
            delay = (deadline - self.clock()) / 1000
            if delay > 0:
                with trio.move_on_after(delay):
                    await self._changed.wait()
                    continue
            self._sleeping_until = None
            if self.stopped:
                return
            self.fire(self.clock())
