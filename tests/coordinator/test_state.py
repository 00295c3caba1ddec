"""The group state table, exactly as Kafka's ClassicGroupState (docs/coordinator-rules.md#group-states)."""

from __future__ import annotations

import itertools

import pytest

from broker.coordinator.classic.group import ClassicGroup as Group
from broker.coordinator.classic.state import (
    ALLOWED_FROM,
    CAN_REBALANCE,
    IllegalTransition,
    check_transition,
    parse_state,
)
from broker.coordinator.classic.state import (
    ClassicGroupState as GroupState,
)

S = GroupState

# to-state -> states it may be entered from (ClassicGroupState.validPreviousStates)
TABLE = {
    S.EMPTY: {S.PREPARING_REBALANCE},
    S.PREPARING_REBALANCE: {S.EMPTY, S.STABLE, S.COMPLETING_REBALANCE},
    S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
    S.STABLE: {S.COMPLETING_REBALANCE},
    S.DEAD: set(S),
}

# in the states' order, not the sets' (which varies between processes, and pytest-xdist's workers
# must collect the same tests)
ALLOWED = [(src, dst) for dst, sources in TABLE.items() for src in S if src in sources]
FORBIDDEN = [(src, dst) for src, dst in itertools.product(S, S) if src not in TABLE[dst]]


def test_wire_names() -> None:
    assert [s.wire_name for s in S] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]


def test_table_is_kafkas() -> None:
    assert {dst: set(src) for dst, src in ALLOWED_FROM.items()} == TABLE
    assert set(CAN_REBALANCE) == {S.EMPTY, S.STABLE, S.COMPLETING_REBALANCE}
    assert len(ALLOWED) + len(FORBIDDEN) == 25


@pytest.mark.parametrize(("src", "dst"), ALLOWED, ids=lambda s: s.value)
def test_allowed_transition(src: GroupState, dst: GroupState) -> None:
    check_transition(src, dst)
    group = Group("g", state=src)
    group.transition(dst, 1234)
    assert group.state is dst
    assert group.state_timestamp == 1234


@pytest.mark.parametrize(("src", "dst"), FORBIDDEN, ids=lambda s: s.value)
def test_forbidden_transition(src: GroupState, dst: GroupState) -> None:
    with pytest.raises(IllegalTransition):
        check_transition(src, dst)
    group = Group("g", state=src, state_timestamp=7)
    with pytest.raises(IllegalTransition):
        group.transition(dst, 1234)
    assert group.state is src
    assert group.state_timestamp == 7


def test_dead_from_dead_allowed() -> None:
    check_transition(S.DEAD, S.DEAD)


@pytest.mark.parametrize("text", ["stable", "STABLE", "Stable", "sTaBlE"])
def test_parse_state_is_case_insensitive(text: str) -> None:
    assert parse_state(text) is S.STABLE


def test_parse_state_unknown() -> None:
    assert parse_state("Rebalancing") is None
    assert parse_state("") is None
