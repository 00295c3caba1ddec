"""Nodes taking their preferred leaderships while kafka-python clients run: the
local-process version of the cluster compose profile (tests/integration/test_cluster_topology.py),
with real etcd, much cheaper than containers.

Three nodes; a topic of six partitions and ``__consumer_offsets`` (50 partitions, as the
compose profile has), all with three replicas. An acks=all producer writes round-robin to
every partition, and three groups, one coordinated by each node, consume and commit after
every poll. Node 3 is killed; once the others lead everything it led, it is started again
on its data, rejoins the ISRs and leads its preferred partitions again
(``auto.leader.rebalance.enable``). After each step every partition must take records and
every group must commit again.

Leaderships are handed back to the preferred replica from the start too, as the nodes join
one after another: a partition whose leader wrote a record no other replica had yet
acknowledged, then handed it to a replica with an empty log, used to stop its high
watermark (and the groups it coordinates) until replica.lag.time.max.ms (pinned without
processes by tests/cluster/test_replica_fetch.py).

Each consumer learns its topic's partitions before its first poll (``learn_partitions``):
without that, a kafka-python 3.0.12 group leader could join before its metadata had the
topic, assign nothing, and strand its second join for good when a 200 ms poll ran out during
it. The broker completes that generation and later expires the silent member; the client
never applies the assignment, never heartbeats again and never rejoins. That is a client
bug, pinned by tests/integration/test_kafka_python_stranded_join.py and described in
docs/cluster.md (Known client issues). A stuck phase prints each stuck group's coordinator
state as the client holds it, beside the nodes' side.

Opt-in (``KCOORD_REJOIN_TEST=1``): three nodes and real etcd for 20 to 30 s, and up to
90 s a phase when something is stuck.
"""

from __future__ import annotations

import collections
import logging
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cluster.local import EtcdServer, free_port
from cluster.model import COORDINATOR_TOPIC
from protocol.consumer_offsets import partition_for
from tests.support.broker_process import BrokerProcess
from tests.support.clients import learn_partitions
from tests.support.cluster import Cluster, wait_for

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.environ.get("KCOORD_REJOIN_TEST") != "1", reason="opt-in: KCOORD_REJOIN_TEST=1")]

TOPIC, PARTITIONS = "orders", 6
OFFSETS_PARTITIONS = 50
SETS: dict[str, object] = {
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
    "default.replication.factor": 3,
}
STEP_TIMEOUT = 90.0
#: What a stuck phase prints of each node's /metrics.
REPLICATION_METRICS = ("kcoord_replica_lag_records{", "kcoord_under_", "kcoord_cluster_lease",
                       "kcoord_partitions_followed", "kcoord_isr_")


class ClientLog(logging.Handler):
    """The kafka-python clients' recent debug lines, and each group's own lines kept apart
    (the clients' IO threads do not carry the group thread's name, and the shared tail soon
    drops a group that went quiet)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: collections.deque[str] = collections.deque(maxlen=5000)
        self.groups: dict[str, collections.deque[str]] = {}

    def follow(self, group: str) -> None:
        self.groups[group] = collections.deque(maxlen=400)

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, str) and record.msg.startswith(("need_rejoin:", "coordinator.poll: timeout")):
            return  # once per poll: they would push everything else out
        message = record.getMessage()
        line = (f"{time.strftime('%H:%M:%S', time.localtime(record.created))}.{int(record.msecs):03d} "
                f"{record.threadName} {message[:300]}")
        self.lines.append(line)
        for group, lines in self.groups.items():
            if f"'{group}'" in message or f" {group} " in message or message.endswith(f" {group}"):
                lines.append(line)

    def about(self, group: Group) -> list[str]:
        """The group's own lines, then those of its thread."""
        own = list(self.groups.get(group.group, ()))
        return own[-80:] + [line for line in self.lines if f" {group.name} " in line][-40:]


