"""OffsetCommit and OffsetFetch: the group rules and what is stored.

docs/coordinator-rules.md#offset-commit and #offset-fetch.
"""

from __future__ import annotations

import struct

import pytest

from protocol.consumer_offsets import OffsetKey, OffsetValue
from tests.coordinator.harness import E, Harness, S

T0 = ("t", 0)


def _value_version(raw: bytes | None) -> int:
    assert raw is not None
    return int(struct.unpack_from(">h", raw)[0])


# ---------------------------------------------------------------- group rules


def test_simple_commit_creates_simple_group() -> None:
    h = Harness()
    assert h.commit("g", {T0: 42}) == {T0: E.NONE}
    g = h.group("g")
    assert g.state is S.EMPTY
    assert g.protocol_type is None
    assert g.generation == 0
    assert h.list_groups() == [{"group_id": "g", "protocol_type": "", "group_state": "Empty"}]
    (rec,) = h.decoded_records()
    assert rec == (OffsetKey("g", "t", 0), OffsetValue(42, -1, "", h.now, -1))
    # simple groups keep accepting generation -1 commits
    assert h.commit("g", {T0: 43}) == {T0: E.NONE}


def test_empty_group_id_is_allowed_for_commit_and_fetch() -> None:
    h = Harness()
    assert h.commit("", {T0: 1}) == {T0: E.NONE}
    assert h.fetch("", {"t": [0]})["topics"][0]["partitions"][0]["committed_offset"] == 1


def test_generation_into_missing_group_is_illegal_generation() -> None:
    h = Harness()
    assert h.commit("g", {T0: 1}, member_id="m", generation=0) == {T0: E.ILLEGAL_GENERATION}
    assert h.commit("g", {T0: 1, ("t", 1): 2}, generation=3) == {T0: E.ILLEGAL_GENERATION,
                                                                ("t", 1): E.ILLEGAL_GENERATION}
    assert "g" not in h.coord.groups
    assert h.records == []


def test_member_commit_in_stable() -> None:
    h = Harness()
    _a, b = h.stable_group("g", 2)
    assert h.commit("g", {T0: 5}, member_id=b, generation=1) == {T0: E.NONE}


def test_stale_generation_rejected() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    h.join("g", a)
    h.join("g", b)
    h.sync("g", a, 2, assignments={})
    assert h.state("g") is S.STABLE
    assert h.commit("g", {T0: 5}, member_id=b, generation=1) == {T0: E.ILLEGAL_GENERATION}
    assert h.commit("g", {T0: 5}, member_id=b, generation=3) == {T0: E.ILLEGAL_GENERATION}
    assert h.commit("g", {T0: 5}, member_id=b, generation=2) == {T0: E.NONE}


def test_member_validation_before_generation() -> None:
    h = Harness()
    s, d = h.stable_group("g", 2, instances=["i", None])
    assert h.commit("g", {T0: 5}, member_id="nobody", generation=99) == {T0: E.UNKNOWN_MEMBER_ID}
    assert h.commit("g", {T0: 5}, member_id=d, generation=99, instance="i") == {T0: E.FENCED_INSTANCE_ID}
    assert h.commit("g", {T0: 5}, member_id=s, generation=1, instance="i") == {T0: E.NONE}


def test_non_member_commit_to_non_empty_group() -> None:
    h = Harness()
    h.stable_group("g", 2)
    assert h.commit("g", {T0: 5}) == {T0: E.UNKNOWN_MEMBER_ID}
    # a member id with generation -1 is validated as a member
    assert h.commit("g", {T0: 5}, member_id="nobody") == {T0: E.UNKNOWN_MEMBER_ID}


def test_completing_rebalance_commit() -> None:
    h = Harness()
    ta = h.join("g", version=3)
    h.run_join_phase("g")
    a = h.reply(ta)["member_id"]
    assert h.commit("g", {T0: 5}, member_id=a, generation=1) == {T0: E.REBALANCE_IN_PROGRESS}
    assert h.records == []


def test_commit_from_previous_generation_in_preparing_rebalance() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2, session=10_000, rebalance=60_000)
    h.join("g", a)
    assert h.state("g") is S.PREPARING_REBALANCE
    assert h.generation("g") == 1
    # b commits instead of heartbeating: the commit keeps it alive
    # (docs/coordinator-rules.md#heartbeat-and-session-timeout)
    for i in range(4):
        h.advance(8000)
        assert h.commit("g", {T0: i}, member_id=b, generation=1) == {T0: E.NONE}
    assert b in h.group("g").members


