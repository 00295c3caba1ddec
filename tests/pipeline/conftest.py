"""Fixtures for the pipeline tests: one Spark session for all of them, and log builders."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] session (UI and progress bar off) shared by every Spark test."""
    if shutil.which("java") is None:
        pytest.skip("Spark tests need Java 17+ on PATH")
    from pipeline.spark import build_session

    session = build_session("local[2]", {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
    })
    yield session
    session.stop()
