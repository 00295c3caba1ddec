"""KIP-211: which offsets expire, from what base time, and what expiry writes.

One group per row of the KIP-211 table (docs/coordinator-rules.md#offset-expiry, after
ClassicGroup.offsetExpirationCondition), driven with a fake clock:

| group                                   | base time                              | offsets considered |
| protocol type, Empty                    | current_state_timestamp (else commit)  | all                |
| "consumer", Stable, subscriptions known | commit timestamp                       | unsubscribed only  |
| no protocol type (simple)               | commit timestamp                       | all                |
| anything else                           | -                                      | none               |

An explicit expire timestamp (OffsetCommit v2-v4 retention_time_ms, or an old v1 record)
replaces "base + retention" for the offsets considered. Expired offsets get tombstones; an
Empty group left without offsets becomes Dead, is dropped, and gets a group tombstone when
its generation is above 0. After every expiry the live state must equal a replay of the log.
"""

from __future__ import annotations

import struct
from typing import Any

from broker.coordinator.classic.state import ClassicGroupState as GroupState
from protocol.codec import encode_body
from protocol.consumer_offsets import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    encode_group_value,
    encode_key,
    encode_offset_value,
)
from protocol.consumer_protocol import encode_subscription
from protocol.messages.coordinator_records import GroupMetadataValue
from tests.coordinator.harness import START, E, Harness, S

RETENTION = 60_000
# Sessions and rebalance timeouts far longer than any clock jump below, so members stay.
SESSION = 1_800_000
REBALANCE = 1_000_000


def _harness() -> Harness:
    return Harness.with_config(offsets_retention_ms=RETENTION, max_session_timeout_ms=1_800_000)


def _sub(*topics: str) -> bytes:
    """A "consumer" protocol Subscription (v0) for ``topics``."""
    return encode_subscription({"topics": list(topics), "user_data": None}, version=0)


def _expire(h: Harness) -> list[tuple[Any, Any]]:
    """Run the cleanup task at the harness's clock; return what it wrote (decoded)."""
    since = len(h.records)
    h.apply(h.coord.expire_offsets(h.now))
    _assert_replay_matches(h)
    return h.decoded_records(since)


def _tombstones(*keys: tuple[str, str, int]) -> list[tuple[Any, Any]]:
    return [(OffsetKey(g, t, p), None) for g, t, p in keys]


def _offsets(h: Harness, group: str) -> set[tuple[str, int]]:
    return set(h.coord.offsets.partitions_of(group))


def _assert_replay_matches(h: Harness) -> None:
    """(g) The state after expiry is the state a restart rebuilds from the records."""
    r = h.replayed()
    assert r.coord.offsets.snapshot() == h.coord.offsets.snapshot()
    assert set(r.coord.groups) == set(h.coord.groups)
    for gid, live in h.coord.groups.items():
        loaded = r.coord.groups[gid]
        # Rebalance states are not persisted (docs/coordinator-rules.md#group-states).
        if live.state in (S.EMPTY, S.STABLE):
            assert (loaded.state, loaded.generation, loaded.protocol_type) == (
                live.state, live.generation, live.protocol_type), gid
        if live.state is S.EMPTY and live.protocol_type:
            # the base time of the Empty-group row must survive a restart
            assert loaded.state_timestamp == live.state_timestamp, gid


def _consumer_group(h: Harness, group: str, subscriptions: list[bytes],
                    protocol_type: str = "consumer") -> list[str]:
    """A Stable group whose members carry the given subscription bytes; returns member ids."""
    return h.consumer_group(group, subscriptions, protocol_type=protocol_type, session=SESSION, rebalance=REBALANCE)


def _load(h: Harness, records: list[tuple[bytes, bytes | None]]) -> None:
    """Start the harness's coordinator from log records (as a broker does at start-up)."""
    for key, value in records:
        h.coord.replay_bytes(key, value)
    h.records.extend(records)
    h.apply(h.coord.finish_load(h.now))


