"""A node paused past its lease stops serving everything it led before it could answer again.

The test pauses a node with SIGSTOP until etcd has expired its lease, lets another node take
its partitions over (an operator's unclean reassignment: with one replica nothing else holds
the data), queues requests on a connection opened before the pause, resumes the node, and
shows that it answers none of them, nor any later one, as leader.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from cluster.model import COORDINATOR_TOPIC
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import build_records, encode_batch
from storage.layout import partition_dir
from tests.support.broker_process import REPO
from tests.support.clients import create_topic
from tests.support.cluster import Cluster, wait_for
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration


def produce_body(topic: str, partition: int, value: bytes = b"written while paused") -> dict[str, object]:
    batch = encode_batch(build_records([(b"k", value)]), base_timestamp=int(time.time() * 1000))
    return {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}


def commit_body(group: str) -> dict[str, object]:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "fenced", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                          "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


def reassign(cluster: Cluster, spec: str, to: int) -> None:
    result = subprocess.run([sys.executable, "-m", "kcoord", "cluster", "reassign", spec, "--to", str(to), "--unclean",
                             "--etcd", cluster.etcd.endpoint, "--cluster-name", "test"],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_node_paused_past_its_lease_answers_nothing_as_leader_after_it_resumes(cluster: Cluster) -> None:
    for node in (1, 2, 3):
        cluster.start(node)
    cluster.wait_settled()
    create_topic(cluster.nodes[1].bootstrap, "fenced", 3)
    cluster.wait_settled()
    partition = next(p for p, leader in cluster.leaders("fenced").items() if leader == 3)
    led = cluster.image().leader_of(("fenced", partition))
    assert led is not None
    epoch_before = led.epoch
    group = cluster.group_on(3, "fenced-group")
    coordinator_partition = next(p for p, leader in cluster.leaders(COORDINATOR_TOPIC).items()
                                 if leader == 3 and cluster.coordinator_of(group) == 3)
    paused = cluster.nodes[3]
    assert paused.proc is not None
    with WireClient(paused.host, paused.port) as early:
        assert early.request(ApiKey.PRODUCE, 10, produce_body("fenced", partition, b"before the pause"))[
            "responses"][0]["partition_responses"][0]["error_code"] == 0
        paused.proc.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: 3 not in cluster.image().nodes, 30, "etcd expired the paused node's lease")
            reassign(cluster, f"fenced:{partition}", 2)
            reassign(cluster, f"{COORDINATOR_TOPIC}:{coordinator_partition}", 2)
            wait_for(lambda: cluster.leaders("fenced")[partition] in (1, 2)
                     and cluster.leaders(COORDINATOR_TOPIC)[_offsets_partition(cluster, group)] in (1, 2), 30,
                     "another node leads what node 3 led")
            takeover = cluster.image().leader_of(("fenced", partition))
            assert takeover is not None
            new_leader = cluster.nodes[takeover.leader]
            with WireClient(new_leader.host, new_leader.port) as leader:
                taken = leader.request(ApiKey.PRODUCE, 10, produce_body("fenced", partition, b"after the takeover"))[
                    "responses"][0]["partition_responses"][0]
            assert (taken["error_code"], taken["base_offset"]) == (0, 0)  # an empty log: the unclean move
            # Queued while the node is stopped: read the moment it wakes, before it can hear from etcd.
            produced = early.send(ApiKey.PRODUCE, 10, produce_body("fenced", partition))
            committed = early.send(ApiKey.OFFSET_COMMIT, 8, commit_body(group))
        finally:
            paused.proc.send_signal(signal.SIGCONT)
        reply = early.receive(ApiKey.PRODUCE, 10, produced)["responses"][0]["partition_responses"][0]
        assert reply["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        commit = early.receive(ApiKey.OFFSET_COMMIT, 8, committed)["topics"][0]["partitions"][0]
        assert commit["error_code"] == ErrorCode.NOT_COORDINATOR

    # From then on: it re-registers, and leads none of what it lost, unless the controller has
    # meanwhile given a partition back to it through a move (a copy of the new leader's log, at a
    # new epoch): it never answers from its own stale log.
    wait_for(lambda: 3 in cluster.image().nodes, 30, "the resumed node registered again")
    with WireClient(paused.host, paused.port) as late:
        reply = late.request(ApiKey.PRODUCE, 10, produce_body("fenced", partition, b"after the resume"))[
            "responses"][0]["partition_responses"][0]
        if reply["error_code"] == 0:
            moved_back = cluster.image().leader_of(("fenced", partition))
            assert moved_back is not None and moved_back.leader == 3 and moved_back.epoch > takeover.epoch
        else:
            assert reply["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert reply["current_leader"]["leader_id"] in (1, 2, 3)
        commit = late.request(ApiKey.OFFSET_COMMIT, 8, commit_body(group))["topics"][0]["partitions"][0]
        if commit["error_code"] == 0:
            assert cluster.coordinator_of(group) == 3, "answered as coordinator only once it leads the group again"
        else:
            assert commit["error_code"] == ErrorCode.NOT_COORDINATOR
    # The controller may give the partition back to node 3 later: only through a move, at a new epoch,
    # with the new leader's log.
    cluster.wait_settled()
    image = cluster.image()
    leadership = image.leader_of(("fenced", partition))
    assert leadership is not None and leadership.epoch > epoch_before
    current = cluster.nodes[leadership.leader]
    with WireClient(current.host, current.port) as reader:
        fetched = reader.request(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "fenced", "partitions": [{"partition": partition, "fetch_offset": 0,
                                                          "partition_max_bytes": 1 << 20}]}]})
    records = fetched["responses"][0]["partitions"][0]["records"]
    assert b"after the takeover" in records and b"written while paused" not in records
    # (what node 3 acknowledged before the pause went with it: the unclean move gave its data up)
    if leadership.leader != 3:
        assert not partition_dir(paused.data_dir, "fenced", partition).exists(), "the stale copy was dropped"
    assert "etcd no longer has this node's lease" in paused.log()


def _offsets_partition(cluster: Cluster, group: str) -> int:
    from protocol.consumer_offsets import partition_for

    return partition_for(group, int(cluster.sets["offsets.topic.num.partitions"]))  # type: ignore[call-overload]
