"""``group.consumer.assignment.interval.ms``: a consumer group's target is computed at most
once per interval, so members joining together share one assignor run
(docs/coordinator-rules.md#target-assignment)."""

from __future__ import annotations

from typing import Any

from broker.coordinator.config import CoordinatorConfig
from broker.coordinator.modern.consumer.group import ConsumerGroupState
from broker.coordinator.modern.topics import StaticImage
from broker.coordinator.records import ConsumerGroupTargetAssignmentEpochRecord, decode
from tests.coordinator.harness import ConsumerClient, Harness, consumer_group

INTERVAL = 100


def harness(interval: int = INTERVAL, **config: Any) -> Harness:
    h = Harness(CoordinatorConfig(consumer_session_timeout_ms=10_000, consumer_heartbeat_interval_ms=1_000,
                                  consumer_assignment_interval_ms=interval, **config))
    h.coord.topics = StaticImage.of({"t": 12})
    return h


def target_epochs(h: Harness, since: int = 0) -> list[int]:
    """The target assignment epochs written, in order."""
    records = [decode(key, value) for key, value in h.records[since:]]
    return [r.epoch for r in records
            if isinstance(r, ConsumerGroupTargetAssignmentEpochRecord) and r.epoch is not None]


def settle(h: Harness, clients: list[ConsumerClient], rounds: int = 20) -> None:
    for _ in range(rounds):
        before = [(c.epoch, frozenset(c.owned)) for c in clients]
        for c in clients:
            c.heartbeat()
        if [(c.epoch, frozenset(c.owned)) for c in clients] == before and \
                consumer_group(h, "g").state is ConsumerGroupState.STABLE:
            return
        h.advance(INTERVAL)
    raise AssertionError(f"the group never settled: {consumer_group(h, 'g').state}")


def test_members_joining_within_one_interval_share_one_target_computation() -> None:
    h = harness()
    first = ConsumerClient(h, "g", "m0", topics=["t"])
    first.heartbeat()  # the first target is computed at once
    assert target_epochs(h) == [1]
    mark = len(h.records)
    others = [ConsumerClient(h, "g", f"m{i}", topics=["t"]) for i in range(1, 6)]
    for c in others:
        c.heartbeat()
    group = consumer_group(h, "g")
    assert group.group_epoch == 6, "every join bumps the group epoch"
    assert target_epochs(h, mark) == [], "no target inside the interval"
    assert group.state is ConsumerGroupState.ASSIGNING
    h.advance(INTERVAL)  # the deferred computation runs once, for all five joins
    assert target_epochs(h, mark) == [6]
    settle(h, [first, *others])
    assert sorted(len(c.owned) for c in [first, *others]) == [2] * 6


def test_a_join_after_the_interval_is_assigned_at_once() -> None:
    h = harness()
    a = ConsumerClient(h, "g", "a", topics=["t"])
    a.heartbeat()
    h.advance(INTERVAL)
    mark = len(h.records)
    b = ConsumerClient(h, "g", "b", topics=["t"])
    b.heartbeat()
    assert target_epochs(h, mark) == [2]
    assert consumer_group(h, "g").state is not ConsumerGroupState.ASSIGNING


def test_a_leave_inside_the_interval_is_assigned_when_it_is_up() -> None:
    h = harness()
    a, b = ConsumerClient(h, "g", "a", topics=["t"]), ConsumerClient(h, "g", "b", topics=["t"])
    a.heartbeat()
    h.advance(INTERVAL)
    b.heartbeat()
    settle(h, [a, b])
    mark = len(h.records)
    b.leave()
    assert consumer_group(h, "g").state is ConsumerGroupState.ASSIGNING
    h.advance(INTERVAL)
    assert target_epochs(h, mark) == [consumer_group(h, "g").group_epoch]
    settle(h, [a])
    assert len(a.owned) == 12


def test_zero_computes_a_target_on_every_epoch_bump() -> None:
    h = harness(interval=0)
    clients = [ConsumerClient(h, "g", f"m{i}", topics=["t"]) for i in range(4)]
    for c in clients:
        c.heartbeat()
    assert target_epochs(h) == [1, 2, 3, 4]


def test_a_deferred_target_survives_a_restart() -> None:
    h = harness()
    ConsumerClient(h, "g", "a", topics=["t"]).heartbeat()
    ConsumerClient(h, "g", "b", topics=["t"]).heartbeat()
    assert consumer_group(h, "g").state is ConsumerGroupState.ASSIGNING
    restarted = h.replayed()
    restarted.coord.topics = StaticImage.of({"t": 12})
    mark = len(restarted.records)
    restarted.advance(0)
    assert target_epochs(restarted, mark) == [2], "loading schedules the missing target"