def _offset_record(group: str, topic: str, partition: int, offset: int, commit_ts: int,
                   expire_ts: int = -1) -> tuple[bytes, bytes]:
    return (encode_key(OffsetKey(group, topic, partition)),
            encode_offset_value(OffsetValue(offset, -1, "", commit_ts, expire_ts)))


def _group_record_v3(group: str, protocol_type: str, generation: int, state_ts: int) -> tuple[bytes, bytes]:
    value = {"protocol_type": protocol_type, "generation": generation, "protocol": None, "leader": None,
             "current_state_timestamp": state_ts, "members": []}
    return encode_key(GroupKey(group)), encode_group_value(value)


def _group_record_v1(group: str, protocol_type: str, generation: int) -> tuple[bytes, bytes]:
    """A GroupMetadataValue v1: written before KIP-211, it has no current_state_timestamp."""
    body = encode_body(GroupMetadataValue, 1, {"protocol_type": protocol_type, "generation": generation,
                                               "protocol": None, "leader": None, "members": []})
    return encode_key(GroupKey(group)), struct.pack(">h", 1) + body


# ---------------------------------------------------------------- (a) Empty group with a protocol type


def test_empty_consumer_group_expires_from_when_it_became_empty() -> None:
    h = _harness()
    (a,) = _consumer_group(h, "g", [_sub("t")])
    assert h.commit("g", {("t", 0): 10, ("u", 0): 20}, member_id=a, generation=1) == {
        ("t", 0): E.NONE, ("u", 0): E.NONE}
    committed_at = h.now

    # Active for ten retention periods: the subscribed offset never expires (the
    # unsubscribed one does, see the Stable row), and the group stays.
    h.advance(RETENTION)
    assert _expire(h) == _tombstones(("g", "u", 0))
    h.advance(9 * RETENTION)
    assert _expire(h) == []
    assert _offsets(h, "g") == {("t", 0)}

    h.leave("g", a)
    assert h.state("g") is S.EMPTY
    empty_since = h.now
    assert h.group("g").state_timestamp == empty_since
    assert h.group_records("g")[-1].current_state_timestamp == empty_since
    # a commit made after the group became Empty counts from the same base
    h.advance(30_000)
    assert h.commit("g", {("v", 0): 30}) == {("v", 0): E.NONE}
    assert empty_since - committed_at >= 10 * RETENTION  # commit times alone would expire "t" now

    h.advance_to(empty_since + RETENTION - 1)
    assert _expire(h) == []
    assert h.state("g") is S.EMPTY
    h.advance(1)
    written = _expire(h)
    # (f) every offset tombstoned, then the group tombstone (generation 2 > 0)
    assert written == _tombstones(("g", "t", 0), ("g", "v", 0)) + [(GroupKey("g"), None)]
    assert "g" not in h.coord.groups
    assert h.describe("g")[0]["group_state"] == "Dead"
    assert h.fetch("g", {"t": [0], "v": [0]})["topics"][0]["partitions"][0]["committed_offset"] == -1


def test_empty_group_does_not_expire_while_members_come_back() -> None:
    h = _harness()
    (a,) = _consumer_group(h, "g", [_sub("t")])
    h.commit("g", {("t", 0): 10}, member_id=a, generation=1)
    h.leave("g", a)
    h.advance(RETENTION - 1000)
    # a member rejoins: the group is no longer Empty, nothing expires however long it stays
    (b,) = _consumer_group(h, "g", [_sub("t")])
    h.advance(5 * RETENTION)
    assert _expire(h) == []
    # it leaves again: the clock restarts from this moment
    h.leave("g", b)
    empty_since = h.now
    h.advance(RETENTION - 1)
    assert _expire(h) == []
    h.advance(1)
    assert _expire(h) == _tombstones(("g", "t", 0)) + [(GroupKey("g"), None)]
    assert h.now == empty_since + RETENTION


