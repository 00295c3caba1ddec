"""docker-compose.yml's topology, run as local processes: the same commands, environment
and start order, with only host names, ports and paths rewritten.

No Docker engine is needed. Each service's command comes from the compose file (or the
image's ENTRYPOINT/CMD in the Dockerfile); ``kcoord:9092`` and the listen address become
127.0.0.1 and a free port, ``/var/lib/kcoord`` becomes a temporary directory, and paths
inside the image become the repository files the Dockerfile copies there. ``kcoord ...``
runs as ``python -m kcoord ...`` and ``python ...`` with this interpreter. A service starts
only when its ``depends_on`` conditions hold: the broker's own healthcheck command passes,
or a one-shot service exited 0.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.test_compose import (
    DATA_DIR,
    REPO,
    dependency_order,
    depends_on,
    effective_argv,
    healthcheck_argv,
    image_files,
    kcoord_subcommands,
    load_compose,
    seconds,
)

pytestmark = pytest.mark.integration

RECORDS = 1000
ONE_SHOT_TIMEOUT = 60.0
PIPELINE_TIMEOUT = 600.0
_ADDRESS = re.compile(r"\b(?:kcoord|0\.0\.0\.0|127\.0\.0\.1|localhost):(\d+)\b")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalTopology:
    """Maps the compose topology onto this machine and keeps what each service did."""

    ports: dict[int, int]  # the broker's container port -> a free local port
    data_dir: Path
    logs: Path
    compose: dict[str, Any]
    files: dict[str, Path] = field(default_factory=image_files)
    healthy: set[str] = field(default_factory=set)
    completed: set[str] = field(default_factory=set)
    outputs: dict[str, str] = field(default_factory=dict)
    broker: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.ports[9092]}"

    def rewrite(self, value: str) -> str:
        if value in self.files:
            return str(self.files[value])
        value = _ADDRESS.sub(lambda m: f"127.0.0.1:{self.ports[int(m.group(1))]}", value)
        return re.sub(rf"(?<![\w/]){re.escape(DATA_DIR)}(?![\w])", str(self.data_dir), value)

    def local_argv(self, argv: list[str]) -> list[str]:
        program, *rest = [self.rewrite(part) for part in argv]
        if program == "kcoord":
            return [sys.executable, "-m", "kcoord", *rest]
        assert program == "python", f"no local mapping for {program!r}"
        return [sys.executable, *rest]

    def environment(self, name: str) -> dict[str, str]:
        variables = self.compose["services"][name].get("environment", {})
        assert isinstance(variables, Mapping), "environment as a mapping"
        return {**os.environ, "PYTHONUNBUFFERED": "1",
                **{key: self.rewrite(str(value)) for key, value in variables.items()}}

    def check_dependencies(self, name: str) -> None:
        for dependency, condition in depends_on(self.compose["services"][name]).items():
            done = {"service_healthy": self.healthy, "service_completed_successfully": self.completed}[condition]
            assert dependency in done, f"{name} needs {dependency} {condition}"

    def start_broker(self, name: str) -> None:
        self.check_dependencies(name)
        with (self.logs / f"{name}.log").open("wb") as log:  # the child keeps its own copy
            self.broker = subprocess.Popen(self.local_argv(effective_argv(name, self.compose)), cwd=REPO,
                                           stdout=log, stderr=subprocess.STDOUT, env=self.environment(name))
        self.wait_healthy(name)

    def wait_healthy(self, name: str) -> None:
        """Run the service's healthcheck command until it passes, as Docker would (bounded)."""
        healthcheck = self.compose["services"][name]["healthcheck"]
        argv = self.local_argv(healthcheck_argv(self.compose["services"][name]))
        budget = seconds(healthcheck["start_period"]) + healthcheck["retries"] * seconds(healthcheck["interval"])
        deadline = time.monotonic() + min(budget, 30.0)
        last = None
        while time.monotonic() < deadline:
            assert self.broker is not None and self.broker.poll() is None, f"{name} exited:\n{self.log(name)}"
            last = subprocess.run(argv, cwd=REPO, capture_output=True, text=True,
                                  timeout=seconds(healthcheck["timeout"]) + 5)
            if last.returncode == 0:
                self.healthy.add(name)
                return
            time.sleep(0.2)
        raise AssertionError(f"{name} never became healthy: {last and last.stderr}\n{self.log(name)}")

    def read_only_mounts(self, name: str) -> list[str]:
        """The local paths of the volumes a service mounts ``:ro``."""
        mounts = [str(volume).split(":") for volume in self.compose["services"][name].get("volumes", [])]
        return [self.rewrite(parts[1]) for parts in mounts if len(parts) == 3 and parts[2] == "ro"]

    def run_one_shot(self, name: str, timeout: float) -> str:
        """Run a one-shot service to completion; its standard output. It must exit 0."""
        self.check_dependencies(name)
        argv = self.local_argv(effective_argv(name, self.compose))
        for path in self.read_only_mounts(name):
            argv = _read_only(path, argv)
        try:
            result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                                    env=self.environment(name))
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{name} did not finish within {timeout}s: {exc.stderr!r}") from None
        (self.logs / f"{name}.log").write_text(result.stderr)
        assert result.returncode == 0, (
            f"{name} exited {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
            f"\nbroker log:\n{self.log('kcoord')}")
        self.completed.add(name)
        self.outputs[name] = result.stdout
        return result.stdout

    def stop_broker(self) -> int:
        assert self.broker is not None
        if self.broker.poll() is None:
            self.broker.send_signal(signal.SIGTERM)
        try:
            return self.broker.wait(20)
        except subprocess.TimeoutExpired:
            self.broker.kill()
            self.broker.wait(5)
            raise AssertionError("the broker did not stop on SIGTERM:\n" + self.log("kcoord")) from None

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


