"""docker-compose.sasl-ssl.yml, built and run in real containers.

The profile's three services start in ``depends_on`` order on a container engine
(tests/compose/harness.py): ``kcoord-certs`` makes the CA, the broker certificate, the
users' passwords and their client settings into the ``kcoord-security`` volume and exits;
``kcoord-sasl`` serves SASL_SSL with SCRAM-SHA-512 and the StandardAuthorizer, healthy by
its loopback-only PLAINTEXT check; ``kcoord-sasl-check`` lists the users as the admin.

From the host, through the published port and the CA read out of the volume, the admin
creates a topic; the demo user, logged in but without ACLs, is shown nothing of it; a wrong
password and a TLS connection that skips SASL are refused. On the compose network the admin
grants the demo user DESCRIBE with ``kcoord acls add`` and the topic appears to it. The
broker container is stopped and started again: the users, the ACL and the topic are still
there. Everything is torn down at the end, volumes included. The passwords are made for the
run (the profile's variables), never written to the repository.
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from admin.client import AdminClient, Connection
from admin.errors import AdminError
from admin.security import ClientSecurity
from tests.compose.harness import Project, find_engine, open_engine, published_port
from tests.test_compose import REPO

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]

PROJECT = "kcoordsasl"
FILE = REPO / "docker-compose.sasl-ssl.yml"
BROKER, CERTS, CHECK = "kcoord-sasl", "kcoord-certs", "kcoord-sasl-check"
SECURITY_DIR = "/etc/kcoord/security"
TOPIC = "payments"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HostClient(AdminClient):
    """The admin client on the host: the broker advertises ``kcoord-sasl:9094``, a name only
    the compose network resolves, reached here on its published port (the certificate also
    names 127.0.0.1)."""

    def __init__(self, port: int, security: ClientSecurity) -> None:
        super().__init__(f"127.0.0.1:{port}", security=security)
        self.published = {(BROKER, 9094): ("127.0.0.1", port)}

    def _connect(self, host: str, port: int) -> Connection:
        return super()._connect(*self.published.get((host, port), (host, port)))


@dataclass
class SaslRun:
    """What the scenario saw, step by step."""

    certs_exit: int = -1
    check_output: str = ""
    created: list[str] = field(default_factory=list)
    demo_topics_before_acl: set[str] = field(default_factory=set)
    wrong_password: str = ""
    tls_without_sasl: str = ""
    acl_output: str = ""
    demo_topics_after_acl: set[str] = field(default_factory=set)
    broker_stop_code: int | None = None
    check_after_restart: str = ""
    demo_topics_after_restart: set[str] = field(default_factory=set)
    leftovers: dict[str, list[str]] = field(default_factory=dict)


def _security(user: str, password: str, cafile: Path) -> ClientSecurity:
    return ClientSecurity("SASL_SSL", "SCRAM-SHA-512", user, password, cafile=str(cafile))


def _topics(port: int, security: ClientSecurity) -> set[str]:
    with HostClient(port, security) as client:
        return set(client.metadata().leaders)


def _refusal(port: int, security: ClientSecurity) -> str:
    """The admin client's error when it tries to list topics with ``security``; '' if it could."""
    try:
        _topics(port, security)
    except AdminError as exc:
        return str(exc)
    return ""


def _security_volume(project: Project) -> str:
    label = f"label=com.docker.compose.project={project.name}"
    volumes = project.engine.cli("volume", "ls", "--quiet", "--filter", label).stdout.split()
    found = [name for name in volumes if name.endswith("kcoord-security")]
    assert len(found) == 1, volumes
    return found[0]


def _cli_on_network(project: Project, *argv: str) -> str:
    """``kcoord ARGV`` as the admin, in a new container on the compose network with the
    security volume mounted read-only."""
    result = project.engine.cli(
        "run", "--rm", "--no-healthcheck", "--network", project.network(BROKER),
        "-v", f"{_security_volume(project)}:{SECURITY_DIR}:ro", project.image(BROKER),
        *argv, "--bootstrap-server", f"{BROKER}:9094", "--command-config", f"{SECURITY_DIR}/admin.properties")
    return result.stdout