def test_loaded_empty_group_with_state_timestamp_uses_it() -> None:
    h = _harness()
    empty_since = START - 10_000
    _load(h, [
        _offset_record("g", "t", 0, 1, commit_ts=START - 10 * RETENTION),
        _group_record_v3("g", "consumer", 4, empty_since),
    ])
    assert h.state("g") is S.EMPTY
    h.advance_to(empty_since + RETENTION - 1)
    assert _expire(h) == []
    h.advance(1)
    assert _expire(h) == _tombstones(("g", "t", 0)) + [(GroupKey("g"), None)]
    assert "g" not in h.coord.groups


def _unknown_state_timestamp_case(group_record: tuple[bytes, bytes]) -> None:
    h = _harness()
    c1, c2 = START - 50_000, START - 20_000
    _load(h, [
        _offset_record("g", "t", 0, 1, commit_ts=c1),
        group_record,
        _offset_record("g", "t", 1, 2, commit_ts=c2),
    ])
    g = h.group("g")
    assert (g.state, g.protocol_type, g.state_timestamp, g.generation) == (S.EMPTY, "consumer", -1, 3)
    # no state timestamp: each offset counts from its own commit time
    h.advance_to(c1 + RETENTION - 1)
    assert _expire(h) == []
    h.advance(1)
    assert _expire(h) == _tombstones(("g", "t", 0))
    assert h.state("g") is S.EMPTY
    h.advance_to(c2 + RETENTION - 1)
    assert _expire(h) == []
    h.advance(1)
    assert _expire(h) == _tombstones(("g", "t", 1)) + [(GroupKey("g"), None)]
    assert "g" not in h.coord.groups


def test_loaded_empty_group_with_unknown_state_timestamp_uses_commit_time() -> None:
    _unknown_state_timestamp_case(_group_record_v3("g", "consumer", 3, -1))


def test_loaded_old_group_record_without_state_timestamp_uses_commit_time() -> None:
    _unknown_state_timestamp_case(_group_record_v1("g", "consumer", 3))


def test_empty_group_without_offsets_goes_at_the_next_cleanup() -> None:
    h = _harness()
    (a,) = _consumer_group(h, "g", [_sub("t")])
    h.leave("g", a)
    assert _expire(h) == [(GroupKey("g"), None)]
    assert "g" not in h.coord.groups


# ---------------------------------------------------------------- (b) Stable "consumer" group


def test_stable_consumer_group_expires_only_unsubscribed_topics() -> None:
    h = _harness()
    a, b = _consumer_group(h, "g", [_sub("t"), _sub("t", "u")])
    h.commit("g", {("t", 0): 1, ("u", 0): 2, ("x", 0): 3}, member_id=a, generation=1)
    h.advance(20_000)
    h.commit("g", {("y", 0): 4}, member_id=b, generation=1)
    x_at, y_at = h.now - 20_000, h.now

    h.advance_to(x_at + RETENTION - 1)
    assert _expire(h) == []
    h.advance(1)
    assert _expire(h) == _tombstones(("g", "x", 0))
    h.advance_to(y_at + RETENTION - 1)
    assert _expire(h) == []
    h.advance(1)
    assert _expire(h) == _tombstones(("g", "y", 0))
    # subscribed topics stay however old their commits are; the group stays Stable
    h.advance(10 * RETENTION)
    assert _expire(h) == []
    assert _offsets(h, "g") == {("t", 0), ("u", 0)}
    assert h.state("g") is S.STABLE


def test_recommitting_an_unsubscribed_topic_restarts_its_clock() -> None:
    h = _harness()
    (a,) = _consumer_group(h, "g", [_sub("t")])
    h.commit("g", {("x", 0): 1}, member_id=a, generation=1)
    h.advance(RETENTION - 1)
    h.commit("g", {("x", 0): 2}, member_id=a, generation=1)
    h.advance(RETENTION - 1)
    assert _expire(h) == []
    h.advance(1)
    assert _expire(h) == _tombstones(("g", "x", 0))


