"""Failover of a replicated coordinator partition under commit load, with real processes, a
real etcd and kafka-python clients (after Redpanda's test_flipping_leadership).

Three nodes hold every ``__consumer_offsets`` partition with three replicas. Three groups,
all coordinated by one partition, commit offset 1, 2, 3... as fast as they are answered,
while a verifier reads their committed offsets throughout. The partition's leader is then
killed with SIGKILL (and started again on its data), or paused with SIGSTOP past its lease
(and resumed), again and again. Every commit a client saw acknowledged must still be there
at the end; no committed offset the verifier reads may ever go backward; every client goes
on committing by itself after each failover.

``KCOORD_CHAOS_ROUNDS`` sets the number of leader kills (``make chaos`` runs 20).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from cluster.local import EtcdServer
from cluster.model import COORDINATOR_TOPIC
from protocol.consumer_offsets import partition_for
from tests.support.clients import create_topic
from tests.support.cluster import Cluster, wait_for

pytestmark = pytest.mark.integration

ROUNDS = int(os.environ.get("KCOORD_CHAOS_ROUNDS", "5"))
PARTITIONS = 12
SETS: dict[str, object] = {
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": PARTITIONS,
    "replica.lag.time.max.ms": 2000,
    "broker.session.timeout.ms": 3000,
}


class Committer:
    """A group committing offset 1, 2, 3... to partition 0 of ``t``, retrying on errors."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.acked = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Committer:
        self._thread.start()
        return self

    def _run(self) -> None:
        from kafka import KafkaConsumer, TopicPartition
        from kafka.structs import OffsetAndMetadata

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group, enable_auto_commit=False,
                                 request_timeout_ms=8000, retry_backoff_ms=50, reconnect_backoff_max_ms=500)
        tp = TopicPartition("t", 0)
        n = self.acked
        while not self._stop.is_set():
            n += 1
            try:
                consumer.commit({tp: OffsetAndMetadata(n, "", -1)})
            except Exception as exc:  # the coordinator moved: the next commit finds it again
                self.failures.append(repr(exc)[:160])
                time.sleep(0.05)
                continue
            self.acked = n
        consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()


class Verifier:
    """Reads every group's committed offset over and over; records any that went backward."""

    def __init__(self, bootstrap: str, groups: list[str]) -> None:
        self.bootstrap = bootstrap
        self.groups = groups
        self.seen: dict[str, int] = dict.fromkeys(groups, 0)
        self.backward: list[tuple[str, int, int]] = []
        self.reads = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Verifier:
        self._thread.start()
        return self

    def _run(self) -> None:
        from kafka import KafkaAdminClient, TopicPartition

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5000,
                                 retry_backoff_ms=50, reconnect_backoff_max_ms=500)
        tp = TopicPartition("t", 0)
        while not self._stop.is_set():
            for group in self.groups:
                try:
                    offsets = admin.list_group_offsets({group: [tp]})[group]
                except Exception as exc:  # the coordinator moved: read again
                    self.errors.append(repr(exc)[:160])
                    time.sleep(0.05)
                    continue
                found = offsets.get(tp)
                if found is None or found.offset < 0:
                    continue
                if found.offset < self.seen[group]:
                    self.backward.append((group, self.seen[group], found.offset))
                self.seen[group] = max(self.seen[group], found.offset)
                self.reads += 1
        admin.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.fixture
def replicated(tmp_path: object, etcd: EtcdServer) -> Iterator[Cluster]:
    running = Cluster(tmp_path, etcd, SETS)  # type: ignore[arg-type]
    yield running
    for proc in running.nodes.values():
        if proc.proc is not None and proc.proc.poll() is None:
            proc.kill()


def in_sync(cluster: Cluster, partition: int) -> bool:
    image = cluster.image()
    tp = (COORDINATOR_TOPIC, partition)
    leadership = image.leader_of(tp)
    return leadership is not None and len(image.isrs.get(tp, ())) == 3


def groups_on(partition: int, count: int) -> list[str]:
    names = (f"flip-{i}" for i in range(100_000))
    return [n for n in names if partition_for(n, PARTITIONS) == partition][:count]


def start_cluster(cluster: Cluster) -> tuple[str, int, list[str]]:
    for node in (1, 2, 3):
        cluster.start(node)
    bootstrap = ",".join(p.bootstrap for p in cluster.nodes.values())
    create_topic(cluster.nodes[1].bootstrap, "t", 1)
    partition = partition_for("flip-0", PARTITIONS)
    try:
        wait_for(lambda: all(in_sync(cluster, p) for p in range(PARTITIONS)), 60,
                 "every coordinator partition led, with three in-sync replicas")
    except AssertionError as exc:
        image = cluster.image()
        state = {p: (getattr(image.leader_of((COORDINATOR_TOPIC, p)), "leader", -1),
                     image.isrs.get((COORDINATOR_TOPIC, p))) for p in range(PARTITIONS)}
        logs = "\n".join(f"---- node {n}\n{proc.log()[-4000:]}" for n, proc in cluster.nodes.items())
        raise AssertionError(f"{exc}: (leader, ISR) {state}\n{logs}") from None
    return bootstrap, partition, groups_on(partition, 3)


