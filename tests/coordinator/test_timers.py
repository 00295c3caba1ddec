"""The coordinator's timers: one heap entry per key however often it is rescheduled, and the
same firings at the same times as pushing an entry for every call (the order among timers
of different keys due in the same millisecond may differ).

``Pushing`` below is the plain design the timers are held to: every ``schedule`` pushes an
entry, and an entry fires if its owner still holds that deadline when it comes up.
"""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.coordinator.effects import Effects
from broker.coordinator.timers import TimerKind, Timers

KINDS = ("session", "join")
GROUPS = ("g1", "g2")
MEMBERS = ("", "m1", "m2")


class Owner:
    """The deadline each key holds now (None: none); firing a key ends its timer."""

    def __init__(self) -> None:
        self.deadlines: dict[tuple[str, str, str], int | None] = {}
        self.fired: list[tuple[str, str, str, int]] = []

    def kind(self, name: str) -> TimerKind:
        def is_current(deadline: int, group: str, member: str) -> bool:
            return self.deadlines.get((name, group, member)) == deadline

        def fire(group: str, member: str, now: int, _fx: Effects) -> None:
            self.fired.append((name, group, member, now))
            self.deadlines[(name, group, member)] = None

        return TimerKind(is_current, fire)


class Pushing:
    """The reference: an entry per call."""

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, str, str, str]] = []
        self.seq = 0
        self.kinds: dict[str, TimerKind] = {}

    def schedule(self, deadline: int, kind: str, group: str, member: str = "") -> None:
        self.seq += 1
        heapq.heappush(self.heap, (deadline, self.seq, kind, group, member))

    def next_deadline(self) -> int | None:
        while self.heap:
            deadline, _, kind, group, member = self.heap[0]
            if self.kinds[kind].is_current(deadline, group, member):
                return deadline
            heapq.heappop(self.heap)
        return None

    def fire_due(self, now: int, fx: Effects) -> None:
        while self.heap and self.heap[0][0] <= now:
            deadline, _, kind, group, member = heapq.heappop(self.heap)
            if self.kinds[kind].is_current(deadline, group, member):
                self.kinds[kind].fire(group, member, now, fx)


def _setup() -> tuple[Timers, Owner, Pushing, Owner]:
    timers, owner, reference, reference_owner = Timers(), Owner(), Pushing(), Owner()
    for name in KINDS:
        timers.register(name, owner.kind(name))
        reference.kinds[name] = reference_owner.kind(name)
    return timers, owner, reference, reference_owner


keys = st.tuples(st.sampled_from(KINDS), st.sampled_from(GROUPS), st.sampled_from(MEMBERS))
steps = st.lists(st.one_of(
    st.tuples(st.just("schedule"), keys, st.integers(0, 60)),   # deadline = now + this
    st.tuples(st.just("drop"), keys, st.just(0)),               # the owner lets the timer go (a member leaves)
    st.tuples(st.just("advance"), keys, st.integers(0, 30)),    # time passes; due timers fire
    st.tuples(st.just("peek"), keys, st.just(0)),               # the timer task asks for the next deadline
), max_size=80)


@settings(max_examples=400, deadline=None)
@given(steps)
def test_the_same_timers_fire_at_the_same_times_as_with_an_entry_per_call(
        script: list[tuple[str, tuple[str, str, str], int]]) -> None:
    timers, owner, reference, reference_owner = _setup()
    now = 0
    fx = Effects()
    for op, key, value in script:
        if op == "schedule":
            for deadlines, schedule in ((owner.deadlines, timers.schedule), (reference_owner.deadlines, reference.schedule)):
                deadlines[key] = now + value
                schedule(now + value, *key)
        elif op == "drop":
            owner.deadlines[key] = reference_owner.deadlines[key] = None
        elif op == "advance":
            now += value
            timers.fire_due(now, fx)
            reference.fire_due(now, fx)
            assert sorted(owner.fired) == sorted(reference_owner.fired)
        else:
            assert timers.next_deadline() == reference.next_deadline()
    now += 1000
    timers.fire_due(now, fx)
    reference.fire_due(now, fx)
    assert sorted(owner.fired) == sorted(reference_owner.fired)
    assert len(timers) == 0


def test_a_key_rescheduled_later_keeps_one_entry_and_fires_at_its_last_deadline() -> None:
    timers, owner, _, _ = _setup()
    key = ("session", "g1", "m1")
    for now in range(0, 100_000, 3):  # a member heartbeating every 3 ms with a 45 ms session
        owner.deadlines[key] = now + 45
        timers.schedule(now + 45, *key)
        timers.fire_due(now, Effects())
    assert len(timers) == 1, "one entry for the key, not one per call"
    last = owner.deadlines[key]
    assert last is not None
    assert timers.next_deadline() == last
    timers.fire_due(last - 1, Effects())
    assert owner.fired == []
    timers.fire_due(last, Effects())
    assert owner.fired == [("session", "g1", "m1", last)]
    assert len(timers) == 0


def test_an_earlier_deadline_takes_effect_at_once() -> None:
    timers, owner, _, _ = _setup()
    key = ("join", "g1", "")
    owner.deadlines[key] = 100
    timers.schedule(100, *key)
    owner.deadlines[key] = 40
    timers.schedule(40, *key)
    assert timers.next_deadline() == 40
    timers.fire_due(40, Effects())
    assert owner.fired == [("join", "g1", "", 40)]