def test_loaded_stable_group_keeps_the_subscription_rule() -> None:
    h = _harness()
    (a,) = _consumer_group(h, "g", [_sub("t")])
    h.commit("g", {("t", 0): 1, ("x", 0): 2}, member_id=a, generation=1)
    r = h.replayed()
    assert r.state("g") is S.STABLE
    # the reloaded member must keep heartbeating to stay; its session is long
    r.advance(RETENTION)
    assert _expire(r) == _tombstones(("g", "x", 0))
    assert _offsets(r, "g") == {("t", 0)}


# ---------------------------------------------------------------- (c) simple group


def test_simple_group_expires_each_offset_from_its_commit_time() -> None:
    h = _harness()
    h.commit("s", {("t", 0): 1})
    h.advance(5000)
    h.commit("s", {("t", 1): 2})
    first, second = h.now - 5000, h.now
    assert h.group("s").protocol_type is None

    h.advance_to(first + RETENTION - 1)
    assert _expire(h) == []
    h.advance(1)
    assert _expire(h) == _tombstones(("s", "t", 0))
    assert h.state("s") is S.EMPTY
    h.advance_to(second + RETENTION - 1)
    assert _expire(h) == []
    h.advance(1)
    # (f) generation 0: no group record was ever written, so no group tombstone either
    assert _expire(h) == _tombstones(("s", "t", 1))
    assert "s" not in h.coord.groups
    assert all(not isinstance(k, GroupKey) for k, _ in h.decoded_records())


def test_loaded_group_with_empty_protocol_type_is_a_simple_group() -> None:
    h = _harness()
    # The record says it became Empty just now, but with protocolType "" the group counts as
    # simple: the state timestamp is ignored and each offset goes at commit time + retention.
    c1, c2 = START - RETENTION - 5000, START - 30_000
    _load(h, [
        _offset_record("s", "t", 0, 1, commit_ts=c1),
        _offset_record("s", "t", 1, 2, commit_ts=c2),
        _group_record_v3("s", "", 2, START),
    ])
    g = h.group("s")
    assert (g.state, g.protocol_type, g.generation) == (S.EMPTY, None, 2)
    assert _expire(h) == _tombstones(("s", "t", 0))
    h.advance_to(c2 + RETENTION - 1)
    assert _expire(h) == []
    h.advance(1)
    # generation 2 > 0: the group record gets a tombstone too
    assert _expire(h) == _tombstones(("s", "t", 1)) + [(GroupKey("s"), None)]
    assert "s" not in h.coord.groups


def test_offsets_loaded_without_group_record_form_a_simple_group() -> None:
    h = _harness()
    _load(h, [_offset_record("s", "t", 0, 1, commit_ts=START - RETENTION)])
    assert h.group("s").protocol_type is None
    assert _expire(h) == _tombstones(("s", "t", 0))
    assert "s" not in h.coord.groups


# ---------------------------------------------------------------- (d) anything else: nothing expires


def _old_offsets(h: Harness, group: str) -> None:
    """Offsets committed long ago: unsubscribed, subscribed, and with an explicit expire time."""
    h.commit(group, {("t", 0): 1, ("x", 0): 2})
    h.commit(group, {("x", 1): 3}, version=2, retention=1000)


def test_preparing_rebalance_expires_nothing() -> None:
    h = _harness()
    _old_offsets(h, "g")
    h.advance(2 * RETENTION)
    a, _b = _consumer_group(h, "g", [_sub("t"), _sub("t")])
    h.join("g", a, session=SESSION, rebalance=REBALANCE, protocols=[("range", _sub("t"))])
    assert h.state("g") is S.PREPARING_REBALANCE
    h.advance(5 * RETENTION)
    assert h.state("g") is S.PREPARING_REBALANCE
    assert _expire(h) == []
    assert _offsets(h, "g") == {("t", 0), ("x", 0), ("x", 1)}


def test_completing_rebalance_expires_nothing() -> None:
    h = _harness()
    _old_offsets(h, "g")
    h.advance(2 * RETENTION)
    h.join("g", version=3, session=SESSION, rebalance=REBALANCE, protocols=[("range", _sub("t"))])
    h.run_join_phase("g")
    assert h.state("g") is S.COMPLETING_REBALANCE
    h.advance(5 * RETENTION)
    assert h.state("g") is S.COMPLETING_REBALANCE
    assert _expire(h) == []
    assert _offsets(h, "g") == {("t", 0), ("x", 0), ("x", 1)}


