"""The cluster rows of ``make bench``: aggregate throughput of 1, 2 and 3 nodes beside Tansu,
and the time from a partition move to its first served request.

Every node is a real ``kcoord serve --cluster`` process on one real etcd, all on this
machine. The load generator sends each group's commits straight to its coordinator and
each partition's produces straight to its leader (what a client does after
FindCoordinator and Metadata), so the figure is what the nodes serve together.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import trio

from bench import loadgen
from bench.brokers import REPO, Broker, _drain, _wait_listening, free_port, start_tansu
from cluster.etcd import Compare, EtcdClient, Put
from cluster.local import EtcdMissing, EtcdServer, etcd_binary
from cluster.model import COORDINATOR_TOPIC, ClusterImage, Keys
from protocol.api_keys import ApiKey
from protocol.codec import decode_response
from protocol.consumer_offsets import partition_for

OFFSETS_PARTITIONS = 12
SETTINGS: dict[str, object] = {
    "group.initial.rebalance.delay.ms": 0, "log.flush.policy": "durable",
    "offsets.topic.num.partitions": OFFSETS_PARTITIONS, "cluster.rebalance.delay.ms": 500,
    "cluster.rebalance.max.moves": 8,
    # One replica per partition: the rows compare node counts and time moves, which reassign
    # single-replica partitions (bench/replication_bench.py has the replicated figures).
    "offsets.topic.replication.factor": 1,
}
COMMIT_SHAPE = "8 conn per node, 1 part/req, depth 8"
PRODUCE_SHAPE = "8 conn per node, 100 x 1024 B records/batch, acks=-1, depth 4"


class LocalCluster:
    """etcd and ``nodes`` kcoord nodes, started together, each node a ``Broker`` for CPU readings."""

    def __init__(self, nodes: int) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="kcoord-cluster-bench-"))
        self.etcd = EtcdServer(self.workdir / "etcd").start()
        self.nodes: dict[int, Broker] = {}
        for node in range(1, nodes + 1):
            self.start_node(node)

    def start_node(self, node: int) -> Broker:
        port = free_port()
        args = [sys.executable, "-m", "kcoord", "serve", "--listen", f"127.0.0.1:{port}", "--node-id", str(node),
                "--cluster", self.etcd.endpoint, "--data-dir", str(self.workdir / f"node-{node}"),
                "--log-level", "WARNING"]
        for key, value in SETTINGS.items():
            args += ["--set", f"{key}={value}"]
        proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        broker = Broker(f"node-{node}", port, proc, self.workdir / f"node-{node}")
        threading.Thread(target=_drain, args=(proc, broker.lines), daemon=True).start()
        _wait_listening(port, proc)
        self.nodes[node] = broker
        return broker

    def image(self) -> ClusterImage:
        async def read() -> ClusterImage:
            client = EtcdClient([self.etcd.endpoint])
            try:
                image = ClusterImage(Keys("kcoord"))
                snapshot = await client.get_prefix(image.keys.prefix)
                image.load(snapshot.revision, [(kv.key, kv.value, kv.mod_revision, kv.lease) for kv in snapshot.kvs])
                return image
            finally:
                await client.aclose()
        return trio.run(read)

    def settled(self) -> bool:
        image = self.image()
        if COORDINATOR_TOPIC not in image.topics or set(image.nodes) != set(self.nodes):
            return False
        counts: dict[int, int] = dict.fromkeys(self.nodes, 0)
        for tp in image.partitions():
            assignment = image.assignments.get(tp)
            leader = image.leader_of(tp)
            if assignment is None or assignment.moving or leader is None:
                return False
            counts[leader.leader] += 1
        return max(counts.values()) - min(counts.values()) <= 1

    def wait_settled(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.settled():
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not settle")
            time.sleep(0.1)

    def leader_address(self, topic: str, partition: int) -> tuple[str, int]:
        leader = self.image().leader_of((topic, partition))
        if leader is None:
            raise RuntimeError(f"{topic}-{partition} has no leader")
        return self.nodes[leader.leader].address

    def cpu_seconds(self) -> float:
        return sum(node.cpu_seconds() for node in self.nodes.values())

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()
        self.etcd.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _groups_spread(cluster: LocalCluster, count: int) -> list[tuple[str, tuple[str, int]]]:
    """``count`` group names dealt evenly over the coordinators, each with its coordinator's address."""
    image = cluster.image()
    by_node: dict[int, list[str]] = {n: [] for n in cluster.nodes}
    i = 0
    while sum(len(v) for v in by_node.values()) < count:
        name = f"bench-{i}"
        i += 1
        leader = image.leader_of((COORDINATOR_TOPIC, partition_for(name, OFFSETS_PARTITIONS)))
        if leader is not None and len(by_node[leader.leader]) < (count + len(by_node) - 1) // len(by_node):
            by_node[leader.leader].append(name)
    return [(name, cluster.nodes[node].address) for node, names in by_node.items() for name in names][:count]


