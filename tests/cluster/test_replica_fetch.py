"""A leader answers its followers' Fetch at every version they may pick (v12's
``replica_id``, v15+'s ``replica_state`` with topic ids), and counts a follower's position
only from a fetch of its current registration (KIP-903's broker epoch)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from cluster.model import NodeInfo
from cluster.replicator import Replicator
from protocol.api_keys import ApiKey
from protocol.codec import decode_request, encode_request
from protocol.messages.fetch import fetching_replica
from tests.cluster.test_hw_checkpoint_restore import KEYS, TP, FakeNode, log_with


def follower_fetch(version: int, replica: int, offset: int, replica_epoch: int = -1) -> Any:
    body: dict[str, Any] = {
        "replica_id": replica, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "replica_state": {"replica_id": replica, "replica_epoch": replica_epoch},
        "topics": [{"topic": "t", "topic_id": None, "partitions": [{
            "partition": 0, "current_leader_epoch": 4, "fetch_offset": offset, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
    if version >= 13:
        body["topics"][0]["topic_id"] = uuid.uuid4()
    return decode_request(encode_request(ApiKey.FETCH, version, 1, body)[4:]).body


def test_the_replica_is_replica_id_up_to_v14_and_replica_state_from_v15() -> None:
    assert fetching_replica(follower_fetch(12, 2, 0)) == 2
    assert fetching_replica(follower_fetch(14, 2, 0)) == 2
    v15 = follower_fetch(15, 3, 0, replica_epoch=77)
    assert "replica_id" not in v15 and v15.replica_state.replica_epoch == 77
    assert fetching_replica(v15) == 3
    assert fetching_replica(follower_fetch(17, -1, 0)) == -1


def leader(tmp_path: Path) -> tuple[Replicator, FakeNode, Any]:
    plog = log_with(tmp_path / "t-0", 10)
    node = FakeNode(tmp_path, plog)
    # Node 2 registered again (a restart) at revision 50.
    node.image.apply(KEYS.node(2), NodeInfo(2, {"PLAINTEXT": ("127.0.0.1", 9002)}).encode(), 50)
    replicator = Replicator(node)
    replicator.lead(TP, 4, plog, serving_before=False)
    return replicator, node, plog


def test_a_v15_fetch_from_the_current_registration_moves_the_high_watermark(tmp_path: Path) -> None:
    replicator, _, plog = leader(tmp_path)
    for replica in (2, 3):
        part = follower_fetch(15, replica, 10, replica_epoch=50).topics[0].partitions[0]
        entry = replicator.serve_fetch(TP, part, replica, plog, 50)
        assert entry["error_code"] == 0
    assert plog.high_watermark == 10


def test_a_fetch_from_a_process_older_than_the_replicas_registration_is_not_counted(tmp_path: Path) -> None:
    replicator, _, plog = leader(tmp_path)
    replicator.serve_fetch(TP, follower_fetch(15, 3, 10).topics[0].partitions[0], 3, plog, -1)
    part = follower_fetch(15, 2, 10, replica_epoch=12).topics[0].partitions[0]
    entry = replicator.serve_fetch(TP, part, 2, plog, 12)
    assert entry["error_code"] == 0  # answered, as Kafka answers it
    assert replicator.leaders[TP].followers[2].end_offset == -1
    assert plog.high_watermark == 0


@pytest.mark.integration
def test_librdkafka_reads_a_replicated_topic_from_a_cluster_by_topic_id(tmp_path: Path) -> None:
    """confluent-kafka picks Fetch v13+ (topic ids) against a kcoord cluster; it reads every
    record of a three-partition topic whose partitions are led by different nodes."""
    from confluent_kafka import Consumer

    from cluster.local import EtcdMissing, EtcdServer, etcd_binary
    from tests.support.clients import create_topic
    from tests.support.cluster import Cluster, wait_for

    try:
        etcd_binary()
    except EtcdMissing as exc:
        pytest.skip(str(exc))
    etcd = EtcdServer(tmp_path / "etcd").start()
    cluster = Cluster(tmp_path, etcd, {"default.replication.factor": 2})
    try:
        for node in (1, 2, 3):
            cluster.start(node)
        bootstrap = ",".join(p.bootstrap for p in cluster.nodes.values())
        create_topic(cluster.nodes[1].bootstrap, "spread", 3)
        wait_for(lambda: len(set(cluster.leaders("spread").values()) - {-1}) >= 2, 60, "spread led by several nodes")
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        for i in range(30):
            producer.send("spread", str(i).encode(), partition=i % 3)
        producer.flush(30)
        producer.close()
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rdkafka-by-id",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["spread"])
        values: list[int] = []
        try:
            deadline = time.monotonic() + 60
            while len(values) < 30 and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    values.append(int(message.value()))
        finally:
            consumer.close()
        assert sorted(values) == list(range(30))
    finally:
        for proc in cluster.nodes.values():
            if proc.proc is not None and proc.proc.poll() is None:
                proc.kill()
        etcd.kill()
