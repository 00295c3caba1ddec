"""The bench's reference for depth-1 commits: kcoord without its fsync, and the disk's fdatasync.

``Bench.fsync_reference`` runs the depth-1 one-partition OffsetCommit rows against a real
kcoord started with ``log.flush.policy=os`` and records them beside the two brokers;
``fsync_reference_lines`` puts them in the report with the fdatasync latency measured in
the same run.
"""

from __future__ import annotations

from pathlib import Path

from bench.run import (
    NO_FSYNC,
    REFERENCE_CONNS,
    Bench,
    SyncLatency,
    fdatasync_latency,
    fsync_reference_lines,
    reference_shape,
)
from storage import aio


def test_fdatasync_latency_measures_syncs_and_leaves_nothing_behind(tmp_path: Path) -> None:
    latency = fdatasync_latency(tmp_path, syncs=50)
    assert 0 < latency.median <= latency.p99 < 5.0
    if aio.available(str(tmp_path)):  # the same syncs through the kernel's AIO worker, as kcoord runs them
        assert latency.aio_median is not None and latency.submit_median is not None
        assert 0 < latency.submit_median <= latency.aio_median < 5.0
    else:
        assert latency.aio_median is None and latency.submit_median is None
    assert list(tmp_path.iterdir()) == []


def _bench_with(values: dict[str, float], fdatasync: list[SyncLatency] | None = None) -> Bench:
    bench = Bench(1.0, 1, [10], with_tansu=True)
    for broker, rate in values.items():
        for conns in REFERENCE_CONNS:
            shape = reference_shape(conns)
            bench.record(f"OffsetCommit requests/s ({shape})", "req/s", True, broker, rate * conns, 0.05)
            bench.record(f"OffsetCommit p50 latency ({shape})", "ms", False, broker, 1000 / rate)
    bench.fdatasync = fdatasync or []
    return bench


def test_the_reference_table_sets_kcoord_without_fsync_against_tansu() -> None:
    bench = _bench_with({"kcoord": 2000, NO_FSYNC: 5000, "tansu": 4000},
                        [SyncLatency(60e-6, 110e-6, 150e-6, 40e-6), SyncLatency(64e-6, 130e-6, 170e-6, 50e-6)])
    lines = fsync_reference_lines(bench)
    rows = [line for line in lines if line.startswith("| 8 conn")]
    # kcoord, no fsync, Tansu, ratio (no fsync / Tansu), CPU us/req without fsync, p50 of each
    assert rows == ["| 8 conn, 1 part/req, depth 1 | 16,000 | 40,000 | 32,000 | 1.25 | 50.00 | 0.500 / 0.200 / 0.250 |"]
    assert sum(line.startswith("| ") and "depth 1" in line for line in lines) == len(REFERENCE_CONNS)
    assert lines[-1].endswith(
        "62 us median, 120 us at the 99th percentile (median of 2 rounds, half of 2,000 syncs each). The same sync "
        "as kcoord runs it, through the kernel's AIO worker (the other half): 160 us median from `io_submit` until "
        "its completion is read, of which `io_submit` itself takes 45 us on the calling thread.")
    without_aio = fsync_reference_lines(_bench_with({"kcoord": 2000, NO_FSYNC: 5000, "tansu": 4000},
                                                    [SyncLatency(60e-6, 110e-6)]))
    assert without_aio[-1].endswith("(median of 1 round, 2,000 syncs each).")


def test_no_reference_rows_means_no_section() -> None:
    assert fsync_reference_lines(_bench_with({"kcoord": 2000, "tansu": 4000})) == []


def test_the_reference_run_commits_against_a_real_broker_without_fsync() -> None:
    bench = Bench(0.3, 1, [10], with_tansu=False)
    bench.fsync_reference()
    assert bench.failures == []
    assert len(bench.fdatasync) == 1
    for conns in REFERENCE_CONNS:
        figure = bench.figures[f"OffsetCommit requests/s ({reference_shape(conns)})"]
        assert (figure.value(NO_FSYNC) or 0) > 0
        assert figure.value("kcoord") is None  # recorded beside kcoord's own row, not in it
        assert (figure.cpu(NO_FSYNC) or 0) > 0
