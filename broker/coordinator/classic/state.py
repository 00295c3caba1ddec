"""Classic group states and the transitions between them, as data (Kafka's ClassicGroupState)."""

from __future__ import annotations

from enum import Enum


class ClassicGroupState(Enum):
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
ALLOWED_FROM: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    ClassicGroupState.EMPTY: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.PREPARING_REBALANCE: frozenset(
        {ClassicGroupState.EMPTY, ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE}
    ),
    ClassicGroupState.COMPLETING_REBALANCE: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.STABLE: frozenset({ClassicGroupState.COMPLETING_REBALANCE}),
    ClassicGroupState.DEAD: frozenset(ClassicGroupState),
}

CAN_REBALANCE: frozenset[ClassicGroupState] = ALLOWED_FROM[ClassicGroupState.PREPARING_REBALANCE]


def check_transition(current: ClassicGroupState, target: ClassicGroupState) -> None:
    if current not in ALLOWED_FROM[target]:
        raise IllegalTransition(f"group cannot go from {current.value} to {target.value}")


def parse_state(text: str) -> ClassicGroupState | None:
    """Case-insensitive state name (ListGroups filters), None when unknown."""
    lowered = text.lower()
    for state in ClassicGroupState:
        if state.value.lower() == lowered:
            return state
    return None