#: Where the first error code sits in the answers (OffsetCommit v7 for topic "bench", Produce v8
#: for "bench-data"): a request sent to the wrong node would be counted as an error.
COMMIT_ERROR = loadgen.error_code_at(4 + 4 + 4 + 2 + len("bench") + 4 + 4)
PRODUCE_ERROR = loadgen.error_code_at(4 + 4 + 2 + len("bench-data") + 4 + 4)


#: (address, request factory): one connection's load
Jobs = list[tuple[tuple[str, int], Callable[[int], bytes]]]


async def _spread_load(jobs: Jobs, seconds: float,
                       depth: int, error_check: Callable[[bytes], bool] | None = None) -> loadgen.Result:
    total = loadgen.Result()

    async def one(address: tuple[str, int], factory: Callable[[int], bytes]) -> None:
        total.merge(await loadgen.pipelined(address, factory, seconds, depth, error_check))

    begin = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for address, factory in jobs:
            nursery.start_soon(one, address, factory)
    total.seconds = time.perf_counter() - begin
    return total


def _measure(cpu: Callable[[], float], run: Callable[[], loadgen.Result]) -> tuple[float, float]:
    before = cpu()
    result = run()
    used = cpu() - before
    if result.errors:
        raise RuntimeError(f"{result.errors} of {result.requests} requests were answered with an error")
    return result.requests / result.seconds, used / max(result.requests, 1) * 1000


def _throughput(cluster: LocalCluster, seconds: float) -> tuple[tuple[float, float], tuple[float, float]]:
    first = cluster.nodes[1].address
    trio.run(loadgen.create_topic, first, "bench", 1)
    trio.run(loadgen.create_topic, first, "bench-data", 6)
    cluster.wait_settled()
    connections = 8 * len(cluster.nodes)  # a cluster grows with its clients: the same load on each node
    commits: Jobs = [(address, loadgen.commit_factory(group, "bench", 1))
                     for group, address in _groups_spread(cluster, connections)]
    commit = _measure(cluster.cpu_seconds, lambda: trio.run(_spread_load, commits, seconds, 8, COMMIT_ERROR))
    produces: Jobs = [
        (cluster.leader_address("bench-data", p % 6), loadgen.produce_factory("bench-data", p % 6, 100, 1024))
        for p in range(connections)]
    produce_rate, produce_cpu = _measure(cluster.cpu_seconds,
                                         lambda: trio.run(_spread_load, produces, seconds, 4, PRODUCE_ERROR))
    return commit, (produce_rate * 100, produce_cpu)


def _tansu_throughput(seconds: float) -> tuple[tuple[float, float], tuple[float, float]]:
    broker = start_tansu()
    try:
        trio.run(loadgen.create_topic, broker.address, "bench", 1)
        trio.run(loadgen.create_topic, broker.address, "bench-data", 6)
        commits: Jobs = [(broker.address, loadgen.commit_factory(f"bench-{i}", "bench", 1)) for i in range(8)]
        commit = _measure(broker.cpu_seconds, lambda: trio.run(_spread_load, commits, seconds, 8, COMMIT_ERROR))
        produces: Jobs = [
            (broker.address, loadgen.produce_factory("bench-data", p % 6, 100, 1024)) for p in range(8)]
        rate, cpu = _measure(broker.cpu_seconds, lambda: trio.run(_spread_load, produces, seconds, 4, PRODUCE_ERROR))
        return commit, (rate * 100, cpu)
    finally:
        broker.stop()


async def _reassign(endpoint: str, tp: tuple[str, int], target: int) -> float:
    """Write the move (as ``kcoord cluster reassign`` does); the moment it was written."""
    from cluster.assignment import reassign

    client = EtcdClient([endpoint])
    try:
        image = ClusterImage(Keys("kcoord"))
        snapshot = await client.get_prefix(image.keys.prefix)
        image.load(snapshot.revision, [(kv.key, kv.value, kv.mod_revision, kv.lease) for kv in snapshot.kvs])
        assignment, problem = reassign(image, tp, [target])
        if assignment is None:
            raise RuntimeError(problem)
        key = image.keys.assignment(*tp)
        result = await client.txn([Compare(key, "MOD", image.revision_of(key))], [Put(key, assignment.encode())])
        if not result.succeeded:
            raise RuntimeError("the partition changed")
        return time.perf_counter()
    finally:
        await client.aclose()