class Producer(threading.Thread):
    """acks=all, one record at a time round-robin over the partitions."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.acked = dict.fromkeys(range(PARTITIONS), 0)
        self.last_error: dict[int, str] = {}
        self.stop_event = threading.Event()

    def run(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", retries=0,
                                 request_timeout_ms=5000, max_block_ms=5000, linger_ms=5)
        i = 0
        while not self.stop_event.is_set():
            partition = i % PARTITIONS
            i += 1
            try:
                producer.send(TOPIC, f"r{i}".encode(), partition=partition).get(10)
                self.acked[partition] += 1
            except Exception as exc:  # a leader moving: counted, and the loop goes on
                self.last_error[partition] = repr(exc)[:200]
                time.sleep(0.1)
        producer.close(5)


class Group(threading.Thread):
    """A consumer in ``group`` committing after every poll."""

    def __init__(self, bootstrap: str, group: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.group = group
        self.commits = 0
        self.last_error = ""
        self.assignment: list[int] = []
        self.consumer: Any = None
        self.stop_event = threading.Event()

    def coordinator_state(self) -> str:
        """The client's side of its membership (kafka-python internals, for a stuck phase's report)."""
        coordinator = getattr(self.consumer, "_coordinator", None)
        if coordinator is None:
            return "no consumer"
        join = coordinator._join_task
        return (f"state {coordinator.state}, {coordinator._generation}, need_rejoin {coordinator.need_rejoin()}, "
                f"join task {'none' if join is None else 'done' if join.is_done else 'in flight'}")

    def run(self) -> None:
        from kafka import KafkaConsumer

        consumer = self.consumer = KafkaConsumer(
            TOPIC, bootstrap_servers=self.bootstrap, group_id=self.group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=10000, heartbeat_interval_ms=1000,
            request_timeout_ms=15000)
        learn_partitions(consumer, [TOPIC])
        while not self.stop_event.is_set():
            try:
                consumer.poll(timeout_ms=200)
                self.assignment = sorted(tp.partition for tp in consumer.assignment())
                if not self.assignment:
                    continue
                consumer.commit()
                self.commits += 1
            except Exception as exc:
                self.last_error = repr(exc)[:200]
                time.sleep(0.1)
        consumer.close()


@dataclass
class Nodes:
    """The cluster, and each node's HTTP port (its /metrics, printed when a phase is stuck)."""

    cluster: Cluster
    http: dict[int, int] = field(default_factory=dict)

    def start(self, node: int) -> None:
        """``Cluster.start`` with the HTTP surface on a known port; again on the same ports."""
        old = self.cluster.nodes.get(node)
        self.http.setdefault(node, free_port())
        proc = BrokerProcess(self.cluster.tmp_path / f"node-{node}", self.cluster.sets, command="kcoord",
                             listen=f"127.0.0.1:{old.port}" if old is not None else "127.0.0.1:0",
                             extra_args=["--node-id", str(node), "--cluster", self.cluster.etcd.endpoint,
                                         "--cluster-name", "test", "--http-listen", f"127.0.0.1:{self.http[node]}"])
        self.cluster.nodes[node] = proc.start(timeout=60)


@pytest.fixture
def nodes(tmp_path: Path, etcd: EtcdServer) -> Iterator[Nodes]:
    running = Nodes(Cluster(tmp_path, etcd, SETS))
    yield running
    for proc in running.cluster.nodes.values():
        if proc.proc is not None and proc.proc.poll() is None:
            proc.kill()


def settled(cluster: Cluster, live: set[int]) -> bool:
    status = cluster.status()
    return ({n["id"] for n in status["nodes"]} == live and bool(status["partitions"])
            and all(row["leader"] in live and not row["adding"] for row in status["partitions"]))


def replication_metrics(port: int, offsets_partitions: set[int]) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError as exc:
        return f"/metrics: {exc!r}"

    def kept(line: str) -> bool:
        return line.startswith(REPLICATION_METRICS) and (
            COORDINATOR_TOPIC not in line or any(f'partition="{p}"' in line for p in offsets_partitions))

    return "\n".join(line for line in text.splitlines() if kept(line))


