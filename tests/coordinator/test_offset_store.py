"""The compact offset store behaves exactly like a dict, in a fraction of the memory."""

from __future__ import annotations

import struct
import tracemalloc
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.coordinator.offset_store import OffsetStore
from broker.coordinator.records import OffsetCommitRecord
from broker.coordinator.requests import FetchedPartition
from protocol.consumer_offsets import OffsetValue

values = st.builds(
    OffsetValue,
    offset=st.integers(-1, 2**63 - 1),
    leader_epoch=st.integers(-1, 2**31 - 1),
    metadata=st.sampled_from(["", "m", "ünïcode", "x" * 300]),
    commit_timestamp=st.integers(-(2**63) + 2, 2**63 - 1),
    expire_timestamp=st.one_of(st.just(-1), st.integers(0, 2**62)),
)
keys = st.tuples(st.sampled_from(["g1", "g2", ""]), st.sampled_from(["a", "b"]), st.integers(0, 40))
ops = st.lists(st.tuples(st.booleans(), keys, values), max_size=80)


def _fetched(partition: int, value: OffsetValue | None) -> FetchedPartition:
    if value is None:
        return FetchedPartition(partition)
    return FetchedPartition(partition, value.offset, value.leader_epoch, value.metadata)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_store_matches_a_dict_model(operations: list[tuple[bool, tuple[str, str, int], OffsetValue]]) -> None:
    store = OffsetStore()
    model: dict[tuple[str, str, int], OffsetValue] = {}
    for is_put, key, value in operations:
        if is_put:
            store.put(*key, value)
            model[key] = value
        else:
            assert store.delete(*key) == (key in model)
            model.pop(key, None)
    for key in {k for _, k, _ in operations}:
        assert store.get(*key) == model.get(key)
    # What an OffsetFetch answers, read straight from the arrays, is what the values say.
    for group in ("g1", "g2", ""):
        for topic in ("a", "b"):
            partitions = (-1, *range(42))
            assert store.fetched(group, topic, partitions) == tuple(
                _fetched(p, model.get((group, topic, p))) for p in partitions)
    expected: dict[str, dict[tuple[str, int], OffsetValue]] = {}
    for (group, topic, partition), value in model.items():
        expected.setdefault(group, {})[(topic, partition)] = value
    assert store.snapshot() == expected
    assert set(store.group_ids()) == set(expected)
    assert store.count() == len(model)


def test_out_of_range_partitions_are_refused() -> None:
    store = OffsetStore()
    for partition in (-1, 1 << 20):
        try:
            store.put("g", "t", partition, OffsetValue(1, -1, "", 0, -1))
        except ValueError:
            continue
        raise AssertionError(f"partition {partition} accepted")
    assert store.get("g", "t", -1) is None


def test_footprint_is_under_the_classic_64_bytes_per_offset() -> None:
    groups, partitions = 200, 100
    tracemalloc.start()
    try:
        store = OffsetStore()
        before = tracemalloc.get_traced_memory()[0]
        for g in range(groups):
            for p in range(partitions):
                store.put(f"group-{g}", "orders", p, OffsetValue(1000 + p, 5, "", 1795300000000 + p, -1))
        per_offset = (tracemalloc.get_traced_memory()[0] - before) / (groups * partitions)
    finally:
        tracemalloc.stop()
    assert per_offset < 64, per_offset


# ---------------------------------------------------------------------- the snapshot's offsets section


def _restored(store: OffsetStore, groups_per_part: int = 2) -> OffsetStore:
    section = b"".join(b"".join(part) for part in store.dump(groups_per_part))
    restored = OffsetStore()
    assert restored.restore(memoryview(section)) == len(section)
    return restored


def _model_of(store: OffsetStore) -> dict[tuple[str, str, int], OffsetValue]:
    return {(g, t, p): v for g, items in store.snapshot().items() for (t, p), v in items.items()}


