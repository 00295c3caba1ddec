"""Exactly-once in a cluster: transactional consume-transform-produce on three real nodes (every
partition, ``__transaction_state`` and ``__consumer_offsets`` included, with three replicas),
real etcd, real clients, and kill -9 of the node that coordinates the transactional id, then of
a node that leads output partitions.

At the end a read_committed consumer reads every input record exactly once in the output, and
the application's committed input offsets are the ends of the input (what the output says was
processed). ``KCOORD_CHAOS_ROUNDS`` sets the number of kills of the confluent-kafka run
(``make chaos`` runs 20); the short version kills each kind of node once.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator

import pytest

from cluster.local import EtcdServer
from cluster.model import COORDINATOR_TOPIC, TRANSACTION_TOPIC
from protocol.api_keys import ApiKey
from protocol.consumer_offsets import partition_for
from protocol.errors import ErrorCode
from tests.support.cluster import Cluster, wait_for
from tests.support.eos import ConfluentApp, KafkaPythonApp, Progress, read_committed, seed, value_of
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

PARTITIONS = 3
OFFSETS_PARTITIONS = 6
TXN_PARTITIONS = 6
ROUNDS = int(os.environ.get("KCOORD_CHAOS_ROUNDS", "2"))
SETS: dict[str, object] = {
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.num.partitions": TXN_PARTITIONS,
    "transaction.state.log.min.isr": 2,
    "replica.lag.time.max.ms": 2000,
    "broker.session.timeout.ms": 3000,
    "cluster.rebalance.enable": False,
}


@pytest.fixture
def replicated(tmp_path: object, etcd: EtcdServer) -> Iterator[Cluster]:
    running = Cluster(tmp_path, etcd, SETS)  # type: ignore[arg-type]
    yield running
    for proc in running.nodes.values():
        if proc.proc is not None and proc.proc.poll() is None:
            proc.kill()


def _all_in_sync(cluster: Cluster) -> bool:
    image = cluster.image()
    tps = list(image.partitions())
    topics = {tp[0] for tp in tps}
    if not {TRANSACTION_TOPIC, COORDINATOR_TOPIC, "eos-in", "eos-out"} <= topics:
        return False
    return all(image.leader_of(tp) is not None and len(image.isrs.get(tp, ())) == 3 for tp in tps)


def _create_topics(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic("eos-in", PARTITIONS, 3), NewTopic("eos-out", PARTITIONS, 3)]
    for future in admin.create_topics(topics).values():
        future.result(30)


def _start(cluster: Cluster) -> str:
    for node in (1, 2, 3):
        cluster.start(node)
    bootstrap = ",".join(p.bootstrap for p in cluster.nodes.values())
    _create_topics(bootstrap)
    # The first lookup of a transactional id creates __transaction_state (COORDINATOR_NOT_AVAILABLE meanwhile).
    first = cluster.nodes[1]
    with WireClient(first.host, first.port) as client:
        reply = client.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["first"]})
    assert reply.coordinators[0].error_code in (0, int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    _wait_in_sync(cluster, "every partition led with three in-sync replicas")
    return bootstrap


def _wait_in_sync(cluster: Cluster, what: str) -> None:
    try:
        wait_for(lambda: _all_in_sync(cluster), 90, what, interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_logs(cluster)}") from None


def _logs(cluster: Cluster, tail: int = 3000) -> str:
    return "\n".join(f"---- node {n}\n{proc.log()[-tail:]}" for n, proc in cluster.nodes.items())


def _leader(cluster: Cluster, topic: str, partition: int) -> int:
    return wait_for(lambda: cluster.leaders(topic).get(partition, -1) if cluster.leaders(topic).get(
        partition, -1) > 0 else None, 60, f"{topic}-{partition} has a leader")


def transaction_coordinator(cluster: Cluster, transactional_id: str) -> int:
    return _leader(cluster, TRANSACTION_TOPIC, partition_for(transactional_id, TXN_PARTITIONS))


def data_only_leader(cluster: Cluster, group: str, transactional_id: str) -> int:
    """A node leading output partitions but coordinating neither the transactional id nor the group."""
    coordinators = {transaction_coordinator(cluster, transactional_id),
                    _leader(cluster, COORDINATOR_TOPIC, partition_for(group, OFFSETS_PARTITIONS))}
    leaders = [_leader(cluster, "eos-out", p) for p in range(PARTITIONS)]
    found = next((n for n in leaders if n not in coordinators), None)
    assert found is not None, f"every output leader {leaders} is a coordinator {coordinators}"
    return found


class NodeKiller(threading.Thread):
    """Kills with SIGKILL, after a few more committed transactions each time, the node that
    ``pick`` names (the transaction coordinator, a data leader, by turns), waits until the
    application commits again, restarts the node on its data and waits for every ISR to be
    whole again."""

    def __init__(self, cluster: Cluster, progress: Progress, picks: list[Callable[[], int]],
                 every: int = 3, stall_timeout: float = 90) -> None:
        super().__init__(name="node-killer", daemon=True)
        self.cluster = cluster
        self.progress = progress
        self.picks = picks
        self.every = every
        self.stall_timeout = stall_timeout
        self.killed: list[int] = []
        self.failure: str | None = None

    def run(self) -> None:
        try:
            for pick in self.picks:
                if not self.progress.wait_for(self.progress.commits + self.every, self.stall_timeout):
                    self.failure = f"no progress within {self.stall_timeout}s before kill {len(self.killed) + 1}"
                    return
                if self.progress.done.is_set():
                    return
                node = pick()
                proc = self.cluster.nodes[node]
                proc.kill()
                self.killed.append(node)
                after = self.progress.commits
                if not self.progress.wait_for(after + 2, self.stall_timeout):
                    self.failure = f"no commit within {self.stall_timeout}s after node {node} was killed"
                    return
                proc.listen = f"{proc.host}:{proc.port}"
                proc.start(timeout=60)
                wait_for(lambda: _all_in_sync(self.cluster), 90, f"node {node} is back in every ISR", interval=0.2)
        except BaseException as exc:  # reported by the test
            self.failure = f"{type(exc).__name__}: {exc}"


def _check_exactly_once(bootstrap: str, records: int) -> None:
    values = read_committed(bootstrap, "eos-out", PARTITIONS, records)
    duplicates = sorted({v for v in values if values.count(v) > 1})
    missing = sorted(set(map(value_of, range(records))) - set(values))
    assert not duplicates and not missing, (
        f"{len(values)} values for {records} inputs; duplicates {duplicates[:10]}, missing {missing[:10]}")


def _check_committed_offsets(bootstrap: str, group: str, ends: dict[int, int]) -> None:
    """The group's committed input offsets are the input's ends: the output holds exactly what they say."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition("eos-in", p) for p in ends], 30)
    finally:
        consumer.close()
    assert {tp.partition: tp.offset for tp in committed} == ends