async def _first_served(address: tuple[str, int], api_key: int, version: int, factory: Callable[[int], bytes],
                        since: float, limit: float = 60) -> float:
    """Seconds from ``since`` until ``address`` answers one request of ``factory`` without an error."""
    conn = await loadgen.Connection.open(address)
    try:
        correlation = 0
        while time.perf_counter() - since < limit:
            correlation += 1
            await conn.stream.send_all(factory(correlation))
            _, body = decode_response(api_key, version, await loadgen.read_frame(conn.stream, conn.buffer))
            topics = body.topics if api_key == ApiKey.OFFSET_COMMIT else body.responses
            parts = topics[0].partitions if api_key == ApiKey.OFFSET_COMMIT else topics[0].partition_responses
            if parts[0].error_code == 0:
                return time.perf_counter() - since
            await trio.sleep(0.002)
    finally:
        await conn.aclose()
    raise RuntimeError("the moved partition was not served in time")


def _move_times(cluster: LocalCluster, rounds: int) -> tuple[list[float], list[float], int]:
    """Seconds from a move's write to the first request the new leader serves: a topic
    partition holding some data (Produce), and a coordinator partition with a group (OffsetCommit)."""
    first = cluster.nodes[1].address
    trio.run(loadgen.create_topic, first, "bench-move", 1)
    cluster.wait_settled()
    fill = loadgen.produce_factory("bench-move", 0, 100, 1024)
    fills: Jobs = [(cluster.leader_address("bench-move", 0), fill)]
    trio.run(_spread_load, fills, 1.0, 4)
    data_times: list[float] = []
    group_times: list[float] = []
    group = "bench-move-group"
    group_tp = (COORDINATOR_TOPIC, partition_for(group, OFFSETS_PARTITIONS))
    commit = loadgen.commit_factory(group, "bench-move", 1)
    produce = loadgen.produce_factory("bench-move", 0, 1, 100)
    seeds: Jobs = [(cluster.leader_address(*group_tp), commit)]
    trio.run(_spread_load, seeds, 0.5, 8)
    size = 0
    for _ in range(rounds):
        moves = ((("bench-move", 0), ApiKey.PRODUCE, 8, produce, data_times),
                 (group_tp, ApiKey.OFFSET_COMMIT, 7, commit, group_times))
        for tp, api_key, version, factory, times in moves:
            image = cluster.image()
            leader = image.leader_of(tp)
            assert leader is not None
            target = next(n for n in cluster.nodes if n != leader.leader)
            # An empty coordinator partition goes the other way at the same moment, so the loads
            # stay even and the controller has nothing to move back.
            partner = next(other for other, assignment in sorted(image.assignments.items())
                           if other[0] == COORDINATOR_TOPIC and other != group_tp
                           and assignment.replicas == (target,) and image.leader_of(other) is not None)
            since = trio.run(_reassign, cluster.etcd.endpoint, tp, target)
            trio.run(_reassign, cluster.etcd.endpoint, partner, leader.leader)
            times.append(trio.run(_first_served, cluster.nodes[target].address, api_key, version, factory, since))
            cluster.wait_settled()
    for node in cluster.nodes.values():
        size = max(size, sum(f.stat().st_size for f in (node.workdir / "bench-move-0").glob("*.log"))
                   if (node.workdir / "bench-move-0").exists() else 0)
    return data_times, group_times, size


