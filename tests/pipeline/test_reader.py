"""Reading segment files without Spark: history + live de-duplication, torn tails, damage.

The data source's planner (``coordinator_segments`` + ``decode_segment``) and the oracle
(``history.read_rows``) are checked against the records the test itself wrote, and
against each other.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from pipeline import history
from pipeline.segments import (
    COLUMNS,
    SegmentReadError,
    coordinator_segments,
    decode_segment,
    read_batch_headers,
)
from tests.pipeline.logs import T0, LogWriter

IDENTITY = ("coordinator_partition", "log_offset", "group", "kind", "topic", "partition", "record_timestamp")


def planned_rows(data_dir: Path) -> list[dict[str, Any]]:
    """What the Spark data source reads, one partition after another, sorted into log order."""
    rows = [dict(zip(COLUMNS, row, strict=True))
            for segment in coordinator_segments(data_dir) for row in decode_segment(segment)]
    return sorted(rows, key=lambda r: (r["coordinator_partition"], r["log_offset"]))


def identity(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(r.get(c) for c in IDENTITY) for r in rows]


def busy_log(data_dir: Path, *, compactions: int = 4) -> LogWriter:
    """Five groups committing over three coordinator partitions, compacted several times."""
    writer = LogWriter(data_dir)
    ts = T0
    for round_no in range(compactions):
        for i in range(30):
            group = f"g{i % 5}"
            ts += 1000
            writer.commit(group, {("orders", p): round_no * 1000 + i * 10 + p for p in range(3)}, ts)
            if i % 10 == 0:
                writer.group_metadata(group, round_no + 1, {f"{group}-m1": ["orders"]}, ts)
        writer.compact(ts)
    return writer


def test_history_and_live_together_hold_every_record_once(tmp_path: Path) -> None:
    writer = busy_log(tmp_path)
    writer.delete_offsets("g1", [("orders", 0)], T0 + 10**6)
    writer.close()
    assert list((tmp_path / "history").rglob("*.log")), "the cleaner moved nothing into history"
    live_records = sum(h.records_count for p in tmp_path.glob("__consumer_offsets-*/*.log")
                       for _, h in read_batch_headers(p))
    assert live_records < len(writer.written), "compaction removed nothing"

    expected = sorted(writer.written, key=lambda r: (r["coordinator_partition"], r["log_offset"]))
    oracle = history.read_rows(tmp_path)
    assert identity(oracle) == identity(expected)
    assert planned_rows(tmp_path) == oracle
    # every row of a commit carries the decoded value
    commits = [r for r in oracle if r["kind"] == "commit"]
    assert all(r["metadata"] == f"m{r['offset']}" and r["leader_epoch"] == 3 for r in commits)


def test_history_switched_on_after_a_clean_without_it(tmp_path: Path) -> None:
    writer = LogWriter(tmp_path, history=False)
    for i in range(40):
        writer.commit(f"g{i % 3}", {("t", 0): i}, T0 + i)
    writer.compact(T0 + 100)
    writer.reopen(history=True)
    cut = len(writer.written)
    for i in range(40, 120):
        writer.commit(f"g{i % 3}", {("t", 0): i}, T0 + i)
        if i % 20 == 0:
            writer.compact(T0 + i)
    writer.close()

    rows = planned_rows(tmp_path)
    assert rows == history.read_rows(tmp_path)
    keys = [(r["coordinator_partition"], r["log_offset"]) for r in rows]
    assert len(keys) == len(set(keys))
    # everything written once history was on is there, plus whatever the first clean kept
    assert set(identity(writer.written[cut:])) <= set(identity(rows)) <= set(identity(writer.written))


def _single_partition_log(data_dir: Path) -> tuple[Path, list[tuple[int, Any]]]:
    writer = LogWriter(data_dir, partitions=1, segment_bytes=1 << 20, history=False)
    for i in range(6):
        writer.commit("g", {("t", p): i * 10 + p for p in range(3)}, T0 + i)
    writer.close()
    segment = next((data_dir / "__consumer_offsets-0").glob("*.log"))
    return segment, read_batch_headers(segment)


def _copy_with(data_dir: Path, segment: Path, data: bytes) -> Path:
    target = data_dir / "__consumer_offsets-0"
    target.mkdir(parents=True)
    shutil.copy(segment.parent.parent / "__consumer_offsets.meta.json", data_dir)
    (target / segment.name).write_bytes(data)
    return data_dir


def test_a_segment_cut_anywhere_in_its_last_batch_reads_up_to_the_last_whole_batch(tmp_path: Path) -> None:
    segment, headers = _single_partition_log(tmp_path / "full")
    data = segment.read_bytes()
    last_pos = headers[-1][0]
    complete = history.read_rows(tmp_path / "full")
    before_last = [r for r in complete if r["log_offset"] < headers[-1][1].base_offset]
    for cut in range(last_pos, len(data) + 1):
        copy = _copy_with(tmp_path / f"cut{cut}", segment, data[:cut])
        oracle = history.read_rows(copy)
        planned = planned_rows(copy)
        want = complete if cut == len(data) else before_last
        assert identity(oracle) == identity(want), cut
        assert identity(planned) == identity(want), cut
        shutil.rmtree(copy)


def test_a_bad_crc_in_the_final_batch_is_a_write_in_progress(tmp_path: Path) -> None:
    segment, headers = _single_partition_log(tmp_path / "full")
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0xFF  # inside the last batch's records: its CRC no longer matches
    copy = _copy_with(tmp_path / "flipped", segment, bytes(data))
    rows = planned_rows(copy)
    assert rows == history.read_rows(copy)
    assert max(r["log_offset"] for r in rows) < headers[-1][1].base_offset
    assert len(rows) == 3 * (len(headers) - 1)


def test_damage_followed_by_valid_batches_is_reported(tmp_path: Path) -> None:
    segment, headers = _single_partition_log(tmp_path / "full")
    data = bytearray(segment.read_bytes())
    damaged_at = headers[2][0]
    data[damaged_at + 40] ^= 0xFF  # a timestamp byte of the third batch: CRC mismatch
    copy = _copy_with(tmp_path / "damaged", segment, bytes(data))
    with pytest.raises(SegmentReadError, match=rf"byte {damaged_at} is followed by a valid batch"):
        planned_rows(copy)
    with pytest.raises(SegmentReadError, match=str(copy / "__consumer_offsets-0")):
        history.read_rows(copy)


def test_a_read_planned_before_a_clean_follows_the_moved_segments(tmp_path: Path) -> None:
    writer = busy_log(tmp_path, compactions=1)
    before = history.read_rows(tmp_path)
    plan = coordinator_segments(tmp_path)
    for i in range(60):  # roll and clean: planned live files move into history meanwhile
        writer.commit(f"g{i % 5}", {("orders", 0): 10**6 + i}, T0 + 10**6 + i)
    writer.compact(T0 + 2 * 10**6)
    moved = [s for s in plan if not s.history
             and (not Path(s.path).exists() or Path(s.path).stat().st_ino != s.inode)]
    assert moved, "the clean replaced none of the planned segments"
    rows = sorted((dict(zip(COLUMNS, row, strict=True)) for s in plan for row in decode_segment(s)),
                  key=lambda r: (r["coordinator_partition"], r["log_offset"]))
    keys = [(r["coordinator_partition"], r["log_offset"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert set(identity(before)) <= set(identity(rows))
    writer.close()


# --- job semantics (oracle) --------------------------------------------------------------


def as_of_scenario(data_dir: Path) -> LogWriter:
    """One group's offsets through commits, a late-written old commit, deletes and re-creation."""
    w = LogWriter(data_dir, partitions=2)
    w.group_metadata("g", 1, {"m1": ["t"]}, T0 + 500)
    w.commit("g", {("t", 0): 10, ("t", 1): 20}, T0 + 1000)
    w.commit("g", {("t", 0): 15}, T0 + 2000)
    # written later than the commit above but carrying an older commit timestamp: log order wins
    w.commit("g", {("t", 1): 5}, T0 + 3000, commit_ts=T0 + 100)
    w.delete_offsets("g", [("t", 0)], T0 + 4000)
    w.delete_group("g", [("t", 1)], T0 + 5000)
    w.commit("g", {("t", 0): 1}, T0 + 6000)
    # a group deleted by its group tombstone alone still loses its offsets
    w.commit("h", {("u", 0): 7}, T0 + 1000)
    w.group_metadata("h", 1, {}, T0 + 1500)
    w.group_tombstone("h", T0 + 2000)
    return w


