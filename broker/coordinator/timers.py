"""Deadlines as data: the coordinator never sleeps, it says when it next has work.

A timer is ``(deadline, kind, group, member)``. Rescheduling does not remove the old
entry; instead the owner of each kind says whether an entry is still current (its group
still holds that very deadline), and stale entries are dropped when they reach the front.
That keeps scheduling O(log n) with no bookkeeping on the hot heartbeat path.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from broker.coordinator.effects import Effects

TimerKey = tuple[str, str, str]  # kind, group id, member id ("" for group timers)


@dataclass(frozen=True, slots=True)
class TimerKind:
    """How one kind of timer is checked for currency and fired."""

    is_current: Callable[[int, str, str], bool]  # (deadline, group, member)
    fire: Callable[[str, str, int, Effects], None]  # (group, member, now, effects)


class Timers:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, str, str, str]] = []
        self._seq = 0
        self._kinds: dict[str, TimerKind] = {}
        self._earliest_new: int | None = None

    def register(self, kind: str, handler: TimerKind) -> None:
        self._kinds[kind] = handler

    def schedule(self, deadline: int, kind: str, group_id: str, member_id: str = "") -> None:
        self._seq += 1
        heapq.heappush(self._heap, (deadline, self._seq, kind, group_id, member_id))
        earliest = self._earliest_new
        if earliest is None or deadline < earliest:
            self._earliest_new = deadline

    def take_earliest_new(self) -> int | None:
        """The earliest deadline scheduled since the last call, or None; forgets it.

        Only a newly scheduled timer can make ``next_deadline`` earlier (an entry only ever
        stops being current), so whoever sleeps until ``next_deadline`` need only compare
        this with it to know whether to wake sooner.
        """
        earliest, self._earliest_new = self._earliest_new, None
        return earliest

    def next_deadline(self) -> int | None:
        """The earliest current deadline, or None."""
        heap = self._heap
        kinds = self._kinds
        while heap:
            deadline, _, kind, group_id, member_id = heap[0]
            if kinds[kind].is_current(deadline, group_id, member_id):
                return deadline
            heapq.heappop(heap)
        return None

    def fire_due(self, now: int, fx: Effects) -> None:
        """Fire every current timer whose deadline has passed, earliest first."""
        heap = self._heap
        kinds = self._kinds
        while heap and heap[0][0] <= now:
            deadline, _, kind, group_id, member_id = heapq.heappop(heap)
            handler = kinds[kind]
            if handler.is_current(deadline, group_id, member_id):
                handler.fire(group_id, member_id, now, fx)

    def __len__(self) -> int:
        return len(self._heap)
