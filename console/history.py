"""A group's commit history for the charts: every commit, its lag then, and the commit rate.

kcoord keeps the coordinator log (and, with ``log.history.retention.ms``, the segments the
cleaner rewrote), so the console can show what Kafka cannot: every offset a group
committed, when, and how far behind the log end it was at that moment. The rows come from
``pipeline.history.lag_rows``, the plain-Python reader of the data directory; the lag at a
commit is the high watermark of the partition at the commit's time minus the offset.

Reading is done in a worker thread and cached briefly, so a page that polls does not
re-read the log each time.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Most points per partition in a chart (the newest are kept).
MAX_POINTS = 2000
MINUTE_MS = 60_000
CACHE_SECONDS = 3.0


@dataclass
class Series:
    topic: str
    partition: int
    points: list[tuple[int, int, int | None]] = field(default_factory=list)  # time ms, offset, lag

    @property
    def label(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass
class History:
    series: list[Series]
    rate: list[tuple[int, int]]  # minute (ms), commits in it
    commits: int
    truncated: bool

    def chart_data(self) -> dict[str, Any]:
        """What the page's charts draw (embedded in the page as JSON)."""
        return {
            "series": [{"label": s.label, "points": [list(p) for p in s.points]} for s in self.series],
            "rate": [list(r) for r in self.rate],
            "commits": self.commits,
            "truncated": self.truncated,
        }


def read_history(data_dir: Path, group: str) -> History:
    from pipeline.history import lag_rows

    by_partition: dict[tuple[str, int], Series] = {}
    per_minute: dict[int, int] = {}
    commits = 0
    for row in lag_rows(data_dir, group):
        key = (row["topic"], row["partition"])
        series = by_partition.get(key)
        if series is None:
            series = by_partition[key] = Series(*key)
        ts = int(row["commit_timestamp"])
        series.points.append((ts, int(row["offset"]), row["lag"]))
        minute = ts // MINUTE_MS * MINUTE_MS
        per_minute[minute] = per_minute.get(minute, 0) + 1
        commits += 1
    truncated = False
    for series in by_partition.values():
        series.points.sort()
        if len(series.points) > MAX_POINTS:
            series.points = series.points[-MAX_POINTS:]
            truncated = True
    return History([by_partition[k] for k in sorted(by_partition)], sorted(per_minute.items()), commits, truncated)


class HistoryCache:
    """``read_history`` results kept for ``CACHE_SECONDS`` per group (thread-safe)."""

    def __init__(self, data_dir: Path, seconds: float = CACHE_SECONDS) -> None:
        self.data_dir = data_dir
        self.seconds = seconds
        self._lock = threading.Lock()
        self._cached: dict[str, tuple[float, History]] = {}

    def get(self, group: str) -> History:
        now = time.monotonic()
        with self._lock:
            hit = self._cached.get(group)
            if hit is not None and now - hit[0] < self.seconds:
                return hit[1]
        history = read_history(self.data_dir, group)
        with self._lock:
            self._cached[group] = (now, history)
            if len(self._cached) > 256:
                oldest = min(self._cached, key=lambda g: self._cached[g][0])
                del self._cached[oldest]
        return history

    def forget(self, group: str) -> None:
        with self._lock:
            self._cached.pop(group, None)
