"""``kcoord pipeline`` argument handling and requirement checks (no Spark started)."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kcoord.cli import main as kcoord
from pipeline.cli import format_table, parse_time
from storage.layout import PARTITION_COUNT_FILE
from tests.pipeline.logs import T0, LogWriter

REPO = Path(__file__).resolve().parents[2]


def test_times_are_epoch_milliseconds_or_iso_8601() -> None:
    assert parse_time("1700000000123") == 1_700_000_000_123
    assert parse_time("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20.5") == 1_700_000_000_500  # no zone: UTC
    assert parse_time("2023-11-15T00:13:20+02:00") == 1_700_000_000_000


def _without_java() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # python, but no java
    return env


def _small_log(data_dir: Path) -> LogWriter:
    writer = LogWriter(data_dir, partitions=2)
    writer.commit("g", {("orders", 0): 5, ("orders", 1): 7}, T0)
    writer.commit("g", {("orders", 0): 6}, T0 + 1000)
    writer.close()
    return writer


def test_a_missing_java_is_one_line_and_exit_2(tmp_path: Path) -> None:
    _small_log(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "kcoord", "pipeline", "as-of", "--data-dir", str(tmp_path), "--time", "0",
         "--engine", "spark"],
        cwd=REPO, env=_without_java(), capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Java 17" in lines[0] and "JAVA_HOME" in lines[0]


def test_a_directory_without_a_kcoord_log_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a broker's data directory")
    for engine in ("auto", "python", "spark"):
        done = subprocess.run(
            [sys.executable, "-m", "kcoord", "pipeline", "as-of", "--data-dir", str(tmp_path), "--time", "0",
             "--engine", engine], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, engine
        assert done.stdout == ""
        assert done.stderr == (f"kcoord pipeline: {tmp_path} holds no kcoord log (no __consumer_offsets "
                               "partitions): give the broker's --data-dir\n")


def test_small_logs_need_no_java_and_print_only_the_result(tmp_path: Path) -> None:
    _small_log(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "kcoord", "pipeline", "as-of", "--data-dir", str(tmp_path),
         "--time", str(T0 + 500)], cwd=REPO, env=_without_java(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["group", "topic", "partition", "offset", "leader_epoch", "metadata",
                                "commit_timestamp"]
    assert [line.split()[:4] for line in lines[2:]] == [["g", "orders", "0", "5"], ["g", "orders", "1", "7"]]


def test_a_fresh_brokers_empty_log_is_an_empty_result_not_an_error(tmp_path: Path) -> None:
    (tmp_path / PARTITION_COUNT_FILE).write_text('{"partitions": 50}')
    assert kcoord(["pipeline", "as-of", "--data-dir", str(tmp_path), "--time", "0"]) == 0


def test_python_engine_answers_as_of_on_a_1_mb_log_in_under_2_seconds(tmp_path: Path) -> None:
    """Measured as the process's CPU time: wall time on a shared, busy machine says little."""
    writer = LogWriter(tmp_path, partitions=4, segment_bytes=256 * 1024)
    i = 0
    while i % 200 or sum(f.stat().st_size for f in tmp_path.rglob("*.log")) < 1_000_000:
        writer.commit(f"group-{i % 40}", {(f"topic-{i % 7}", p): i for p in range(4)}, T0 + i * 1000)
        i += 1
    writer.close()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "kcoord", "pipeline", "as-of", "--data-dir", str(tmp_path),
                           "--time", str(T0 + i * 500), "--engine", "python"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 2.0, f"{cpu:.2f}s of CPU"
    assert len(done.stdout.splitlines()) > 100


def test_history_needs_an_output_and_a_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert kcoord(["pipeline", "history", "--data-dir", str(tmp_path)]) == 2
    assert "--output" in capsys.readouterr().err
    assert kcoord(["pipeline", "lag", "--data-dir", str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_tables_show_times_in_utc() -> None:
    text = format_table(["group", "last_commit", "commits"], [("g", 1_700_000_000_000, 3), ("h", None, 1)])
    assert text.splitlines() == [
        "group  last_commit               commits",
        "-----  ------------------------  -------",
        "g      2023-11-14T22:13:20.000Z  3",
        "h                                1",
    ]


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs Java 17+")
def test_spark_engine_prints_only_kcoords_lines_unless_verbose(tmp_path: Path) -> None:
    """Spark's start-up warnings and log4j lines go to its log file; the result is unchanged."""
    _small_log(tmp_path)
    argv = [sys.executable, "-m", "kcoord", "pipeline", "as-of", "--data-dir", str(tmp_path), "--time", str(T0 + 500),
            "--master", "local[1]"]
    spark = subprocess.run([*argv, "--engine", "spark"], cwd=REPO, capture_output=True, text=True, timeout=300)
    python = subprocess.run([*argv, "--engine", "python"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert spark.returncode == 0, spark.stderr
    lines = spark.stderr.splitlines()
    assert len(lines) == 2, spark.stderr
    assert lines[0].startswith("kcoord pipeline: as-of over ") and lines[1].startswith("kcoord pipeline: as-of done")
    assert spark.stdout == python.stdout