def _scenario(project: Project, run: SaslRun, passwords: dict[str, str], workdir: Path) -> None:
    project.create()
    project.start(CERTS)
    run.certs_exit = project.wait_exit(CERTS, 180.0)
    project.start(BROKER)  # its depends_on: kcoord-certs exited 0
    project.wait_healthy(BROKER)
    run.check_output, _ = project.run_once(CHECK, 180.0)

    port = published_port(project, BROKER, 9094)
    cafile = workdir / "ca.pem"
    cafile.write_text(project.exec(BROKER, ["cat", f"{SECURITY_DIR}/ca.pem"]).stdout)
    admin = _security("admin", passwords["admin"], cafile)
    demo = _security("demo", passwords["demo"], cafile)

    with HostClient(port, admin) as client:
        results = client.create_topics([(TOPIC, 3, -1, {})])
        run.created = [result.name for result in results if result.error == 0]
    run.demo_topics_before_acl = _topics(port, demo)
    run.wrong_password = _refusal(port, _security("demo", passwords["demo"] + "x", cafile))
    run.tls_without_sasl = _refusal(port, ClientSecurity("SSL", cafile=str(cafile)))

    run.acl_output = _cli_on_network(project, "acls", "add", "--allow-principal", "User:demo",
                                     "--operation", "Describe", "--topic", TOPIC)
    run.demo_topics_after_acl = _topics(port, demo)

    run.broker_stop_code = project.stop(BROKER)
    project.engine.cli("start", project.container(BROKER))
    project.wait_healthy(BROKER)
    run.check_after_restart, _ = project.run_once(CHECK, 180.0)
    run.demo_topics_after_restart = _topics(port, demo)


@pytest.fixture(scope="module")
def sasl_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslRun]:
    choice = find_engine()
    if isinstance(choice, str):
        pytest.skip(f"containers cannot run on this machine: {choice}")
    passwords = {"admin": secrets.token_urlsafe(12), "demo": secrets.token_urlsafe(12)}
    run = SaslRun()
    with open_engine(choice) as engine:
        project = Project(engine, PROJECT, {
            "KCOORD_SASL_PORT": str(_free_port()),
            "KCOORD_ADMIN_PASSWORD": passwords["admin"],
            "KCOORD_DEMO_PASSWORD": passwords["demo"],
        }, file=FILE, profiles=("sasl-ssl",))
        project.down()  # whatever an interrupted run left behind
        try:
            project.build()
            _scenario(project, run, passwords, tmp_path_factory.mktemp("sasl"))
        finally:
            project.down()
        run.leftovers = project.leftovers()
    yield run


def test_the_certificates_are_made_once_and_the_broker_becomes_healthy(sasl_run: SaslRun) -> None:
    assert sasl_run.certs_exit == 0


def test_the_admin_lists_the_users_over_sasl_ssl_on_the_compose_network(sasl_run: SaslRun) -> None:
    for output in (sasl_run.check_output, sasl_run.check_after_restart):
        assert "admin" in output and "demo" in output, output
        assert "SCRAM-SHA-512" in output, output


def test_the_admin_creates_a_topic_through_the_published_port(sasl_run: SaslRun) -> None:
    assert sasl_run.created == [TOPIC]


def test_a_user_without_acls_is_shown_nothing(sasl_run: SaslRun) -> None:
    assert TOPIC not in sasl_run.demo_topics_before_acl


def test_a_wrong_password_and_a_connection_without_sasl_are_refused(sasl_run: SaslRun) -> None:
    assert sasl_run.wrong_password, "a wrong password was accepted"
    assert "authentication" in sasl_run.wrong_password.lower() or "sasl" in sasl_run.wrong_password.lower(), \
        sasl_run.wrong_password
    assert sasl_run.tls_without_sasl, "a request without SASL was answered"


def test_an_acl_added_on_the_network_shows_the_topic_and_survives_a_restart(sasl_run: SaslRun) -> None:
    assert TOPIC in sasl_run.demo_topics_after_acl
    assert TOPIC in sasl_run.demo_topics_after_restart
    assert sasl_run.broker_stop_code == 0


def test_nothing_is_left_behind(sasl_run: SaslRun) -> None:
    assert sasl_run.leftovers == {"containers": [], "volumes": [], "networks": []}

