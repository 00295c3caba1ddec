"""The replication rows of ``make bench``: OffsetCommit and acks=-1 Produce throughput of three
nodes with replication factor 3 beside 1, and the failover time of a coordinator partition.

The clusters are ``bench.cluster_bench``'s (one real etcd, real ``kcoord serve --cluster``
nodes on this machine) with the load it sends: each group's commits to its coordinator,
each partition's batches to its leader. With replication factor 3 every commit and every
acks=-1 batch is answered only once both followers have fetched it (and fsynced it).

Failover: a group commits to its coordinator; the coordinator's node is killed with
SIGKILL; the time is taken until the first OffsetCommit the new leader answers without an
error. The lease (``broker.session.timeout.ms``) is part of it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import trio

from bench import cluster_bench, loadgen
from bench.brokers import REPO
from cluster.local import EtcdMissing, etcd_binary
from cluster.model import COORDINATOR_TOPIC
from protocol.api_keys import ApiKey
from protocol.consumer_offsets import partition_for

SECTION = "## Replication"
LEASE_MS = 3000


def _all_in_sync(cluster: cluster_bench.LocalCluster, factor: int) -> bool:
    image = cluster.image()
    if COORDINATOR_TOPIC not in image.topics:
        return False
    return all(image.leader_of(tp) is not None and tp in image.assignments
               and len(image.isr_of(tp)) >= min(factor, len(image.assignments[tp].replicas))
               for tp in image.partitions())


def _wait(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {timeout}s: {what}")
        time.sleep(0.1)


async def _create(address: tuple[str, int], name: str, partitions: int, factor: int) -> None:
    conn = await loadgen.Connection.open(address)
    try:
        await conn.request(19, 4, {"topics": [{"name": name, "num_partitions": partitions,
                                               "replication_factor": factor, "assignments": [], "configs": []}],
                                   "timeout_ms": 10000, "validate_only": False})
    finally:
        await conn.aclose()


def _cluster(factor: int) -> cluster_bench.LocalCluster:
    """Three nodes (and every node restarted later) with ``factor`` replicas per partition."""
    cluster_bench.SETTINGS.update({"offsets.topic.replication.factor": factor,
                                   "broker.session.timeout.ms": LEASE_MS, "broker.heartbeat.interval.ms": 500})
    cluster = cluster_bench.LocalCluster(3)
    _wait(lambda: _all_in_sync(cluster, factor), 60, "every partition in sync")
    trio.run(_create, cluster.nodes[1].address, "bench-data", 6, factor)
    _wait(lambda: _all_in_sync(cluster, factor), 60, "every partition in sync")
    cluster.wait_settled()
    return cluster


def _throughput(cluster: cluster_bench.LocalCluster, seconds: float
                ) -> tuple[tuple[float, float], tuple[float, float]]:
    """The cluster section's load: 8 commit connections per node (groups dealt over the
    coordinator partitions, each sent to its partition's leader) and 8 produce connections
    per node over bench-data's six partitions."""
    trio.run(loadgen.create_topic, cluster.nodes[1].address, "bench", 1)
    cluster.wait_settled()
    image = cluster.image()
    connections = 8 * len(cluster.nodes)
    commits: cluster_bench.Jobs = []
    for i in range(connections):
        group = f"bench-{i}"
        leader = image.leader_of((COORDINATOR_TOPIC, partition_for(group, cluster_bench.OFFSETS_PARTITIONS)))
        assert leader is not None
        commits.append((cluster.nodes[leader.leader].address, loadgen.commit_factory(group, "bench", 1)))
    commit = cluster_bench._measure(cluster.cpu_seconds, lambda: trio.run(
        cluster_bench._spread_load, commits, seconds, 8, cluster_bench.COMMIT_ERROR))
    produces: cluster_bench.Jobs = [
        (cluster.leader_address("bench-data", p % 6), loadgen.produce_factory("bench-data", p % 6, 100, 1024))
        for p in range(connections)]
    rate, cpu = cluster_bench._measure(cluster.cpu_seconds, lambda: trio.run(
        cluster_bench._spread_load, produces, seconds, 4, cluster_bench.PRODUCE_ERROR))
    return commit, (rate * 100, cpu)


