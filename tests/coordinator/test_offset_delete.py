"""OffsetDelete (KIP-496): who may delete which committed offsets, and what is written
(docs/coordinator-rules.md#offset-delete)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from protocol.consumer_offsets import OffsetKey
from protocol.consumer_protocol import encode_subscription
from protocol.errors import ErrorCode
from protocol.messages import OffsetDeleteRequest
from tests.coordinator.harness import E, Harness, S

Partitions = dict[tuple[str, int], ErrorCode]


def _sub(*topics: str, version: int = 0) -> bytes:
    fields: dict[str, Any] = {"topics": list(topics), "user_data": None}
    if version >= 1:
        fields.update(owned_partitions=[], generation_id=-1, rack_id=None)
    return encode_subscription(fields, version=version)


def _delete_raw(h: Harness, group: str, partitions: list[tuple[str, int]],
                exists: Callable[[str, int], bool] | None = None) -> dict[str, Any]:
    topics: dict[str, list[dict[str, int]]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append({"partition_index": partition})
    return h.request_now(OffsetDeleteRequest, 0, {
        "group_id": group, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]},
        partition_exists=exists)


def _delete(h: Harness, group: str, partitions: list[tuple[str, int]],
            exists: Callable[[str, int], bool] | None = None) -> tuple[ErrorCode, Partitions]:
    reply = _delete_raw(h, group, partitions, exists)
    return ErrorCode(reply["error_code"]), {
        (t["name"], p["partition_index"]): ErrorCode(p["error_code"])
        for t in reply["topics"] for p in t["partitions"]}


def _written(h: Harness, since: int) -> list[tuple[Any, Any]]:
    return h.decoded_records(since)


def _committed(h: Harness, group: str) -> set[tuple[str, int]]:
    return set(h.coord.offsets.partitions_of(group))


def _stable(h: Harness, group: str, subscriptions: list[bytes],
            protocol_type: str = "consumer") -> list[str]:
    """A Stable group whose members carry the given subscription bytes; returns member ids."""
    return h.consumer_group(group, subscriptions, protocol_type=protocol_type)


# ---------------------------------------------------------------- group-level errors


def test_missing_group_is_group_id_not_found() -> None:
    h = Harness()
    reply = _delete_raw(h, "nope", [("t", 0)])
    assert reply == {"error_code": E.GROUP_ID_NOT_FOUND, "throttle_time_ms": 0, "topics": []}
    assert h.records == []
    assert "nope" not in h.coord.groups


def test_dead_group_is_group_id_not_found() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 1})
    h.group("g").transition(S.DEAD, h.now)
    assert _delete(h, "g", [("t", 0)]) == (E.GROUP_ID_NOT_FOUND, {})
    assert len(h.records) == 1  # only the commit


def test_deleted_group_is_group_id_not_found() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 1})
    assert h.delete_groups("g") == {"g": E.NONE}
    assert _delete(h, "g", [("t", 0)]) == (E.GROUP_ID_NOT_FOUND, {})


def test_empty_group_id_is_invalid() -> None:
    h = Harness()
    h.commit("", {("t", 0): 1})  # "" is a valid group for OffsetCommit, not for OffsetDelete
    assert _delete(h, "", [("t", 0)]) == (E.INVALID_GROUP_ID, {})
    assert _committed(h, "") == {("t", 0)}


@pytest.mark.parametrize("protocol_type", ["connect", "consumer-ish", "streams"])
def test_non_consumer_protocol_type_non_empty_group_is_non_empty_group(protocol_type: str) -> None:
    h = Harness()
    (a,) = _stable(h, "g", [_sub("t")], protocol_type=protocol_type)
    h.commit("g", {("t", 0): 1, ("x", 0): 2}, member_id=a, generation=1)
    before = len(h.records)
    assert _delete(h, "g", [("t", 0), ("x", 0)]) == (E.NON_EMPTY_GROUP, {})
    assert h.records[before:] == []
    assert _committed(h, "g") == {("t", 0), ("x", 0)}


def test_non_consumer_group_in_rebalance_is_non_empty_group() -> None:
    h = Harness()
    h.join("g", version=3, protocol_type="connect")
    assert h.state("g") is S.PREPARING_REBALANCE
    assert _delete(h, "g", [("t", 0)]) == (E.NON_EMPTY_GROUP, {})
    h.run_join_phase("g")
    assert h.state("g") is S.COMPLETING_REBALANCE
    assert _delete(h, "g", [("t", 0)]) == (E.NON_EMPTY_GROUP, {})


# ---------------------------------------------------------------- Empty groups


def test_empty_simple_group_deletes_every_requested_partition() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 1, ("t", 1): 2, ("u", 0): 3, ("keep", 0): 4})
    before = len(h.records)
    error, parts = _delete(h, "g", [("t", 0), ("t", 1), ("t", 7), ("u", 0), ("never", 0)])
    assert error is E.NONE
    assert parts == {("t", 0): E.NONE, ("t", 1): E.NONE, ("t", 7): E.NONE, ("u", 0): E.NONE,
                     ("never", 0): E.NONE}
    # tombstones only where an offset existed, in request order
    assert _written(h, before) == [
        (OffsetKey("g", "t", 0), None), (OffsetKey("g", "t", 1), None), (OffsetKey("g", "u", 0), None)]
    assert _committed(h, "g") == {("keep", 0)}
    fetched = h.fetch("g", {"t": [0, 1], "keep": [0]})
    assert {(t["name"], p["partition_index"]): p["committed_offset"]
            for t in fetched["topics"] for p in t["partitions"]} == {("t", 0): -1, ("t", 1): -1, ("keep", 0): 4}
    # the same request again: all NONE, nothing written
    before = len(h.records)
    assert _delete(h, "g", [("t", 0), ("u", 0)]) == (E.NONE, {("t", 0): E.NONE, ("u", 0): E.NONE})
    assert h.records[before:] == []


def test_empty_consumer_group_ignores_stale_subscriptions() -> None:
    h = Harness()
    (a,) = _stable(h, "g", [_sub("t")])
    h.commit("g", {("t", 0): 1}, member_id=a, generation=1)
    h.leave("g", a)
    assert h.state("g") is S.EMPTY
    before = len(h.records)
    assert _delete(h, "g", [("t", 0)]) == (E.NONE, {("t", 0): E.NONE})
    assert _written(h, before) == [(OffsetKey("g", "t", 0), None)]


def test_deletion_survives_restart() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 1, ("t", 1): 2})
    _delete(h, "g", [("t", 0)])
    r = h.replayed()
    assert r.coord.offsets.snapshot() == h.coord.offsets.snapshot()
    assert _committed(r, "g") == {("t", 1)}


# ---------------------------------------------------------------- non-empty "consumer" groups


def test_stable_consumer_group_subscribed_topics_are_refused() -> None:
    h = Harness()
    a, b = _stable(h, "g", [_sub("t"), _sub("u", version=3)])
    h.commit("g", {("t", 0): 1, ("t", 1): 2, ("u", 0): 3, ("x", 0): 4, ("x", 1): 5}, member_id=a,
             generation=1)
    before = len(h.records)
    error, parts = _delete(h, "g", [("t", 0), ("u", 0), ("x", 0), ("x", 9), ("y", 0)])
    assert error is E.NONE
    assert parts == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): E.GROUP_SUBSCRIBED_TO_TOPIC,
                     ("x", 0): E.NONE, ("x", 9): E.NONE, ("y", 0): E.NONE}
    assert E.GROUP_SUBSCRIBED_TO_TOPIC == 86
    assert _written(h, before) == [(OffsetKey("g", "x", 0), None)]
    assert _committed(h, "g") == {("t", 0), ("t", 1), ("u", 0), ("x", 1)}
    assert h.state("g") is S.STABLE
    assert set(h.group("g").members) == {a, b}


def test_consumer_group_in_rebalance_uses_known_subscriptions() -> None:
    h = Harness()
    a, _b = _stable(h, "g", [_sub("t"), _sub("t")])
    h.commit("g", {("t", 0): 1, ("x", 0): 2}, member_id=a, generation=1)
    h.join("g", a, protocols=[("range", _sub("t"))])
    assert h.state("g") is S.PREPARING_REBALANCE
    assert _delete(h, "g", [("t", 0), ("x", 0)]) == (
        E.NONE, {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("x", 0): E.NONE})


def test_consumer_group_before_its_first_generation_is_subscribed_to_everything() -> None:
    h = Harness()
    h.commit("g", {("x", 0): 1})
    h.join("g", version=3, protocols=[("range", _sub("t"))])
    assert h.state("g") is S.PREPARING_REBALANCE
    assert h.group("g").protocol is None  # no protocol selected yet: subscriptions unknown
    assert _delete(h, "g", [("x", 0)]) == (E.NONE, {("x", 0): E.GROUP_SUBSCRIBED_TO_TOPIC})
    assert _committed(h, "g") == {("x", 0)}


@pytest.mark.parametrize("bad", [b"", b"\x00", b"\x00\x00\xff", b"\x00\x00\x00\x00\x00\x09ab"])
def test_unreadable_subscription_means_subscribed_to_everything(bad: bytes) -> None:
    h = Harness()
    a, _b = _stable(h, "g", [_sub("t"), bad])
    h.commit("g", {("t", 0): 1, ("x", 0): 2}, member_id=a, generation=1)
    before = len(h.records)
    assert _delete(h, "g", [("t", 0), ("x", 0)]) == (
        E.NONE, {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("x", 0): E.GROUP_SUBSCRIBED_TO_TOPIC})
    assert h.records[before:] == []


def test_subscription_of_newer_version_is_read_by_its_v0_prefix() -> None:
    h = Harness()
    newer = b"\x00\x09" + _sub("t", version=3)[2:] + b"junk"  # a future version: appended fields
    (a,) = _stable(h, "g", [newer])
    h.commit("g", {("t", 0): 1, ("x", 0): 2}, member_id=a, generation=1)
    assert _delete(h, "g", [("t", 0), ("x", 0)]) == (
        E.NONE, {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("x", 0): E.NONE})


# ---------------------------------------------------------------- unknown partitions


def test_unknown_topic_or_partition_from_the_broker() -> None:
    h = Harness()
    (a,) = _stable(h, "g", [_sub("t")])
    h.commit("g", {("t", 0): 1, ("x", 0): 2, ("x", 1): 3}, member_id=a, generation=1)
    exists = lambda topic, partition: topic in ("t", "x") and partition < 1  # noqa: E731
    before = len(h.records)
    error, parts = _delete(h, "g", [("t", 0), ("t", 5), ("x", 0), ("x", 1), ("gone", 0)], exists)
    assert error is E.NONE
    assert parts == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("t", 5): E.UNKNOWN_TOPIC_OR_PARTITION,
                     ("x", 0): E.NONE, ("x", 1): E.UNKNOWN_TOPIC_OR_PARTITION,
                     ("gone", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert _written(h, before) == [(OffsetKey("g", "x", 0), None)]
    assert _committed(h, "g") == {("t", 0), ("x", 1)}


def test_group_error_wins_over_unknown_partitions() -> None:
    h = Harness()
    assert _delete(h, "nope", [("gone", 0)], lambda t, p: False) == (E.GROUP_ID_NOT_FOUND, {})
    h.commit("s", {("t", 0): 1})
    assert _delete(h, "s", [("gone", 0)], lambda t, p: False) == (
        E.NONE, {("gone", 0): E.UNKNOWN_TOPIC_OR_PARTITION})
