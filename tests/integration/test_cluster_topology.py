"""docker-compose.cluster.yml in real containers: etcd and three kcoord nodes.

The images are built from the Dockerfile as for the demo topology (tests/compose/harness.py:
Docker, or podman with the local Debian base and the host-built wheelhouse). etcd starts,
then the three nodes, each when etcd is healthy. From the host, kafka-python clients
bootstrap from node 1 alone and follow Metadata and FindCoordinator to every node (each
node advertises its published EXTERNAL listener): a producer writes to a topic striped over
the three nodes, and three consumer groups, one coordinated by each node, consume and
commit.

Every partition has three replicas. Then node 3's container is killed: once its lease
ends, the controller makes an in-sync replica on node 1 or 2 the leader of every partition
node 3 led, with no operator action, and the group node 3 coordinated moves with its
``__consumer_offsets`` partition: the producer and all three groups continue. Node 3's
container is started again: it rejoins with its volume, catches up, re-enters the ISR and
leads its preferred partitions again, the clients continuing through that too. Everything
is torn down at the end, volumes included.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from protocol.consumer_offsets import partition_for
from tests.compose.harness import REPO, CommandFailed, Project, find_engine, open_engine

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

CLUSTER_FILE = REPO / "docker-compose.cluster.yml"
PROJECT = "kcoordclustertest"
NODES = {1: "kcoord-1", 2: "kcoord-2", 3: "kcoord-3"}
ETCD = "http://etcd:2379"
TOPIC, PARTITIONS = "orders", 6
OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions, the default
STEP_TIMEOUT = 120.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        time.sleep(interval)


class Producer(threading.Thread):
    """kafka-python, acks=all, one record at a time round-robin over the partitions:
    the records each partition acknowledged, and the failures."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.acked = dict.fromkeys(range(PARTITIONS), 0)
        self.failed = 0
        self.client: Any = None
        #: per partition: when (monotonic) and what the last failed send raised
        self.last_error: dict[int, tuple[float, str]] = {}
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from kafka import KafkaProducer

        try:
            producer = self.client = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", retries=0,
                                                   request_timeout_ms=5000, max_block_ms=5000, linger_ms=5)
            i = 0
            while not self.stop_event.is_set():
                partition = i % PARTITIONS
                i += 1
                try:
                    producer.send(TOPIC, f"r{i}".encode(), partition=partition).get(10)
                    self.acked[partition] += 1
                except Exception as exc:  # offline while a node is down: counted, and the loop goes on
                    self.failed += 1
                    self.last_error[partition] = (time.monotonic(), repr(exc)[:300])
                    time.sleep(0.1)
            producer.close(5)
        except BaseException as exc:
            self.error = exc


