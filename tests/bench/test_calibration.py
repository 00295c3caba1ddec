"""The bench's calibration: kcoord's own request path timed in process, warm and on cold caches.

``commit_cost.cold_cost`` routes real OffsetCommit frames through a broker built as
``kcoord serve`` builds it, timing each alone, and checks every commit was applied;
``calibration_lines`` puts its figures in the report beside the warm calibration. The
workloads ``--instructions`` counts under valgrind run here without it: each checks its
last reply.
"""

from __future__ import annotations

import pytest

from bench import commit_cost
from bench.run import Bench, calibration_lines


def test_cold_cost_times_every_kind_of_request_and_applies_every_commit() -> None:
    warm, cold = commit_cost.cold_cost(requests=6, block=3, cleared=(1 << 20, 2 << 20))
    assert 0 < warm < 1.0
    assert len(cold) == 2 and all(0 < c < 1.0 for c in cold)


def test_the_report_gives_the_cold_figures_beside_the_calibration() -> None:
    bench = Bench(1.0, 1, [10], with_tansu=True)
    assert calibration_lines(bench) == []
    bench.calibration = [(40e-6, 3e-6), (50e-6, 3.5e-6)]
    bench.cold = [(41e-6, [45e-6, 200e-6]), (52e-6, [60e-6, 230e-6])]
    lines = calibration_lines(bench)
    assert len(lines) == 2
    assert "40.0 and 50.0 us of CPU per one-partition OffsetCommit, 3.00 and 3.50 us per additional offset" in lines[0]
    assert lines[1].startswith("- The same one-partition OffsetCommit timed one request at a time, in process: "
                               "41.0 and 52.0 us of CPU right after the one before; after 2 MiB of other memory "
                               "was read, 45.0 and 60.0 us; after 64 MiB of other memory was read, 200.0 and 230.0 us")


@pytest.mark.parametrize("workload", ["commits", "fetches", "heartbeats", "consumer heartbeats"])
def test_every_workload_counted_with_valgrind_runs_and_is_answered(workload: str) -> None:
    if workload == "commits":
        commit_cost.route_only(8, 3, 5)
    elif workload == "fetches":
        commit_cost.route_only(8, 3, 5, fetch=True)
    elif workload == "heartbeats":
        commit_cost.route_heartbeats(5)
    else:
        commit_cost.route_heartbeats(5, consumer=True)
