"""The compact offset store behaves exactly like a dict, in a fraction of the memory."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.coordinator.offset_store import OffsetStore
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
