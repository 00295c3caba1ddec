"""The high watermark checkpoint with real nodes: a clean stop saves every replica's high
watermark to ``replication-offset-checkpoint``, a kill -9 leaves the periodic one, and a
cluster started again on its data serves every acknowledged record."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cluster.local import EtcdServer
from storage.hw_checkpoint import HighWatermarkCheckpoint
from tests.cluster.test_failover import read_all
from tests.support.cluster import Cluster, wait_for

pytestmark = pytest.mark.integration

SETS: dict[str, object] = {
    "replica.lag.time.max.ms": 2000,
    "replica.high.watermark.checkpoint.interval.ms": 200,
}


@pytest.fixture
def three(tmp_path: object, etcd: EtcdServer) -> Iterator[Cluster]:
    running = Cluster(tmp_path, etcd, SETS)  # type: ignore[arg-type]
    yield running
    for proc in running.nodes.values():
        if proc.proc is not None and proc.proc.poll() is None:
            proc.kill()


def saved(cluster: Cluster, node: int) -> int:
    return HighWatermarkCheckpoint(cluster.nodes[node].data_dir).read().get(("hw", 0), -1)


def test_every_replica_saves_its_high_watermark_and_a_restarted_cluster_serves_what_was_acknowledged(
        three: Cluster) -> None:
    cluster = three
    for node in (1, 2, 3):
        cluster.start(node)
    bootstrap = ",".join(p.bootstrap for p in cluster.nodes.values())
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.nodes[1].bootstrap)
    admin.create_topics([NewTopic("hw", 1, 3)])
    admin.close()
    wait_for(lambda: len(cluster.image().isrs.get(("hw", 0), ())) == 3 and cluster.leaders("hw").get(0, -1) > 0,
             60, "hw-0 led, with three in-sync replicas")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(50):
        producer.send("hw", str(i).encode(), partition=0)
    producer.flush(30)
    producer.close()
    # The periodic checkpoint reaches the acknowledged end on every replica (a follower
    # learns the high watermark from its next fetch).
    wait_for(lambda: all(saved(cluster, n) == 50 for n in (1, 2, 3)), 30,
             "every replica's checkpoint holds high watermark 50")
    leader = cluster.leaders("hw")[0]
    cluster.nodes[leader].kill()  # kill -9: the periodic checkpoint stays
    assert saved(cluster, leader) == 50
    for node in (1, 2, 3):
        if node != leader:
            assert cluster.nodes[node].stop() == 0  # a clean stop writes it once more
            assert saved(cluster, node) == 50
    for node in (1, 2, 3):
        proc = cluster.nodes[node]
        proc.listen = f"{proc.host}:{proc.port}"
        proc.start(timeout=60)
    wait_for(lambda: cluster.leaders("hw").get(0, -1) > 0, 60, "hw-0 has a leader again")
    assert read_all(bootstrap, "hw", 50) == list(range(50))
