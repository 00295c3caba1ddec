"""Starting Spark for the pipeline: requirement checks and settings that suit both a laptop
and a cluster.

Spark runs on the JVM (Java 17 or newer) and the data source yields Arrow batches
(pyarrow), so both are checked before a session is started and a missing one is reported in
one line instead of a JVM stack trace.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["RequirementError", "build_session", "check_requirements", "default_conf", "parse_conf"]

MIN_JAVA = 17
_REPO = Path(__file__).resolve().parents[1]
#: Packages the executors import (the data source and its decoders).
_SHIPPED_PACKAGES = ("pipeline", "protocol", "storage")


class RequirementError(Exception):
    """Something Spark needs is missing; the message is one line telling how to fix it."""


def _java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        return str(candidate) if candidate.exists() else None
    return shutil.which("java")


def java_version(java: str) -> int | None:
    """Major version of a ``java`` binary (8 for "1.8.0_..."), or None if it will not say."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def check_requirements() -> None:
    """Raise ``RequirementError`` unless pyspark, pyarrow and Java 17+ are available."""
    for module, package in (("pyspark", "pyspark"), ("pyarrow", "pyarrow")):
        if importlib.util.find_spec(module) is None:
            raise RequirementError(
                f"{package} is not installed: run `make pipeline` in the kcoord clone (or `pip install -e "
                "'.[pipeline]'` there), or use --engine python"
            )
    java = _java_binary()
    if java is None:
        where = f"JAVA_HOME={os.environ['JAVA_HOME']} has no bin/java" if os.environ.get("JAVA_HOME") \
            else "no java on PATH and JAVA_HOME is not set"
        raise RequirementError(
            f"Spark needs Java {MIN_JAVA} or newer ({where}): install it (e.g. apt-get install "
            f"openjdk-17-jre-headless) or set JAVA_HOME to a Java {MIN_JAVA}+ installation"
        )
    major = java_version(java)
    if major is not None and major < MIN_JAVA:
        raise RequirementError(
            f"Spark needs Java {MIN_JAVA} or newer but {java} is Java {major}: install Java "
            f"{MIN_JAVA} (e.g. apt-get install openjdk-17-jre-headless) and set JAVA_HOME to it"
        )


def parse_conf(items: Iterable[str]) -> dict[str, str]:
    """``--spark-conf key=value`` options as a dict."""
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--spark-conf {item!r}: expected key=value")
        conf[key.strip()] = value
    return conf


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def default_conf(master: str) -> dict[str, str]:
    """Settings applied unless ``--spark-conf`` says otherwise.

    The UI is off (a batch job on a laptop needs no web server; turn it on with
    ``--spark-conf spark.ui.enabled=true``). Locally, shuffles use a few partitions per
    core instead of Spark's 200, and the driver (which is also the executor) gets 2 GiB.
    On a cluster, Spark's and the cluster's own defaults stand, with adaptive execution
    coalescing small shuffle partitions.
    """
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true",
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
        "spark.pyspark.python": sys.executable,
    }
    if is_local(master):
        cores = os.cpu_count() or 2
        conf.update({
            "spark.sql.shuffle.partitions": str(max(2, min(4 * cores, 32))),
            "spark.driver.memory": "2g",
        })
    return conf


def _started_quietly(builder: Any) -> Any:
    """Start the JVM with its standard error pointed at a log file (it keeps that file for life)."""
    log_path = Path(tempfile.mkdtemp(prefix="kcoord-spark-")) / "spark.log"
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log_path, "ab") as log_file:
        os.dup2(log_file.fileno(), 2)
        try:
            return builder.getOrCreate()
        except Exception:
            os.dup2(saved, 2)
            print(f"Spark did not start; its log is {log_path}", file=sys.stderr)
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _code_archive() -> Path:
    """A zip of the packages executors import, for clusters whose Python lacks kcoord."""
    target = Path(tempfile.mkdtemp(prefix="kcoord-pipeline-")) / "kcoord-pipeline.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in _SHIPPED_PACKAGES:
            for path in sorted((_REPO / package).rglob("*.py")):
                archive.write(path, path.relative_to(_REPO))
    return target


def build_session(master: str = "local[*]", conf: Mapping[str, str] | None = None,
                  app_name: str = "kcoord-pipeline", *, quiet: bool = False) -> Any:
    """A SparkSession with the pipeline's data sources registered.

    ``PYSPARK_PYTHON`` is set to this interpreter (unless already set) so Python workers
    find pyarrow and the kcoord packages. If a session is already running in this process
    it is reused, and runtime settings are applied to it.

    ``quiet`` sends everything the JVM writes to standard error (its start-up warnings,
    log4j's lines, the progress bar) to ``spark.log`` in a temporary directory, whose path
    is printed only if starting fails; the job's output stays alone on the terminal.
    """
    check_requirements()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from pipeline.source import register

    settings = default_conf(master)
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if quiet and SparkSession.getActiveSession() is None:
        spark = _started_quietly(builder)
        spark.sparkContext.setLogLevel(settings.get("spark.log.level", "ERROR"))
    else:
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel(settings.get("spark.log.level", "WARN"))
    if not is_local(master):
        spark.sparkContext.addPyFile(str(_code_archive()))
    register(spark)
    return spark
