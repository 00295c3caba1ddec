"""The SASL_SSL compose profile (docker-compose.sasl-ssl.yml), checked without Docker.

Its services build from the Dockerfile's targets and sit in the ``sasl-ssl`` profile; its
certificate script makes files the broker's TLS settings accept; and the broker command it
runs, started here as a local process with those files, serves ``kcoord users list`` over
SASL_SSL to the admin whose client settings the script wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from admin.security import load_command_config
from broker.cli import build_parser
from broker.config import load_config
from broker.listeners import parse_listeners, server_ssl_context
from tests.support.broker_process import BrokerProcess

REPO = Path(__file__).resolve().parents[1]
FILE = REPO / "docker-compose.sasl-ssl.yml"
SECURITY_DIR = "/etc/kcoord/security"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(FILE.read_text())
    return data


def test_every_service_is_in_the_profile_and_builds_from_a_target(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"kcoord-certs", "kcoord-sasl", "kcoord-sasl-check"}
    for name, service in services.items():
        assert service["profiles"] == ["sasl-ssl"], name
        assert service["build"]["target"] in ("broker", "demo"), name
    assert services["kcoord-sasl"]["depends_on"] == {"kcoord-certs": {"condition": "service_completed_successfully"}}
    assert services["kcoord-sasl-check"]["depends_on"] == {"kcoord-sasl": {"condition": "service_healthy"}}


def _local(argv: list[str], directory: Path) -> list[str]:
    return [arg.replace(SECURITY_DIR, str(directory)) for arg in argv]


def test_the_certificates_and_the_broker_command_work_together(compose: dict[str, Any], tmp_path: Path) -> None:
    certs = tmp_path / "security"
    script = REPO / "deploy" / "security" / "make_certs.py"
    env = dict(os.environ, KCOORD_ADMIN_PASSWORD="", KCOORD_DEMO_PASSWORD="")
    for _ in range(2):  # the second run keeps what the first made
        done = subprocess.run([sys.executable, str(script), str(certs), "127.0.0.1", "localhost"],
                              capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr
    assert "kept" in done.stdout
    assert (certs / "broker.pem").stat().st_mode & 0o077 == 0

    serve = _local(compose["services"]["kcoord-sasl"]["command"], certs)
    args = build_parser().parse_args(serve)
    config = load_config(None, args.sets)
    specs = parse_listeners(config)
    assert [(s.name, s.protocol) for s in specs] == [("SASL_SSL", "SASL_SSL"), ("PLAINTEXT", "PLAINTEXT")]
    server_ssl_context(config, client_auth=False)
    admin = load_command_config(certs / "admin.properties")
    assert admin.protocol == "SASL_SSL" and admin.mechanism == "SCRAM-SHA-512" and admin.username == "admin"

    # The same command, locally: ports chosen by the OS, the advertised names dropped.
    sets = {name: value for name, value in (s.split("=", 1) for s in args.sets)
            if name not in ("listeners", "advertised.listeners")}
    sets["listeners"] = "SASL_SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"
    broker = BrokerProcess(tmp_path / "data", sets).start()
    try:
        check = _local(compose["services"]["kcoord-sasl-check"]["command"], certs)
        check[check.index("--bootstrap-server") + 1] = broker.address("SASL_SSL")
        done = subprocess.run([sys.executable, "-m", "kcoord.cli", *check], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr + broker.log()
        assert "admin" in done.stdout and "demo" in done.stdout
        health = subprocess.run([sys.executable, str(REPO / "deploy" / "healthcheck.py"), "--bootstrap-server",
                                 broker.address("PLAINTEXT")], capture_output=True, text=True, timeout=30)
        assert health.returncode == 0, health.stderr
    finally:
        broker.stop()


def test_the_passwords_pass_through_from_the_environment(compose: dict[str, Any]) -> None:
    # a list entry without a value: the host's value when set, absent otherwise, with both
    # Docker's compose and podman-compose (which leaves "${NAME:-}" uninterpolated)
    assert compose["services"]["kcoord-certs"]["environment"] == ["KCOORD_ADMIN_PASSWORD", "KCOORD_DEMO_PASSWORD"]


@pytest.mark.parametrize("password, problem", [
    ("${KCOORD_ADMIN_PASSWORD:-}", "not interpolated"),
    ('pa"ss', "quote"),
])
def test_a_password_the_script_cannot_use_is_refused_and_nothing_is_made(
        tmp_path: Path, password: str, problem: str) -> None:
    script = REPO / "deploy" / "security" / "make_certs.py"
    env = dict(os.environ, KCOORD_ADMIN_PASSWORD=password, KCOORD_DEMO_PASSWORD="")
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "security"), "localhost"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode != 0
    assert problem in done.stderr and "KCOORD_ADMIN_PASSWORD" in done.stderr
    assert not (tmp_path / "security" / "broker.pem").exists()


def test_the_images_build_with_the_same_arguments_as_the_demo(compose: dict[str, Any]) -> None:
    demo = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    for name, service in compose["services"].items():
        assert service["build"]["args"] == demo["services"]["kcoord"]["build"]["args"], name