def _failover_times(cluster: cluster_bench.LocalCluster, rounds: int) -> list[float]:
    """Kill the coordinator of a group, time the first commit the new leader answers; restart."""
    times: list[float] = []
    for round_no in range(rounds):
        group = f"failover-{round_no}"
        tp = (COORDINATOR_TOPIC, partition_for(group, cluster_bench.OFFSETS_PARTITIONS))
        leader = cluster.image().leader_of(tp)
        assert leader is not None
        factory = loadgen.commit_factory(group, "bench", 1)
        trio.run(cluster_bench._first_served, cluster.nodes[leader.leader].address, ApiKey.OFFSET_COMMIT, 7,
                 factory, time.perf_counter())
        victim = cluster.nodes[leader.leader]
        killed = time.perf_counter()
        victim.proc.kill()
        victim.proc.wait(10)

        def new_leader(tp: tuple[str, int] = tp, old: int = leader.leader) -> bool:
            found = cluster.image().leader_of(tp)
            return found is not None and found.leader != old

        _wait(new_leader, 60, "a new leader")
        found = cluster.image().leader_of(tp)
        assert found is not None
        times.append(trio.run(cluster_bench._first_served, cluster.nodes[found.leader].address,
                              ApiKey.OFFSET_COMMIT, 7, factory, killed))
        cluster.start_node(leader.leader)
        _wait(lambda: _all_in_sync(cluster, 3), 60, "the killed node back in every ISR")
    return times


def run(seconds: float, rounds: int = 1) -> list[str]:
    try:
        etcd_binary()
    except EtcdMissing as exc:
        return [SECTION, "", f"Not measured: {exc}."]
    rows: dict[int, tuple[tuple[float, float], tuple[float, float]]] = {}
    failovers: list[float] = []
    saved = dict(cluster_bench.SETTINGS)
    try:
        for factor in (1, 3):
            print(f"replication: factor {factor}", file=sys.stderr)
            cluster = _cluster(factor)
            try:
                rows[factor] = _throughput(cluster, seconds)
                if factor == 3:
                    failovers = _failover_times(cluster, max(3, rounds))
            finally:
                cluster.stop()
    finally:
        cluster_bench.SETTINGS.clear()
        cluster_bench.SETTINGS.update(saved)
    lines = [
        SECTION,
        "",
        "`bench/replication_bench.py`: three `kcoord serve --cluster` nodes on one etcd, on this machine,",
        "with the cluster section's load (8 OffsetCommit and 8 Produce connections per node). With",
        "replication factor 3, a commit or an acks=-1 batch is answered once both followers have fetched",
        "and fsynced it (docs/cluster.md#replication).",
        "",
        f"| replication factor | OffsetCommit req/s ({cluster_bench.COMMIT_SHAPE}) | CPU s/1k | "
        f"Produce records/s ({cluster_bench.PRODUCE_SHAPE}) | CPU s/1k |",
        "|---|---|---|---|---|",
    ]
    for factor, ((commit_rate, commit_cpu), (produce_rate, produce_cpu)) in rows.items():
        lines.append(f"| {factor} | {commit_rate:,.0f} | {commit_cpu:.2f} | {produce_rate:,.0f} | {produce_cpu:.2f} |")
    lines += [
        "",
        f"Failover of a `__consumer_offsets` partition (replication factor 3, lease {LEASE_MS} ms): from",
        "kill -9 of its leader to the first OffsetCommit the new leader answers without an error,",
        f"over {len(failovers)} kills.",
        "",
        "| median | max | goal (lease + 1 s) |",
        "|---|---|---|",
        f"| {statistics.median(failovers) * 1000:.0f} ms | {max(failovers) * 1000:.0f} ms | {LEASE_MS + 1000} ms |",
    ]
    return lines


def splice(report: Path, lines: list[str]) -> None:
    """Put this section into docs/benchmarks.md in place of the one there (before
    "## Machine and versions" when there is none)."""
    text = report.read_text().splitlines()
    if SECTION in text:
        start = text.index(SECTION)
        end = next((i for i in range(start + 1, len(text)) if text[i].startswith("## ")), len(text))
        text[start:end] = [*lines, ""]
    else:
        at = text.index("## Machine and versions") if "## Machine and versions" in text else len(text)
        text[at:at] = [*lines, ""]
    report.write_text("\n".join(text).rstrip() + "\n")


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.replication_bench``: only the replication rows, into docs/benchmarks.md."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="load duration per shape")
    parser.add_argument("--rounds", type=int, default=3, help="failover kills")
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    splice(args.output, run(args.seconds, args.rounds))
    print(f"wrote the replication section of {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