def _offsets(result: dict[str, dict[tuple[str, int], dict[str, Any]]]) -> dict[str, dict[tuple[str, int], int]]:
    return {g: {tp: v["offset"] for tp, v in tps.items()} for g, tps in result.items()}


AS_OF_EXPECTED: dict[int, dict[str, dict[tuple[str, int], int]]] = {
    999: {"h": {}},
    1000: {"g": {("t", 0): 10, ("t", 1): 20}, "h": {("u", 0): 7}},
    2500: {"g": {("t", 0): 15, ("t", 1): 20}},
    3000: {"g": {("t", 0): 15, ("t", 1): 5}},
    4000: {"g": {("t", 1): 5}},
    5000: {},
    6000: {"g": {("t", 0): 1}},
}


def test_consumer_group_records_are_history_rows_and_leave_as_of_alone(tmp_path: Path) -> None:
    w = LogWriter(tmp_path, partitions=1)
    w.commit("cg", {("t", 0): 4}, T0 + 100)
    w.consumer_group("cg", 3, {"m1": ["t"], "m2": ["t"]}, T0 + 200)
    w.commit("cg", {("t", 1): 9}, T0 + 300)
    w.consumer_group_gone("cg", ["m1", "m2"], T0 + 400)
    w.close()
    rows = history.read_rows(tmp_path)
    kinds = [r["kind"] for r in rows]
    assert kinds == [k["kind"] for k in w.written]
    by_kind = {r["kind"]: r for r in rows}
    assert by_kind["consumer_group_epoch"]["generation"] == 3
    assert by_kind["consumer_group_subscription"]["subscribed_topics"] == ["t"]
    assert by_kind["consumer_group_member"]["members"][0]["subscribed_topics"] == ["t"]
    assignment = by_kind["consumer_group_assignment"]
    assert (assignment["member_id"], assignment["generation"], assignment["state"]) == ("m2", 3, "STABLE")
    assert assignment["assignment"] == [{"topic_id": "00000000-0000-0000-0000-000000000007", "partitions": [1]}]
    assert by_kind["consumer_group_epoch_tombstone"]["protocol_type"] == "consumer"
    # as-of reads offsets only: the group's records, its end included, change nothing.
    assert {tp: v["offset"] for tp, v in history.offsets_as_of(tmp_path, T0 + 500)["cg"].items()} == {
        ("t", 0): 4, ("t", 1): 9}


