"""Live state == replay(log) == replay(compact(log)), through the real storage layer.

Random coordinator traffic (commits, joins/syncs of simple consumer groups, leaves,
group and topic deletions, expiry at random times) is applied to a live coordinator; every
record it produces is appended to a real CoordinatorLog with tiny segments. Then the log is
replayed into a fresh coordinator, compacted (tombstones dropped), and replayed again: all
three must agree on offsets and on every Stable or Empty group.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.coordinator import CoordinatorConfig, GroupCoordinatorShard
from broker.coordinator.api import BINDINGS
from broker.coordinator.classic.state import ClassicGroupState as GroupState
from broker.coordinator.records import encode as encode_record
from broker.coordinator.requests import ClientInfo
from protocol.codec import decode_body, encode_body
from protocol.messages import (
    DeleteGroupsRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)
from storage.coordinator_log import CoordinatorLog

START = 1_700_000_000_000
GROUPS = ["g0", "g1", "g2"]
TOPICS = ["a", "b"]


def _body(message: Any, version: int, fields: dict[str, Any]) -> Any:
    return decode_body(message, version, encode_body(message, version, fields))


commit = st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.sampled_from(TOPICS), st.integers(0, 3),
                   st.integers(0, 10**6), st.sampled_from([-1, 1000]))
join = st.tuples(st.just("join"), st.sampled_from(GROUPS))
leave = st.tuples(st.just("leave"), st.sampled_from(GROUPS))
delete_group = st.tuples(st.just("delete"), st.sampled_from(GROUPS))
delete_topic = st.tuples(st.just("delete_topic"), st.sampled_from(TOPICS))
advance = st.tuples(st.just("advance"), st.integers(1, 5000))
operations = st.lists(st.one_of(commit, commit, join, leave, delete_group, delete_topic, advance), max_size=40)


class Driver:
    def __init__(self, log: CoordinatorLog) -> None:
        config = CoordinatorConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=1,
                                   offsets_retention_ms=3000)
        counter = iter(range(10**9))
        self.coordinator = GroupCoordinatorShard(config, new_id=lambda: str(next(counter)))
        self.log = log
        self.now = START
        self.ticket = 0
        self.members: dict[str, tuple[str, int]] = {}

    def apply(self, fx: Any) -> list[tuple[int, Any]]:
        for group, records in fx.records.items():
            self.log.append(group, [encode_record(r) for r in records], self.now)
        return list(fx.replies)

    def call(self, message: Any, version: int, fields: dict[str, Any]) -> dict[str, Any]:
        self.ticket += 1
        binding = BINDINGS[message.api_key]
        request = binding.decode(version, _body(message, version, fields), ClientInfo("client", "/127.0.0.1"))
        replies = dict(self.apply(binding.handle(self.coordinator, self.ticket, self.now, request)))
        result = replies.get(self.ticket)
        return {} if result is None else binding.encode(version, result)

    def step(self, op: tuple[Any, ...]) -> None:
        c = self.coordinator
        kind = op[0]
        if kind == "commit":
            _, group, topic, partition, offset, retention = op
            self.call(OffsetCommitRequest, 2, {
                "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "retention_time_ms": retention,
                "topics": [{"name": topic, "partitions": [{"partition_index": partition, "committed_offset": offset,
                                                           "committed_metadata": f"m{offset}"}]}]})
        elif kind == "join" and op[1] not in self.members:
            group = op[1]
            join = {"group_id": group, "session_timeout_ms": 60000, "rebalance_timeout_ms": 60000,
                    "member_id": "", "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x01\x00\x01a\xff\xff\xff\xff"}]}
            reply = self.call(JoinGroupRequest, 3, join)
            if not reply:
                self.apply(c.on_time(self.now))  # initial delay 0: the join completes on the timer
                return
            if reply.get("error_code") == 0:
                member, generation = reply["member_id"], reply["generation_id"]
                synced = self.call(SyncGroupRequest, 3, {
                    "group_id": group, "generation_id": generation, "member_id": member,
                    "assignments": [{"member_id": member, "assignment": b"x"}]})
                if synced.get("error_code") == 0:
                    self.members[group] = (member, generation)
        elif kind == "leave" and op[1] in self.members:
            member, _ = self.members.pop(op[1])
            self.call(LeaveGroupRequest, 1, {"group_id": op[1], "member_id": member})
        elif kind == "delete":
            self.call(DeleteGroupsRequest, 1, {"groups_names": [op[1]]})
        elif kind == "delete_topic":
            self.apply(c.on_topic_deleted(op[1], self.now))
        elif kind == "advance":
            self.now += op[1]
            self.apply(c.on_time(self.now))
            self.apply(c.expire_offsets(self.now))


def _replayed(log: CoordinatorLog) -> GroupCoordinatorShard:
    fresh = GroupCoordinatorShard(CoordinatorConfig())
    for key, value, _ in log.replay():
        fresh.replay_bytes(key, value)
    fresh.finish_load(START)
    return fresh


def _groups(coordinator: GroupCoordinatorShard, only: set[str] | None = None) -> dict[str, Any]:
    out = {}
    for group_id, g in coordinator.groups.items():
        if only is not None and group_id not in only:
            continue
        out[group_id] = (g.generation, g.protocol_type, g.protocol, g.leader,
                         [(m.member_id, m.assignment) for m in g.members.values()])
    return out


def test_the_scenario_really_exercises_groups_and_compaction() -> None:
    """Guard against the property passing on empty work."""
    ops = [("commit", "g0", "a", 1, 5, -1), ("join", "g1"), ("commit", "g1", "a", 0, 7, -1),
           ("advance", 4000), ("commit", "g2", "b", 2, 3, 1000), ("leave", "g1"), ("advance", 4000),
           ("delete_topic", "b")] * 3
    with tempfile.TemporaryDirectory() as tmp:
        log = CoordinatorLog(Path(tmp), partitions=2, segment_bytes=300)
        driver = Driver(log)
        for op in ops:
            driver.step(op)
        log.sync()
        assert driver.coordinator.groups["g1"].generation >= 1  # joined, synced, left, rejoined
        before = sum(1 for _ in log.replay())
        results = log.compact_all(driver.now + 10**9, delete_retention_ms=0)
        assert sum(r.records_before - r.records_after for r in results.values()) > 0
        assert sum(1 for _ in log.replay()) < before
        log.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_live_state_equals_replay_equals_replay_of_compacted_log(ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = CoordinatorLog(Path(tmp), partitions=2, segment_bytes=300)
        driver = Driver(log)
        for op in ops:
            driver.step(op)
        log.sync()
        live = driver.coordinator
        settled = {gid for gid, g in live.groups.items()
                   if g.state in (GroupState.STABLE, GroupState.EMPTY) and (g.generation > 0 or g.members)}
        replayed = _replayed(log)
        assert replayed.offsets.snapshot() == live.offsets.snapshot()
        assert _groups(replayed, settled) == _groups(live, settled)
        results = log.compact_all(driver.now + 10**9, delete_retention_ms=0)  # everything sealed is cleanable
        assert all(r.records_after <= r.records_before for r in results.values())
        compacted = _replayed(log)
        assert compacted.offsets.snapshot() == live.offsets.snapshot()
        assert _groups(compacted, settled) == _groups(live, settled)
        log.close()
        reopened = CoordinatorLog(Path(tmp), partitions=2, segment_bytes=300)
        assert _replayed(reopened).offsets.snapshot() == live.offsets.snapshot()
        reopened.close()
