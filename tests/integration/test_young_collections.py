"""The broker walks Python's youngest generation rarely (``broker.heap``), and says how often.

A 100-partition OffsetCommit makes a few objects per partition that all die with the
reply. With Python's default threshold (700) each such commit set off several walks of
the youngest generation; ``kcoord serve`` raises it. Counted through the broker's own
``python_gc_collections_total``, so the test holds on a busy machine: about 30 walks for
these commits with the default, none or one or two with the broker's setting.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.clients import create_topic
from tests.support.prometheus import scrape
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

PARTITIONS = 100
CONNECTIONS, DEPTH = 4, 8
COMMITS = 1280


@pytest.fixture
def metered(tmp_path: Path) -> Iterator[tuple[BrokerProcess, str]]:
    proc = BrokerProcess(tmp_path / "data", extra_args=["--metrics-listen", "127.0.0.1:0"]).start()
    try:
        url = proc.http_url()
        yield proc, url
    finally:
        assert proc.stop() == 0, proc.log()


def commit_body(group: str, offset: int) -> dict[str, object]:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "wide", "partitions": [
                {"partition_index": p, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": None} for p in range(PARTITIONS)]}]}


def test_pipelined_large_commits_seldom_walk_the_youngest_generation(metered: tuple[BrokerProcess, str]) -> None:
    """Four connections keep eight 100-partition commits each in flight, so many requests'
    objects are alive at once, as under load."""
    proc, base = metered
    create_topic(proc.bootstrap, "wide", PARTITIONS)
    clients = [WireClient(proc.host, proc.port) for _ in range(CONNECTIONS)]
    try:
        before = scrape(base)
        for burst in range(COMMITS // (CONNECTIONS * DEPTH)):
            sent = [[client.send(8, 8, commit_body(f"wide-{n}", burst * DEPTH + i)) for i in range(DEPTH)]
                    for n, client in enumerate(clients)]
            for client, ids in zip(clients, sent, strict=True):
                for correlation_id in ids:
                    body = client.receive(8, 8, correlation_id)
                    assert {p.error_code for t in body.topics for p in t.partitions} == {0}
        after = scrape(base)
    finally:
        for client in clients:
            client.close()
    young = (after.get("python_gc_collections_total", generation="0")
             - before.get("python_gc_collections_total", generation="0"))
    assert young < COMMITS / 100, f"{young:.0f} walks of the youngest generation for {COMMITS} commits"
