"""Closing a service stops its timers first: a deadline that falls due while the broker shuts
down (a member's session expiring) must not write to a log that is being closed."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from broker.config import Config
from broker.context import BrokerContext
from broker.deadlines import DeadlineTask
from broker.group_service import GroupService, wall_clock_ms
from broker.handlers import groups
from broker.router import Router
from tests.support.routing import call


async def test_a_stopped_deadline_task_fires_nothing_and_ends() -> None:
    fired: list[int] = []
    task = DeadlineTask(lambda: 100, fired.append, lambda: int(trio.current_time() * 1000), lambda: None)
    task.stop()
    with trio.fail_after(5):
        await task.run()
    assert fired == []


async def test_stopping_a_sleeping_deadline_task_ends_it_before_its_deadline(
        autojump_clock: trio.testing.MockClock) -> None:
    fired: list[int] = []
    start = trio.current_time()
    task = DeadlineTask(lambda: 60_000, fired.append, lambda: int((trio.current_time() - start) * 1000),
                        lambda: None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(task.run)
        await trio.sleep(10)
        task.stop()
    assert fired == [] and trio.current_time() - start < 60


async def test_a_session_due_after_close_writes_nothing(tmp_path: Path) -> None:
    config = Config({"offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0})
    service = GroupService.open(config, tmp_path)
    router = Router(BrokerContext(config=config, node_id=0, host="127.0.0.1", port=9092, cluster_id="c"))
    groups.register(router, service)
    join = {"group_id": "g", "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]}
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        first = await call(router, 11, 5, join)
        joined = await call(router, 11, 5, dict(join, member_id=first.member_id))
        assert joined.error_code == 0
        nursery.cancel_scope.cancel()
    appended = service.records_appended
    await service.close()
    # An hour later the member's session is long over; the closed service's timer and
    # expiry tasks end at once instead of appending to the closed log.
    service.clock = lambda: wall_clock_ms() + 3_600_000
    assert service.coordinator.next_deadline() is not None
    with trio.fail_after(5):
        await service.timers.run()
        await service._expiry_loop()
    assert service.records_appended == appended
