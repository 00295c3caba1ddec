"""Lag per group and topic for /metrics, and the bound on its series."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import generate_latest

from broker.lag import LagCollector, TopicLag, select, topic_lags
from broker.metrics import registry
from protocol.consumer_offsets import OffsetValue
from tests.support.prometheus import parse


class Offsets:
    def __init__(self, committed: dict[str, dict[tuple[str, int], int]]) -> None:
        self.committed = committed

    def group_ids(self) -> list[str]:
        return list(self.committed)

    def items_of(self, group: str) -> Iterator[tuple[tuple[str, int], OffsetValue]]:
        for tp, offset in self.committed[group].items():
            yield tp, OffsetValue(offset, -1, "", 0, -1)


@dataclass
class Log:
    next_offset: int


class Catalog:
    def __init__(self, ends: dict[tuple[str, int], int]) -> None:
        self.ends = ends

    def partition(self, name: str, index: int) -> Log | None:
        end = self.ends.get((name, index))
        return None if end is None else Log(end)


ENDS = {("orders", 0): 100, ("orders", 1): 50, ("audit", 0): 7}


def test_lag_is_summed_per_group_and_topic_and_never_negative() -> None:
    offsets = Offsets({
        "billing": {("orders", 0): 90, ("orders", 1): 50, ("audit", 0): 9},  # audit: ahead of the log
        "gone": {("deleted-topic", 0): 5, ("orders", 7): 1},  # nothing that exists
    })
    assert sorted(topic_lags(offsets, Catalog(ENDS)), key=lambda t: t.topic) == [
        TopicLag("billing", "audit", 1, 9, 0),
        TopicLag("billing", "orders", 2, 140, 10),
    ]


def test_the_largest_lags_are_kept_and_the_rest_counted() -> None:
    lags = [TopicLag(f"g{i}", "t", 1, 0, lag) for i, lag in enumerate([5, 50, 0, 50, 7])]
    kept, omitted = select(lags, 3)
    assert [(t.group, t.lag) for t in kept] == [("g1", 50), ("g3", 50), ("g4", 7)]
    assert omitted == 2
    assert select(lags, 10) == (sorted(lags, key=lambda t: (-t.lag, t.group)), 0)


def test_the_collector_exposes_bounded_families() -> None:
    offsets = Offsets({"a": {("orders", 0): 10}, "b": {("orders", 0): 99, ("orders", 1): 0}, "c": {("audit", 0): 7}})
    text = generate_latest(registry(LagCollector(offsets, Catalog(ENDS), 2), process=False)).decode()
    exposition = parse(text)
    assert exposition.series("kcoord_group_topic_lag") == {
        (("group", "a"), ("topic", "orders")): 90,
        (("group", "b"), ("topic", "orders")): 51,
    }
    assert exposition.get("kcoord_group_topic_offset_sum", group="b", topic="orders") == 99
    assert exposition.get("kcoord_group_topic_lag_series_omitted") == 1


def test_zero_series_turns_the_families_off() -> None:
    assert LagCollector(Offsets({"a": {("orders", 0): 1}}), Catalog(ENDS), 0)() == []