def restart(cluster: Cluster, node: int) -> None:
    proc = cluster.nodes[node]
    proc.listen = f"{proc.host}:{proc.port}"
    proc.start(timeout=60)


def progressed(committers: list[Committer], since: list[int], by: int = 3) -> bool:
    return all(c.acked >= before + by for c, before in zip(committers, since, strict=True))


def finish(cluster: Cluster, bootstrap: str, committers: list[Committer], verifier: Verifier) -> None:
    for committer in committers:
        committer.stop()
    time.sleep(0.5)  # a last read or two by the verifier
    verifier.stop()
    assert verifier.backward == [], f"committed offsets went backward: {verifier.backward}"
    assert verifier.reads > 0, f"the verifier read nothing: {verifier.errors[-5:]}"
    from kafka import KafkaAdminClient, TopicPartition

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    tp = TopicPartition("t", 0)

    def committed(group: str) -> int | None:
        try:
            return int(admin.list_group_offsets({group: [tp]})[group][tp].offset)
        except Exception:  # a leader handing the partition back: ask again
            return None

    try:
        for committer in committers:
            offset = wait_for(lambda g=committer.group: committed(g), 30, f"{committer.group}'s committed offset")
            assert offset >= committer.acked, f"{committer.group}: acknowledged {committer.acked}, kept {offset}"
    finally:
        admin.close()


def abort(cluster: Cluster, committers: list[Committer], verifier: Verifier, exc: BaseException) -> None:
    """Stop the clients and put what they and the nodes saw into the failure."""
    for committer in committers:
        committer._stop.set()
    verifier._stop.set()
    details = [f"{c.group}: acked {c.acked}, last errors {c.failures[-3:]}" for c in committers]
    details.append(f"verifier: {verifier.reads} reads, last errors {verifier.errors[-3:]}")
    for node, proc in cluster.nodes.items():
        details.append(f"---- node {node}\n{proc.log()[-3000:]}")
    if isinstance(exc, AssertionError):
        exc.args = (f"{exc.args[0] if exc.args else ''}\n" + "\n".join(details),)


def test_killing_the_coordinator_leader_again_and_again_loses_no_acknowledged_commit(
        replicated: Cluster) -> None:
    cluster = replicated
    bootstrap, partition, groups = start_cluster(cluster)
    committers = [Committer(bootstrap, g).start() for g in groups]
    verifier = Verifier(bootstrap, groups).start()
    failover_s: list[float] = []
    try:
        wait_for(lambda: progressed(committers, [0, 0, 0]), 60, "the groups commit")
        for round_ in range(ROUNDS):
            leader = wait_for(lambda: cluster.leaders(COORDINATOR_TOPIC).get(partition, -1) > 0, 30,
                              "the partition has a leader")
            leader = cluster.leaders(COORDINATOR_TOPIC)[partition]
            before = [c.acked for c in committers]
            killed_at = time.monotonic()
            cluster.nodes[leader].kill()
            # Two: one commit may have been answered by the old leader just before the kill.
            wait_for(lambda b=before: progressed(committers, b, 2), 60,
                     f"round {round_}: every group commits again after node {leader} was killed")
            failover_s.append(time.monotonic() - killed_at)
            restart(cluster, leader)
            wait_for(lambda: in_sync(cluster, partition), 60,
                     f"round {round_}: node {leader} is back in the ISR")
        finish(cluster, bootstrap, committers, verifier)
    except BaseException as exc:
        abort(cluster, committers, verifier, exc)
        raise
    print(f"failover (kill -9 to every group committing again): {[round(s, 2) for s in failover_s]}")


def test_a_paused_coordinator_leader_loses_its_partition_and_acknowledges_nothing_stale(
        replicated: Cluster) -> None:
    cluster = replicated
    bootstrap, partition, groups = start_cluster(cluster)
    committers = [Committer(bootstrap, g).start() for g in groups]
    verifier = Verifier(bootstrap, groups).start()
    try:
        wait_for(lambda: progressed(committers, [0, 0, 0]), 60, "the groups commit")
        leader = cluster.leaders(COORDINATOR_TOPIC)[partition]
        proc = cluster.nodes[leader].proc
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: cluster.leaders(COORDINATOR_TOPIC).get(partition, -1) not in (-1, leader), 30,
                     "another node leads the partition")
            before = [c.acked for c in committers]
            wait_for(lambda: progressed(committers, before), 60, "the groups commit on the new leader")
        finally:
            proc.send_signal(signal.SIGCONT)
        wait_for(lambda: in_sync(cluster, partition), 60, f"node {leader} is back in the ISR")
        before = [c.acked for c in committers]
        wait_for(lambda: progressed(committers, before), 60, "the groups go on committing")
        finish(cluster, bootstrap, committers, verifier)
    except BaseException as exc:
        abort(cluster, committers, verifier, exc)
        raise


