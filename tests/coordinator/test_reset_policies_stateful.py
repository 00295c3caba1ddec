"""A random walk over retention, producing, commits and policies (docs/coordinator-rules.md#offset-reset-policies).

Producers grow a partition's log, retention and DeleteRecords move its start (the shell asks
``before_log_start_moves`` first), clients commit any offset up to the log end, and groups
switch ``kcoord.offset.out.of.range`` between nearest and none. After every step:

- a policy commit never moves a committed offset backward, and never past the log end;
- a group with ``nearest`` has every committed offset inside [log start, log end];
- the coordinator's offsets are what replaying its records gives.

A second walk adds truncation (a log cut back at start-up recovery): then the only backward
move allowed is down to exactly the new log end.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from broker.coordinator import CoordinatorConfig
from broker.coordinator.reset_policies import policy_of
from protocol.consumer_offsets import OffsetKey
from tests.coordinator.harness import Harness

TOPIC, PARTITION = "t", 0
GROUPS = ("g0", "g1", "g2")


class Log:
    """The partition's bounds, as the broker's catalogue would answer them."""

    def __init__(self) -> None:
        self.start = 0
        self.end = 0

    def log_bounds(self, topic: str, partition: int) -> tuple[int, int] | None:
        return (self.start, self.end) if (topic, partition) == (TOPIC, PARTITION) else None


class PolicyMachine(RuleBasedStateMachine):
    truncation = False

    @initialize(default=st.sampled_from(["none", "nearest"]))
    def start(self, default: str) -> None:
        self.h = Harness(CoordinatorConfig(offset_out_of_range=default))
        self.log = Log()
        self.h.coord.log_bounds = self.log
        self.policy = dict.fromkeys(GROUPS, default)

    # ------------------------------------------------------------------ helpers

    def committed(self, group: str) -> int | None:
        value = self.h.coord.offsets.get(group, TOPIC, PARTITION)
        return None if value is None else value.offset

    def check_policy_commits(self, since: int, before: dict[str, int | None], truncated: bool = False) -> None:
        """Every policy commit written since ``since``, against the offset it replaced."""
        previous = dict(before)
        for key, value in self.h.decoded_records(since):
            if not isinstance(key, OffsetKey) or value is None:
                continue
            if policy_of(value.metadata) is not None:
                old = previous[key.group]
                assert value.offset <= self.log.end, "a policy commit past the log end"
                if old is not None and old <= self.log.end:
                    assert value.offset >= old, f"a policy commit moved {key.group} back from {old} to {value.offset}"
                else:
                    assert old is not None and truncated and value.offset == self.log.end
            previous[key.group] = value.offset

    def snapshot(self) -> dict[str, int | None]:
        return {g: self.committed(g) for g in GROUPS}

    # ------------------------------------------------------------------ steps

    @rule(records=st.integers(1, 50))
    def produce(self, records: int) -> None:
        self.log.end += records

    @rule(data=st.data())
    def move_log_start(self, data: Any) -> None:
        """Retention or DeleteRecords: the coordinator hears first, then the start moves."""
        low, high = self.log.start, self.log.end
        # Around the committed offsets is where an off-by-one would hide.
        near = sorted({min(max(o + d, low), high) for o in self.snapshot().values() if o is not None
                       for d in (-1, 0, 1)})
        new_start = data.draw(st.sampled_from(near) | st.integers(low, high) if near else st.integers(low, high))
        since, before = len(self.h.records), self.snapshot()
        self.h.apply(self.h.coord.before_log_start_moves(TOPIC, PARTITION, new_start, self.h.now))
        self.log.start = new_start
        self.check_policy_commits(since, before)

    @rule(group=st.sampled_from(GROUPS), data=st.data())
    def client_commits(self, group: str, data: Any) -> None:
        offset = data.draw(st.sampled_from([0, self.log.start - 1, self.log.start, self.log.end])
                           .filter(lambda o: o >= 0) | st.integers(0, self.log.end))
        since, before = len(self.h.records), self.snapshot()
        assert self.h.commit(group, {(TOPIC, PARTITION): offset}) == {(TOPIC, PARTITION): 0}
        self.check_policy_commits(since, before)  # against the client's commit, which comes first

    @rule(group=st.sampled_from(GROUPS), policy=st.sampled_from(["none", "nearest"]))
    def set_policy(self, group: str, policy: str) -> None:
        since, before = len(self.h.records), self.snapshot()
        configs = self.h.coord.group_configs
        self.h.coord.replay_group_config(group, configs.validated(group, {"kcoord.offset.out.of.range": policy}))
        self.h.apply(self.h.coord.on_group_config_changed(group, self.h.now))
        self.policy[group] = policy
        # An offset past the log end here was left by a truncation while the group had no
        # nearest policy: switching to nearest clamps it down to exactly the end.
        self.check_policy_commits(since, before, truncated=self.truncation)

    @rule(ms=st.integers(1, 10_000))
    def time_passes(self, ms: int) -> None:
        self.h.advance(ms)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def nearest_groups_stay_inside_the_log(self) -> None:
        if not hasattr(self, "h"):
            return
        for group, policy in self.policy.items():
            offset = self.committed(group)
            if policy == "nearest" and offset is not None:
                assert self.log.start <= offset <= self.log.end, (group, offset, self.log.start, self.log.end)

    @invariant()
    def state_is_the_replay_of_the_records(self) -> None:
        if not hasattr(self, "h"):
            return
        assert self.h.replayed().coord.offsets.snapshot() == self.h.coord.offsets.snapshot()


class TruncationMachine(PolicyMachine):
    truncation = True

    @rule(data=st.data())
    def truncate_and_restart(self, data: Any) -> None:
        """Recovery cut the log back; the start-up sweep moves offsets past the new end down to it."""
        self.log.end = data.draw(st.integers(self.log.start, self.log.end))
        since, before = len(self.h.records), self.snapshot()
        self.h.apply(self.h.coord.enforce_offset_policies(self.h.now))
        self.check_policy_commits(since, before, truncated=True)


SETTINGS = settings(max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestPolicyMachine = PolicyMachine.TestCase
TestPolicyMachine.settings = SETTINGS
TestTruncationMachine = TruncationMachine.TestCase
TestTruncationMachine.settings = SETTINGS
