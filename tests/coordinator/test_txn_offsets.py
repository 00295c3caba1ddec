"""TxnOffsetCommit in the group coordinator: offsets pending until their producer's marker.

docs/transactions.md#pending-offsets has the rules these pin (Kafka's OffsetMetadataManager:
commitTransactionalOffset, replayEndTransactionMarker, fetchOffsets with require_stable,
deleteOffsets, deleteAllOffsets, cleanupExpiredOffsets).
"""

from __future__ import annotations

from typing import Any

from broker.coordinator import CoordinatorConfig, Effects, GroupCoordinatorShard
from broker.coordinator.records import encode as encode_record
from protocol.errors import ErrorCode
from protocol.messages import DeleteGroupsRequest, OffsetDeleteRequest, TxnOffsetCommitRequest
from protocol.records import EndTransactionMarker
from tests.coordinator.harness import Harness

E = ErrorCode
T = "topic"
Entry = tuple[Any, ...]  # ("record", key, value, producer id) | ("marker", partition, producer id, commit)


class TxnHarness(Harness):
    """The harness with transactional batches and markers in its log (one __consumer_offsets partition)."""

    partitions = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        self.log: list[Entry] = []

    def apply(self, fx: Effects) -> Effects:
        for records in fx.records.values():
            self.log.extend(("record", *encode_record(r), -1) for r in records)
        for (_, producer_id, _), records in fx.transactional.items():
            self.log.extend(("record", *encode_record(r), producer_id) for r in records)
        return super().apply(fx)

    def txn_commit(self, group: str, producer_id: int, offsets: dict[tuple[str, int], int], *, version: int = 3,
                   member_id: str = "", generation: int = -1, instance: str | None = None,
                   metadata: str = "") -> dict[tuple[str, int], ErrorCode]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                                 "committed_leader_epoch": -1, "committed_metadata": metadata})
        reply = self.request_now(TxnOffsetCommitRequest, version, {
            "transactional_id": f"txn-{producer_id}", "group_id": group, "producer_id": producer_id,
            "producer_epoch": 0, "generation_id": generation, "member_id": member_id,
            "group_instance_id": instance, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]})
        return {(t["name"], p["partition_index"]): ErrorCode(p["error_code"])
                for t in reply["topics"] for p in t["partitions"]}

    def marker(self, producer_id: int, commit: bool, partition: int = 0) -> int:
        self.log.append(("marker", partition, producer_id, commit))
        return self.coord.replay_marker(partition, self.partitions, producer_id, EndTransactionMarker(commit, 0))

    def offset(self, group: str, partition: int = 0, *, stable: bool = False) -> tuple[int, ErrorCode]:
        reply = self.fetch_raw({"group_id": group, "topics": [{"name": T, "partition_indexes": [partition]}],
                                "require_stable": stable}, 7)
        p = reply["topics"][0]["partitions"][0]
        return p["committed_offset"], ErrorCode(p["error_code"])

    def replay_log(self) -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(self.config)
        for entry in self.log:
            if entry[0] == "marker":
                _, partition, producer_id, commit = entry
                shard.replay_marker(partition, self.partitions, producer_id, EndTransactionMarker(commit, 0))
            elif entry[3] < 0:
                shard.replay_bytes(entry[1], entry[2])
            else:
                shard.replay_transactional_bytes(entry[1], entry[2], entry[3])
        shard.finish_load(self.now)
        return shard


def same_state(a: GroupCoordinatorShard, b: GroupCoordinatorShard) -> bool:
    return a.offsets.snapshot() == b.offsets.snapshot() and a.pending_offsets.snapshot() == b.pending_offsets.snapshot()


def test_pending_offsets_are_invisible_until_the_commit_marker() -> None:
    h = TxnHarness()
    h.commit("g", {(T, 0): 5})
    assert h.txn_commit("g", 7, {(T, 0): 10}) == {(T, 0): E.NONE}
    assert h.offset("g") == (5, E.NONE)
    assert h.marker(7, commit=True) == 1
    assert h.offset("g") == (10, E.NONE)
    assert same_state(h.coord, h.replay_log())


