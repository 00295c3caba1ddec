"""Start-up load time and resident memory per stored offset (kcoord only).

Writes N OffsetCommit records straight into a coordinator log with the storage layer
(no broker involved), then times ``kcoord serve`` from exec until it accepts
connections, and reads its resident memory once loaded: first with no snapshot (the
whole log is replayed), then again after that broker's clean shutdown wrote the
coordinator snapshot (docs/storage.md), which the second start-up loads.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from bench.brokers import start_kcoord
from protocol.consumer_offsets import OffsetKey, OffsetValue, encode_key, encode_offset_value
from storage.coordinator_log import CoordinatorLog

PARTITIONS_PER_GROUP = 100
RECORDS_PER_BATCH = 100


def write_log(data_dir: Path, records: int) -> int:
    """N distinct offsets: groups of 100 partitions each; returns the number written."""
    log = CoordinatorLog(data_dir, 50, 104857600)
    written = 0
    now = int(time.time() * 1000)
    group_no = 0
    while written < records:
        group = f"group-{group_no}"
        batch = []
        for p in range(min(PARTITIONS_PER_GROUP, records - written)):
            batch.append((encode_key(OffsetKey(group, "topic", p)),
                          encode_offset_value(OffsetValue(written + p, -1, "", now, -1))))
        log.append(group, batch, now)
        written += len(batch)
        group_no += 1
    log.sync()
    log.checkpoint()  # as a broker's clean stop leaves it: the segments hold everything
    log.close()
    return written


def baseline_rss() -> int:
    broker = start_kcoord()
    try:
        return broker.rss_bytes()
    finally:
        broker.stop()


def _start(data_dir: Path) -> tuple[float, int]:
    """Seconds from exec until listening, and resident memory once loaded; then a clean shutdown."""
    began = time.perf_counter()
    broker = start_kcoord(data_dir=data_dir)
    elapsed = time.perf_counter() - began
    try:
        return elapsed, broker.rss_bytes()
    finally:
        broker.stop()


def run(sizes: list[int]) -> list[str]:
    lines = ["## Start-up load and memory (kcoord)", "",
             "Tansu's memory storage keeps nothing across restarts, so these rows are kcoord's alone.",
             "*Replay*: no snapshot, the whole log is replayed. *Snapshot*: the next start-up, which loads",
             "the coordinator snapshot the first one wrote at its clean shutdown.", "",
             "| offset records | log size | start-up from | start-up to listening (s) | resident memory "
             "| bytes per offset |",
             "|---|---|---|---|---|---|"]
    base = baseline_rss()
    for size in sizes:
        workdir = Path(tempfile.mkdtemp(prefix="kcoord-startup-"))
        data_dir = workdir / "data"
        try:
            written = write_log(data_dir, size)
            log_bytes = sum(f.stat().st_size for f in data_dir.rglob("*.log"))
            for how in ("replay", "snapshot"):
                elapsed, rss = _start(data_dir)
                per = (rss - base) / written
                lines.append(f"| {written:,} | {log_bytes / 1e6:,.0f} MB | {how} | {elapsed:.2f} | "
                             f"{rss / 1e6:,.0f} MB | {per:,.0f} |")
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    lines += ["", f"Bytes per offset = (resident memory - {base / 1e6:.0f} MB of an empty broker) / offsets."]
    return lines
