"""Where each partition's committed offset goes under a reset strategy: pure arithmetic.

The command gathers the facts (committed offsets, each partition's log start and end,
offsets found by timestamp, file rows); ``plan_reset`` turns them into one ``PlanRow``
per partition. Nothing here talks to a broker, so every strategy is tested directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from admin.errors import UsageError
from admin.inputs import OffsetRow

TopicPartition = tuple[str, int]

EARLIEST = "to-earliest"
LATEST = "to-latest"
CURRENT = "to-current"
TO_OFFSET = "to-offset"
SHIFT_BY = "shift-by"
TO_DATETIME = "to-datetime"
BY_DURATION = "by-duration"
FROM_FILE = "from-file"
NEAREST = "to-nearest"

STRATEGIES = (EARLIEST, LATEST, CURRENT, TO_OFFSET, SHIFT_BY, TO_DATETIME, BY_DURATION, FROM_FILE, NEAREST)
#: Strategies that look offsets up by timestamp (ListOffsets with a time).
BY_TIME = (TO_DATETIME, BY_DURATION)


@dataclass(frozen=True)
class Strategy:
    """One reset strategy and its argument (an offset, a shift, or a timestamp in ms)."""

    name: str
    value: int = 0


@dataclass(frozen=True)
class PlanRow:
    """One partition: where the group is now and where it will resume.

    ``new`` None means "leave this partition as it is" (nothing is committed for it).
    """

    topic: str
    partition: int
    current: int | None
    new: int | None
    log_start: int | None = None
    log_end: int | None = None
    metadata: str = ""
    leader_epoch: int = -1

    @property
    def changes(self) -> bool:
        return self.new is not None and self.new != self.current


def clamp(offset: int, log_start: int, log_end: int) -> int:
    """``offset`` moved into [log start, log end]."""
    return max(log_start, min(offset, log_end))


def plan_reset(
    strategy: Strategy,
    partitions: list[TopicPartition],
    committed: dict[TopicPartition, int],
    ranges: dict[TopicPartition, tuple[int, int]],
    found_by_time: dict[TopicPartition, int] | None = None,
    file_rows: dict[TopicPartition, OffsetRow] | None = None,
) -> list[PlanRow]:
    """The plan for every partition in ``partitions``, in topic/partition order.

    - to-earliest / to-latest: the log start / log end offset.
    - to-current: the committed offset; the log end for a partition with none (as Kafka).
    - to-offset N, shift-by N: clamped into [log start, log end], as Kafka does.
    - to-datetime / by-duration: the offset ListOffsets found for the time; the log end
      when no record is at or after it (found offset -1).
    - from-file: the file's offset (and metadata, leader epoch) as written.
    - to-nearest: the committed offset clamped into [log start, log end]: earliest if it
      fell below the log start, latest if it is past the end, unchanged otherwise; a
      partition with no committed offset is left alone.
    """
    rows = []
    for tp in sorted(set(partitions)):
        topic, partition = tp
        current = committed.get(tp)
        start, end = ranges[tp]
        metadata, epoch = "", -1
        new: int | None
        name = strategy.name
        if name == EARLIEST:
            new = start
        elif name == LATEST:
            new = end
        elif name == CURRENT:
            new = end if current is None else current
        elif name == TO_OFFSET:
            new = clamp(strategy.value, start, end)
        elif name == SHIFT_BY:
            if current is None:
                raise UsageError(f"cannot shift {topic}-{partition}: the group has no committed offset there; "
                                 "reset it with --to-earliest/--to-latest first, or leave it out with "
                                 f"--topic {topic}:P,...")
            new = clamp(current + strategy.value, start, end)
        elif name in BY_TIME:
            found = (found_by_time or {}).get(tp, -1)
            new = end if found < 0 else found
        elif name == FROM_FILE:
            row = (file_rows or {})[tp]
            new, metadata, epoch = row.offset, row.metadata, row.leader_epoch
        elif name == NEAREST:
            new = None if current is None else clamp(current, start, end)
        else:
            raise UsageError(f"unknown reset strategy {name!r}")
        rows.append(PlanRow(topic, partition, current, new, start, end, metadata, epoch))
    return rows


def plan_restore(
    restored: dict[TopicPartition, OffsetRow],
    committed: dict[TopicPartition, int],
    ranges: dict[TopicPartition, tuple[int, int]] | None = None,
) -> list[PlanRow]:
    """Restore: each listed partition goes back to exactly the given offset (no clamping)."""
    ranges = ranges or {}
    rows = []
    for tp in sorted(restored):
        row = restored[tp]
        start, end = ranges.get(tp, (None, None))
        rows.append(PlanRow(tp[0], tp[1], committed.get(tp), row.offset, start, end, row.metadata,
                            row.leader_epoch))
    return rows
