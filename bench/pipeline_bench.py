"""Pipeline throughput: the ``history`` and ``as-of`` Spark jobs over a large coordinator log.

Writes N OffsetCommit records straight into segment files with the project's encoders
(no broker: a batch per group commit of all its partitions, as the coordinator writes
them), then times each job on a local Spark session and reports log records per second.
Results go to docs/benchmarks-pipeline.md (``make bench`` owns docs/benchmarks.md).

    python -m bench.pipeline_bench                    # 10M records, local[2]
    python -m bench.pipeline_bench --records 1000000  # a quicker run
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.brokers import REPO
from protocol.consumer_offsets import OffsetKey, OffsetValue, encode_key, encode_offset_value, partition_for
from protocol.records import build_records, encode_batch
from storage.layout import segment_name

COORDINATOR_PARTITIONS = 8
GROUPS = 200
PARTITIONS_PER_GROUP = 10
SEGMENT_BYTES = 64 << 20
T0 = 1_700_000_000_000
#: Milliseconds between two commits in the generated log.
COMMIT_SPACING_MS = 10


class _SegmentWriter:
    """Appends encoded batches to one coordinator partition's segment files, rolling by size."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.next_offset = 0
        self.size = 0
        self.file = open(directory / segment_name(0), "wb")

    def append(self, records: list[tuple[bytes, bytes]], timestamp: int) -> None:
        data = encode_batch(build_records(records), base_offset=self.next_offset, base_timestamp=timestamp)
        if self.size and self.size + len(data) > SEGMENT_BYTES:
            self.file.close()
            self.file = open(self.directory / segment_name(self.next_offset), "wb")
            self.size = 0
        self.file.write(data)
        self.size += len(data)
        self.next_offset += len(records)

    def close(self) -> None:
        self.file.close()


def generate(data_dir: Path, records: int) -> tuple[int, int]:
    """Write ``records`` commit records; returns (records written, last timestamp)."""
    (data_dir / "__consumer_offsets.meta.json").parent.mkdir(parents=True, exist_ok=True)
    (data_dir / "__consumer_offsets.meta.json").write_text(f'{{"partitions": {COORDINATOR_PARTITIONS}}}')
    writers: dict[int, _SegmentWriter] = {}
    keys = {
        (g, p): encode_key(OffsetKey(f"group-{g}", "orders", p))
        for g in range(GROUPS) for p in range(PARTITIONS_PER_GROUP)
    }
    written = 0
    commit = 0
    ts = T0
    while written < records:
        g = commit % GROUPS
        group = f"group-{g}"
        ts = T0 + commit * COMMIT_SPACING_MS
        n = min(PARTITIONS_PER_GROUP, records - written)
        batch = [(keys[(g, p)], encode_offset_value(OffsetValue(commit + p, 0, "", ts, -1))) for p in range(n)]
        cp = partition_for(group, COORDINATOR_PARTITIONS)
        writer = writers.get(cp)
        if writer is None:
            writer = writers[cp] = _SegmentWriter(data_dir / f"__consumer_offsets-{cp}")
        writer.append(batch, ts)
        written += n
        commit += 1
    for writer in writers.values():
        writer.close()
    return written, ts


def _timed(run: Callable[[], Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    result = run()
    return time.perf_counter() - began, result


def measure(records: int, master: str, workdir: Path) -> list[str]:
    from pipeline import history, jobs
    from pipeline.spark import build_session

    data_dir = workdir / "data"
    gen_s, (written, last_ts) = _timed(lambda: generate(data_dir, records))
    log_bytes = sum(f.stat().st_size for f in data_dir.rglob("*.log"))
    segments = len(list(data_dir.rglob("*.log")))
    print(f"generated {written:,} records ({log_bytes / 1e6:,.0f} MB, {segments} segments) in {gen_s:.1f}s",
          file=sys.stderr)
    start_s, spark = _timed(lambda: build_session(master, {"spark.ui.showConsoleProgress": "false"}))
    d = str(data_dir)
    middle = T0 + (last_ts - T0) // 2
    rows: list[tuple[str, float, int]] = []
    history_s, _ = _timed(lambda: jobs.history(jobs.records(spark, d)).write.mode("overwrite")
                          .partitionBy("group").parquet(str(workdir / "history")))
    rows.append(("history -> Parquet partitioned by group (all records)", history_s, written))
    as_of_s, result = _timed(lambda: jobs.as_of(jobs.records(spark, d), last_ts).collect())
    assert len(result) == GROUPS * PARTITIONS_PER_GROUP, len(result)
    rows.append(("as-of, latest time (every record read)", as_of_s, written))
    mid_s, _ = _timed(lambda: jobs.as_of(jobs.records(spark, d), middle).collect())
    rows.append(("as-of, middle of the log (later segments and batches skipped)", mid_s, written))
    group_s, one = _timed(lambda: jobs.as_of(jobs.records(spark, d, "group-7"), last_ts).collect())
    assert len(one) == PARTITIONS_PER_GROUP
    rows.append(("as-of --group (one coordinator partition read)", group_s, written))
    spark.stop()
    oracle_s, found = _timed(lambda: history.offsets_as_of(data_dir, last_ts, "group-7"))
    assert len(found["group-7"]) == PARTITIONS_PER_GROUP
    rows.append(("plain Python offsets_as_of(group) (restore's reader)", oracle_s, written))

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    import pyspark

    lines = [
        "# Pipeline benchmarks",
        "",
        "Produced by `python -m bench.pipeline_bench` (`bench/pipeline_bench.py`). The log is",
        f"{written:,} OffsetCommit records ({log_bytes / 1e6:,.0f} MB in {segments} segment files over",
        f"{COORDINATOR_PARTITIONS} coordinator partitions), {GROUPS} groups committing {PARTITIONS_PER_GROUP}"
        " partitions per batch,",
        f"written straight to segment files with the project's encoders in {gen_s:.1f} s. Each job runs on",
        f"Spark `{master}`; *records/s* is log records divided by the job's wall time, Spark's",
        "planning included. Starting the session is not included"
        f" (it took {start_s:.1f} s).",
        "",
        "| job | seconds | log records/s |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {seconds:.1f} | {count / seconds:,.0f} |" for name, seconds, count in rows]
    lines += [
        "",
        "## Machine and versions",
        "",
        f"- CPU: {cpu}, {os.cpu_count()} cores; load average at the end "
        f"{os.getloadavg()[0]:.1f}",
        f"- Python {platform.python_version()}, PySpark {pyspark.__version__}",
        "",
        "## Reproduce",
        "",
        "```sh",
        "python -m bench.pipeline_bench                    # 10M records",
        "python -m bench.pipeline_bench --records 1000000  # about a tenth of the time",
        "```",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000_000, help="commit records to generate")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "benchmarks-pipeline.md")
    parser.add_argument("--workdir", type=Path, help="where to generate (default: a temporary directory)")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kcoord-pipeline-bench-"))
    try:
        lines = measure(args.records, args.master, workdir)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    text = "\n".join(lines) + "\n"
    print(text)
    args.output.write_text(text)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