def test_commit_with_generation_minus_one_to_empty_group_after_generation() -> None:
    h = Harness()
    (a,) = h.stable_group("g", 1)
    h.leave("g", a)
    assert h.state("g") is S.EMPTY
    assert h.commit("g", {T0: 9}) == {T0: E.NONE}
    assert h.commit("g", {T0: 9}, member_id=a, generation=2) == {T0: E.UNKNOWN_MEMBER_ID}


def test_dead_group_commit() -> None:
    h = Harness()
    h.commit("g", {T0: 1})
    h.group("g").transition(S.DEAD, h.now)
    assert h.commit("g", {T0: 2}) == {T0: E.COORDINATOR_NOT_AVAILABLE}


# ---------------------------------------------------------------- per partition


def test_metadata_too_large_is_measured_in_utf16_units() -> None:
    h = Harness.with_config(offset_metadata_max_bytes=4)
    result = h.commit("g", {
        ("t", 0): (1, "😀😀"),  # 2 code points, 4 UTF-16 units, 8 UTF-8 bytes: fits
        ("t", 1): (2, "😀😀a"),  # 5 units
        ("t", 2): (3, "éééé"),  # 4 units, 8 UTF-8 bytes: fits
        ("t", 3): (4, "abcde"),
    })
    assert result == {("t", 0): E.NONE, ("t", 1): E.OFFSET_METADATA_TOO_LARGE,
                      ("t", 2): E.NONE, ("t", 3): E.OFFSET_METADATA_TOO_LARGE}
    assert [(k.partition, v.metadata) for k, v in h.decoded_records()] == [(0, "😀😀"), (2, "éééé")]
    parts = h.fetch("g", {"t": [0, 1, 2, 3]})["topics"][0]["partitions"]
    assert [p["committed_offset"] for p in parts] == [1, -1, 3, -1]


def test_default_metadata_limit_is_4096() -> None:
    h = Harness()
    assert h.commit("g", {("t", 0): (1, "x" * 4096), ("t", 1): (1, "x" * 4097)}) == {
        ("t", 0): E.NONE, ("t", 1): E.OFFSET_METADATA_TOO_LARGE}


def test_null_metadata_stored_as_empty_string() -> None:
    h = Harness()
    h.commit("g", {T0: (7, None)})
    ((_, value),) = h.decoded_records()
    assert value.metadata == ""
    assert h.fetch("g", {"t": [0]})["topics"][0]["partitions"][0]["metadata"] == ""


def test_v1_commit_timestamp() -> None:
    h = Harness()
    h.commit("g", {T0: 1}, version=1, commit_timestamp=12_345)
    h.commit("g", {("t", 1): 1}, version=1, commit_timestamp=-1)
    (_, v0), (_, v1) = h.decoded_records()
    assert v0.commit_timestamp == 12_345
    assert v1.commit_timestamp == h.now
    assert v0.expire_timestamp == v1.expire_timestamp == -1


@pytest.mark.parametrize("version", [2, 3, 4])
def test_v2_4_retention_sets_expire_timestamp(version: int) -> None:
    h = Harness()
    h.commit("g", {T0: 1}, version=version, retention=60_000)
    h.commit("g", {("t", 1): 1}, version=version, retention=-1)
    (_, raw_with), (_, raw_without) = h.records
    assert _value_version(raw_with) == 1
    assert _value_version(raw_without) == 3
    (_, with_expiry), (_, without) = h.decoded_records()
    assert with_expiry.expire_timestamp == h.now + 60_000
    assert with_expiry.commit_timestamp == h.now
    assert without.expire_timestamp == -1


@pytest.mark.parametrize("version", [5, 6, 7, 8])
def test_no_retention_from_v5_record_v3(version: int) -> None:
    h = Harness()
    h.commit("g", {T0: 1}, version=version)
    ((_, raw),) = h.records
    assert _value_version(raw) == 3


def test_leader_epoch_stored_from_v6() -> None:
    h = Harness()
    h.commit("g", {T0: 1}, version=6, leader_epoch=17)
    h.commit("g", {("t", 1): 1}, version=5, leader_epoch=17)
    (_, v6), (_, v5) = h.decoded_records()
    assert v6.leader_epoch == 17
    assert v5.leader_epoch == -1
    parts = h.fetch("g", {"t": [0, 1]}, version=5)["topics"][0]["partitions"]
    assert [p["committed_leader_epoch"] for p in parts] == [17, -1]


