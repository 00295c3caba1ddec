"""docker-compose.yml's demo topology, built and run in real containers.

The images are built from the Dockerfile by the compose tool (Docker, or podman with a
locally built Debian base and a host-built wheelhouse where no registry or index can be
reached: tests/compose/harness.py). The services start in ``depends_on`` order, each when
its conditions hold: the broker healthy, then the demo producer, then the demo consumer
group (kafka-python and confluent-kafka), then the pipeline job. What they did is checked
from the host (the published ports, the Kafka protocol through them) and from inside
containers (the demo apps' own reports, ``kcoord groups describe`` on the compose network,
the pipeline job's output). Then the broker container is stopped and started again: the
volume keeps the log, and a second round of the demo resumes from the committed offsets.
Everything is torn down at the end, volumes included.

The whole scenario runs once, in the ``demo`` fixture, and the tests read what it saw.
Where no container engine can be used, every test is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from admin.client import LATEST_TIMESTAMP, AdminClient, Connection
from tests.compose.harness import (
    STATE,
    Project,
    find_engine,
    open_engine,
    parse_table,
    published_port,
    summary_line,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]

PROJECT = "kcoordtest"
RECORDS = 600  # per round of the demo
TOPIC, GROUP, PARTITIONS = "demo", "demo-group", 3
ONE_SHOT_TIMEOUT = 180.0
PIPELINE_TIMEOUT = 600.0
#: Where a root podman keeps state unless told otherwise: none of it may change.
PODMAN_HOST_PATHS = ("/var/lib/containers", "/run/containers", "/run/libpod", "/run/runc", "/run/netns",
                     "/dev/shm/libpod_lock", "/etc/containers/networks", "/etc/cni/net.d", "/var/lib/cni")

Offsets = dict[tuple[str, int], int]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PublishedAdminClient(AdminClient):
    """The admin client on the host. The broker advertises ``kcoord:9092``, a name only the
    compose network resolves; from the host that address is reached on its published port."""

    def __init__(self, published: dict[tuple[str, int], tuple[str, int]]) -> None:
        (host, port), = set(published.values())
        super().__init__(f"{host}:{port}")
        self.published = published

    def _connect(self, host: str, port: int) -> Connection:
        return super()._connect(*self.published.get((host, port), (host, port)))


@dataclass
class HostView:
    """The group's committed offsets and the topic's log end offsets, asked from the host."""

    committed: Offsets
    ends: Offsets


@dataclass
class DemoRun:
    """What the scenario saw, step by step."""

    engine: str
    healthy_after: float = 0.0
    healthz: int = 0
    metrics: str = ""
    produced: list[dict[str, Any]] = field(default_factory=list)
    consumed: list[dict[str, Any]] = field(default_factory=list)
    host: dict[str, HostView] = field(default_factory=dict)
    described: dict[str, Any] = field(default_factory=dict)
    pipeline_rows: list[dict[str, str]] = field(default_factory=list)
    broker_stop_code: int | None = None
    healthy_after_restart: float = 0.0
    leftovers: dict[str, list[str]] = field(default_factory=dict)
    host_paths_before: dict[str, int | None] = field(default_factory=dict)
    host_paths_after: dict[str, int | None] = field(default_factory=dict)


def _host_paths() -> dict[str, int | None]:
    """Each of podman's default state paths on the host: its modification time, or None."""
    found: dict[str, int | None] = {}
    for path in PODMAN_HOST_PATHS:
        try:
            found[path] = os.stat(path).st_mtime_ns
        except FileNotFoundError:
            found[path] = None
    return found


def _host_view(project: Project) -> HostView:
    published = {("kcoord", 9092): ("127.0.0.1", published_port(project, "kcoord", 9092))}
    with PublishedAdminClient(published) as client:
        committed = {tp: c.offset for tp, c in client.fetch_offsets(GROUP).items()}
        ends = client.list_offsets({(TOPIC, p): LATEST_TIMESTAMP for p in range(PARTITIONS)})
    return HostView(committed, ends)


def _http_get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return int(response.status), response.read().decode()


def _demo_round(project: Project, run: DemoRun) -> None:
    out, _ = project.run_once("demo-producer", ONE_SHOT_TIMEOUT)
    run.produced.append(summary_line(out))
    out, _ = project.run_once("demo-consumer", ONE_SHOT_TIMEOUT)
    run.consumed.append(summary_line(out))


def _scenario(project: Project, run: DemoRun) -> None:
    began = time.monotonic()
    project.create()
    project.start("kcoord")
    project.wait_healthy("kcoord")
    run.healthy_after = time.monotonic() - began
    metrics = f"http://127.0.0.1:{published_port(project, 'kcoord', 9308)}"
    run.healthz, _ = _http_get(metrics + "/healthz")
    _, run.metrics = _http_get(metrics + "/metrics")

    _demo_round(project, run)
    run.host["first round"] = _host_view(project)
    described = project.run_on_network(
        project.image("kcoord"),
        ["groups", "describe", GROUP, "--bootstrap-server", "kcoord:9092", "--output", "json"],
        network=project.network("kcoord"))
    run.described = json.loads(described.stdout)
    out, _ = project.run_once("pipeline", PIPELINE_TIMEOUT)
    run.pipeline_rows = parse_table(out)

    run.broker_stop_code = project.stop("kcoord")
    began = time.monotonic()
    project.engine.cli("start", project.container("kcoord"))
    project.wait_healthy("kcoord")
    run.healthy_after_restart = time.monotonic() - began
    run.host["after restart"] = _host_view(project)

    _demo_round(project, run)
    run.host["second round"] = _host_view(project)
    project.timings["compose up to healthy"] = run.healthy_after