class Producer:
    """An idempotent acks=all producer sending 0, 1, 2... to partition 0 of ``topic``."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.sent = 0
        self.acked: set[int] = set()
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Producer:
        self._thread.start()
        return self

    def _run(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True,
                                 retries=1_000_000, request_timeout_ms=8000, retry_backoff_ms=50,
                                 reconnect_backoff_max_ms=500, delivery_timeout_ms=120_000, linger_ms=5)
        while not self._stop.is_set():
            value = self.sent
            future = producer.send(self.topic, str(value).encode(), partition=0)
            future.add_callback(lambda _meta, v=value: self.acked.add(v))
            future.add_errback(lambda exc: self.failures.append(repr(exc)[:160]))
            self.sent += 1
            if self.sent - len(self.acked) > 200:
                producer.flush(60)
        producer.flush(120)
        producer.close(30)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)
        assert not self._thread.is_alive()


def read_all(bootstrap: str, topic: str, at_least: int) -> list[int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    values: list[int] = []
    deadline = time.monotonic() + 60
    while len(values) < at_least and time.monotonic() < deadline:
        for batch in consumer.poll(1000).values():
            values.extend(int(record.value) for record in batch)
    consumer.close()
    return values


def test_an_idempotent_producer_across_leader_kills_leaves_no_duplicate_and_no_gap(replicated: Cluster) -> None:
    cluster = replicated
    for node in (1, 2, 3):
        cluster.start(node)
    bootstrap = ",".join(p.bootstrap for p in cluster.nodes.values())
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.nodes[1].bootstrap)
    admin.create_topics([NewTopic("events", 1, 3)])
    admin.close()
    wait_for(lambda: len(cluster.image().isrs.get(("events", 0), ())) == 3, 60, "events-0 has three in-sync replicas")
    producer = Producer(bootstrap, "events").start()
    try:
        wait_for(lambda: len(producer.acked) > 100, 60, "the producer's records are acknowledged")
        for round_ in range(min(ROUNDS, 5)):
            leader = cluster.leaders("events")[0]
            before = len(producer.acked)
            cluster.nodes[leader].kill()
            wait_for(lambda b=before: len(producer.acked) > b + 50, 60,
                     f"round {round_}: records are acknowledged again after node {leader} was killed")
            restart(cluster, leader)
            wait_for(lambda: len(cluster.image().isrs.get(("events", 0), ())) == 3 and cluster.leaders("events")[0] > 0,
                     60, f"round {round_}: node {leader} is back in the ISR")
        producer.stop()
    except BaseException as exc:
        producer._stop.set()
        if isinstance(exc, AssertionError):
            exc.args = (f"{exc.args[0]}\nacked {len(producer.acked)}, failures {producer.failures[-3:]}\n"
                        + "\n".join(f"---- node {n}\n{p.log()[-3000:]}" for n, p in cluster.nodes.items()),)
        raise
    assert producer.failures == []
    values = read_all(bootstrap, "events", producer.sent)
    assert len(values) == len(set(values)), "no record twice"
    assert values == list(range(len(values))), "every record, in order, with no gap"
    assert producer.acked <= set(values), "every acknowledged record is there"
    assert len(values) == producer.sent > 100


def test_a_node_whose_disk_is_wiped_comes_back_empty_and_re_replicates(replicated: Cluster) -> None:
    import shutil

    cluster = replicated
    bootstrap, partition, groups = start_cluster(cluster)
    committers = [Committer(bootstrap, g).start() for g in groups]
    verifier = Verifier(bootstrap, groups).start()
    try:
        wait_for(lambda: progressed(committers, [0, 0, 0], by=50), 60, "the groups commit")
        leader = cluster.leaders(COORDINATOR_TOPIC)[partition]
        victim = next(n for n in (1, 2, 3) if n != leader)
        proc = cluster.nodes[victim]
        proc.kill()
        shutil.rmtree(proc.data_dir)
        before = [c.acked for c in committers]
        wait_for(lambda: progressed(committers, before), 60, f"the groups commit while node {victim} is gone")
        restart(cluster, victim)
        wait_for(lambda: all(in_sync(cluster, p) for p in range(PARTITIONS)), 60,
                 f"node {victim} is back in every ISR")
        # Both other nodes die: the wiped node alone leads now, from what it re-replicated.
        others = [n for n in (1, 2, 3) if n != victim]
        for node in others:
            cluster.nodes[node].kill()
        wait_for(lambda: cluster.leaders(COORDINATOR_TOPIC).get(partition, -1) == victim, 30,
                 f"node {victim} leads the partition")
        before = [c.acked for c in committers]
        wait_for(lambda: progressed(committers, before), 60, "the groups go on committing")
        status = cluster.status()
        row = next(r for r in status["partitions"] if (r["topic"], r["partition"]) == (COORDINATOR_TOPIC, partition))
        assert row["isr"] == [victim] and row["under_replicated"]
        finish(cluster, bootstrap, committers, verifier)
    except BaseException as exc:
        abort(cluster, committers, verifier, exc)
        raise