@pytest.mark.parametrize("compact", [False, True], ids=["as-written", "compacted-with-history"])
def test_offsets_as_of_follows_log_order_tombstones_and_group_deletes(tmp_path: Path, compact: bool) -> None:
    w = as_of_scenario(tmp_path)
    if compact:
        for i in range(20):  # push the scenario into sealed segments and clean them
            w.commit("filler", {("f", 0): i}, T0 + 7000 + i)
            w.commit("g2", {("f", 0): i}, T0 + 7000 + i)
        w.compact(T0 + 8000)
        assert list((tmp_path / "history").rglob("*.log"))
    w.close()
    for at, expected in AS_OF_EXPECTED.items():
        got = _offsets(history.offsets_as_of(tmp_path, T0 + at))
        got = {g: tps for g, tps in got.items() if g in ("g", "h")}
        assert got == {g: tps for g, tps in expected.items() if tps}, at
        assert _offsets(history.offsets_as_of(tmp_path, T0 + at, group="g")) == (
            {"g": expected["g"]} if expected.get("g") else {})
    detail = history.offsets_as_of(tmp_path, T0 + 3000, "g")["g"][("t", 1)]
    assert detail == {"offset": 5, "leader_epoch": 3, "metadata": "m5", "commit_timestamp": T0 + 100}