@settings(max_examples=150, deadline=None)
@given(ops, ops, st.integers(1, 3))
def test_a_restored_store_is_the_dumped_one_before_and_after_use(
        before: list[tuple[bool, tuple[str, str, int], OffsetValue]],
        after: list[tuple[bool, tuple[str, str, int], OffsetValue]], groups_per_part: int) -> None:
    """Groups stay in the loaded columns until first used; the store answers the same either way,
    and dumping a store with groups still in the columns writes them as they were."""
    live = OffsetStore()
    for is_put, key, value in before:
        if is_put:
            live.put(*key, value)
        else:
            live.delete(*key)
    restored = _restored(live, groups_per_part)
    assert restored.count() == live.count()
    assert set(restored.group_ids()) == set(live.group_ids())
    assert _restored(restored, groups_per_part).snapshot() == live.snapshot(), "untouched groups copied across"
    # A fetch of a group still in the columns answers from them.
    fresh = _restored(live, groups_per_part)
    for group in ("g2", "g1", ""):
        assert fresh.fetched(group, "a", (0, 3, 40)) == live.fetched(group, "a", (0, 3, 40))
    for is_put, key, value in after:
        if is_put:
            live.put(*key, value)
            restored.put(*key, value)
        else:
            assert restored.delete(*key) == live.delete(*key)
        assert restored.get(*key) == live.get(*key)
        assert restored.offset_of(*key) == live.offset_of(*key)
    assert restored.count() == live.count()
    assert sorted(restored.partitions_of("g1")) == sorted(live.partitions_of("g1"))
    assert _restored(restored, groups_per_part).snapshot() == live.snapshot()
    assert _model_of(restored) == _model_of(live)


def test_a_restored_store_frees_its_columns_once_most_groups_are_used() -> None:
    live = OffsetStore()
    for g in range(10):
        for p in range(4):
            live.put(f"g{g}", "t", p, OffsetValue(p, -1, "m" if p == 1 else "", 5, 7 if p == 2 else -1))
    restored = _restored(live, groups_per_part=3)
    assert restored._columns is not None
    for g in range(6):  # past half of the columns' slots: the rest is taken out too
        assert restored.get(f"g{g}", "t", 1) == live.get(f"g{g}", "t", 1)
    assert restored._columns is None
    assert restored.snapshot() == live.snapshot()


def test_a_damaged_offsets_section_is_refused() -> None:
    live = OffsetStore()
    live.put("g", "t", 3, OffsetValue(1, -1, "", 5, -1))
    live.put("h", "t", 0, OffsetValue(1, -1, "", 5, -1))
    section = b"".join(b"".join(part) for part in live.dump())
    for size in range(len(section) - 1):  # every cut
        try:
            OffsetStore().restore(memoryview(section[:size]))
        except (ValueError, struct.error, UnicodeDecodeError):
            continue
        raise AssertionError(f"a section cut at {size} bytes was taken")
    twice = section.replace(b"gh", b"gg")  # the names are one run of UTF-8: two groups of the same name
    with pytest.raises(ValueError, match="same name"):
        OffsetStore().restore(memoryview(twice))


@settings(max_examples=150, deadline=None)
@given(ops, ops)
def test_changes_made_while_a_restored_store_is_dumped_are_covered_by_replaying_them(
        before: list[tuple[bool, tuple[str, str, int], OffsetValue]],
        during: list[tuple[bool, tuple[str, str, int], OffsetValue]]) -> None:
    """As the broker writes a snapshot: a part at a time, the store changing in between (which
    takes groups out of the columns, and may free them); the changes are records after the
    snapshot, so loading it and replaying them gives the live store."""
    def apply(store: OffsetStore, operation: tuple[bool, tuple[str, str, int], OffsetValue]) -> None:
        is_put, key, value = operation
        if is_put:
            store.put(*key, value)
        else:
            store.delete(*key)

    live = OffsetStore()
    for operation in before:
        apply(live, operation)
    live = _restored(live)  # groups in the columns
    pending = list(during)
    parts = []
    for part in live.dump(groups_per_part=1):
        parts.append(b"".join(part))
        for operation in pending[:3]:
            apply(live, operation)
        del pending[:3]
    for operation in pending:
        apply(live, operation)
    loaded = OffsetStore()
    section = b"".join(parts)
    assert loaded.restore(memoryview(section)) == len(section)
    for operation in during:
        apply(loaded, operation)
    assert loaded.snapshot() == live.snapshot()
    assert loaded.count() == live.count()


