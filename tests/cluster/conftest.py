"""A real etcd per test, and a cluster of real ``kcoord serve`` nodes on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.local import EtcdMissing, EtcdServer, etcd_binary
from tests.support.cluster import Cluster


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    try:
        etcd_binary()
    except EtcdMissing as exc:
        pytest.skip(str(exc))
    server = EtcdServer(tmp_path / "etcd").start()
    yield server
    server.kill()


@pytest.fixture
def cluster(tmp_path: Path, etcd: EtcdServer) -> Iterator[Cluster]:
    running = Cluster(tmp_path, etcd)
    yield running
    for node_id, proc in running.nodes.items():
        if proc.proc is not None and proc.proc.poll() is None:
            code = proc.stop()
            assert code == 0, f"node {node_id} exited with {code}:\n{proc.log()}"
