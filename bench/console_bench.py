"""OffsetCommit throughput while the console and /metrics are polled.

The console runs inside the broker process and asks the broker over its own Kafka
listener, so it must not slow the Kafka clients down. One broker started as ``kcoord serve
--http-listen`` is measured three times with the same OffsetCommit load (8 connections, 1
partition per request, pipeline depth 8): with nobody on HTTP, with a poller that every
second scrapes /metrics and loads the overview, the groups list and a group page (what an
open browser tab and Prometheus do), and with a poller that loads them back to back as
fast as the console answers. The poller is its own process, so it takes no CPU from the
load generator's process; it shares the machine's cores with everything else, as a
browser would. The three are measured in turn, three times, and the medians reported.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import trio

from bench import loadgen

CONNECTIONS = 8
DEPTH = 8
GROUPS = 20
TOPIC = "bench-console"
PARTITIONS = 100
PAGES = ("/metrics", "/", "/groups", "/groups/console-bench-0")
SHAPE = f"{CONNECTIONS} conn, 1 part/req"
REPEATS = 3
POLLS = (
    ("nobody on HTTP", None),
    ("/metrics and 3 console pages loaded every second", 1.0),
    ("/metrics and 3 console pages loaded back to back", 0.0),
)


def _poll(base: str, interval: float, stop: Any, loads: Any, failures: Any) -> None:
    while not stop.is_set():
        for path in PAGES:
            try:
                with urllib.request.urlopen(base + path, timeout=30) as response:
                    response.read()
                with loads.get_lock():
                    loads.value += 1
            except OSError:
                with failures.get_lock():
                    failures.value += 1
        if interval:
            stop.wait(interval)


def _prepare(bootstrap: str) -> None:
    """Groups with offsets on every partition, so the pages have something to show."""
    from admin.client import AdminClient, CommittedOffset

    with AdminClient(bootstrap) as admin:
        for g in range(GROUPS):
            admin.commit_offsets(f"console-bench-{g}",
                                 {(TOPIC, p): CommittedOffset(0) for p in range(PARTITIONS)})


def _measure_once(address: tuple[str, int], base: str, seconds: float, interval: float | None,
                  measure: Callable[[Callable[[], loadgen.Result]], tuple[loadgen.Result, float]]
                  ) -> tuple[loadgen.Result, float, int]:
    context = multiprocessing.get_context("fork")
    specs: list[loadgen.FactorySpec] = [
        ("commit_factory", (f"console-bench-commits-{i}", TOPIC, 1)) for i in range(CONNECTIONS)]
    stop, loads, failures = context.Event(), context.Value("i", 0), context.Value("i", 0)
    poller = None
    if interval is not None:
        poller = context.Process(target=_poll, args=(base, interval, stop, loads, failures), daemon=True)
        poller.start()
        time.sleep(0.5)  # the first pages are being served when the load starts

    def load() -> loadgen.Result:
        return loadgen.run_processes(address, specs, seconds, DEPTH, 1)

    try:
        result, cpu = measure(load)
    finally:
        stop.set()
        if poller is not None:
            poller.join(60)
    if failures.value:
        raise RuntimeError(f"{failures.value} console page loads failed")
    return result, cpu, int(loads.value)


def run(address: tuple[str, int], base: str, seconds: float,
        measure: Callable[[Callable[[], loadgen.Result]], tuple[loadgen.Result, float]],
        repeats: int = REPEATS) -> list[tuple[str, float, float, float, int]]:
    """Per variant: ``(what polled, median commits/s, median p99 s, median broker CPU s per
    1k requests, pages loaded)``. The variants are measured in turn, ``repeats`` times, so a
    machine that gets busier or quieter meanwhile affects them alike."""
    trio.run(loadgen.create_topic, address, TOPIC, PARTITIONS)
    _prepare(f"{address[0]}:{address[1]}")
    runs: dict[str, list[tuple[loadgen.Result, float, int]]] = {what: [] for what, _ in POLLS}
    for _ in range(repeats):
        for what, interval in POLLS:
            runs[what].append(_measure_once(address, base, seconds, interval, measure))
    out = []
    for what, _ in POLLS:
        found = runs[what]
        out.append((what, statistics.median(r.requests / r.seconds for r, _, _ in found),
                    statistics.median(r.percentile(0.99) for r, _, _ in found),
                    statistics.median(cpu for _, cpu, _ in found), sum(n for _, _, n in found)))
    return out
