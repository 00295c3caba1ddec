"""The bench's view of kcoord's fsync rounds in the OffsetCommit rows.

``Bench.offsets_workloads`` reads kcoord's fsync histogram from its /metrics before and
after each OffsetCommit row; ``sync_round_lines`` puts the rounds per second, their mean
duration and the commits per round in the report.
"""

from __future__ import annotations

import pytest
import trio

from bench import loadgen
from bench.brokers import free_port, start_kcoord
from bench.run import KCOORD_SETTINGS, Bench, SyncRounds, fsync_histogram, sync_round_lines, sync_rounds


def test_a_real_broker_under_commits_reports_the_rounds_that_made_them_durable() -> None:
    broker = start_kcoord(KCOORD_SETTINGS, metrics_port=free_port())
    try:
        trio.run(loadgen.create_topic, broker.address, "bench", 1)
        before = fsync_histogram(broker)
        commits: list[loadgen.FactorySpec] = [("commit_factory", (f"sync-rounds-{i}", "bench", 1)) for i in range(2)]
        result = loadgen.run_processes(broker.address, commits, 0.3, 1, 1)
        after = fsync_histogram(broker)
    finally:
        broker.stop()
    assert result.requests > 0 and result.errors == 0
    rounds = sync_rounds(before, after, result.requests, result.seconds)
    assert rounds is not None
    # Every commit was answered only once durable, so some round covered it; none covers more
    # than the commits in flight at once (two connections at depth 1).
    assert 1 <= after[0] - before[0] <= result.requests
    assert 1.0 <= rounds.commits_per_round <= 2.0
    assert 0 < rounds.mean_seconds < 1.0 and rounds.per_second > 0


def test_no_rounds_read_means_none() -> None:
    assert sync_rounds((5.0, 0.01), (5.0, 0.01), 100, 1.0) is None
    assert sync_rounds((5.0, 0.01), (7.0, 0.02), 0, 1.0) is None
    rounds = sync_rounds((5.0, 0.01), (9.0, 0.03), 20, 2.0)
    assert rounds is not None
    assert (rounds.per_second, rounds.mean_seconds, rounds.commits_per_round) == pytest.approx((2.0, 0.005, 5.0))


def test_the_report_gives_each_commit_row_its_rounds() -> None:
    bench = Bench(1.0, 3, [10], with_tansu=True)
    assert sync_round_lines(bench) == []
    shape = "8 conn, 1 part/req, depth 1"
    bench.sync_rounds[shape] = [SyncRounds(1200, 350e-6, 5.5), SyncRounds(1000, 400e-6, 6.0),
                                SyncRounds(1100, 300e-6, 4.0)]
    lines = sync_round_lines(bench)
    assert lines[0] == "### kcoord's fsync rounds in the OffsetCommit rows"
    assert lines[-1] == f"| {shape} | 1,100 | 350 | 5.50 |"  # medians over the rounds
