"""Consumer lag per group and topic, read at scrape time, with a bound on the series.

Lag is what Kafka's consumer-group tools print: for each partition a group has committed
an offset for, the partition's log end offset minus the committed offset (never below 0).
Partitions whose topic or partition no longer exists are skipped. The figures are summed
per (group, topic), as kminion's topic granularity does, so a topic of 100 partitions
costs one series, not 100.

Every (group, topic) pair is a series of each family, and a broker may hold hundreds of
thousands of groups: ``max_series`` (``metrics.group.lag.max.series``) keeps the pairs with
the largest lag and reports how many it left out, so a scrape never explodes. 0 turns
the families off.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from broker.metrics import Family, gauge
from protocol.consumer_offsets import OffsetValue


class CommittedOffsets(Protocol):
    """The coordinator's offset store, as far as lag needs it."""

    def group_ids(self) -> list[str]: ...

    def items_of(self, group: str) -> Iterator[tuple[tuple[str, int], OffsetValue]]: ...


class _Log(Protocol):
    @property
    def next_offset(self) -> int: ...


class Partitions(Protocol):
    """The topic catalogue, as far as lag needs it."""

    def partition(self, name: str, index: int) -> _Log | None: ...


@dataclass(frozen=True, slots=True)
class TopicLag:
    group: str
    topic: str
    partitions: int
    committed_sum: int
    lag: int


def topic_lags(offsets: CommittedOffsets, partitions: Partitions) -> Iterator[TopicLag]:
    """One ``TopicLag`` per (group, topic) with at least one existing partition."""
    for group in offsets.group_ids():
        sums: dict[str, list[int]] = {}
        for (topic, partition), value in offsets.items_of(group):
            log = partitions.partition(topic, partition)
            if log is None:
                continue
            end = log.next_offset
            row = sums.setdefault(topic, [0, 0, 0])
            row[0] += 1
            row[1] += value.offset
            row[2] += max(0, end - value.offset)
        for topic, (count, committed, lag) in sums.items():
            yield TopicLag(group, topic, count, committed, lag)


def select(lags: Iterable[TopicLag], max_series: int) -> tuple[list[TopicLag], int]:
    """The ``max_series`` pairs with the largest lag (ties by name), and how many were left out."""
    ordered = sorted(lags, key=lambda t: (-t.lag, t.group, t.topic))
    return ordered[:max_series], max(0, len(ordered) - max_series)


class LagCollector:
    """``kcoord_group_topic_lag`` and ``kcoord_group_topic_offset_sum``, bounded."""

    def __init__(self, offsets: CommittedOffsets, partitions: Partitions, max_series: int) -> None:
        self.offsets = offsets
        self.partitions = partitions
        self.max_series = max_series

    def __call__(self) -> list[Family]:
        if self.max_series <= 0:
            return []
        kept, omitted = select(topic_lags(self.offsets, self.partitions), self.max_series)
        lag = gauge("kcoord_group_topic_lag",
                    "Sum over the topic's partitions of log end offset minus the group's committed offset.")
        committed = gauge("kcoord_group_topic_offset_sum",
                          "Sum of the group's committed offsets over the topic's partitions.")
        for row in sorted(kept, key=lambda t: (t.group, t.topic)):
            lag.add(row.lag, group=row.group, topic=row.topic)
            committed.add(row.committed_sum, group=row.group, topic=row.topic)
        return [
            lag, committed,
            gauge("kcoord_group_topic_lag_series_omitted",
                  "(group, topic) pairs left out of the lag families by metrics.group.lag.max.series.",
                  omitted),
        ]