def _other_byte_order(section: bytes) -> bytes:
    """The section as a machine of the other byte order writes it (docs/storage.md's layout)."""
    def swapped(data: bytes, code: str) -> bytes:
        column = array(code)
        column.frombytes(data)
        column.byteswap()
        return column.tobytes()

    out = [bytes([3 - section[0]])]
    pos = 1
    chunk = struct.Struct("<IIQQQQ")
    while True:
        header = chunk.unpack_from(section, pos)
        out.append(section[pos : pos + chunk.size])
        pos += chunk.size
        groups, entries, slots, names_size, topics_size, meta_size = header
        if not groups:
            return b"".join(out)
        for size, code in ((names_size, ""), (4 * groups, "I"), (8 * groups, "Q"), (topics_size, ""),
                           (8 * entries, "Q"), (8 * entries, "Q"), (8 * entries, "Q"), (4 * entries, "I"),
                           (meta_size, ""), (16 * slots, "q"), (4 * slots, "i")):
            data = section[pos : pos + size]
            out.append(swapped(data, code) if code else data)
            pos += size


def test_a_section_of_the_other_byte_order_is_swapped_on_load() -> None:
    live = OffsetStore()
    for g in range(5):
        for p in range(3):
            live.put(f"gé{g}", "t" if g % 2 else "u", p, OffsetValue(1000 + p, 2, "m" if p == 1 else "", 7, -1))
        live.put(f"gé{g}", "v", 4, OffsetValue(-1, -1, "", 9, 11))
    section = b"".join(b"".join(part) for part in live.dump(groups_per_part=2))
    foreign = _other_byte_order(section)
    assert foreign != section
    restored = OffsetStore()
    assert restored.restore(memoryview(foreign)) == len(foreign)
    assert restored.count() == live.count()
    again = _restored(restored)  # untouched groups are written back in this machine's order
    assert restored.snapshot() == live.snapshot()
    assert again.snapshot() == live.snapshot()


#: Records as a commit writes them: runs of one group and topic, and tombstones among them.
record_runs = st.lists(st.tuples(st.sampled_from(["g1", "g2"]), st.sampled_from(["a", "b"]),
                                 st.lists(st.tuples(st.integers(0, 40), st.one_of(st.none(), values)),
                                          min_size=1, max_size=12)), max_size=8)


@settings(max_examples=150, deadline=None)
@given(ops, st.lists(record_runs, max_size=4))
def test_put_records_is_put_and_delete_in_turn(
        before: list[tuple[bool, tuple[str, str, int], OffsetValue]],
        commits: list[list[tuple[str, str, list[tuple[int, OffsetValue | None]]]]]) -> None:
    """``put_records`` (a commit's, or a replayed batch's, records) leaves the store as ``put``
    and ``delete`` of each record in turn would, on a store that already holds offsets."""
    stores = OffsetStore(), OffsetStore()
    for store in stores:
        for is_put, key, value in before:
            if is_put:
                store.put(*key, value)
            else:
                store.delete(*key)
    batched, one_by_one = stores
    for runs in commits:
        records = [OffsetCommitRecord(group, topic, partition, value)
                   for group, topic, partitions in runs for partition, value in partitions]
        batched.put_records(records)
        for group, topic, partition, value in records:
            if value is None:
                one_by_one.delete(group, topic, partition)
            else:
                one_by_one.put(group, topic, partition, value)
        assert batched.snapshot() == one_by_one.snapshot()
        assert batched.count() == one_by_one.count()
        for group in ("g1", "g2", ""):
            for topic in ("a", "b"):
                partitions = tuple(range(42))
                assert batched.fetched(group, topic, partitions) == one_by_one.fetched(group, topic, partitions)
