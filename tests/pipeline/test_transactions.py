"""Transactional offset commits count in the pipeline only once their COMMIT marker is in the log.

One log, written with the storage layer, holds transactions that commit, abort,
interleave with each other and with plain commits, lose to a newer plain commit, are
cut short by a tombstone or a group deletion, and one that is still open at the end.
After every write the broker's own replay of the log (``CoordinatorLog.replay`` into a
coordinator shard, as start-up does) is taken as the truth at that time; the plain-Python
engine's as-of must equal it at every such time and between them, the data source's
reader must read what the plain reader reads, and the Spark jobs must equal the
plain-Python ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from broker.coordinator import GroupCoordinatorShard
from broker.coordinator.config import CoordinatorConfig
from broker.coordinator_load import TransactionalRecords
from pipeline import history
from pipeline.segments import COLUMNS, coordinator_segments, decode_segment
from storage.coordinator_log import CoordinatorLog
from tests.pipeline.logs import T0, LogWriter

Offsets = dict[str, dict[tuple[str, int], int]]
A, B, C, D, E, F, G = 100, 200, 300, 400, 500, 600, 700


def broker_offsets(log: CoordinatorLog) -> tuple[Offsets, Offsets]:
    """What the broker would load from the log now: (committed offsets, pending offsets by group)."""
    shard = GroupCoordinatorShard(CoordinatorConfig())
    for key, value, _ in log.replay(None, TransactionalRecords(shard, log)):
        shard.replay_bytes(key, value)
    committed = {g: {tp: v.offset for tp, v in tps.items()} for g, tps in shard.offsets.snapshot().items() if tps}
    pending: Offsets = {}
    for offsets in shard.pending_offsets.snapshot().values():
        for (group, topic, partition), value in offsets.items():
            pending.setdefault(group, {})[(topic, partition)] = value.offset
    return committed, pending


@dataclass
class TxnLog:
    writer: LogWriter
    #: (time of a write, what the broker's replay held right after it), in writing order.
    truth: list[tuple[int, Offsets]] = field(default_factory=list)
    pending: Offsets = field(default_factory=dict)

    def step(self, at: int, write: Any, *args: Any) -> None:
        write(*args, T0 + at)
        self.writer.log.sync()
        committed, self.pending = broker_offsets(self.writer.log)
        self.truth.append((T0 + at, committed))


def txn_log(data_dir: Path, *, compact: bool) -> TxnLog:
    """g lives in coordinator partition 1, h in partition 0 (of 2)."""
    log = TxnLog(LogWriter(data_dir, partitions=2))
    w = log.writer
    log.step(1000, w.commit, "g", {("t", 0): 10, ("t", 1): 20})
    log.step(2000, w.txn_commit, "g", A, {("t", 0): 11, ("t", 1): 21})
    log.step(3000, w.commit, "g", {("t", 1): 25})  # newer in the log than A's t-1
    log.step(4000, w.end_txn, "g", A, True)  # t-0 becomes 11; t-1 stays 25
    log.step(5000, w.txn_commit, "g", B, {("t", 0): 12})
    log.step(6000, w.end_txn, "g", B, False)  # aborted: t-0 stays 11
    # C and D interleave; C spans both partitions, each settled by its own marker
    log.step(7000, w.txn_commit, "g", C, {("t", 0): 13})
    log.step(7500, w.txn_commit, "g", D, {("t", 0): 14})
    log.step(8000, w.txn_commit, "h", C, {("u", 0): 5})
    log.step(8500, w.commit, "h", {("u", 1): 6})
    log.step(9000, w.end_txn, "g", D, True)  # t-0 becomes 14
    log.step(10000, w.end_txn, "g", C, True)  # C's t-0 is older in the log than D's: stays 14
    log.step(10500, w.end_txn, "h", C, True)  # h u-0 becomes 5
    # a tombstone drops E's pending offset, so its COMMIT shows nothing
    log.step(11000, w.txn_commit, "g", E, {("t", 1): 30})
    log.step(12000, w.delete_offsets, "g", [("t", 1)])
    log.step(13000, w.end_txn, "g", E, True)
    # DeleteGroups tombstones F's pending offset too
    log.step(14000, w.txn_commit, "h", F, {("u", 2): 7})
    log.step(15000, w.delete_group, "h", [("u", 0), ("u", 1), ("u", 2)])
    log.step(16000, w.end_txn, "h", F, True)
    # the same producer again, in a new transaction
    log.step(17000, w.txn_commit, "g", A, {("t", 0): 50, ("t", 2): 1})
    for i in range(12):  # rolls segments, so markers and their records are in different files
        log.step(17100 + 10 * i, w.commit, "k", {("v", 0): i})
    log.step(18000, w.end_txn, "g", A, True)
    log.step(19000, w.txn_commit, "g", G, {("t", 0): 99})  # never ends
    log.step(20000, w.commit, "g", {("t", 1): 40})
    if compact:
        w.compact(T0 + 30000)
        assert list((data_dir / "history").rglob("*.log")), "the cleaner moved nothing into history"
    w.close()
    return log


def offsets_at(data_dir: Path, at: int) -> Offsets:
    return {g: {tp: v["offset"] for tp, v in tps.items()} for g, tps in history.offsets_as_of(data_dir, at).items()}


def planned_rows(data_dir: Path) -> list[dict[str, Any]]:
    rows = [dict(zip(COLUMNS, row, strict=True))
            for segment in coordinator_segments(data_dir) for row in decode_segment(segment)]
    return sorted(rows, key=lambda r: (r["coordinator_partition"], r["log_offset"]))


@pytest.fixture(params=[False, True], ids=["as-written", "compacted-with-history"])
def written(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, TxnLog]:
    return tmp_path, txn_log(tmp_path, compact=request.param)


def test_as_of_equals_the_brokers_replay_at_every_write_and_between(written: tuple[Path, TxnLog]) -> None:
    data_dir, log = written
    for (at, truth), (later, _) in zip(log.truth, [*log.truth[1:], (T0 + 10**9, {})], strict=True):
        assert offsets_at(data_dir, at) == truth, at - T0
        assert offsets_at(data_dir, (at + later) // 2) == truth, (at + later) // 2 - T0
    assert offsets_at(data_dir, T0 + 999) == {}


def test_a_transaction_shows_only_from_its_commit_marker(written: tuple[Path, TxnLog]) -> None:
    data_dir, _ = written
    assert offsets_at(data_dir, T0 + 2500)["g"] == {("t", 0): 10, ("t", 1): 20}  # A written, not yet committed
    assert offsets_at(data_dir, T0 + 4000)["g"] == {("t", 0): 11, ("t", 1): 25}
    assert offsets_at(data_dir, T0 + 6000)["g"][("t", 0)] == 11  # B aborted
    assert offsets_at(data_dir, T0 + 10500)["g"][("t", 0)] == 14  # C committed last, D wrote last
    assert offsets_at(data_dir, T0 + 13000)["g"] == {("t", 0): 14}  # E's offset was tombstoned
    assert "h" not in offsets_at(data_dir, T0 + 16000)  # F's offset went with the group
    assert offsets_at(data_dir, T0 + 10**9)["g"] == {("t", 0): 50, ("t", 1): 40, ("t", 2): 1}  # G still open


def test_rows_say_how_each_transaction_ended(written: tuple[Path, TxnLog]) -> None:
    data_dir, log = written
    rows = history.read_rows(data_dir)
    assert planned_rows(data_dir) == rows  # the data source's reader settles them the same way
    assert any(m.offset >= s.end for s in coordinator_segments(data_dir) if s.end is not None for m in s.markers), \
        "no transaction's marker is in a later file than its records"
    fates = {(r["producer_id"], r["transaction"]) for r in rows if r["producer_id"] is not None}
    # the live log's cleaner drops aborted records, but history keeps the originals
    assert fates == {(A, "committed"), (B, "aborted"), (C, "committed"), (D, "committed"), (E, "committed"),
                     (F, "committed"), (G, "open")}
    still_open = {}
    for r in rows:
        if r["transaction"] == "open":
            still_open.setdefault(r["group"], {})[(r["topic"], r["partition"])] = r["offset"]
    assert still_open == log.pending == {"g": {("t", 0): 99}}
    for r in rows:
        if r["producer_id"] is None:
            assert r["visible_timestamp"] == r["record_timestamp"] and r["transaction"] is None
        elif r["transaction"] == "committed" and r["kind"] == "commit":
            assert r["visible_timestamp"] > r["record_timestamp"] and r["marker_offset"] > r["log_offset"]
        elif r["kind"] == "commit":
            assert r["visible_timestamp"] is None
    # history keeps what took effect, stats count only committed transactions
    assert [r for r in history.history_rows(data_dir) if r["transaction"] in ("aborted", "open")] == []
    last = {r["group"]: r for r in history.stats(data_dir, T0 + 10**6, 1)["last_commit"]}
    assert last["g"] == {"group": "g", "last_commit": T0 + 20000, "commits": 4 + 2 + 1 + 1 + 1 + 2}  # plain, A, D, C, E, A


@pytest.mark.integration
def test_spark_jobs_equal_the_plain_python_engine(spark: Any, tmp_path: Path) -> None:
    from pipeline import jobs
    from tests.pipeline.test_spark_jobs import collect, in_log_order

    log = txn_log(tmp_path, compact=True)
    records = jobs.records(spark, str(tmp_path)).cache()
    try:
        assert in_log_order(collect(records)) == history.read_rows(tmp_path)
        assert in_log_order(collect(jobs.history(records))) == history.history_rows(tmp_path)
        times = [at for at, _ in log.truth] + [at + 5 for at, _ in log.truth][::4]
        by_time: dict[int, list[dict[str, Any]]] = {}
        for row in collect(jobs.as_of_many(records, times)):
            by_time.setdefault(row.pop("as_of"), []).append(row)
        for at in times:
            assert by_time.get(at, []) == history.as_of_rows(tmp_path, at), at - T0
        now = T0 + 19500
        oracle = history.stats(tmp_path, now, 0.1)
        for name, table in jobs.stats(records, now, 0.1).items():
            assert collect(table) == oracle[name], name
        assert collect(jobs.lag(records, str(tmp_path))) == history.lag_rows(tmp_path)
    finally:
        records.unpersist()
