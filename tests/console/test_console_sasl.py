"""The console of a broker whose Kafka listener asks for SASL: a real login, then ACLs apply.

The broker's first listener is SASL_SSL with SCRAM users and the StandardAuthorizer on. The
console must ask for credentials, refuse a wrong password with the broker's own error, and
then act as the logged-in principal, so a user sees only the groups the ACLs let them
describe (docs/console.md).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from admin.client import AdminClient, CommittedOffset
from admin.security import ClientSecurity
from tests.console.test_console import Browserless
from tests.support.broker_process import BrokerProcess
from tests.support.security import (
    ADMIN,
    ADMIN_PASSWORD,
    ALICE,
    ALICE_PASSWORD,
    Certificates,
    make_certificates,
    secure_settings,
    users_file,
)

pytestmark = pytest.mark.integration


class SecureConsole:
    def __init__(self, broker: BrokerProcess, certs: Certificates, base: str) -> None:
        self.broker, self.certs, self.base = broker, certs, base

    def admin(self) -> AdminClient:
        security = ClientSecurity("SASL_SSL", "SCRAM-SHA-512", ADMIN, ADMIN_PASSWORD, cafile=str(self.certs.ca))
        return AdminClient(self.broker.address("SASL_SSL"), 10.0, security=security)

    def kcoord(self, *args: str) -> None:
        config = self.broker.data_dir.parent / "admin.properties"
        config.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
            f'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{ADMIN}" password="{ADMIN_PASSWORD}";\nssl.truststore.location={self.certs.ca}\n')
        done = subprocess.run([sys.executable, "-m", "kcoord.cli", *args, "--bootstrap-server",
                               self.broker.address("SASL_SSL"), "--command-config", str(config)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureConsole]:
    tmp = tmp_path_factory.mktemp("secure-console")
    certs = make_certificates(tmp / "certs")
    settings = secure_settings(certs, users_file(tmp), authorizer=True,
                               listeners="SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0")
    broker = BrokerProcess(tmp / "data", settings, command="kcoord",
                           extra_args=["--http-listen", "127.0.0.1:0"]).start()
    try:
        url = broker.http_url()
        console = SecureConsole(broker, certs, url)
        with console.admin() as admin:
            admin.create_topics([("ledger", 1, 1, {})])
            for group in ("alice-app", "payroll"):
                admin.commit_offsets(group, {("ledger", 0): CommittedOffset(5, -1, "")})
        console.kcoord("acls", "add", "--allow-principal", f"User:{ALICE}", "--operation", "Describe",
                       "--group", "alice-", "--resource-pattern-type", "prefixed")
        console.kcoord("acls", "add", "--allow-principal", f"User:{ALICE}", "--operation", "Describe",
                       "--topic", "ledger")
        yield console
    finally:
        broker.stop()


def _login(client: Browserless, password: str) -> tuple[int, dict[str, str], str]:
    status, _, page = client.request("/login?next=/groups")
    assert status == 200 and 'name="password"' in page
    assert "SCRAM-SHA-512" in page  # the broker's enabled mechanisms are offered
    return client.request("/login?next=/groups", {"csrf": client.csrf(), "mechanism": "SCRAM-SHA-512",
                                                  "username": ALICE, "password": password})


def test_the_console_asks_for_a_login_and_refuses_a_wrong_password(secure: SecureConsole) -> None:
    client = Browserless(secure.base)
    status, headers, _ = client.request("/groups")
    assert status == 303 and headers["location"] == "/login?next=/groups"
    status, _, page = _login(client, "not-" + ALICE_PASSWORD)
    assert status == 401 and "SASL_AUTHENTICATION_FAILED" in page
    status, headers, _ = client.request("/groups")
    assert status == 303, "a failed login opens nothing"


def test_after_a_login_the_console_shows_what_the_acls_let_the_user_describe(secure: SecureConsole) -> None:
    client = Browserless(secure.base)
    status, headers, _ = _login(client, ALICE_PASSWORD)
    assert status == 303 and headers["location"] == "/groups"
    status, _, page = client.request("/groups")
    assert status == 200
    assert "alice-app" in page
    assert "payroll" not in page, "ListGroups is filtered by the user's DESCRIBE ACLs"
    status, _, page = client.request("/")
    assert status == 200 and secure.broker.address("SASL_SSL") in page
