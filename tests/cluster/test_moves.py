"""Partitions move while groups commit: a fourth node joins and takes a share, an operator
reassigns coordinator partitions to it, and no acknowledged commit is lost."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from cluster.model import COORDINATOR_TOPIC
from protocol.consumer_offsets import partition_for
from tests.support.broker_process import REPO
from tests.support.clients import create_topic
from tests.support.cluster import Cluster, wait_for

pytestmark = pytest.mark.integration


class Committer:
    """A group committing offset 1, 2, 3... to one partition, as fast as it is answered."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.acked = 0
        self.acked_at: list[float] = []
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
                                 request_timeout_ms=10000, retry_backoff_ms=50)
        tp = TopicPartition("t", 0)
        n = 0
        while not self._stop.is_set():
            n += 1
            try:
                consumer.commit({tp: OffsetAndMetadata(n, "", -1)})
            except Exception as exc:  # a commit may fail while its coordinator moves; the next one retries
                self.failures.append(repr(exc)[:120])
                continue
            self.acked = n
            self.acked_at.append(time.monotonic())
        consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()


def committed(bootstrap: str, group: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return consumer.committed(TopicPartition("t", 0)) or 0
    finally:
        consumer.close()


def test_a_fourth_node_takes_partitions_under_commit_load_and_no_acknowledged_commit_is_lost(
        cluster: Cluster) -> None:
    for node in (1, 2, 3):
        cluster.start(node)
    cluster.wait_settled()
    bootstrap = cluster.nodes[1].bootstrap
    create_topic(bootstrap, "t", 3)
    cluster.wait_settled()
    groups = [cluster.group_on(node, f"load{node}", set()) for node in (1, 2, 3)]
    groups += [cluster.group_on(node, f"more{node}", set(groups)) for node in (1, 2, 3)]
    committers = [Committer(bootstrap, g).start() for g in groups]
    try:
        wait_for(lambda: all(c.acked >= 20 for c in committers), 60, "every group committing")
        cluster.start(4)
        # The controller gives the new node its share; then an operator moves two groups' coordinators there.
        wait_for(lambda: cluster.settled() and any(
            row["leader"] == 4 for row in cluster.status()["partitions"]), 60, "node 4 leads a share")
        partitions = int(cluster.sets["offsets.topic.num.partitions"])  # type: ignore[call-overload]
        moved = sorted({partition_for(g, partitions) for g in groups[:2]})
        moving = [p for p in moved if cluster.leaders(COORDINATOR_TOPIC)[p] != 4]
        if moving:
            result = subprocess.run(
                [sys.executable, "-m", "kcoord", "cluster", "reassign",
                 f"{COORDINATOR_TOPIC}:{','.join(map(str, moving))}", "--to", "4", "--etcd", cluster.etcd.endpoint,
                 "--cluster-name", "test", "--wait", "30"], cwd=REPO, capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, result.stdout + result.stderr
        assert all(cluster.leaders(COORDINATOR_TOPIC)[p] == 4 for p in moved)
        moved_at = time.monotonic()
        wait_for(lambda: all(c.acked_at and c.acked_at[-1] > moved_at + 0.5 for c in committers), 60,
                 "every group committing again after the moves")
    finally:
        for committer in committers:
            committer.stop()
    for committer in committers:
        assert committed(bootstrap, committer.group) >= committer.acked, (
            f"group {committer.group} lost acknowledged commits (failures: {committer.failures[:3]})")
    assert {cluster.coordinator_of(g) for g in groups[:2]} == {4}