def test_an_abort_marker_drops_them() -> None:
    h = TxnHarness()
    h.commit("g", {(T, 0): 5})
    h.txn_commit("g", 7, {(T, 0): 10, (T, 1): 3})
    h.marker(7, commit=False)
    assert h.offset("g") == (5, E.NONE)
    assert h.offset("g", 1) == (-1, E.NONE)
    assert h.coord.pending_offsets.count() == 0
    assert same_state(h.coord, h.replay_log())


def test_require_stable_answers_unstable_for_exactly_the_pending_partitions() -> None:
    h = TxnHarness()
    h.commit("g", {(T, 0): 5, (T, 1): 6})
    h.txn_commit("g", 7, {(T, 0): 10})
    assert h.offset("g", 0, stable=True) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    assert h.offset("g", 1, stable=True) == (6, E.NONE)
    assert h.offset("g", 0) == (5, E.NONE)  # without require_stable: the committed one
    everything = h.fetch_raw({"group_id": "g", "topics": None, "require_stable": True}, 7)
    errors = {p["partition_index"]: p["error_code"] for t in everything["topics"] for p in t["partitions"]}
    assert errors == {0: int(E.UNSTABLE_OFFSET_COMMIT), 1: 0}
    h.marker(7, commit=True)
    assert h.offset("g", 0, stable=True) == (10, E.NONE)


def test_a_plain_commit_written_after_the_pending_one_wins() -> None:
    h = TxnHarness()
    h.txn_commit("g", 7, {(T, 0): 10})
    h.commit("g", {(T, 0): 20})
    h.marker(7, commit=True)
    assert h.offset("g") == (20, E.NONE)
    assert same_state(h.coord, h.replay_log())


def test_a_pending_offset_written_after_the_plain_one_wins() -> None:
    h = TxnHarness()
    h.commit("g", {(T, 0): 20})
    h.txn_commit("g", 7, {(T, 0): 10})
    h.marker(7, commit=True)
    assert h.offset("g") == (10, E.NONE)


def test_two_transactions_on_one_partition_settle_by_log_order() -> None:
    h = TxnHarness()
    h.txn_commit("g", 7, {(T, 0): 10})
    h.txn_commit("g", 8, {(T, 0): 11})
    h.marker(8, commit=True)
    h.marker(7, commit=True)  # older in the log than producer 8's: not materialized
    assert h.offset("g") == (11, E.NONE)
    assert same_state(h.coord, h.replay_log())


def test_a_marker_settles_only_the_groups_of_its_partition() -> None:
    h = TxnHarness()
    h.partitions = 2
    from protocol.consumer_offsets import partition_for
    groups = [f"g{i}" for i in range(10)]
    by_partition = {p: [g for g in groups if partition_for(g, 2) == p] for p in (0, 1)}
    a, b = by_partition[0][0], by_partition[1][0]
    h.txn_commit(a, 7, {(T, 0): 1})
    h.txn_commit(b, 7, {(T, 0): 2})
    h.marker(7, commit=True, partition=partition_for(a, 2))
    assert h.offset(a) == (1, E.NONE)
    assert h.offset(b, stable=True) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    h.marker(7, commit=True, partition=partition_for(b, 2))
    assert h.offset(b) == (2, E.NONE)
    assert same_state(h.coord, h.replay_log())


def test_offset_delete_tombstones_a_pending_only_partition_and_drops_the_pending_offset() -> None:
    h = TxnHarness()
    h.commit("g", {(T, 1): 1})
    h.txn_commit("g", 7, {(T, 0): 10})
    reply = h.request_now(OffsetDeleteRequest, 0, {"group_id": "g", "topics": [
        {"name": T, "partitions": [{"partition_index": 0}]}]})
    assert reply["error_code"] == 0
    assert h.log[-1][2] is None  # the tombstone
    assert h.offset("g", 0, stable=True) == (-1, E.NONE)
    h.marker(7, commit=True)
    assert h.offset("g", 0) == (-1, E.NONE)
    assert same_state(h.coord, h.replay_log())


