"""``kcoord pipeline`` argument handling and requirement checks (no Spark started)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kcoord.cli import main as kcoord
from pipeline.cli import format_table, parse_time

REPO = Path(__file__).resolve().parents[2]


def test_times_are_epoch_milliseconds_or_iso_8601() -> None:
    assert parse_time("1700000000123") == 1_700_000_000_123
    assert parse_time("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20.5") == 1_700_000_000_500  # no zone: UTC
    assert parse_time("2023-11-15T00:13:20+02:00") == 1_700_000_000_000


def test_a_missing_java_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # python, but no java
    done = subprocess.run(
        [sys.executable, "-m", "kcoord", "pipeline", "as-of", "--data-dir", str(tmp_path), "--time", "0"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Java 17" in lines[0] and "JAVA_HOME" in lines[0]


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
