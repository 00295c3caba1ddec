"""The timer task of a sans-IO coordinator: it wakes for an earlier deadline, and only then."""

from __future__ import annotations

import trio
import trio.testing

from broker.coordinator.effects import Effects
from broker.coordinator.timers import TimerKind, Timers
from broker.deadlines import DeadlineTask


def test_timers_report_the_earliest_deadline_scheduled_since_they_were_last_asked() -> None:
    timers = Timers()
    timers.register("t", TimerKind(lambda _d, _g, _m: True, lambda _g, _m, _now, _fx: None))
    assert timers.take_earliest_new() is None
    for deadline in (50, 30, 40):
        timers.schedule(deadline, "t", "g")
    assert timers.take_earliest_new() == 30
    assert timers.take_earliest_new() is None, "taken: forgotten"
    timers.schedule(70, "t", "g")
    assert timers.take_earliest_new() == 70
    assert timers.next_deadline() == 30, "the timers themselves are untouched"


async def test_the_timer_task_wakes_for_an_earlier_deadline_and_not_for_a_later_one(
        autojump_clock: trio.testing.MockClock) -> None:
    """A heartbeat pushes its member's deadline later: the sleeping task is neither woken
    nor made to look for the next deadline again. A deadline earlier than the one it
    sleeps until wakes it, and fires on time."""
    start = trio.current_time()
    timers = Timers()
    fired: list[tuple[str, int]] = []
    timers.register("t", TimerKind(lambda _d, _g, _m: True, lambda group, _m, now, _fx: fired.append((group, now))))
    lookups: list[int | None] = []

    def next_deadline() -> int | None:
        lookups.append(timers.next_deadline())
        return lookups[-1]

    task = DeadlineTask(next_deadline, lambda now: timers.fire_due(now, Effects()),
                        lambda: round((trio.current_time() - start) * 1000), timers.take_earliest_new)
    timers.schedule(1000, "t", "first")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(task.run)
        await trio.sleep(0.1)
        assert lookups == [1000]
        timers.schedule(5000, "t", "later")
        task.moved()
        await trio.sleep(0.1)
        assert lookups == [1000], "a later deadline neither wakes the task nor is looked for"
        timers.schedule(500, "t", "earlier")
        task.moved()
        await trio.sleep(6)
        task.stop()
    assert fired == [("earlier", 500), ("first", 1000), ("later", 5000)]