def test_delete_groups_tombstones_committed_and_pending_offsets() -> None:
    h = TxnHarness()
    h.commit("g", {(T, 0): 1})
    h.txn_commit("g", 7, {(T, 0): 10, (T, 1): 11})
    reply = h.request_now(DeleteGroupsRequest, 2, {"groups_names": ["g"]})
    assert reply["results"][0]["error_code"] == 0
    assert h.coord.pending_offsets.count() == 0
    tombstoned = [e for e in h.log if e[0] == "record" and e[2] is None and e[1][:2] == b"\x00\x01"]
    assert len(tombstoned) == 2  # partition 0 once (committed and pending), partition 1 (pending only)
    h.marker(7, commit=True)
    assert h.offset("g", 1) == (-1, E.NONE)


def test_expiry_waits_while_an_offset_is_pending_and_keeps_the_group() -> None:
    h = TxnHarness(CoordinatorConfig(offsets_retention_ms=1000))
    h.commit("g", {(T, 0): 1, (T, 1): 2})
    h.txn_commit("g", 7, {(T, 0): 10})
    h.now += 10_000
    h.apply(h.coord.expire_offsets(h.now))
    assert h.offset("g", 0) == (1, E.NONE)   # pending: kept
    assert h.offset("g", 1) == (-1, E.NONE)  # expired
    assert "g" in h.coord.groups
    h.marker(7, commit=False)
    h.now += 10_000
    h.apply(h.coord.expire_offsets(h.now))
    assert h.offset("g", 0) == (-1, E.NONE)
    assert "g" not in h.coord.groups


def test_a_group_known_only_by_pending_offsets_is_loaded() -> None:
    h = TxnHarness()
    h.txn_commit("new", 7, {(T, 0): 10})
    assert "new" in h.replay_log().groups


def test_kip447_member_checks_from_v3() -> None:
    h = TxnHarness()
    member = h.stable_group("g", 1)[0]
    generation = h.generation("g")
    assert h.txn_commit("g", 7, {(T, 0): 1}, member_id="nobody", generation=generation) == {(T, 0): E.UNKNOWN_MEMBER_ID}
    assert h.txn_commit("g", 7, {(T, 0): 1}, member_id=member, generation=generation + 1) == {
        (T, 0): E.ILLEGAL_GENERATION}
    assert h.txn_commit("g", 7, {(T, 0): 1}, member_id=member, generation=generation) == {(T, 0): E.NONE}
    # v0-2 send no member: accepted whatever the group's state, as Kafka does.
    assert h.txn_commit("g", 7, {(T, 0): 2}, version=2) == {(T, 0): E.NONE}
    # An unknown group with a generation: ILLEGAL_GENERATION; without one: a simple group.
    assert h.txn_commit("missing", 7, {(T, 0): 1}, member_id="m", generation=3) == {(T, 0): E.ILLEGAL_GENERATION}
    assert h.txn_commit("simple", 7, {(T, 0): 1}) == {(T, 0): E.NONE}


def test_kip447_static_member_fencing() -> None:
    h = TxnHarness()
    members = h.stable_group("g", 1, instances=["static-1"])
    generation = h.generation("g")
    assert h.txn_commit("g", 7, {(T, 0): 1}, member_id="other", generation=generation, instance="static-1") == {
        (T, 0): E.FENCED_INSTANCE_ID}
    assert h.txn_commit("g", 7, {(T, 0): 1}, member_id=members[0], generation=generation, instance="static-1") == {
        (T, 0): E.NONE}


def test_unknown_partitions_and_oversized_metadata() -> None:
    h = TxnHarness()
    errors = h.request_now(TxnOffsetCommitRequest, 3, {
        "transactional_id": "t", "group_id": "g", "producer_id": 7, "producer_epoch": 0,
        "topics": [{"name": T, "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_metadata": "x" * 5000},
            {"partition_index": 9, "committed_offset": 1, "committed_metadata": None}]}]},
        partition_exists=lambda topic, p: p < 5)
    assert [p["error_code"] for p in errors["topics"][0]["partitions"]] == [
        int(E.OFFSET_METADATA_TOO_LARGE), int(E.UNKNOWN_TOPIC_OR_PARTITION)]
    assert h.coord.pending_offsets.count() == 0


def test_topic_deletion_tombstones_pending_offsets_too() -> None:
    h = TxnHarness()
    h.txn_commit("g", 7, {(T, 0): 10})
    h.apply(h.coord.on_topic_deleted(T, h.now))
    assert h.coord.pending_offsets.count() == 0
    h.marker(7, commit=True)
    assert h.offset("g") == (-1, E.NONE)
