"""The timer task of a sans-IO coordinator: it wakes for an earlier deadline, and only then;
the group service wakes it for what its requests schedule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.testing

from broker.config import Config
from broker.context import BrokerContext
from broker.coordinator.effects import Effects
from broker.coordinator.timers import TimerKind, Timers
from broker.deadlines import DeadlineTask
from broker.group_service import GroupService
from broker.handlers import groups
from broker.router import Router
from protocol.codec import decode_response, encode_request
from protocol.errors import ErrorCode


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


async def test_a_timer_scheduled_by_a_request_answered_at_once_wakes_the_service_timer_task(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """KIP-394: a JoinGroup without a member id is answered MEMBER_ID_REQUIRED at once
    (nothing written) and the id it hands out expires after the session timeout. The group
    service's timer task, idle until then, must be woken for that deadline: the member id is
    unknown once it has passed."""
    config = Config({"offsets.topic.num.partitions": 1})
    service = GroupService.open(config, tmp_path)
    service.clock = lambda: round(trio.current_time() * 1000)
    router = Router(BrokerContext(config=config, node_id=0, host="127.0.0.1", port=9092, cluster_id="c"))
    groups.register(router, service)
    join = {"group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}

    def join_group(member_id: str, correlation_id: int) -> Any:
        outcome = router.route(encode_request(11, 5, correlation_id, dict(join, member_id=member_id), "c")[4:],
                               "127.0.0.1:1")
        # A join that is taken waits for the rebalance (a slot); a refused one is answered at once.
        assert type(outcome) is bytes, f"join of {member_id!r} taken: it waits for a rebalance"
        return decode_response(11, 5, outcome[4:])[1]

    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        await trio.sleep(1)  # the timer task sleeps with no deadline at all
        first = join_group("", 1)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        await trio.sleep(11)
        assert join_group(first.member_id, 2).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        nursery.cancel_scope.cancel()
    await service.close()