def test_partition_exists_callback() -> None:
    h = Harness()
    exists = lambda topic, partition: topic == "t" and partition < 2  # noqa: E731
    result = h.commit("g", {("t", 0): 1, ("t", 5): 2, ("gone", 0): 3}, partition_exists=exists)
    assert result == {("t", 0): E.NONE, ("t", 5): E.UNKNOWN_TOPIC_OR_PARTITION,
                      ("gone", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert [k for k, _ in h.decoded_records()] == [OffsetKey("g", "t", 0)]


def test_unknown_partitions_answered_before_group_validation() -> None:
    # KafkaApis.handleOffsetCommitRequest answers UNKNOWN_TOPIC_OR_PARTITION before the coordinator
    # sees the request.
    h = Harness()
    h.stable_group("g", 2)
    exists = lambda topic, partition: topic == "t"  # noqa: E731
    result = h.commit("g", {("t", 0): 1, ("gone", 0): 3}, member_id="nobody", generation=1,
                      partition_exists=exists)
    assert result == {("t", 0): E.UNKNOWN_MEMBER_ID, ("gone", 0): E.UNKNOWN_TOPIC_OR_PARTITION}


def test_commit_of_only_unknown_partitions_creates_no_group() -> None:
    h = Harness()
    assert h.commit("g", {("gone", 0): 1}, partition_exists=lambda t, p: False) == {
        ("gone", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert "g" not in h.coord.groups
    assert h.records == []


# ---------------------------------------------------------------- OffsetFetch


def _parts(reply: dict) -> dict[tuple[str, int], tuple[int, str, int]]:
    return {(t["name"], p["partition_index"]): (p["committed_offset"], p["metadata"], p["error_code"])
            for t in reply["topics"] for p in t["partitions"]}


@pytest.mark.parametrize("version", [1, 2, 5, 7])
def test_fetch_unknown_partitions(version: int) -> None:
    h = Harness()
    h.commit("g", {T0: (10, "meta")})
    reply = h.fetch("g", {"t": [0, 1], "other": [3]}, version=version)
    assert _parts(reply) == {("t", 0): (10, "meta", 0), ("t", 1): (-1, "", 0), ("other", 3): (-1, "", 0)}
    if version >= 2:
        assert reply["error_code"] == 0


def test_fetch_unknown_group_with_partitions() -> None:
    h = Harness()
    reply = h.fetch("nope", {"t": [0]})
    assert _parts(reply) == {("t", 0): (-1, "", 0)}
    assert reply["error_code"] == 0
    assert "nope" not in h.coord.groups


def test_fetch_all_topics() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 1, ("t", 1): 2, ("u", 0): 3})
    assert _parts(h.fetch("g", None, version=2)) == {
        ("t", 0): (1, "", 0), ("t", 1): (2, "", 0), ("u", 0): (3, "", 0)}
    assert h.fetch("nope", None, version=7)["topics"] == []


def test_fetch_v8_multi_group() -> None:
    h = Harness()
    h.commit("a", {("t", 0): 1})
    h.commit("b", {("t", 0): 2, ("u", 1): 3})
    reply = h.fetch_raw({"require_stable": False, "groups": [
        {"group_id": "a", "topics": [{"name": "t", "partition_indexes": [0, 1]}]},
        {"group_id": "b", "topics": None},
        {"group_id": "c", "topics": None},
    ]}, version=8)
    groups = {g["group_id"]: g for g in reply["groups"]}
    assert list(groups) == ["a", "b", "c"]
    assert all(g["error_code"] == 0 for g in reply["groups"])
    assert _parts(groups["a"]) == {("t", 0): (1, "", 0), ("t", 1): (-1, "", 0)}
    assert _parts(groups["b"]) == {("t", 0): (2, "", 0), ("u", 1): (3, "", 0)}
    assert groups["c"]["topics"] == []


def test_fetch_does_not_validate_members() -> None:
    h = Harness()
    a, _b = h.stable_group("g", 2)
    h.commit("g", {T0: 5}, member_id=a, generation=1)
    assert _parts(h.fetch("g", {"t": [0]})) == {T0: (5, "", 0)}


def test_offsets_survive_restart() -> None:
    h = Harness()
    h.commit("g", {T0: (5, "m")}, version=6, leader_epoch=3)
    h.commit("g", {T0: 6}, version=2, retention=1000)
    r = h.replayed()
    assert r.coord.offsets.snapshot() == h.coord.offsets.snapshot()
    assert r.state("g") is S.EMPTY
    assert _parts(r.fetch("g", {"t": [0]})) == {T0: (6, "", 0)}