_READ_ONLY_BIND = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'


@functools.cache
def _can_mount_read_only() -> bool:
    """Whether this process may make a private read-only bind mount (root, mount namespaces)."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    with tempfile.TemporaryDirectory() as directory:
        probe = ["unshare", "-m", "sh", "-c", _READ_ONLY_BIND, "sh", directory, "sh", "-c", "! touch \"$0\"/x",
                 directory]
        try:
            return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False


def _read_only(path: str, argv: list[str]) -> list[str]:
    """argv run with ``path`` read-only for it alone, as a ``:ro`` volume is (when possible)."""
    if not _can_mount_read_only():
        return argv
    return ["unshare", "-m", "sh", "-c", _READ_ONLY_BIND, "sh", path, *argv]


def _summary(output: str) -> dict[str, Any]:
    lines = [line for line in output.splitlines() if line.startswith("summary ")]
    assert len(lines) == 1, output
    summary: dict[str, Any] = json.loads(lines[0].removeprefix("summary "))
    return summary


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTopology]:
    """The broker healthy, then the producer and the consumer run to completion, in order."""
    root = tmp_path_factory.mktemp("topology")
    (root / "logs").mkdir()
    compose = load_compose({"DEMO_RECORDS": str(RECORDS)})
    published = [int(str(mapping).rsplit(":", 1)[1]) for mapping in compose["services"]["kcoord"]["ports"]]
    local = LocalTopology({port: _free_port() for port in published}, root / "kcoord-data", root / "logs", compose)
    order = dependency_order(compose)
    assert order == ["kcoord", "demo-producer", "demo-consumer", "pipeline"]
    try:
        local.start_broker("kcoord")
        for name in ("demo-producer", "demo-consumer"):  # the pipeline job is a test of its own
            local.run_one_shot(name, ONE_SHOT_TIMEOUT)
        yield local
    finally:
        code = local.stop_broker() if local.broker is not None else None
    assert code == 0, f"the broker exited {code}:\n{local.log('kcoord')}"


def test_the_broker_advertises_the_rewritten_address(topology: LocalTopology) -> None:
    assert f"(advertised {topology.bootstrap})" in topology.log("kcoord")
    assert (topology.data_dir / ".lock").exists()


def test_the_metrics_port_serves_health_and_metrics(topology: LocalTopology) -> None:
    base = f"http://127.0.0.1:{topology.ports[9308]}"
    with urllib.request.urlopen(base + "/healthz", timeout=10) as response:
        assert response.status == 200
    with urllib.request.urlopen(base + "/metrics", timeout=10) as response:
        assert "kcoord_build_info" in response.read().decode()


def test_the_producer_writes_every_record(topology: LocalTopology) -> None:
    summary = _summary(topology.outputs["demo-producer"])
    assert summary["topic"] == "demo"
    assert summary["records"] == RECORDS
    assert set(summary["per_partition"]) == {"0", "1", "2"}


def test_the_consumer_group_reads_every_record_once_and_commits(topology: LocalTopology) -> None:
    summary = _summary(topology.outputs["demo-consumer"])
    assert (summary["group"], summary["topic"], summary["records"]) == ("demo-group", "demo", RECORDS)
    assert (summary["unique"], summary["redelivered"]) == (RECORDS, 0)
    assert (summary["missing_seqs"], summary["duplicate_seqs"]) == (0, 0)
    assert sum(summary["per_client"].values()) == RECORDS
    assert summary["committed_ok"] is True
    # both client libraries took part in the one group
    assert set(summary["per_client"]) == {"kafka-python", "confluent-kafka"}


def test_committed_offsets_are_the_end_of_the_topic(topology: LocalTopology) -> None:
    """Checked independently of the demo, with kafka-python's admin and consumer APIs."""
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    bootstrap = topology.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        committed = admin.list_group_offsets("demo-group")["demo-group"]
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        partitions = [TopicPartition("demo", p) for p in range(3)]
        ends = consumer.end_offsets(partitions)
    finally:
        consumer.close()
    assert {tp: meta.offset for tp, meta in committed.items()} == ends
    assert sum(ends.values()) == RECORDS


@pytest.mark.timeout(PIPELINE_TIMEOUT + 60)
def test_the_pipeline_job_reads_the_broker_volume(topology: LocalTopology) -> None:
    if "pipeline" not in kcoord_subcommands():
        pytest.skip("`kcoord pipeline` is not registered yet")
    before = sorted(p.relative_to(topology.data_dir) for p in topology.data_dir.rglob("*"))
    output = topology.run_one_shot("pipeline", PIPELINE_TIMEOUT)
    assert "demo-group" in output, f"the demo's group is missing from the stats:\n{output}"
    # compose mounts the volume read-only for this job: it must not write there
    assert sorted(p.relative_to(topology.data_dir) for p in topology.data_dir.rglob("*")) == before