@pytest.fixture(scope="module")
def demo() -> Iterator[DemoRun]:
    choice = find_engine()
    if isinstance(choice, str):
        pytest.skip(f"containers cannot run on this machine: {choice}")
    run = DemoRun(choice.kind, host_paths_before=_host_paths())
    with open_engine(choice) as engine:
        project = Project(engine, PROJECT, {
            "DEMO_RECORDS": str(RECORDS),
            "KCOORD_PORT": str(_free_port()),
            "KCOORD_METRICS_PORT": str(_free_port()),
        })
        project.down()  # whatever an interrupted run left behind
        try:
            project.build()
            sizes = project.image_sizes()
            _scenario(project, run)
        finally:
            project.down()
        run.leftovers = project.leftovers()
        _record(project, sizes)
    run.host_paths_after = _host_paths()
    yield run


def _record(project: Project, sizes: dict[str, int]) -> None:
    """The last run's timings and image sizes in .compose/last-run.json (docs/deployment.md
    quotes them)."""
    STATE.mkdir(parents=True, exist_ok=True)
    timings = {**project.engine.timings, **project.timings}
    record = {"engine": project.engine.kind, "seconds": {k: round(v, 1) for k, v in timings.items()},
              "image MB": {image: round(size / 1e6) for image, size in sizes.items()}}
    (STATE / "last-run.json").write_text(json.dumps(record, indent=2) + "\n")


# --------------------------------------------------------------------------- the first round


def test_the_broker_becomes_healthy_and_serves_its_published_ports(demo: DemoRun) -> None:
    assert demo.healthy_after > 0
    assert demo.healthz == 200
    assert "kcoord_build_info" in demo.metrics


def test_the_producer_writes_every_record(demo: DemoRun) -> None:
    first = demo.produced[0]
    assert (first["topic"], first["records"]) == (TOPIC, RECORDS)
    assert set(first["per_partition"]) == {str(p) for p in range(PARTITIONS)}


def test_the_group_of_two_client_libraries_consumes_every_record_once(demo: DemoRun) -> None:
    first = demo.consumed[0]
    assert (first["group"], first["topic"], first["records"]) == (GROUP, TOPIC, RECORDS)
    assert (first["unique"], first["redelivered"]) == (RECORDS, 0)
    assert (first["missing_seqs"], first["duplicate_seqs"]) == (0, 0)
    assert set(first["per_client"]) == {"kafka-python", "confluent-kafka"}
    assert first["committed_ok"] is True


def test_committed_offsets_equal_the_log_end_offsets(demo: DemoRun) -> None:
    view = demo.host["first round"]
    assert view.committed == view.ends
    assert sum(view.ends.values()) == RECORDS
    # what the consumer read back inside its container agrees with the host
    inside = {(TOPIC, int(p)): offset for p, offset in demo.consumed[0]["committed"].items()}
    assert inside == view.committed


def test_groups_describe_in_a_container_shows_the_group(demo: DemoRun) -> None:
    described = demo.described
    assert (described["group"], described["state"], described["protocol_type"]) == (GROUP, "Empty", "consumer")
    assert described["coordinator"]["host"] == "kcoord"
    rows = {(r["topic"], r["partition"]): r for r in described["offsets"]}
    assert {tp: r["current_offset"] for tp, r in rows.items()} == demo.host["first round"].committed
    assert {tp: r["log_end_offset"] for tp, r in rows.items()} == demo.host["first round"].ends
    assert all(r["lag"] == 0 for r in rows.values())


def test_the_pipeline_job_output_matches_the_committed_offsets(demo: DemoRun) -> None:
    rows = demo.pipeline_rows
    assert {row["group"] for row in rows} == {GROUP}
    from_log = {(row["topic"], int(row["partition"])): int(row["offset"]) for row in rows}
    assert from_log == demo.host["first round"].committed


# --------------------------------------------------------------------------- the restart


def test_the_broker_stops_cleanly_and_the_volume_keeps_its_log(demo: DemoRun) -> None:
    assert demo.broker_stop_code == 0
    assert demo.healthy_after_restart > 0
    assert demo.host["after restart"] == demo.host["first round"]


def test_after_the_restart_the_group_resumes_from_its_committed_offsets(demo: DemoRun) -> None:
    assert demo.produced[1]["records"] == RECORDS
    second = demo.consumed[1]
    # exactly the new records: a group starting over from the beginning would read the old ones
    assert (second["unique"], second["redelivered"], second["missing_seqs"]) == (RECORDS, 0, 0)
    view = demo.host["second round"]
    assert view.committed == view.ends
    assert sum(view.ends.values()) == 2 * RECORDS
    assert all(view.committed[tp] > offset for tp, offset in demo.host["first round"].committed.items())


# --------------------------------------------------------------------------- the teardown


def test_the_teardown_removes_containers_volumes_and_network(demo: DemoRun) -> None:
    assert demo.leftovers == {"containers": [], "volumes": [], "networks": []}


def test_podman_changes_nothing_outside_the_repository_and_the_temp_directory(demo: DemoRun) -> None:
    if demo.engine != "podman":
        pytest.skip("Docker keeps its state in its daemon's directories")
    assert demo.host_paths_after == demo.host_paths_before
    assert Path(STATE).is_relative_to(Path(__file__).resolve().parents[2]) or "KCOORD_COMPOSE_STATE" in os.environ