def _stack_of(thread: threading.Thread) -> str:
    frame = sys._current_frames().get(thread.ident or -1)
    return "" if frame is None else "".join(traceback.format_stack(frame)[-6:])


def _run(cluster: Cluster, app: ConfluentApp | KafkaPythonApp, picks: list[Callable[[], int]], bootstrap: str,
         records: int, ends: dict[int, int]) -> NodeKiller:
    killer = NodeKiller(cluster, app.progress, picks)
    app.start()
    killer.start()
    app.join(max(1.0, app.deadline - time.monotonic()) + 30)
    killer.join(120)
    try:
        assert not app.is_alive(), f"the application is stuck; steps {app.log[-15:]}; at\n{_stack_of(app)}"
        assert app.error is None, f"{app.error!r}; steps {app.log[-15:]}"
        assert killer.failure is None, f"{killer.failure}; steps {app.log[-15:]}"
        _check_exactly_once(bootstrap, records)
        _check_committed_offsets(bootstrap, app.group, ends)
        assert len(killer.killed) == len(picks), f"only {killer.killed} were killed before the input ran out"
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_logs(cluster, 200_000 if os.environ.get('KCOORD_TXN_LOGS') else 3000)}"
                             ) from None
    if os.environ.get("KCOORD_TXN_LOGS"):
        print(_logs(cluster, 200_000))
    return killer


def transactional_id_apart_from(cluster: Cluster, group: str, prefix: str) -> str:
    """A transactional id whose coordinator is not the group's coordinator."""
    group_coordinator = _leader(cluster, COORDINATOR_TOPIC, partition_for(group, OFFSETS_PARTITIONS))
    for i in range(1000):
        candidate = f"{prefix}-{i}"
        if transaction_coordinator(cluster, candidate) != group_coordinator:
            return candidate
    raise AssertionError(f"every transactional id is coordinated with group {group}")


def test_confluent_kafka_exactly_once_survives_killing_the_transaction_coordinator_and_a_data_leader(
        replicated: Cluster) -> None:
    """The node killed is never the group's coordinator: librdkafka (up to 2.16 at least) hangs
    ``send_offsets_to_transaction`` past its timeout when the group coordinator's broker
    leaves the metadata (librdkafka issue #5511, open), which a killed node does once its
    lease ends, in Kafka as here."""
    cluster = replicated
    bootstrap = _start(cluster)
    records = 200 + ROUNDS * 600
    ends = seed(bootstrap, "eos-in", PARTITIONS, records)
    group = "ctp"
    app = ConfluentApp(bootstrap, "eos-in", "eos-out", ends, group=group,
                       transactional_id=transactional_id_apart_from(cluster, group, "ctp-cluster"),
                       deadline=90 + ROUNDS * 40)
    if os.environ.get("KCOORD_TXN_LOGS"):
        app.extra = {"debug": "eos"}

    def coordinator() -> int:
        node = transaction_coordinator(cluster, app.transactional_id)
        assert node != _leader(cluster, COORDINATOR_TOPIC, partition_for(group, OFFSETS_PARTITIONS))
        return node

    picks = [coordinator if round_ % 2 == 0 else (lambda: data_only_leader(cluster, group, app.transactional_id))
             for round_ in range(ROUNDS)]
    killer = _run(cluster, app, picks, bootstrap, records, ends)
    print(f"killed {killer.killed}; {app.progress.commits} commits, {app.progress.aborts} aborts, "
          f"{app.progress.restarts} producer restarts")


def test_kafka_python_exactly_once_survives_killing_a_data_leader(replicated: Cluster) -> None:
    """kafka-python's transactional producer and read_committed consumer on three nodes, with a
    node leading output partitions (coordinating neither the transactional id nor the group)
    killed once, and started again on its data. The transaction coordinator is not killed: kafka-python (3.0.12)
    drops a transactional request whose coordinator refuses the connection
    (``Sender._maybe_send_transactional_request``: ``await_ready`` raises, and the request is
    neither sent nor retried) and then waits forever."""
    cluster = replicated
    bootstrap = _start(cluster)
    records = 600
    ends = seed(bootstrap, "eos-in", PARTITIONS, records)
    app = KafkaPythonApp(bootstrap, "eos-in", "eos-out", ends, transactional_id="ctp-kp-cluster", deadline=150)
    _run(cluster, app, [lambda: data_only_leader(cluster, app.group, app.transactional_id)], bootstrap, records,
         ends)
