"""etcd going away: a restart loses nothing; an outage stops leadership when the leases would
have expired (retriable errors meanwhile), and the cluster comes back by itself."""

from __future__ import annotations

import time

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import build_records, encode_batch
from tests.support.clients import create_topic
from tests.support.cluster import Cluster, wait_for
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration


def produce(cluster: Cluster, leaders: dict[int, int], partition: int, value: bytes) -> int:
    """One acks=all record to the partition's leader (as etcd showed it before); its error code."""
    leader = cluster.nodes[leaders[partition]]
    batch = encode_batch(build_records([(b"k", value)]), base_timestamp=int(time.time() * 1000))
    with WireClient(leader.host, leader.port) as client:
        reply = client.request(ApiKey.PRODUCE, 9, {
            "transactional_id": None, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": "kept", "partition_data": [{"index": partition, "records": batch}]}]})
    return int(reply["responses"][0]["partition_responses"][0]["error_code"])


def start(cluster: Cluster) -> dict[int, int]:
    """Two nodes, and a topic with a partition on each: partition -> leader."""
    cluster.start(1)
    cluster.start(2)
    cluster.wait_settled()
    create_topic(cluster.nodes[1].bootstrap, "kept", 2)
    cluster.wait_settled()
    leaders = cluster.leaders("kept")
    assert set(leaders.values()) == {1, 2}
    return leaders


def test_a_restarted_etcd_does_not_lose_the_cluster(cluster: Cluster) -> None:
    leaders = start(cluster)
    before = cluster.status()
    cluster.etcd.stop()
    cluster.etcd.start()
    wait_for(lambda: cluster.status()["nodes"] == before["nodes"], 20, "both nodes registered, as before")
    after = cluster.status()
    assert after["partitions"] == before["partitions"]  # the same leaders at the same epochs
    assert all(produce(cluster, leaders, p, b"after the restart") == 0 for p in leaders)
    create_topic(cluster.nodes[2].bootstrap, "new-after-restart", 2)
    cluster.wait_settled()


def test_without_etcd_nodes_serve_until_their_leases_would_expire_then_stop_and_come_back(
        cluster: Cluster) -> None:
    leaders = start(cluster)
    cluster.etcd.kill()
    lost_at = time.monotonic()
    assert all(produce(cluster, leaders, p, b"etcd just went") == 0 for p in leaders)  # the leases still hold
    ttl = int(cluster.sets["broker.session.timeout.ms"]) / 1000  # type: ignore[call-overload]
    wait_for(lambda: all(produce(cluster, leaders, p, b"too late") == ErrorCode.NOT_LEADER_OR_FOLLOWER
                         for p in leaders), ttl + 10, "every leader stopped, with a retriable error")
    assert time.monotonic() - lost_at >= ttl - 1.0  # not before the lease could have expired
    cluster.etcd.start()
    wait_for(lambda: all(produce(cluster, leaders, p, b"back") == 0 for p in leaders), 30,
             "the nodes lead again once etcd answers")
    for node in cluster.nodes.values():
        assert "etcd does not answer" in node.log()
