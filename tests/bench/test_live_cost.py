"""What a live broker executes per request (``bench.live_cost``): its difference of two runs.

The tracer's counts come from a real broker process under the load generator's requests;
each request is read by the request reader exactly once, so over the difference of two runs
of different lengths that reader's calls per request come out at exactly one, whatever the
start-up, the connections and the sync rounds cost. valgrind's count is read from the text
valgrind prints as the process exits.
"""

from __future__ import annotations

import pytest

from bench import live_cost
from bench.commit_cost import instructions_counted
from bench.run import KCOORD_SETTINGS


@pytest.mark.integration
@pytest.mark.parametrize("fetch", [False, True])
def test_the_tracer_counts_one_read_per_request_over_the_difference_of_two_runs(fetch: bool) -> None:
    ops, calls = live_cost.bytecodes(fetch, connections=2, depth=2, partitions=3, requests=10,
                                     settings=KCOORD_SETTINGS)
    reader = "read_offset_fetch" if fetch else "read_offset_commit"
    assert calls[("broker/coordinator/packed.py", reader)] == 1.0
    assert calls[("broker/router.py", "Router.route")] == 1.0
    # The connection's own code runs too: what in-process counts leave out.
    assert ops[("broker/server.py", "Connection._read_once")] > 0
    assert sum(ops.values()) > 1000


def test_the_instruction_count_is_read_from_valgrinds_summary() -> None:
    output = "==12== Cachegrind, a cache and branch-prediction profiler\n==12== \n==12== I   refs:      2,357,237,292\n"
    assert instructions_counted(output) == 2_357_237_292
    with pytest.raises(RuntimeError, match="no instruction count"):
        instructions_counted("==12== killed\n")
