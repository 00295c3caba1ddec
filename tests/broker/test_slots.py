"""A slot tells its connection once, as it is set, that its reply may go out."""

from __future__ import annotations

import trio
import trio.testing

from broker.slots import Slot, set_all


def test_setting_a_slot_calls_its_connection_once() -> None:
    calls: list[bool] = []
    slot = Slot(8, 8, 1)
    slot.on_ready = lambda: calls.append(slot.is_set())
    slot.fill(b"reply")
    slot.set()  # set again: the connection was already told
    assert calls == [True]
    assert slot.on_ready is None and slot.frame == b"reply"


async def test_a_waiter_still_wakes_beside_the_connection() -> None:
    slot = Slot(8, 8, 1)
    told: list[int] = []
    slot.on_ready = lambda: told.append(1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(slot.wait)
        await trio.testing.wait_all_tasks_blocked()
        slot.set()
    assert told == [1]


def test_slots_released_together_are_all_set_before_any_connection_is_told() -> None:
    first, second, third = Slot(8, 8, 1), Slot(8, 8, 2), Slot(8, 8, 3)
    seen: list[list[bool]] = []
    first.on_ready = lambda: seen.append([s.is_set() for s in (first, second, third)])
    third.on_ready = lambda: seen.append([s.is_set() for s in (first, second, third)])
    set_all([first, second, third])
    assert seen == [[True, True, True], [True, True, True]], "each told once, in order, after all were set"
    assert first.on_ready is None and third.on_ready is None


async def test_set_all_wakes_waiters_and_sets_other_replies() -> None:
    slot = Slot(8, 8, 1)
    other = trio.Event()

    class Waiter:
        frame = None
        event = other

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slot.wait)
        await trio.testing.wait_all_tasks_blocked()
        set_all([slot, Waiter()])
    assert slot.is_set() and other.is_set()