def test_stable_group_of_other_protocol_type_expires_nothing() -> None:
    h = _harness()
    _old_offsets(h, "g")
    h.advance(2 * RETENTION)
    _consumer_group(h, "g", [_sub("t")], protocol_type="connect")
    h.advance(5 * RETENTION)
    assert _expire(h) == []
    assert _offsets(h, "g") == {("t", 0), ("x", 0), ("x", 1)}


def test_stable_consumer_group_with_unreadable_subscription_expires_nothing() -> None:
    h = _harness()
    _old_offsets(h, "g")
    h.advance(2 * RETENTION)
    _consumer_group(h, "g", [_sub("t"), b"\x00\x00\xff"])  # second member: not a Subscription
    assert h.group("g").subscribed_topics() is None
    h.advance(5 * RETENTION)
    assert _expire(h) == []
    assert _offsets(h, "g") == {("t", 0), ("x", 0), ("x", 1)}


# ---------------------------------------------------------------- (e) explicit expire timestamps


def test_explicit_expire_timestamp_wins_for_a_simple_group() -> None:
    h = _harness()
    for version in (2, 3, 4):
        assert h.commit("s", {("short", version): 1}, version=version, retention=1000) == {
            ("short", version): E.NONE}
    h.commit("s", {("long", 0): 2}, version=2, retention=3 * RETENTION)
    h.commit("s", {("default", 0): 3}, version=5)
    at = h.now
    h.advance(999)
    assert _expire(h) == []
    h.advance(1)  # now == expire timestamp: expired
    assert _expire(h) == _tombstones(("s", "short", 2), ("s", "short", 3), ("s", "short", 4))
    h.advance_to(at + RETENTION)
    # commit + retention has passed, but the explicit (later) expire timestamp still wins
    assert _expire(h) == _tombstones(("s", "default", 0))
    h.advance_to(at + 3 * RETENTION - 1)
    assert _expire(h) == []
    h.advance(1)
    assert _expire(h) == _tombstones(("s", "long", 0))
    assert "s" not in h.coord.groups


def test_explicit_expire_timestamp_wins_while_the_group_is_active() -> None:
    h = _harness()
    (a,) = _consumer_group(h, "g", [_sub("t")])
    # by a member, v2 with a retention: an unsubscribed topic goes at the explicit time
    assert h.commit("g", {("x", 0): 1}, member_id=a, generation=1, version=2, retention=5000) == {
        ("x", 0): E.NONE}
    h.advance(4999)
    assert _expire(h) == []
    h.advance(1)
    assert _expire(h) == _tombstones(("g", "x", 0))
    assert h.state("g") is S.STABLE


def test_explicit_expire_timestamp_of_a_subscribed_topic_waits() -> None:
    # Kafka (both coordinators) filters subscribed topics out before looking at expire
    # timestamps: while the group is Stable, a subscribed topic's offset stays.
    h = _harness()
    (a,) = _consumer_group(h, "g", [_sub("t")])
    h.commit("g", {("t", 0): 1}, member_id=a, generation=1, version=3, retention=5000)
    expire_at = h.now + 5000
    h.advance(2 * RETENTION)
    assert _expire(h) == []
    h.leave("g", a)
    # Empty now: the explicit timestamp (long passed) applies at once, not "Empty + retention"
    assert _expire(h) == _tombstones(("g", "t", 0)) + [(GroupKey("g"), None)]
    assert h.now > expire_at