def stuck(nodes: Nodes, producer: Producer, groups: list[Group], acked: dict[int, int],
          commits: dict[str, int], client_log: ClientLog) -> str:
    """Which partitions and groups did not progress, what the cluster and the clients saw."""
    rows = {(r["topic"], r["partition"]): r for r in nodes.cluster.status()["partitions"]}
    lines = [f"{TOPIC}-{p}: {rows.get((TOPIC, p))}, last error {producer.last_error.get(p)}"
             for p in range(PARTITIONS) if producer.acked[p] <= acked[p]]
    offsets_partitions = set()
    for group in groups:
        if group.commits <= commits[group.group]:
            tp = (COORDINATOR_TOPIC, partition_for(group.group, OFFSETS_PARTITIONS))
            offsets_partitions.add(tp[1])
            lines.append(f"{group.group} on {tp[0]}-{tp[1]}: {rows.get(tp)}, assignment {group.assignment}, "
                         f"last error {group.last_error}; client: {group.coordinator_state()}")
            lines.extend(f"  {line}" for line in client_log.about(group))
    for node, port in nodes.http.items():
        lines.append(f"---- node {node} /metrics\n{replication_metrics(port, offsets_partitions)}")
    try:  # where the client threads are
        lines.append(subprocess.run([str(Path(sys.executable).parent / "py-spy"), "dump", "--pid", str(os.getpid())],
                                    capture_output=True, text=True, timeout=60).stdout[-8000:])
    except (OSError, subprocess.SubprocessError) as exc:
        lines.append(f"py-spy: {exc!r}")
    for node, proc in nodes.cluster.nodes.items():
        lines.append(f"---- node {node}\n{proc.log()[-8000:]}")
    return "\n".join(lines)


def phase(nodes: Nodes, name: str, producer: Producer, groups: list[Group], client_log: ClientLog) -> None:
    acked = dict(producer.acked)
    commits = {g.group: g.commits for g in groups}

    def progressed() -> bool:
        return (all(producer.acked[p] > acked[p] for p in range(PARTITIONS))
                and all(g.commits > commits[g.group] for g in groups))

    try:
        wait_for(progressed, STEP_TIMEOUT, f"{name}: every partition takes records and every group commits", 0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{stuck(nodes, producer, groups, acked, commits, client_log)}") from None


def test_a_node_back_on_its_data_takes_its_leaderships_back_while_clients_run(nodes: Nodes) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    client_log = ClientLog()
    coordinator_log = logging.getLogger("kafka")
    coordinator_log.addHandler(client_log)
    coordinator_log.setLevel(logging.DEBUG)
    cluster = nodes.cluster
    for node in (1, 2, 3):
        nodes.start(node)
    bootstrap = cluster.nodes[1].bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])
    admin.close()
    wait_for(lambda: settled(cluster, {1, 2, 3}) and len(cluster.leaders(TOPIC)) == PARTITIONS, STEP_TIMEOUT,
             "every partition placed and led", 0.2)
    leaders = cluster.leaders(COORDINATOR_TOPIC)
    names = [f"group-{i}" for i in range(10_000)]
    groups = [Group(bootstrap, next(g for g in names if leaders.get(partition_for(g, OFFSETS_PARTITIONS)) == n))
              for n in (1, 2, 3)]
    for group in groups:
        client_log.follow(group.group)
    producer = Producer(bootstrap)
    for client in (producer, *groups):
        client.start()
    try:
        phase(nodes, "three nodes", producer, groups, client_log)
        cluster.nodes[3].kill()
        wait_for(lambda: settled(cluster, {1, 2}), STEP_TIMEOUT, "nodes 1 and 2 lead everything", 0.2)
        phase(nodes, "node 3 killed", producer, groups, client_log)
        nodes.start(3)
        wait_for(lambda: settled(cluster, {1, 2, 3}) and 3 in cluster.leaders(TOPIC).values()
                 and 3 in cluster.leaders(COORDINATOR_TOPIC).values(), STEP_TIMEOUT,
                 "node 3 leads partitions again", 0.2)
        phase(nodes, "node 3 back", producer, groups, client_log)
    finally:
        for client in (producer, *groups):
            client.stop_event.set()
        for client in (producer, *groups):
            client.join(30)
        coordinator_log.removeHandler(client_log)
