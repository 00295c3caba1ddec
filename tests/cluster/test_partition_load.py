"""A cluster node loads and unloads the groups of one coordinator partition (Kafka's onLoaded
and onUnloaded), leaving the other partitions' groups alone."""

from __future__ import annotations

from broker.coordinator.records import decode
from protocol.consumer_offsets import partition_for
from protocol.errors import ErrorCode
from tests.coordinator.harness import Harness

PARTITIONS = 50


def known(topic: str, partition: int) -> bool:
    return True


def groups_on_two_partitions() -> tuple[str, str]:
    moving = "group-0"
    staying = next(f"group-{i}" for i in range(1, 100)
                   if partition_for(f"group-{i}", PARTITIONS) != partition_for(moving, PARTITIONS))
    return moving, staying


def partition_records(h: Harness, group: str) -> list[tuple[bytes, bytes | None]]:
    """What the group's partition log holds: the records of every group that hashes there."""
    keep = partition_for(group, PARTITIONS)
    out = []
    for key, value in h.records:
        record = decode(key, value)
        if record is not None and partition_for(record.group_id, PARTITIONS) == keep:
            out.append((key, value))
    return out


def test_unloading_answers_parked_requests_with_not_coordinator_and_forgets_only_that_partition() -> None:
    moving, staying = groups_on_two_partitions()
    h = Harness()
    assert h.commit(staying, {("t", 0): 5}, partition_exists=known) == {("t", 0): ErrorCode.NONE}
    members = h.stable_group(moving)
    h.commit(moving, {("t", 0): 7}, member_id=members[0], generation=h.generation(moving), partition_exists=known)
    h.new_member(moving)  # a third member: the rebalance parks the joins
    parked = h.parked()
    assert parked
    h.apply(h.coord.unload_groups([moving]))
    assert all(h.error(ticket) is ErrorCode.NOT_COORDINATOR for ticket in parked)
    assert moving not in h.coord.groups and not h.coord.offsets.has_group(moving)
    assert staying in h.coord.groups and h.coord.offsets.has_group(staying)
    # No timer of the unloaded group fires or writes anything any more.
    assert h.advance(10 * 60_000).records == {}


def test_loading_a_partition_brings_back_its_groups_and_offsets() -> None:
    moving, staying = groups_on_two_partitions()
    h = Harness()
    members = h.stable_group(moving)
    generation = h.generation(moving)
    h.commit(moving, {("t", 0): 7}, member_id=members[0], generation=generation, partition_exists=known)
    records = partition_records(h, moving)
    fresh = Harness()
    fresh.commit(staying, {("t", 1): 3}, partition_exists=known)
    fx, loaded = fresh.coord.load_groups(records, fresh.now)
    fresh.apply(fx)
    assert loaded == {moving}
    assert fresh.generation(moving) == generation
    assert set(fresh.group(moving).members) == set(members)
    fetched = fresh.fetch(moving, {"t": [0]})
    assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 7
    assert fresh.coord.offsets.has_group(staying)
    # The loaded members' sessions run from the load: a heartbeat now is answered normally.
    assert fresh.heartbeat(moving, members[0], generation) is ErrorCode.NONE