def test_explicit_expire_timestamp_in_an_empty_consumer_group() -> None:
    h = _harness()
    (a,) = _consumer_group(h, "g", [_sub("t")])
    h.leave("g", a)
    empty_since = h.now
    h.commit("g", {("t", 0): 1}, version=2, retention=1000)
    h.commit("g", {("t", 1): 2}, version=2, retention=2 * RETENTION)
    h.commit("g", {("t", 2): 3})
    h.advance(1000)
    assert _expire(h) == _tombstones(("g", "t", 0))
    h.advance_to(empty_since + RETENTION)
    assert _expire(h) == _tombstones(("g", "t", 2))
    assert h.state("g") is S.EMPTY  # t-1 still holds the group
    h.advance_to(empty_since + 2 * RETENTION)
    assert _expire(h) == _tombstones(("g", "t", 1)) + [(GroupKey("g"), None)]


def test_v1_commit_timestamp_is_the_base_for_simple_groups() -> None:
    h = _harness()
    past, future = h.now - 50_000, h.now + 50_000
    assert h.commit("s", {("t", 0): 1}, version=1, commit_timestamp=past) == {("t", 0): E.NONE}
    assert h.commit("s", {("t", 1): 2}, version=1, commit_timestamp=future) == {("t", 1): E.NONE}
    assert h.commit("s", {("t", 2): 3}, version=1) == {("t", 2): E.NONE}  # -1: broker time
    at = h.now
    h.advance_to(past + RETENTION - 1)
    assert _expire(h) == []
    h.advance(1)
    assert _expire(h) == _tombstones(("s", "t", 0))
    h.advance_to(at + RETENTION)
    assert _expire(h) == _tombstones(("s", "t", 2))
    h.advance_to(future + RETENTION - 1)
    assert _expire(h) == []
    h.advance(1)
    assert _expire(h) == _tombstones(("s", "t", 1))


def test_loaded_v1_offset_record_keeps_its_expire_timestamp() -> None:
    h = _harness()
    _load(h, [_offset_record("s", "t", 0, 1, commit_ts=START, expire_ts=START + 10 * RETENTION)])
    h.advance(RETENTION)
    assert _expire(h) == []
    h.advance_to(START + 10 * RETENTION)
    assert _expire(h) == _tombstones(("s", "t", 0))


# ---------------------------------------------------------------- (f)/(g) records and replay


def test_expiry_writes_one_tombstone_per_expired_offset_and_nothing_else() -> None:
    h = _harness()
    h.commit("s1", {("t", 0): 1, ("t", 1): 2})
    h.commit("s2", {("t", 0): 3})
    (a,) = _consumer_group(h, "g", [_sub("t")])
    h.commit("g", {("t", 0): 4}, member_id=a, generation=1)
    h.advance(RETENTION)
    assert sorted(_expire(h), key=repr) == sorted(
        _tombstones(("s1", "t", 0), ("s1", "t", 1), ("s2", "t", 0)), key=repr)
    assert set(h.coord.groups) == {"g"}
    # a second run right away finds nothing more
    assert _expire(h) == []


def test_expiry_then_restart_then_expiry_agree() -> None:
    h = _harness()
    h.commit("s", {("t", 0): 1})
    (a,) = _consumer_group(h, "g", [_sub("t")])
    h.commit("g", {("t", 0): 2, ("x", 0): 3}, member_id=a, generation=1)
    h.advance(RETENTION)
    _expire(h)
    h.leave("g", a)
    r = h.replayed()
    later = h.now + RETENTION
    h.advance_to(later)
    r.advance_to(later)
    since_live, since_loaded = len(h.records), len(r.records)
    h.apply(h.coord.expire_offsets(later))
    r.apply(r.coord.expire_offsets(later))
    assert h.records[since_live:] == r.records[since_loaded:]
    assert h.coord.offsets.snapshot() == r.coord.offsets.snapshot() == {}
    assert h.coord.groups == {} and r.coord.groups == {}


def test_dead_group_state_is_final() -> None:
    h = _harness()
    h.commit("s", {("t", 0): 1})
    h.advance(RETENTION)
    group = h.group("s")
    _expire(h)
    assert group.state is GroupState.DEAD
    # a new commit makes a new simple group, not a resurrection of the old object
    assert h.commit("s", {("t", 0): 2}) == {("t", 0): E.NONE}
    assert h.group("s") is not group
