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
itself); the composition root lists them, and ``render`` writes what they return in the
Prometheus text exposition format 0.0.4. This module knows no service. Both are sans-IO;
``broker.metrics_http`` is the HTTP shell around them.
"""

from __future__ import annotations

import functools
import math
import re
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

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


# --- exposition ------------------------------------------------------------------------

Labels = tuple[tuple[str, str], ...]


@dataclass(slots=True)
class Family:
    """One metric family: its HELP and TYPE lines and its samples."""

    name: str
    kind: str
    help: str
    samples: list[tuple[str, Labels, float]] = field(default_factory=list)  # suffix, labels, value

    def __post_init__(self) -> None:
        if not _METRIC_NAME.match(self.name):
            raise ValueError(f"invalid metric name {self.name!r}")
        if self.kind not in _KINDS:
            raise ValueError(f"unknown metric type {self.kind!r}")

    def add(self, value: float, **labels: Any) -> Family:
        self.samples.append(("", _labels(labels), value))
        return self

    def add_histogram(self, histogram: Histogram, **labels: Any) -> Family:
        if self.kind != "histogram":
            raise ValueError(f"{self.name} is a {self.kind}, not a histogram")
        base = _labels(labels)
        for bound, count in histogram.cumulative():
            self.samples.append(("_bucket", (*base, ("le", format_value(bound))), count))
        self.samples.append(("_sum", base, histogram.sum))
        self.samples.append(("_count", base, histogram.count))
        return self


def _labels(labels: dict[str, Any]) -> Labels:
    for name in labels:
        if not _LABEL_NAME.match(name) or name == "le" or name.startswith("__"):
            raise ValueError(f"invalid label name {name!r}")
    return tuple((name, str(value)) for name, value in labels.items())


def format_value(value: float) -> str:
    """A sample value as Prometheus writes it: integers bare, ``+Inf``, ``-Inf``, ``NaN``."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return f"{value:.1f}"
    return repr(value)


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def render(families: Iterable[Family]) -> str:
    """The text exposition format 0.0.4: HELP, TYPE, then the samples, for every family."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for suffix, labels, value in family.samples:
            if labels:
                inner = ",".join(f'{name}="{escape_label_value(text)}"' for name, text in labels)
                lines.append(f"{family.name}{suffix}{{{inner}}} {format_value(value)}")
            else:
                lines.append(f"{family.name}{suffix} {format_value(value)}")
    lines.append("")
    return "\n".join(lines)


# --- helpers for the services' collectors ------------------------------------------------


class Collector(Protocol):
    """A service's metrics: read from its live state when /metrics is scraped."""

    def __call__(self) -> list[Family]: ...


def collect(collectors: Iterable[Collector]) -> list[Family]:
    families: list[Family] = []
    for collector in collectors:
        families.extend(collector())
    return families


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
