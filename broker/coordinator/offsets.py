"""Committed offsets in memory: group -> (topic, partition) -> value."""

from __future__ import annotations

from collections.abc import Iterator

from protocol.consumer_offsets import OffsetValue


class OffsetStore:
    """The latest committed offset per group/topic/partition (what replay of the log yields)."""

    __slots__ = ("_groups",)

    def __init__(self) -> None:
        self._groups: dict[str, dict[tuple[str, int], OffsetValue]] = {}

    def put(self, group: str, topic: str, partition: int, value: OffsetValue) -> None:
        self._groups.setdefault(group, {})[(topic, partition)] = value

    def get(self, group: str, topic: str, partition: int) -> OffsetValue | None:
        offsets = self._groups.get(group)
        return None if offsets is None else offsets.get((topic, partition))

    def delete(self, group: str, topic: str, partition: int) -> bool:
        offsets = self._groups.get(group)
        if offsets is None or offsets.pop((topic, partition), None) is None:
            return False
        if not offsets:
            del self._groups[group]
        return True

    def has_group(self, group: str) -> bool:
        return group in self._groups

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def partitions_of(self, group: str) -> list[tuple[str, int]]:
        return list(self._groups.get(group, {}))

    def items_of(self, group: str) -> Iterator[tuple[tuple[str, int], OffsetValue]]:
        yield from self._groups.get(group, {}).items()

    def snapshot(self) -> dict[str, dict[tuple[str, int], OffsetValue]]:
        """A deep copy, for comparing live state with a replay."""
        return {g: dict(o) for g, o in self._groups.items()}
