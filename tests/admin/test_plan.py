"""Every reset strategy as arithmetic: committed offsets and log ranges in, plan rows out."""

from __future__ import annotations

import pytest

from admin.errors import UsageError
from admin.inputs import OffsetRow
from admin.plan import (
    BY_DURATION,
    CURRENT,
    EARLIEST,
    FROM_FILE,
    LATEST,
    NEAREST,
    SHIFT_BY,
    TO_DATETIME,
    TO_OFFSET,
    PlanRow,
    Strategy,
    clamp,
    plan_reset,
    plan_restore,
)

# t-0: log [10, 50), committed 30 (inside); t-1: log [0, 20), committed 25 (past the end);
# t-2: log [100, 200), committed 40 (below the start, e.g. after retention); t-3: nothing committed.
RANGES = {("t", 0): (10, 50), ("t", 1): (0, 20), ("t", 2): (100, 200), ("t", 3): (5, 9)}
COMMITTED = {("t", 0): 30, ("t", 1): 25, ("t", 2): 40}
ALL = sorted(RANGES)


def new_offsets(strategy: Strategy, partitions: list[tuple[str, int]] = ALL, **facts: object) -> dict[int, int | None]:
    rows = plan_reset(strategy, partitions, COMMITTED, RANGES, **facts)  # type: ignore[arg-type]
    return {r.partition: r.new for r in rows}


def test_rows_carry_current_offset_and_log_range_in_order() -> None:
    rows = plan_reset(Strategy(EARLIEST), [("t", 3), ("t", 0), ("t", 0)], COMMITTED, RANGES)
    assert rows == [PlanRow("t", 0, 30, 10, 10, 50), PlanRow("t", 3, None, 5, 5, 9)]


def test_to_earliest_and_to_latest() -> None:
    assert new_offsets(Strategy(EARLIEST)) == {0: 10, 1: 0, 2: 100, 3: 5}
    assert new_offsets(Strategy(LATEST)) == {0: 50, 1: 20, 2: 200, 3: 9}


def test_to_current_keeps_committed_and_takes_latest_where_none() -> None:
    assert new_offsets(Strategy(CURRENT)) == {0: 30, 1: 25, 2: 40, 3: 9}


@pytest.mark.parametrize(("offset", "expected"), [
    (15, {0: 15, 1: 15, 2: 100, 3: 9}),
    (0, {0: 10, 1: 0, 2: 100, 3: 5}),
    (10**12, {0: 50, 1: 20, 2: 200, 3: 9}),
])
def test_to_offset_is_clamped_into_each_log(offset: int, expected: dict[int, int]) -> None:
    assert new_offsets(Strategy(TO_OFFSET, offset)) == expected


def test_shift_by_moves_from_committed_and_clamps() -> None:
    committed_only = [("t", 0), ("t", 1), ("t", 2)]
    assert new_offsets(Strategy(SHIFT_BY, 5), committed_only) == {0: 35, 1: 20, 2: 100}
    assert new_offsets(Strategy(SHIFT_BY, -15), committed_only) == {0: 15, 1: 10, 2: 100}
    assert new_offsets(Strategy(SHIFT_BY, -1000), committed_only) == {0: 10, 1: 0, 2: 100}
    assert new_offsets(Strategy(SHIFT_BY, 0), committed_only) == {0: 30, 1: 20, 2: 100}


def test_shift_by_without_a_committed_offset_is_refused() -> None:
    with pytest.raises(UsageError, match="cannot shift t-3: the group has no committed offset"):
        new_offsets(Strategy(SHIFT_BY, 1))


@pytest.mark.parametrize("name", [TO_DATETIME, BY_DURATION])
def test_by_time_takes_the_found_offset_or_latest_when_none(name: str) -> None:
    found = {("t", 0): 12, ("t", 1): -1, ("t", 2): 150}  # t-3 not answered at all
    assert new_offsets(Strategy(name, 1_700_000_000_000), found_by_time=found) == {0: 12, 1: 20, 2: 150, 3: 9}


def test_to_nearest_clamps_only_out_of_range_committed_offsets() -> None:
    rows = plan_reset(Strategy(NEAREST), ALL, COMMITTED, RANGES)
    assert [(r.partition, r.current, r.new, r.changes) for r in rows] == [
        (0, 30, 30, False),   # inside the log: unchanged
        (1, 25, 20, True),    # past the end: latest
        (2, 40, 100, True),   # below the start: earliest
        (3, None, None, False),  # nothing committed: left alone
    ]


def test_to_nearest_at_the_edges_is_unchanged() -> None:
    committed = {("t", 0): 10, ("t", 1): 20}
    rows = plan_reset(Strategy(NEAREST), [("t", 0), ("t", 1)], committed, RANGES)
    assert [(r.current, r.new) for r in rows] == [(10, 10), (20, 20)]


def test_from_file_takes_offsets_metadata_and_epoch_as_written() -> None:
    file_rows = {("t", 0): OffsetRow("t", 0, 49, "m", 3), ("t", 1): OffsetRow("t", 1, 99)}
    rows = plan_reset(Strategy(FROM_FILE), [("t", 0), ("t", 1)], COMMITTED, RANGES, file_rows=file_rows)
    assert rows == [PlanRow("t", 0, 30, 49, 10, 50, "m", 3), PlanRow("t", 1, 25, 99, 0, 20)]


def test_unknown_strategy() -> None:
    with pytest.raises(UsageError, match="unknown reset strategy"):
        new_offsets(Strategy("to-the-moon"))


def test_clamp() -> None:
    assert [clamp(x, 5, 9) for x in (0, 5, 7, 9, 100)] == [5, 5, 7, 9, 9]


def test_restore_is_exact_and_keeps_epoch_and_metadata() -> None:
    restored = {("t", 1): OffsetRow("t", 1, 2, "x", 7), ("u", 0): OffsetRow("u", 0, 1000)}
    rows = plan_restore(restored, COMMITTED, {("t", 1): (0, 20)})
    assert rows == [PlanRow("t", 1, 25, 2, 0, 20, "x", 7), PlanRow("u", 0, None, 1000, None, None)]
