"""Classic group states and the transitions between them, as data."""

from __future__ import annotations

from enum import Enum


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def wire_name(self) -> str:
        """The name DescribeGroups and ListGroups put on the wire."""
        return self.value


class IllegalTransition(RuntimeError):
    """A transition the table forbids: always a coordinator bug, never bad input."""


# to-state -> the states it may be entered from (Kafka's ClassicGroupState).
ALLOWED_FROM: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}

CAN_REBALANCE: frozenset[GroupState] = ALLOWED_FROM[GroupState.PREPARING_REBALANCE]


def check_transition(current: GroupState, target: GroupState) -> None:
    if current not in ALLOWED_FROM[target]:
        raise IllegalTransition(f"group cannot go from {current.value} to {target.value}")


def parse_state(text: str) -> GroupState | None:
    """Case-insensitive state name (ListGroups filters), None when unknown."""
    lowered = text.lower()
    for state in GroupState:
        if state.value.lower() == lowered:
            return state
    return None
