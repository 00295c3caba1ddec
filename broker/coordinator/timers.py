"""Deadlines as data: the coordinator never sleeps, it says when it next has work.

A timer is ``(deadline, kind, group, member)``. Rescheduling does not remove the old
entry; instead the owner of each kind says whether an entry is still current (its group
still holds that very deadline), and stale entries are dropped when they reach the front.

Moving a key's (kind, group, member) deadline later pushes nothing: a heartbeat moves its
member's session deadline later every time, and an entry per heartbeat would stay in the
heap until its deadline came (at 50,000 heartbeats a second and a 45 s session, two
million entries). Instead the key remembers the deadline last scheduled; when its entry
in the heap comes up and is no longer current, the entry is pushed again at that
deadline, so timers fire at the same times as if every call had pushed one
(tests/coordinator/test_timers.py). Among timers due in the same millisecond, those of
different keys may fire in another order. A deadline earlier than the key's entry in the
heap is pushed at once.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from broker.coordinator.effects import Effects

TimerKey = tuple[str, str, str]  # kind, group id, member id ("" for group timers)
#: A key's entry in the heap (deadline, sequence number) and the deadline last scheduled for it, with its number.
_Armed = list[int]


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
        #: The earliest deadline scheduled since ``take_earliest_new`` was last called, or None:
        #: read as it is where a call would cost more than the check (``broker.group_service``).
        self.earliest_new: int | None = None
        #: Per key with an entry in the heap: [its deadline, the deadline last scheduled, that call's number].
        self._armed: dict[TimerKey, _Armed] = {}

    def register(self, kind: str, handler: TimerKind) -> None:
        self._kinds[kind] = handler

    def schedule(self, deadline: int, kind: str, group_id: str, member_id: str = "") -> None:
        self._seq = seq = self._seq + 1
        earliest = self.earliest_new
        if earliest is None or deadline < earliest:
            self.earliest_new = deadline
        key = (kind, group_id, member_id)
        armed = self._armed.get(key)
        if armed is None:
            self._armed[key] = [deadline, deadline, seq]
        else:
            armed[1] = deadline
            armed[2] = seq
            if armed[0] <= deadline:  # its entry in the heap comes first and is pushed again then
                return
            armed[0] = deadline
        heapq.heappush(self._heap, (deadline, seq, kind, group_id, member_id))

    def _left(self, deadline: int, kind: str, group_id: str, member_id: str) -> None:
        """An entry left the heap: if it was its key's, push the deadline scheduled since, if later."""
        key = (kind, group_id, member_id)
        armed = self._armed.get(key)
        if armed is None or armed[0] != deadline:
            return  # an entry a call for an earlier deadline took the place of
        latest = armed[1]
        if latest > deadline:
            armed[0] = latest
            heapq.heappush(self._heap, (latest, armed[2], kind, group_id, member_id))
        else:
            del self._armed[key]

    def take_earliest_new(self) -> int | None:
        """The earliest deadline scheduled since the last call, or None; forgets it.

        Only a newly scheduled timer can make ``next_deadline`` earlier (an entry only ever
        stops being current), so whoever sleeps until ``next_deadline`` need only compare
        this with it to know whether to wake sooner.
        """
        earliest, self.earliest_new = self.earliest_new, None
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
            self._left(deadline, kind, group_id, member_id)
        return None

    def fire_due(self, now: int, fx: Effects) -> None:
        """Fire every current timer whose deadline has passed, earliest first."""
        heap = self._heap
        kinds = self._kinds
        while heap and heap[0][0] <= now:
            deadline, _, kind, group_id, member_id = heapq.heappop(heap)
            handler = kinds[kind]
            current = handler.is_current(deadline, group_id, member_id)
            self._left(deadline, kind, group_id, member_id)  # before firing, which may schedule the key again
            if current:
                handler.fire(group_id, member_id, now, fx)

    def __len__(self) -> int:
        return len(self._heap)
