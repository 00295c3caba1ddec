"""The Spark jobs equal the plain-Python oracle, and as-of equals what the clients committed.

One log is written by the real broker under kafka-python clients (``scenario``), one with
the storage layer directly (``tests.pipeline.logs``) for cases a client cannot produce on
demand (a commit written after a newer one, a group deleted by its group tombstone alone).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kcoord.cli import main as kcoord
from pipeline import history, jobs
from pipeline.history import AS_OF_COLUMNS, STATS_TABLES, sort_rows
from pipeline.segments import SegmentReadError, read_batch_headers
from protocol.consumer_offsets import partition_for
from storage.partition import PartitionLog
from tests.pipeline import scenario
from tests.pipeline.logs import T0
from tests.pipeline.test_reader import AS_OF_EXPECTED, as_of_scenario

pytestmark = pytest.mark.integration


def collect(df: Any) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in df.collect()]


def in_log_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["coordinator_partition"], r["log_offset"]))


@pytest.fixture(scope="module")
def broker_log(tmp_path_factory: pytest.TempPathFactory) -> scenario.Scenario:
    return scenario.run(tmp_path_factory.mktemp("broker") / "data")


@pytest.fixture(scope="module")
def written_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("written") / "data"
    w = as_of_scenario(data_dir)
    w.consumer_group("cg", 2, {"m1": ["orders"], "m2": ["orders"]}, T0 + 6500)
    # Commits the broker made under the groups' reset policies (metadata kcoord:<policy>).
    w.commit("cg", {("orders", 0): 0, ("orders", 1): 0}, T0 + 6600, metadata="kcoord:latest_on_start")
    w.commit("cg", {("orders", 0): 4}, T0 + 6700, metadata="kcoord:nearest")
    for i in range(60):
        w.commit(f"busy{i % 4}", {("orders", 0): i, ("orders", 1): i + 1}, T0 + 7000 + i * 1000)
        if i == 30:
            w.consumer_group_gone("cg", ["m1", "m2"], T0 + 7000 + i * 1000)
        if i % 20 == 19:
            w.compact(T0 + 7000 + i * 1000)
    w.close()
    topic = PartitionLog.open(data_dir / "orders-0", 4096)
    for i in range(50):
        topic.append([(b"k", b"v")] * 2, T0 + 5000 + i * 1500)
    topic.flush()
    topic.close()
    return data_dir


def check_all_jobs(spark: Any, data_dir: Path, times: list[int], now: int, idle_minutes: float) -> None:
    """Every job's Spark result equals the oracle's; the log is read once and cached."""
    records = jobs.records(spark, str(data_dir)).cache()
    try:
        assert in_log_order(collect(jobs.history(records))) == history.read_rows(data_dir)
        if times:
            by_time = by_as_of(collect(jobs.as_of_many(records, times)))
            for at in times:
                assert by_time.get(at, []) == history.as_of_rows(data_dir, at), at
        oracle = history.stats(data_dir, now, idle_minutes)
        for name, table in jobs.stats(records, now, idle_minutes).items():
            assert collect(table) == oracle[name], name
        assert collect(jobs.lag(records, str(data_dir))) == history.lag_rows(data_dir)
    finally:
        records.unpersist()


def by_as_of(rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    grouped: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        at = row.pop("as_of")
        grouped.setdefault(at, []).append(row)
    return grouped


def model_offsets(data_dir: Path, at: int) -> dict[str, dict[tuple[str, int], int]]:
    return {g: {tp: v["offset"] for tp, v in tps.items()} for g, tps in history.offsets_as_of(data_dir, at).items()}


def test_every_job_on_a_broker_written_log_equals_the_oracle(spark: Any, broker_log: scenario.Scenario) -> None:
    data_dir = broker_log.data_dir
    times = [at for at, _ in broker_log.checkpoints]
    check_all_jobs(spark, data_dir, times, broker_log.stable_at, idle_minutes=0)
    # idle relative to a later "now", and the state after svc-a left
    later = times[-1] + 3_600_000
    oracle = history.stats(data_dir, later, 30)
    for name, table in jobs.stats(jobs.records(spark, str(data_dir)), later, 30).items():
        assert collect(table) == oracle[name], name
    assert {r["group"] for r in oracle["idle_groups"]} == {"svc-a", "svc-b", "svc-c"}


def test_as_of_gives_what_the_clients_had_committed(spark: Any, broker_log: scenario.Scenario) -> None:
    data_dir = broker_log.data_dir
    assert len({at for at, _ in broker_log.checkpoints}) >= 8
    times = [at for at, _ in broker_log.checkpoints]
    by_time = by_as_of(collect(jobs.as_of_many(jobs.records(spark, str(data_dir)), times)))
    for at, committed in broker_log.checkpoints:
        expected = {g: tps for g, tps in committed.items() if tps}
        assert model_offsets(data_dir, at) == expected, at
        rows = by_time.get(at, [])
        assert {(r["group"], r["topic"], r["partition"]): r["offset"] for r in rows} == {
            (g, t, p): o for g, tps in expected.items() for (t, p), o in tps.items()}, at
        assert all(r["metadata"] == f"{r['group']}@{r['offset']}" for r in rows)
    # the cleaner really did drop history out of the live log: as-of of early times needs it
    assert list((data_dir / "history").rglob("*.log"))


def test_stats_see_the_unsubscribed_topic_and_the_rebalances(spark: Any, broker_log: scenario.Scenario) -> None:
    records = jobs.records(spark, str(broker_log.data_dir), group="svc-a")
    tables = {name: collect(df) for name, df in jobs.stats(records, broker_log.stable_at, 60).items()}
    assert tables["unsubscribed_offsets"] == [
        {"group": "svc-a", "state": "Stable", "topic": "audit", "partition": 0, "offset": 1}]
    assert tables["rebalances"][0]["group"] == "svc-a" and tables["rebalances"][0]["rebalances"] >= 2
    assert tables["idle_groups"] == []
    assert tables["last_commit"][0]["commits"] == 12 * 3 + 1


def test_lag_against_local_topic_data(spark: Any, broker_log: scenario.Scenario) -> None:
    data_dir = str(broker_log.data_dir)
    rows = collect(jobs.lag(jobs.records(spark, data_dir, group="svc-b"), data_dir))
    assert rows and all(r["topic"] == "orders" for r in rows)
    # 20 records per partition were produced before any commit
    assert {r["high_watermark"] for r in rows} == {20}
    assert all(r["lag"] == 20 - r["offset"] for r in rows)


def test_every_job_on_a_storage_written_log_equals_the_oracle(spark: Any, written_log: Path) -> None:
    times = [T0 + at for at in AS_OF_EXPECTED] + [T0 + 10**9]
    check_all_jobs(spark, written_log, times, T0 + 60_000, idle_minutes=0.5)
    # a single moment through the job itself, its time and group filters pushed to the reader
    rows = collect(jobs.as_of(jobs.records(spark, str(written_log), group="g"), T0 + 3000))
    assert {(r["topic"], r["partition"]): r["offset"] for r in rows} == AS_OF_EXPECTED[3000]["g"]


def test_group_and_time_filters_keep_spark_away_from_other_segments(spark: Any, written_log: Path,
                                                                    tmp_path: Path) -> None:
    """Damage segments the filters exclude: a query that never plans them still succeeds."""
    data_dir = tmp_path / "data"
    shutil.copytree(written_log, data_dir)
    mine = partition_for("g", 2)
    other = min(path for path in (data_dir / f"__consumer_offsets-{1 - mine}").glob("*.log")
                if len(read_batch_headers(path)) > 1)
    # The newest archived segment of g's partition that holds more than one batch, all after T0 + 6000.
    newest = max(path for path in (data_dir / "history" / f"__consumer_offsets-{mine}").glob("*.log")
                 if len(read_batch_headers(path)) > 1)
    for path in (other, newest):
        headers = read_batch_headers(path)
        assert len(headers) > 1
        data = bytearray(path.read_bytes())
        first = headers[0][1]
        data[headers[0][0] + first.size - 1] ^= 0xFF  # a record byte: the CRC breaks, valid batches follow
        path.write_bytes(bytes(data))
    with pytest.raises(SegmentReadError):
        history.read_rows(data_dir)
    assert min(h.base_timestamp for _, h in read_batch_headers(written_log / newest.relative_to(data_dir))) > T0 + 6000
    rows = collect(jobs.as_of(jobs.records(spark, str(data_dir), group="g"), T0 + 6000))
    assert {(r["topic"], r["partition"]): r["offset"] for r in rows} == AS_OF_EXPECTED[6000]["g"]


def test_cli_history_writes_parquet_partitioned_by_group(spark: Any, broker_log: scenario.Scenario,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "history"
    code = kcoord(["pipeline", "history", "--data-dir", str(broker_log.data_dir), "--output", str(out),
                   "--master", "local[2]", "--engine", "spark"])
    assert code == 0
    assert {p.name for p in out.iterdir() if p.is_dir()} == {"group=svc-a", "group=svc-b", "group=svc-c"}
    written = spark.read.option("basePath", str(out)).parquet(str(out))
    rows = in_log_order(collect(written))
    assert rows == history.read_rows(broker_log.data_dir)


def test_cli_as_of_prints_a_table_and_writes_json_and_csv(spark: Any, broker_log: scenario.Scenario,
                                                           tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    at = broker_log.stable_at
    common = ["--data-dir", str(broker_log.data_dir), "--time", str(at), "--group", "svc-a", "--engine", "spark"]
    expected = history.as_of_rows(broker_log.data_dir, at, "svc-a")
    assert kcoord(["pipeline", "as-of", *common]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == list(AS_OF_COLUMNS)
    assert [line.split()[:4] for line in lines[2:]] == [
        [r["group"], r["topic"], str(r["partition"]), str(r["offset"])] for r in expected]

    assert kcoord(["pipeline", "as-of", *common, "--output", str(tmp_path / "j"), "--output-format", "json"]) == 0
    got = [json.loads(line) for f in sorted((tmp_path / "j").glob("part-*.json")) for line in f.read_text().splitlines()]
    assert sort_rows(got, AS_OF_COLUMNS) == expected

    assert kcoord(["pipeline", "stats", "--data-dir", str(broker_log.data_dir), "--now", str(at),
                   "--output", str(tmp_path / "s"), "--output-format", "csv", "--engine", "spark"]) == 0
    assert {p.name for p in (tmp_path / "s").iterdir()} == set(STATS_TABLES)
    header = next((tmp_path / "s" / "unsubscribed_offsets").glob("part-*.csv")).read_text().splitlines()[0]
    assert header.split(",") == list(STATS_TABLES["unsubscribed_offsets"])


def test_history_as_csv_flattens_nested_columns(spark: Any, written_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "csv"
    assert kcoord(["pipeline", "history", "--data-dir", str(written_log), "--output", str(out),
                   "--output-format", "csv", "--group", "g", "--engine", "spark"]) == 0
    back = spark.read.option("header", "true").csv(str(out))
    rows = collect(back)
    oracle = history.read_rows(written_log, "g")
    assert len(rows) == len(oracle)
    members = [json.loads(r["members"]) for r in rows if r["kind"] == "group_metadata"]
    assert members == [[{"member_id": "m1", "client_id": "c", "client_host": "/127.0.0.1",
                         "subscribed_topics": ["t"]}]]


# ---------------------------------------------------------------------- the two engines agree


def _printed(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    assert kcoord(argv) == 0
    return capsys.readouterr().out


def _engine_jobs(data_dir: Path, times: list[int], now: int) -> list[list[str]]:
    common = ["--data-dir", str(data_dir)]
    jobs_ = [["pipeline", "as-of", *common, "--time", str(at)] for at in times]
    jobs_ += [["pipeline", "as-of", *common, "--time", str(times[-1]), "--group", "svc-a"],
              ["pipeline", "stats", *common, "--now", str(now), "--idle-minutes", "1"],
              ["pipeline", "lag", *common]]
    return jobs_


@pytest.mark.parametrize("log", ["broker_log", "written_log"])
def test_both_engines_print_the_same_tables(spark: Any, log: str, request: pytest.FixtureRequest,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    fixture = request.getfixturevalue(log)
    if log == "broker_log":
        data_dir, times, now = fixture.data_dir, [at for at, _ in fixture.checkpoints][::3], fixture.stable_at
    else:
        data_dir, times, now = fixture, [T0 + at for at in AS_OF_EXPECTED], T0 + 60_000
    for argv in _engine_jobs(data_dir, times, now):
        by_python = _printed(capsys, [*argv, "--engine", "python"])
        by_spark = _printed(capsys, [*argv, "--engine", "spark"])
        assert by_python == by_spark, argv
        assert by_python.strip(), argv


def test_stats_prints_the_policy_commits_per_group_with_both_engines(
        spark: Any, written_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["pipeline", "stats", "--data-dir", str(written_log), "--now", str(T0 + 60_000)]
    printed = {engine: _printed(capsys, [*argv, "--engine", engine]) for engine in ("python", "spark")}
    assert printed["python"] == printed["spark"]
    table = printed["python"].split("== policy_commits ==\n")[1].split("\n\n")[0].splitlines()
    assert table[0].split() == list(STATS_TABLES["policy_commits"])
    assert [line.split()[:3] for line in table[2:]] == [["cg", "latest_on_start", "2"], ["cg", "nearest", "1"]]


@pytest.mark.parametrize("fmt", ["json", "csv", "parquet"])
def test_both_engines_write_the_same_history(spark: Any, broker_log: scenario.Scenario, tmp_path: Path,
                                             fmt: str) -> None:
    written = {}
    for engine in ("python", "spark"):
        out = tmp_path / engine
        assert kcoord(["pipeline", "history", "--data-dir", str(broker_log.data_dir), "--output", str(out),
                       "--output-format", fmt, "--engine", engine]) == 0
        assert {p.name for p in out.iterdir() if p.is_dir()} == {"group=svc-a", "group=svc-b", "group=svc-c"}
        reader = spark.read.option("basePath", str(out))
        df = {"json": reader.json, "csv": reader.option("header", "true").csv, "parquet": reader.parquet}[fmt](str(out))
        written[engine] = sorted(json.dumps(row, sort_keys=True, default=str) for row in collect(df))
    assert written["python"] == written["spark"]