def _median(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def run(seconds: float, with_tansu: bool, rounds: int = 2) -> list[str]:
    try:
        etcd_binary()
    except EtcdMissing as exc:
        return ["## A cluster", "", f"Not measured: {exc}."]
    load_before = os.getloadavg()[1]
    samples: dict[str, dict[str, list[tuple[float, float]]]] = {}
    data_times: list[float] = []
    group_times: list[float] = []
    size = 0
    for round_no in range(rounds):
        for nodes in ((1, 2, 3) if round_no % 2 == 0 else (3, 2, 1)):
            print(f"cluster: round {round_no + 1}/{rounds}, {nodes} nodes", file=sys.stderr)
            cluster = LocalCluster(nodes)
            try:
                cluster.wait_settled()
                commit, produce = _throughput(cluster, seconds)
                row = samples.setdefault(f"{nodes} node{'s' if nodes > 1 else ''}", {"commit": [], "produce": []})
                row["commit"].append(commit)
                row["produce"].append(produce)
                if nodes == 3 and not data_times:
                    data_times, group_times, size = _move_times(cluster, 3)
            finally:
                cluster.stop()
        if with_tansu:
            print(f"cluster: round {round_no + 1}/{rounds}, tansu", file=sys.stderr)
            commit, produce = _tansu_throughput(seconds)
            row = samples.setdefault("Tansu (1 broker)", {"commit": [], "produce": []})
            row["commit"].append(commit)
            row["produce"].append(produce)
    rows = {name: {what: _median(values) for what, values in row.items()} for name, row in samples.items()}
    load = (load_before + os.getloadavg()[1]) / 2
    one = rows["1 node"]["commit"][0]
    lines = [
        "## A cluster",
        "",
        "`bench/cluster_bench.py`: one real etcd and 1, 2 or 3 `kcoord serve --cluster` nodes on this",
        "machine, the load generator sending each group's commits to its coordinator and each",
        "partition's batches to its leader. Eight OffsetCommit connections per node (one group each,",
        "the groups dealt evenly over the coordinators) and eight Produce connections per node over",
        "six partitions (two per node with 3 nodes): the load grows with the cluster, as its clients",
        "would. Tansu gets the single node's load. Each figure is the median of",
        f"{rounds} rounds, the order of the node counts alternating between rounds; CPU s/1k is",
        "summed over the nodes. Nodes, etcd and the load",
        f"generator share this machine's {os.cpu_count()} cores, and so did other work: the 5-minute load",
        f"average was about {load:.1f} during this run.",
        *([] if load <= (os.cpu_count() or 1) else [
            "With more runnable work than cores, every process also competes with the other work, so",
            "each added node wins the cluster a larger share of the machine: the ratios are flattered,",
            "and the absolute figures are far below a quiet machine's (the single-node table above)."]),
        "",
        f"| nodes | OffsetCommit req/s ({COMMIT_SHAPE}) | x one node | CPU s/1k | "
        f"Produce records/s ({PRODUCE_SHAPE}) | CPU s/1k (per 1k requests) |",
        "|---|---|---|---|---|---|",
    ]
    for name, figures in rows.items():
        commit_rate, commit_cpu = figures["commit"]
        produce_rate, produce_cpu = figures["produce"]
        lines.append(f"| {name} | {commit_rate:,.0f} | {commit_rate / one:.2f} | {commit_cpu:.2f} | "
                     f"{produce_rate:,.0f} | {produce_cpu:.2f} |")
    lines += [
        "",
        "Time from a move's write to etcd (as `kcoord cluster reassign` writes it) to the first request",
        "the new leader serves, median of 3 moves between the 3 nodes: the new node copies the log",
        "with Fetch as a replica, the old leader freezes it and gives it up, the new one claims it.",
        "Each move is paired with an empty `__consumer_offsets` partition moving the other way, so the",
        "loads stay even and the controller moves nothing back.",
        "",
        "| partition | median | max |",
        "|---|---|---|",
        f"| a topic partition holding {size / 1e6:.1f} MB, to the first Produce | "
        f"{statistics.median(data_times) * 1000:.0f} ms | {max(data_times) * 1000:.0f} ms |",
        f"| a `__consumer_offsets` partition with a group, to the first OffsetCommit | "
        f"{statistics.median(group_times) * 1000:.0f} ms | {max(group_times) * 1000:.0f} ms |",
    ]
    return lines


SECTION = "## A cluster"


def splice(report: Path, lines: list[str]) -> None:
    """Put the cluster section into an existing docs/benchmarks.md, in place of the one there
    (before "## Machine and versions" when there is none)."""
    text = report.read_text().splitlines()
    section = list(lines)
    if SECTION in text:
        start = text.index(SECTION)
        end = next((i for i in range(start + 1, len(text)) if text[i].startswith("## ")), len(text))
        text[start:end] = [*section, ""]
    else:
        at = text.index("## Machine and versions") if "## Machine and versions" in text else len(text)
        text[at:at] = [*section, ""]
    report.write_text("\n".join(text).rstrip() + "\n")


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.cluster_bench``: only the cluster rows, into docs/benchmarks.md's section."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="load duration per shape")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-tansu", action="store_true")
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    from bench.brokers import tansu_binary

    lines = run(args.seconds, not args.no_tansu and tansu_binary() is not None, args.rounds)
    splice(args.output, lines)
    print(f"wrote the cluster section of {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
