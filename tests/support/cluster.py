"""A real kcoord cluster for tests: one etcd and ``kcoord serve --cluster`` nodes on loopback."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import trio

from cluster.assignment import load_of
from cluster.cli import describe
from cluster.etcd import EtcdClient
from cluster.local import EtcdServer
from cluster.model import COORDINATOR_TOPIC, ClusterImage, Keys
from protocol.consumer_offsets import partition_for
from tests.support.broker_process import BrokerProcess

T = TypeVar("T")

#: Settings that make a test cluster react in test time: a short lease, quick rebalances.
FAST: dict[str, object] = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "cluster.rebalance.delay.ms": 500,
    "cluster.rebalance.max.moves": 8,
    "offsets.topic.num.partitions": 12,
    # Placement and move tests reason about single-replica partitions; replication tests ask for 3.
    "offsets.topic.replication.factor": 1,
    "group.initial.rebalance.delay.ms": 0,
}


def wait_for(condition: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``condition`` until it returns something truthy, within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(interval)


class Cluster:
    """Nodes of one cluster, started and stopped by the test."""

    def __init__(self, tmp_path: Path, etcd: EtcdServer, sets: dict[str, object] | None = None) -> None:
        self.tmp_path = tmp_path
        self.etcd = etcd
        self.sets = {**FAST, **(sets or {})}
        self.nodes: dict[int, BrokerProcess] = {}

    def start(self, node_id: int, **sets: object) -> BrokerProcess:
        proc = BrokerProcess(self.tmp_path / f"node-{node_id}", {**self.sets, **sets}, command="kcoord",
                             extra_args=["--node-id", str(node_id), "--cluster", self.etcd.endpoint,
                                         "--cluster-name", "test"])
        self.nodes[node_id] = proc.start(timeout=60)
        return proc

    @property
    def bootstrap(self) -> str:
        return next(iter(self.nodes.values())).bootstrap

    def image(self) -> ClusterImage:
        async def read() -> ClusterImage:
            client = EtcdClient([self.etcd.endpoint], timeout=2)
            try:
                image = ClusterImage(Keys("test"))
                snapshot = await client.get_prefix(image.keys.prefix)
                image.load(snapshot.revision, [(kv.key, kv.value, kv.mod_revision, kv.lease) for kv in snapshot.kvs])
                return image
            finally:
                await client.aclose()
        return trio.run(read)

    def status(self) -> dict[str, Any]:
        return describe(self.image())

    def leaders(self, topic: str) -> dict[int, int]:
        """partition -> leader (-1 when it has none)."""
        return {row["partition"]: row["leader"] for row in self.status()["partitions"] if row["topic"] == topic}

    def settled(self) -> bool:
        """Every partition placed, led by a live node, nothing moving, and the nodes balanced."""
        image = self.image()
        if COORDINATOR_TOPIC not in image.topics or set(image.nodes) != set(self.nodes):
            return False
        load = load_of(image)
        if max(load.values()) - min(load.values()) > 1:
            return False
        for tp in image.partitions():
            assignment = image.assignments.get(tp)
            if assignment is None or assignment.moving or image.leader_of(tp) is None:
                return False
        return True

    def wait_settled(self, timeout: float = 30) -> None:
        wait_for(self.settled, timeout, "every partition led and no move under way")

    def coordinator_of(self, group: str) -> int:
        partitions = int(self.sets["offsets.topic.num.partitions"])  # type: ignore[call-overload]
        return self.leaders(COORDINATOR_TOPIC).get(partition_for(group, partitions), -1)

    def group_on(self, node: int, prefix: str, avoid: set[str] = frozenset()) -> str:  # type: ignore[assignment]
        """A group name whose coordinator is ``node``."""
        for i in range(10_000):
            name = f"{prefix}-{i}"
            if name not in avoid and self.coordinator_of(name) == node:
                return name
        raise AssertionError(f"no group name coordinated by node {node}")

    def stop_all(self) -> None:
        for proc in self.nodes.values():
            if proc.proc is not None and proc.proc.poll() is None:
                proc.stop()
