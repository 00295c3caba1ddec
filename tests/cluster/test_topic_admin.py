"""CreateTopics, CreatePartitions and DeleteTopics work when sent to any node, the controller
or not: the node writes the change to etcd before it answers, and every node's Metadata
shows it."""

from __future__ import annotations

from typing import Any

import pytest

from protocol.api_keys import ApiKey
from tests.support.cluster import Cluster, wait_for
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

TOPIC = "anywhere"


def ask(cluster: Cluster, node: int, api: ApiKey, version: int, body: dict[str, Any]) -> dict[str, Any]:
    proc = cluster.nodes[node]
    with WireClient(proc.host, proc.port) as client:
        reply: dict[str, Any] = client.request(api, version, body)
    return reply


def metadata_partitions(cluster: Cluster, node: int) -> dict[int, int] | None:
    """The topic's partition -> leader in ``node``'s Metadata; None when it has no such topic."""
    reply = ask(cluster, node, ApiKey.METADATA, 9, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False,
                                                    "include_topic_authorized_operations": False})
    topic = reply["topics"][0]
    if topic["error_code"] != 0:
        return None
    return {p["partition_index"]: p["leader_id"] for p in topic["partitions"]}


def test_topics_are_created_grown_and_deleted_through_any_node(cluster: Cluster) -> None:
    for node in (1, 2, 3):
        cluster.start(node)
    cluster.wait_settled()
    controller = cluster.image().controller
    creator, grower = [n for n in (1, 2, 3) if n != controller]

    created = ask(cluster, creator, ApiKey.CREATE_TOPICS, 4, {
        "topics": [{"name": TOPIC, "num_partitions": 3, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 10000, "validate_only": False})
    assert created["topics"][0]["error_code"] == 0
    cluster.wait_settled()
    assert set(cluster.leaders(TOPIC).values()) == {1, 2, 3}

    grown = ask(cluster, grower, ApiKey.CREATE_PARTITIONS, 1, {
        "topics": [{"name": TOPIC, "count": 6, "assignments": None}], "timeout_ms": 10000, "validate_only": False})
    assert grown["results"][0]["error_code"] == 0
    cluster.wait_settled()
    leaders = cluster.leaders(TOPIC)
    assert sorted(leaders) == list(range(6)) and set(leaders.values()) == {1, 2, 3}
    for node in (1, 2, 3):
        wait_for(lambda n=node: metadata_partitions(cluster, n) == leaders, 10,
                 f"node {node}'s Metadata shows the six partitions and their leaders")

    deleted = ask(cluster, controller or 1, ApiKey.DELETE_TOPICS, 4, {"topic_names": [TOPIC], "timeout_ms": 10000})
    assert deleted["responses"][0]["error_code"] == 0
    wait_for(lambda: TOPIC not in cluster.image().topics and not cluster.leaders(TOPIC), 10,
             "the topic and its placement gone from etcd")
    for node in (1, 2, 3):
        wait_for(lambda n=node: metadata_partitions(cluster, n) is None, 10, f"node {node} forgot the topic")
