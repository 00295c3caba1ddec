"""Reassigning replicated partitions under load (Kafka's AlterPartitionReassignments): the
new replica follows the leader and joins the ISR, the controller completes the move, the
removed leader steps down for an in-sync target replica, and nothing acknowledged is lost.

Three nodes hold ``__consumer_offsets`` and a topic with two replicas each. Three groups
commit as fast as they are answered on one coordinator partition, with a verifier reading
their offsets throughout, while an idempotent acks=all producer writes 0, 1, 2... to the
topic. Both partitions are then reassigned with ``kcoord cluster reassign`` away from their
leader, to the node that held neither and one of the old followers.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.local import EtcdServer
from cluster.model import COORDINATOR_TOPIC
from storage.layout import coordinator_partition_dir, partition_dir
from tests.cluster.test_failover import (
    PARTITIONS,
    Committer,
    Producer,
    Verifier,
    abort,
    finish,
    groups_on,
    progressed,
    read_all,
)
from tests.support.broker_process import REPO
from tests.support.cluster import Cluster, wait_for

pytestmark = pytest.mark.integration

SETS: dict[str, object] = {
    "offsets.topic.replication.factor": 2,
    "offsets.topic.num.partitions": PARTITIONS,
    "replica.lag.time.max.ms": 2000,
    "broker.session.timeout.ms": 3000,
}


@pytest.fixture
def two_replicas(tmp_path: object, etcd: EtcdServer) -> Iterator[Cluster]:
    running = Cluster(tmp_path, etcd, SETS)  # type: ignore[arg-type]
    yield running
    for proc in running.nodes.values():
        if proc.proc is not None and proc.proc.poll() is None:
            proc.kill()


def directory_of(cluster: Cluster, node: int, tp: tuple[str, int]) -> Path:
    data_dir = cluster.nodes[node].data_dir
    return coordinator_partition_dir(data_dir, tp[1]) if tp[0] == COORDINATOR_TOPIC else partition_dir(data_dir, *tp)


def fully_in_sync(cluster: Cluster, tps: list[tuple[str, int]]) -> bool:
    image = cluster.image()
    for tp in tps:
        assignment = image.assignments.get(tp)
        if (assignment is None or image.leader_of(tp) is None or assignment.moving
                or set(image.isrs.get(tp, ())) != set(assignment.replicas) or len(assignment.replicas) != 2):
            return False
    return True


def test_reassigning_replicated_partitions_away_from_their_leader_under_load_loses_nothing(
        two_replicas: Cluster) -> None:
    cluster = two_replicas
    for node in (1, 2, 3):
        cluster.start(node)
    bootstrap = ",".join(p.bootstrap for p in cluster.nodes.values())
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.nodes[1].bootstrap)
    admin.create_topics([NewTopic("t", 1, 2), NewTopic("events", 1, 2)])
    admin.close()
    partition = 0
    groups = groups_on(partition, 3)  # the same partition count as test_failover's
    moved = [(COORDINATOR_TOPIC, partition), ("events", 0)]
    wait_for(lambda: fully_in_sync(cluster, [(COORDINATOR_TOPIC, p) for p in range(PARTITIONS)] + [("events", 0)]),
             60, "every partition led, with two in-sync replicas")
    committers = [Committer(bootstrap, g).start() for g in groups]
    verifier = Verifier(bootstrap, groups).start()
    producer = Producer(bootstrap, "events").start()
    try:
        wait_for(lambda: progressed(committers, [0, 0, 0], by=20) and len(producer.acked) > 100, 60,
                 "the groups commit and the producer's records are acknowledged")
        image = cluster.image()
        targets: dict[tuple[str, int], list[int]] = {}
        old_leaders: dict[tuple[str, int], int] = {}
        for tp in moved:
            leader = image.leader_of(tp)
            assert leader is not None
            replicas = image.assignments[tp].replicas
            spare = next(n for n in (1, 2, 3) if n not in replicas)
            follower = next(n for n in replicas if n != leader.leader)
            targets[tp] = [spare, follower]
            old_leaders[tp] = leader.leader
        before = [c.acked for c in committers]
        acked_before = len(producer.acked)
        for tp, target in targets.items():
            result = subprocess.run(
                [sys.executable, "-m", "kcoord", "cluster", "reassign", f"{tp[0]}:{tp[1]}", "--to",
                 ",".join(map(str, target)), "--etcd", cluster.etcd.endpoint, "--cluster-name", "test",
                 "--wait", "60"], cwd=REPO, capture_output=True, text=True, timeout=90)
            assert result.returncode == 0, result.stdout + result.stderr
        image = cluster.image()
        for tp, target in targets.items():
            assignment = image.assignments[tp]
            leader = image.leader_of(tp)
            assert set(assignment.replicas) == set(target) and not assignment.moving, (tp, assignment)
            assert leader is not None and leader.leader in target and leader.leader != old_leaders[tp]
            assert set(image.isrs[tp]) <= set(target)
        # The removed replicas let go of their data; the clients carry on by themselves.
        wait_for(lambda: not any(directory_of(cluster, old_leaders[tp], tp).exists() for tp in moved), 30,
                 "the old leaders deleted the partitions they no longer hold")
        wait_for(lambda: progressed(committers, before, by=20) and len(producer.acked) > acked_before + 100, 60,
                 "the groups commit and the producer's records are acknowledged on the new leaders")
        wait_for(lambda: fully_in_sync(cluster, moved), 60, "both partitions have two in-sync replicas again")
        producer.stop()
        finish(cluster, bootstrap, committers, verifier)
    except BaseException as exc:
        producer._stop.set()
        abort(cluster, committers, verifier, exc)
        raise
    assert producer.failures == []
    values = read_all(bootstrap, "events", producer.sent)
    assert len(values) == len(set(values)), "no record twice"
    assert values == list(range(len(values))), "every record, in order, with no gap"
    assert producer.acked <= set(values), "every acknowledged record is there"


def explain(cluster: Cluster, topic: str) -> str:
    """The partition's state and what the nodes logged about it, for a failure's message."""
    rows = [r for r in cluster.status()["partitions"] if r["topic"] == topic]
    logs = "\n".join(f"---- node {n}\n" + "\n".join(line for line in p.log().splitlines() if topic in line)
                     for n, p in cluster.nodes.items())
    return f"{rows}\n{logs}"


def reassign(cluster: Cluster, spec: str, to: list[int]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kcoord", "cluster", "reassign", spec, "--to", ",".join(map(str, to)),
         "--etcd", cluster.etcd.endpoint, "--cluster-name", "test", "--wait", "60"],
        cwd=REPO, capture_output=True, text=True, timeout=90)


def test_a_single_replica_grows_to_two_by_reassignment_and_shrinks_back_onto_the_other_node(
        two_replicas: Cluster) -> None:
    cluster = two_replicas
    for node in (1, 2, 3):
        # The controller would rebalance the single-replica partition once it is back to one.
        cluster.start(node, **{"cluster.rebalance.enable": False})
    bootstrap = ",".join(p.bootstrap for p in cluster.nodes.values())
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.nodes[1].bootstrap)
    admin.create_topics([NewTopic("solo", 1, 1), NewTopic("pair", 1, 2)])
    admin.close()
    wait_for(lambda: cluster.leaders("solo").get(0, -1) > 0 and fully_in_sync(cluster, [("pair", 0)]), 60,
             "solo-0 and pair-0 are led")
    first = cluster.leaders("solo")[0]
    other = next(n for n in (1, 2, 3) if n != first)
    # A replicated topic is not shrunk below its replication factor: the controller would grow it back.
    refused = reassign(cluster, "pair:0", [other])
    assert refused.returncode != 0 and "replication factor is 2" in refused.stdout, refused.stdout
    # Growing: the new replica follows and joins the ISR, then the move completes.
    result = reassign(cluster, "solo:0", [first, other])
    assert result.returncode == 0, result.stdout + result.stderr + explain(cluster, "solo")
    wait_for(lambda: set(cluster.image().isrs.get(("solo", 0), ())) == {first, other}, 30,
             "solo-0 has two in-sync replicas")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=100, retry_backoff_ms=100)
    for i in range(30):
        producer.send("solo", str(i).encode(), partition=0)
    producer.flush(30)
    # Shrinking onto the follower: the leader steps down, the follower leads alone and serves
    # its whole log at once (it is the only replica: its log end is the high watermark).
    result = reassign(cluster, "solo:0", [other])
    assert result.returncode == 0, result.stdout + result.stderr + explain(cluster, "solo")
    image = cluster.image()
    assert image.assignments[("solo", 0)].replicas == (other,)
    assert image.leader_of(("solo", 0)).leader == other  # type: ignore[union-attr]
    for i in range(30, 40):
        producer.send("solo", str(i).encode(), partition=0)
    producer.flush(30)
    producer.close()
    assert [int(v) for v in read_all(bootstrap, "solo", 40)] == list(range(40))
