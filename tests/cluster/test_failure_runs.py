"""The cluster's longer failure runs (``make cluster-failures``; marked slow, so ``make test``
leaves them out and runs the short versions in the other files).

Groups coordinated by every node commit without pause while, round after round, each node
in turn is stopped with SIGSTOP past its lease and resumed, and etcd itself is killed past
the leases and started again. Nothing is reassigned: each node comes back to the
partitions it holds, re-claims them at a new epoch and loads their groups from its log.
At the end every group's committed offset is the last one it was acknowledged: no pause,
fencing or outage lost an acknowledged commit, and every group commits again after each.
"""

from __future__ import annotations

import signal
import time

import pytest

from cluster.model import COORDINATOR_TOPIC
from protocol.consumer_offsets import partition_for
from tests.cluster.test_moves import Committer, committed
from tests.support.clients import create_topic
from tests.support.cluster import Cluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

ROUNDS = 2


def _all_commit_after(cluster: Cluster, committers: list[Committer], moment: float, what: str) -> None:
    try:
        wait_for(lambda: all(c.acked_at and c.acked_at[-1] > moment for c in committers), 90,
                 f"every group committing again after {what}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnosis(cluster, committers, moment)}") from None


def _diagnosis(cluster: Cluster, committers: list[Committer], moment: float) -> str:
    """What each stuck group saw, who etcd says coordinates it, and what that node logged of it."""
    partitions = int(cluster.sets["offsets.topic.num.partitions"])  # type: ignore[call-overload]
    now = time.monotonic()
    lines = []
    for c in committers:
        if c.acked_at and c.acked_at[-1] > moment:
            continue
        part = partition_for(c.group, partitions)
        last = f"{now - c.acked_at[-1]:.1f}s ago" if c.acked_at else "never"
        lines.append(f"group {c.group} ({COORDINATOR_TOPIC}-{part}, coordinator per etcd: node "
                     f"{cluster.coordinator_of(c.group)}): acked {c.acked}, last ack {last}, "
                     f"last failures {c.failures[-3:]}")
        for node_id, node in cluster.nodes.items():
            mine = [line for line in node.log().splitlines() if f"{COORDINATOR_TOPIC}-{part}" in line]
            lines.extend(f"  node {node_id}: {line}" for line in mine[-8:])
    lines.append(f"partitions: {cluster.status()['partitions']}")
    return "\n".join(lines)


def test_repeated_pauses_and_etcd_outages_under_commit_load_lose_no_acknowledged_commit(cluster: Cluster) -> None:
    for node in (1, 2, 3):
        cluster.start(node)
    cluster.wait_settled()
    bootstrap = cluster.nodes[1].bootstrap
    create_topic(bootstrap, "t", 3)
    cluster.wait_settled()
    groups = [cluster.group_on(node, f"run{node}") for node in (1, 2, 3)]
    committers = [Committer(bootstrap, g).start() for g in groups]
    epochs: dict[int, int] = {}
    try:
        wait_for(lambda: all(c.acked >= 20 for c in committers), 60, "every group committing")
        for _ in range(ROUNDS):
            for node in (1, 2, 3):
                proc = cluster.nodes[node].proc
                assert proc is not None
                led = [row for row in cluster.status()["partitions"] if row["leader"] == node]
                proc.send_signal(signal.SIGSTOP)
                try:
                    wait_for(lambda n=node: n not in cluster.image().nodes, 30,
                             f"etcd expired paused node {node}'s lease")
                finally:
                    proc.send_signal(signal.SIGCONT)
                cluster.wait_settled(60)
                after = {(r["topic"], r["partition"]): r for r in cluster.status()["partitions"]}
                for row in led:
                    now = after[(row["topic"], row["partition"])]
                    assert now["epoch"] > row["epoch"], f"{row['topic']}-{row['partition']} led again at a new epoch"
                _all_commit_after(cluster, committers, time.monotonic(), f"node {node}'s pause")
            cluster.etcd.kill()
            ttl = int(cluster.sets["broker.session.timeout.ms"]) / 1000  # type: ignore[call-overload]
            time.sleep(ttl + 1)  # past every lease: nothing may be led now
            cluster.etcd.start()
            cluster.wait_settled(60)
            _all_commit_after(cluster, committers, time.monotonic(), "etcd's outage")
        epochs = {row["partition"]: row["epoch"] for row in cluster.status()["partitions"]
                  if row["topic"] == COORDINATOR_TOPIC}
    finally:
        for committer in committers:
            committer.stop()
    for committer in committers:
        assert committed(bootstrap, committer.group) == committer.acked, (
            f"group {committer.group} lost acknowledged commits (failures: {committer.failures[:3]})")
    assert epochs and all(epoch > 0 for epoch in epochs.values())
    for node in cluster.nodes.values():
        assert "etcd no longer has this node's lease" in node.log()