class Group(threading.Thread):
    """A kafka-python consumer in ``group`` that commits after every poll: the commits that
    succeeded and those that failed (while its coordinator moves)."""

    def __init__(self, bootstrap: str, group: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.group = group
        self.commits = 0
        self.failed = 0
        self.records = 0
        self.client: Any = None
        #: when (monotonic) and what the last failed commit raised
        self.last_error: tuple[float, str] | None = None
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from kafka import KafkaConsumer

        try:
            consumer = self.client = KafkaConsumer(TOPIC, bootstrap_servers=self.bootstrap, group_id=self.group,
                                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                                   session_timeout_ms=10000, heartbeat_interval_ms=1000,
                                                   request_timeout_ms=15000)
            consumer.partitions_for_topic(TOPIC)
            while not self.stop_event.is_set():
                polled = consumer.poll(timeout_ms=200)
                self.records += sum(len(records) for records in polled.values())
                if not consumer.assignment():
                    continue
                try:
                    consumer.commit()
                    self.commits += 1
                except Exception as exc:
                    self.failed += 1
                    self.last_error = (time.monotonic(), repr(exc)[:300])
                    time.sleep(0.1)
            consumer.close()
        except BaseException as exc:
            self.error = exc


@dataclass
class ClusterRun:
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[int, str] = field(default_factory=dict)
    #: per phase: the acknowledged records per partition and the commits per group during it
    acked: dict[str, dict[int, int]] = field(default_factory=dict)
    commits: dict[str, dict[str, int]] = field(default_factory=dict)
    killed_exit: str = ""
    errors: list[str] = field(default_factory=list)
    leftovers: dict[str, list[str]] = field(default_factory=dict)
    #: node -> its EXTERNAL port on the host
    ports: dict[int, int] = field(default_factory=dict)


def _status(project: Project) -> dict[str, Any] | None:
    """``kcoord cluster status --json`` in node 1's container; None when it could not ask etcd
    this time (a busy machine: the waits below ask again)."""
    try:
        out = project.exec("kcoord-1", ["kcoord", "cluster", "status", "--etcd", ETCD, "--json"]).stdout
    except CommandFailed:
        return None
    document: dict[str, Any] = json.loads(out)
    return document


def _leaders(status: dict[str, Any], topic: str) -> dict[int, int]:
    return {row["partition"]: row["leader"] for row in status["partitions"] if row["topic"] == topic}


def _settled(status: dict[str, Any], nodes: set[int], balanced: bool = True) -> bool:
    """Exactly ``nodes`` live, every partition led by one of them, no move under way, and
    (``balanced``) no node holding more than one partition more than another."""
    holds = [n["holds"] for n in status["nodes"]]
    return ({n["id"] for n in status["nodes"]} == nodes and bool(status["partitions"])
            and all(row["leader"] in nodes and not row["adding"] for row in status["partitions"])
            and (not balanced or max(holds) - min(holds) <= 1))


def _group_on(status: dict[str, Any], node: int) -> str:
    leaders = _leaders(status, "__consumer_offsets")
    return next(f"group-{i}" for i in range(10_000)
                if leaders.get(partition_for(f"group-{i}", OFFSETS_PARTITIONS)) == node)


def _phase(project: Project, run: ClusterRun, name: str, producer: Producer, groups: list[Group],
           seconds: float) -> None:
    """Let the clients run for ``seconds``, then keep waiting (bounded) until every partition
    acknowledged a record and every group committed during this phase; if they do not, the
    failure says which did not, what the cluster and the clients saw, and whether each node
    answers."""
    acked_before = dict(producer.acked)
    commits_before = {g.group: g.commits for g in groups}
    started = time.monotonic()

    def progressed() -> bool:
        return (all(producer.acked[p] > acked_before[p] for p in range(PARTITIONS))
                and all(g.commits > commits_before[g.group] for g in groups))

    time.sleep(seconds)
    try:
        wait_for(progressed, STEP_TIMEOUT, f"{name}: every partition takes records and every group commits")
    except AssertionError as exc:
        report = _stuck_report(project, run, producer, groups, acked_before, commits_before, started)
        raise AssertionError(f"{exc}\n{report}") from None
    finally:
        run.acked[name] = {p: producer.acked[p] - acked_before[p] for p in range(PARTITIONS)}
        run.commits[name] = {g.group: g.commits - commits_before[g.group] for g in groups}


def _since(started: float, error: tuple[float, str] | None) -> str:
    return "none" if error is None else f"at +{error[0] - started:.1f}s: {error[1]}"


def _client_view(what: Callable[[], Any]) -> str:
    """What a client thread believes (read from another thread, for a failure message only)."""
    try:
        return repr(what())
    except Exception as exc:  # the client is mid-change: say so rather than fail the report
        return f"? ({exc!r})"


def _probe(project: Project, run: ClusterRun) -> list[str]:
    """Does each node answer ApiVersions on its published port from the host, and on its
    INTERNAL listener from node 1's container?"""
    import importlib.util

    spec = importlib.util.spec_from_file_location("kcoord_healthcheck", REPO / "deploy" / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    healthcheck = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(healthcheck)
    lines = []
    for node, service in NODES.items():
        port = run.ports.get(node)
        started = time.monotonic()
        try:
            problem = healthcheck.check("127.0.0.1", port, 5.0) if port else "no port"
        except Exception as exc:
            problem = repr(exc)
        lines.append(f"node {node} from the host (127.0.0.1:{port}): {problem or 'answers'} "
                     f"({time.monotonic() - started:.2f}s)")
        try:
            project.exec("kcoord-1", ["python", "/opt/kcoord/healthcheck.py", "--bootstrap-server", f"{service}:9092"],
                         timeout=30)
            lines.append(f"node {node} from node 1's container ({service}:9092): answers")
        except CommandFailed as exc:
            lines.append(f"node {node} from node 1's container ({service}:9092): {str(exc)[-300:]}")
    return lines


def _stuck_report(project: Project, run: ClusterRun, producer: Producer, groups: list[Group],
                  acked_before: dict[int, int], commits_before: dict[str, int], started: float) -> str:
    from kafka import TopicPartition

    status = _status(project)
    rows = {} if status is None else {(r["topic"], r["partition"]): r for r in status["partitions"]}
    lines = [f"-- what did not progress (times from the phase's start, +{time.monotonic() - started:.1f}s now)"]
    for p in range(PARTITIONS):
        if producer.acked[p] > acked_before[p]:
            continue
        believed = _client_view(lambda p=p: producer.client._metadata.leader_for_partition(TopicPartition(TOPIC, p)))
        lines.append(f"{TOPIC}-{p}: {producer.acked[p] - acked_before[p]} acknowledged; cluster {rows.get((TOPIC, p))}; "
                     f"the producer's leader {believed}; last error {_since(started, producer.last_error.get(p))}")
    for group in groups:
        if group.commits > commits_before[group.group]:
            continue
        tp = ("__consumer_offsets", partition_for(group.group, OFFSETS_PARTITIONS))
        believed = _client_view(lambda g=group: g.client._coordinator.coordinator_id)
        assignment = _client_view(lambda g=group: sorted(tp.partition for tp in g.client.assignment()))
        lines.append(f"{group.group} on {tp[0]}-{tp[1]}: {group.commits - commits_before[group.group]} commits, "
                     f"{group.failed} failed in all; cluster {rows.get(tp)}; the consumer's coordinator {believed}, "
                     f"assignment {assignment}; last error {_since(started, group.last_error)}")
    for client in (producer, *groups):
        if client.error is not None or not client.is_alive():
            lines.append(f"{type(client).__name__} thread alive={client.is_alive()} error={client.error!r}")
    lines.append("-- does each node answer")
    lines.extend(_probe(project, run))
    lines.append("-- kcoord cluster status --json")
    lines.append("(etcd did not answer)" if status is None else json.dumps(status, indent=None))
    return "\n".join(lines)


def _describe(project: Project, service: str, chars: int = 30_000) -> str:
    """A service's state and a long tail of its logs (the harness's describe keeps 3000 characters)."""
    try:
        state = project.inspect(service, "{{.State.Status}} exit={{.State.ExitCode}}")
        out, err = project.logs(service)
    except (CommandFailed, AssertionError) as exc:
        return f"({service}: {exc})"
    return f"[{service}: {state}]\n{out[-chars:]}\n{err[-chars:]}"


def _scenario(project: Project, run: ClusterRun, bootstrap: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    project.build()
    project.create()
    project.start("etcd")
    project.wait_healthy("etcd")
    for service in NODES.values():
        project.start(service)
    for service in NODES.values():
        project.wait_healthy(service)
    run.statuses["started"] = wait_for(lambda: (s := _status(project)) and _settled(s, {1, 2, 3}) and s,
                                       STEP_TIMEOUT, "three nodes registered, every partition led")

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])
    admin.close()
    run.statuses["topic"] = wait_for(
        lambda: (s := _status(project)) and _settled(s, {1, 2, 3}) and len(_leaders(s, TOPIC)) == PARTITIONS and s,
        STEP_TIMEOUT, "the topic placed and led")
    run.groups = {node: _group_on(run.statuses["topic"], node) for node in NODES}

    producer = Producer(bootstrap)
    groups = [Group(bootstrap, name) for name in run.groups.values()]
    for client in (producer, *groups):
        client.start()
    try:
        _phase(project, run, "three nodes", producer, groups, 3)

        project.engine.cli("kill", project.container("kcoord-3"))
        run.killed_exit = project.state("kcoord-3")
        run.statuses["killed"] = wait_for(lambda: (s := _status(project)) and [n["id"] for n in s["nodes"]] == [1, 2]
                                          and s, STEP_TIMEOUT, "node 3's lease ended")
        run.statuses["failed over"] = wait_for(
            lambda: (s := _status(project)) and _settled(s, {1, 2}, balanced=False) and s,
            STEP_TIMEOUT, "every partition led by nodes 1 and 2")
        _phase(project, run, "node 3 killed, its partitions failed over", producer, groups, 3)

        project.engine.cli("start", project.container("kcoord-3"))
        project.wait_healthy("kcoord-3")
        run.statuses["rejoined"] = wait_for(
            lambda: (s := _status(project)) and _settled(s, {1, 2, 3})
            and next(n["leads"] for n in s["nodes"] if n["id"] == 3) > 0 and s,
            STEP_TIMEOUT, "node 3 rejoined and leads partitions again")
        _phase(project, run, "node 3 back", producer, groups, 3)
    finally:
        for client in (producer, *groups):
            client.stop_event.set()
        for client in (producer, *groups):
            client.join(30)
            if client.error is not None:
                run.errors.append(repr(client.error))


@pytest.fixture(scope="module")
def cluster_run() -> Iterator[ClusterRun]:
    choice = find_engine()
    if isinstance(choice, str):
        pytest.skip(f"containers cannot run on this machine: {choice}")
    ports = {f"KCOORD_CLUSTER_PORT_{n}": str(_free_port()) for n in NODES}
    run = ClusterRun(ports={n: int(ports[f"KCOORD_CLUSTER_PORT_{n}"]) for n in NODES})
    with open_engine(choice) as engine:
        project = Project(engine, PROJECT, ports, CLUSTER_FILE)
        project.down()  # whatever an interrupted run left behind
        try:
            _scenario(project, run, f"127.0.0.1:{ports['KCOORD_CLUSTER_PORT_1']}")
        except BaseException:
            for service in ("etcd", *NODES.values()):
                print(_describe(project, service))
            raise
        finally:
            project.down()
            run.leftovers = project.leftovers()
    yield run


def test_the_nodes_register_and_the_topic_and_groups_spread_over_them(cluster_run: ClusterRun) -> None:
    status = cluster_run.statuses["topic"]
    assert [n["id"] for n in status["nodes"]] == [1, 2, 3]
    assert set(_leaders(status, TOPIC).values()) == {1, 2, 3}
    assert set(_leaders(status, "__consumer_offsets").values()) == {1, 2, 3}
    assert {n["id"]: n["listeners"]["EXTERNAL"][0] for n in status["nodes"]} == dict.fromkeys(NODES, "127.0.0.1")
    assert {n["id"]: n["listeners"]["INTERNAL"] for n in status["nodes"]} == {
        n: [service, 9092] for n, service in NODES.items()}


def test_clients_from_one_bootstrap_address_write_and_commit_on_every_node(cluster_run: ClusterRun) -> None:
    assert all(count > 0 for count in cluster_run.acked["three nodes"].values())
    assert all(count > 0 for count in cluster_run.commits["three nodes"].values())


def test_a_killed_node_leaves_and_its_partitions_fail_over_to_the_live_nodes(cluster_run: ClusterRun) -> None:
    assert cluster_run.killed_exit in ("exited", "stopped")
    before = cluster_run.statuses["topic"]
    assert all(len(row["replicas"]) == 3 for row in before["partitions"]), "every partition has three replicas"
    failed_over = cluster_run.statuses["failed over"]
    assert {row["leader"] for row in failed_over["partitions"]} == {1, 2}
    # the group node 3 coordinated moved with its __consumer_offsets partition, by itself
    moved_group = partition_for(cluster_run.groups[3], OFFSETS_PARTITIONS)
    assert _leaders(before, "__consumer_offsets")[moved_group] == 3
    assert _leaders(failed_over, "__consumer_offsets")[moved_group] in (1, 2)


def test_the_producer_and_every_group_continue_after_the_failover(cluster_run: ClusterRun) -> None:
    phase = "node 3 killed, its partitions failed over"
    assert all(count > 0 for count in cluster_run.acked[phase].values())
    assert all(count > 0 for count in cluster_run.commits[phase].values())


def test_the_node_rejoins_takes_partitions_back_and_the_clients_continue(cluster_run: ClusterRun) -> None:
    rejoined = cluster_run.statuses["rejoined"]
    assert {row["leader"] for row in rejoined["partitions"]} == {1, 2, 3}
    assert all(count > 0 for count in cluster_run.acked["node 3 back"].values())
    assert all(count > 0 for count in cluster_run.commits["node 3 back"].values())
    assert cluster_run.errors == []


def test_the_teardown_removes_containers_volumes_and_network(cluster_run: ClusterRun) -> None:
    assert cluster_run.leftovers == {"containers": [], "volumes": [], "networks": []}
