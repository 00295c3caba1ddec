"""Prometheus metrics: cheap counters on the hot path, everything else read at scrape time.

Three kinds of number feed a scrape:

- counters kept by the services themselves as plain ``int`` attributes (``flushes``,
  ``records_appended``, ...), incremented where the event happens, no locks;
- ``Histogram`` objects, observed where the event happens (a bisect and three adds);
- gauges about state (groups by state, members, stored offsets, log size, topics), which
  are computed from the live objects when ``/metrics`` is read, so no request pays for them.

Per-request counters are resolved once per API: ``ApiStats`` holds a list indexed by
version, so counting a request is one list-item increment with no label tuple built.

Each service exposes its own collector (``metrics()``, returning ``Family`` objects about
itself); the composition root lists them. A ``Family`` is a ``prometheus_client`` metric
family, so ``registry`` hands them to prometheus-client's own collector registry, which
writes the exposition formats (with the standard ``process_*`` metrics beside them).
This module knows no service and does no I/O; ``broker.http`` serves the registry.
"""

from __future__ import annotations

import functools
import math
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, GCCollector, ProcessCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector as PrometheusCollector

#: Request latency: from 50 µs (a heartbeat) to 10 s (a long-polled Fetch, a JoinGroup
#: parked for a rebalance).
REQUEST_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                   0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: One fsync round of the coordinator log.
FSYNC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                 0.5, 1.0, 2.5)
#: One pass of the log cleaner over the coordinator log.
CLEAN_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)

#: Why a request was refused (the label values of ``kcoord_request_errors_total``).
ERROR_REASONS = ("frame", "malformed", "unsupported", "internal")

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_KINDS = ("counter", "gauge", "histogram")


class Histogram:
    """Counts per bucket (not cumulative: ``observe`` touches one), a sum and a count."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        ordered = tuple(float(b) for b in bounds)
        if list(ordered) != sorted(set(ordered)) or any(math.isinf(b) or math.isnan(b) for b in ordered):
            raise ValueError(f"histogram bounds must be finite and strictly increasing: {bounds}")
        self.bounds = ordered
        self.counts = [0] * (len(ordered) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le = "<=").
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations <= bound)`` for every bucket, ending with +Inf."""
        out = []
        running = 0
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


class ApiStats:
    """One API's request counter per version and latency histogram, made at registration."""

    __slots__ = ("api_key", "latency", "name", "requests")

    def __init__(self, api_key: int, name: str, max_version: int) -> None:
        self.api_key = api_key
        self.name = name
        self.requests = [0] * (max_version + 1)
        self.latency = Histogram(REQUEST_BUCKETS)


# --- families ----------------------------------------------------------------------------


class Family(Metric):
    """One metric family, as prometheus-client models it, built the way the services count.

    A counter is named with its ``_total`` (``kcoord_requests_total``), as the exposition
    shows it; prometheus-client keeps the family name without it.
    """

    def __init__(self, name: str, kind: str, help: str) -> None:
        if kind not in _KINDS:
            raise ValueError(f"unknown metric type {kind!r}")
        if not _METRIC_NAME.match(name):  # the classic names every scraper reads
            raise ValueError(f"invalid metric name {name!r}")
        self.sample_name = name
        if kind == "counter":
            name = name.removesuffix("_total")
        super().__init__(name, help, kind)

    @property
    def help(self) -> str:
        return str(self.documentation)

    @property
    def kind(self) -> str:
        return str(self.type)

    def add(self, value: float, **labels: Any) -> Family:
        self.add_sample(self.sample_name, _labels(labels), value)
        return self

    def add_histogram(self, histogram: Histogram, **labels: Any) -> Family:
        if self.type != "histogram":
            raise ValueError(f"{self.name} is a {self.type}, not a histogram")
        base = _labels(labels)
        for bound, count in histogram.cumulative():
            self.add_sample(self.name + "_bucket", {**base, "le": _bound(bound)}, count)
        self.add_sample(self.name + "_sum", base, histogram.sum)
        self.add_sample(self.name + "_count", base, histogram.count)
        return self


def _bound(bound: float) -> str:
    """A bucket's ``le`` label: ``+Inf`` or the shortest repr of the float."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def _labels(labels: dict[str, Any]) -> dict[str, str]:
    for name in labels:
        if not _LABEL_NAME.match(name) or name == "le" or name.startswith("__"):
            raise ValueError(f"invalid label name {name!r}")
    return {name: str(value) for name, value in labels.items()}


# --- collectors and the registry -----------------------------------------------------------


class Collector(Protocol):
    """A service's metrics: read from its live state when /metrics is scraped."""

    def __call__(self) -> list[Family]: ...


def collect(collectors: Iterable[Collector]) -> list[Family]:
    families: list[Family] = []
    for collector in collectors:
        families.extend(collector())
    return families


class _Adapter(PrometheusCollector):
    """prometheus-client's collector interface over kcoord's collectors."""

    def __init__(self, families: Callable[[], Iterable[Family]]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return list(self.families())


def registry(families: Callable[[], Iterable[Family]], *, process: bool = True) -> CollectorRegistry:
    """A prometheus-client registry of kcoord's families (read at every scrape) and, with
    ``process``, the standard ``process_*`` metrics (CPU, memory, open files) and
    ``python_gc_*`` metrics (the cyclic collector's runs) of this process."""
    found = CollectorRegistry(auto_describe=False)
    found.register(_Adapter(families))
    if process:
        ProcessCollector(registry=found)
        GCCollector(registry=found)
    return found


def counter(name: str, help: str, value: float | None = None) -> Family:
    family = Family(name, "counter", help)
    return family if value is None else family.add(value)


def gauge(name: str, help: str, value: float | None = None) -> Family:
    family = Family(name, "gauge", help)
    return family if value is None else family.add(value)


@functools.cache
def kcoord_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kcoord")
    except PackageNotFoundError:
        return "0+unknown"
