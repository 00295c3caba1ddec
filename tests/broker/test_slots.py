"""A slot tells its connection once, as it is set, that its reply may go out."""

from __future__ import annotations

import trio
import trio.testing

from broker.slots import Slot


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