def test_stats_oracle(tmp_path: Path) -> None:
    w = LogWriter(tmp_path, partitions=2)
    for generation, ts in ((1, 1000), (1, 1100), (2, 2000)):  # the second is the same generation
        w.group_metadata("g", generation, {"m1": ["a"], "m2": ["a", "c"]}, T0 + ts)
    w.commit("g", {("a", 0): 1, ("b", 0): 2, ("c", 0): 3}, T0 + 2500)
    w.commit("g", {("a", 0): 4}, T0 + 61_000)
    w.commit("old", {("a", 0): 1}, T0 + 1000)
    w.delete_group("old", [("a", 0)], T0 + 1500)
    w.group_metadata("old", 1, {}, T0 + 1600)  # re-created: generation 1 again is a new one
    w.commit("g", {("a", 1): 0}, T0 + 3000, metadata="kcoord:latest_on_start")
    w.commit("g", {("a", 0): 9}, T0 + 3100, metadata="kcoord:nearest")
    w.commit("g", {("a", 0): 12, ("a", 1): 12}, T0 + 3200, metadata="kcoord:nearest")
    w.commit("g", {("a", 0): 13}, T0 + 3300, metadata="kcoord:")  # no policy named: a client's own
    w.close()
    now = T0 + 61_000 + 30 * 60_000
    tables = history.stats(tmp_path, now, idle_minutes=20)
    assert tables["policy_commits"] == [
        {"group": "g", "policy": "latest_on_start", "commits": 1, "last_commit": T0 + 3000},
        {"group": "g", "policy": "nearest", "commits": 3, "last_commit": T0 + 3200},
    ]
    assert tables["commits_per_minute"] == [
        {"group": "g", "minute": (T0 + 2500) // 60_000 * 60_000, "commits": 8},
        {"group": "g", "minute": (T0 + 61_000) // 60_000 * 60_000, "commits": 1},
        {"group": "old", "minute": (T0 + 1000) // 60_000 * 60_000, "commits": 1},
    ]
    assert tables["last_commit"] == [{"group": "g", "last_commit": T0 + 61_000, "commits": 9},
                                     {"group": "old", "last_commit": T0 + 1000, "commits": 1}]
    assert tables["idle_groups"] == [{"group": "g", "last_commit": T0 + 61_000, "idle_ms": 30 * 60_000},
                                     {"group": "old", "last_commit": T0 + 1000, "idle_ms": now - T0 - 1000}]
    assert tables["unsubscribed_offsets"] == [{"group": "g", "state": "Stable", "topic": "b", "partition": 0,
                                               "offset": 2}]
    assert tables["rebalances"] == [{"group": "g", "rebalances": 2}, {"group": "old", "rebalances": 1}]


def test_lag_oracle(tmp_path: Path) -> None:
    from storage.partition import PartitionLog

    data = PartitionLog.open(tmp_path / "orders-0", 1 << 20)
    for i, ts in enumerate((1000, 2000, 3000)):
        data.append([(b"k", b"v")] * (i + 1), T0 + ts)  # offsets 0 | 1-2 | 3-5
    data.flush()
    data.close()
    w = LogWriter(tmp_path, partitions=1)
    w.commit("g", {("orders", 0): 0}, T0 + 500)
    w.commit("g", {("orders", 0): 2}, T0 + 2000)
    w.commit("g", {("orders", 0): 3}, T0 + 9000)
    w.commit("g", {("elsewhere", 0): 3}, T0 + 9000)
    w.close()
    assert history.lag_rows(tmp_path) == [
        {"group": "g", "topic": "elsewhere", "partition": 0, "commit_timestamp": T0 + 9000, "offset": 3,
         "high_watermark": None, "lag": None},
        {"group": "g", "topic": "orders", "partition": 0, "commit_timestamp": T0 + 500, "offset": 0,
         "high_watermark": 0, "lag": 0},
        {"group": "g", "topic": "orders", "partition": 0, "commit_timestamp": T0 + 2000, "offset": 2,
         "high_watermark": 3, "lag": 1},
        {"group": "g", "topic": "orders", "partition": 0, "commit_timestamp": T0 + 9000, "offset": 3,
         "high_watermark": 6, "lag": 3},
    ]
