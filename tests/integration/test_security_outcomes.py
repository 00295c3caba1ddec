"""What goes wrong gets Kafka's outcome, and never a connection that serves data.

Wrong password, unknown user, unknown mechanism, a request before the handshake, a
plaintext client on a TLS port, an untrusted client certificate; then: credentials and
ACLs survive kill -9, no password is ever written to the data directory or the log,
re-authentication (KIP-368) keeps a real client going, logins and denials are counted.
"""

from __future__ import annotations

import re
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from admin.client import AdminClient
from admin.security import ClientSecurity
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess
from tests.support.security import (
    ADMIN,
    ADMIN_PASSWORD,
    ALICE,
    ALICE_PASSWORD,
    Certificates,
    client_tls,
    login_plain,
    login_scram,
    make_certificates,
    pin_ports,
    sasl_handshake,
    secure_settings,
    users_file,
)
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

E = ErrorCode
FAIL_DELAY_MS = 300


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Certificates]]:
    tmp = tmp_path_factory.mktemp("outcomes")
    certs = make_certificates(tmp / "certs")
    settings = secure_settings(certs, users_file(tmp), **{"ssl.client.auth": "required",
                                                         "connections.max.reauth.ms": 1500,
                                                         "connection.failed.authentication.delay.ms": FAIL_DELAY_MS})
    broker = BrokerProcess(tmp / "data", settings, extra_args=["--http-listen", "127.0.0.1:0"]).start()
    try:
        yield broker, certs
    finally:
        broker.stop()


def connect(broker: BrokerProcess, listener: str, tls: ssl.SSLContext | None = None) -> WireClient:
    host, _, port = broker.address(listener).rpartition(":")
    return WireClient(host, int(port), timeout=10, tls=tls)


def serves_nothing(client: WireClient) -> bool:
    """The broker closed the connection: a Metadata request gets no answer."""
    try:
        client.send(ApiKey.METADATA, 1, {"topics": None})
        return client.is_closed_by_peer()
    except OSError:
        return True


def still_serving(broker: BrokerProcess) -> None:
    with connect(broker, "SASL_PLAINTEXT") as client:
        assert login_plain(client, ALICE, ALICE_PASSWORD).error_code == 0
        assert client.request(ApiKey.METADATA, 1, {"topics": None}).brokers


def test_wrong_password_fails_and_closes(secure: tuple[BrokerProcess, Certificates]) -> None:
    broker, _ = secure
    with connect(broker, "SASL_PLAINTEXT") as client:
        started = time.monotonic()
        reply = login_plain(client, ALICE, "not-the-password")
        assert time.monotonic() - started >= FAIL_DELAY_MS / 1000  # a failed login costs the caller time
        assert reply.error_code == E.SASL_AUTHENTICATION_FAILED
        assert "not-the-password" not in (reply.error_message or "")
        assert serves_nothing(client)
    with connect(broker, "SASL_PLAINTEXT") as client:
        reply = login_scram(client, ALICE, "not-the-password")
        assert reply.error_code == E.SASL_AUTHENTICATION_FAILED
        assert serves_nothing(client)
    still_serving(broker)


def test_unknown_user_fails_and_closes(secure: tuple[BrokerProcess, Certificates]) -> None:
    broker, _ = secure
    for login in (login_plain, login_scram):
        with connect(broker, "SASL_PLAINTEXT") as client:
            assert login(client, "mallory", ALICE_PASSWORD).error_code == E.SASL_AUTHENTICATION_FAILED
            assert serves_nothing(client)
    still_serving(broker)


def test_unknown_mechanism_gets_the_enabled_list_and_closes(secure: tuple[BrokerProcess, Certificates]) -> None:
    broker, _ = secure
    with connect(broker, "SASL_PLAINTEXT") as client:
        reply = sasl_handshake(client, "GSSAPI")
        assert reply.error_code == E.UNSUPPORTED_SASL_MECHANISM
        assert list(reply.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert serves_nothing(client)


def test_a_request_before_the_handshake_gets_illegal_sasl_state_and_closes(
        secure: tuple[BrokerProcess, Certificates]) -> None:
    broker, _ = secure
    with connect(broker, "SASL_PLAINTEXT") as client:
        reply = client.request(ApiKey.FIND_COORDINATOR, 1, {"key": "g", "key_type": 0})
        assert reply.error_code == E.ILLEGAL_SASL_STATE and reply.node_id == -1
        assert serves_nothing(client)
    with connect(broker, "SASL_PLAINTEXT") as client:  # no error field in a Metadata reply: just closed
        assert serves_nothing(client)
    with connect(broker, "SASL_PLAINTEXT") as client:  # after the handshake, before the login
        assert sasl_handshake(client, "PLAIN").error_code == 0
        reply = client.request(ApiKey.FIND_COORDINATOR, 1, {"key": "g", "key_type": 0})
        assert reply.error_code == E.ILLEGAL_SASL_STATE
        assert serves_nothing(client)


@pytest.mark.parametrize("listener", ["SASL_SSL", "SSL"])
def test_a_plaintext_client_on_a_tls_port_is_closed(secure: tuple[BrokerProcess, Certificates],
                                                    listener: str) -> None:
    broker, _ = secure
    with connect(broker, listener) as client:
        client.send(ApiKey.API_VERSIONS, 0, {})
        received = b""
        try:
            while chunk := client.sock.recv(4096):
                received += chunk
        except OSError:
            pass
        # At most a TLS alert record (content type 21), never a Kafka reply.
        assert received == b"" or received[0] == 21, received[:16]
    still_serving(broker)


def test_ssl_without_a_trusted_client_certificate_is_refused(secure: tuple[BrokerProcess, Certificates]) -> None:
    broker, certs = secure
    for context in (client_tls(certs), _untrusted(certs)):
        try:
            with connect(broker, "SSL", context) as client:
                assert serves_nothing(client)
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            pass  # refused during the handshake
    with connect(broker, "SSL", client_tls(certs, with_cert=True)) as client:
        assert client.request(ApiKey.METADATA, 1, {"topics": None}).brokers


def _untrusted(certs: Certificates) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.load_cert_chain(str(certs.untrusted_cert), str(certs.untrusted_key))
    return context


def test_reauthentication_keeps_a_real_client_connected(secure: tuple[BrokerProcess, Certificates]) -> None:
    """connections.max.reauth.ms=1500: librdkafka re-authenticates on the same connection (KIP-368)."""
    from confluent_kafka import Producer

    broker, _ = secure
    before = _logins(broker, "SCRAM-SHA-256", "success")
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": ALICE, "sasl.password": ALICE_PASSWORD,
                         "error_cb": errors.append})
    deadline = time.monotonic() + 30
    sent = 0
    while time.monotonic() < deadline and _logins(broker, "SCRAM-SHA-256", "success") < before + 3:
        producer.produce("reauth-topic", b"x", on_delivery=lambda err, msg: errors.append(err) if err else None)
        producer.flush(10)
        sent += 1
        time.sleep(0.2)
    assert _logins(broker, "SCRAM-SHA-256", "success") >= before + 3, broker.log()[-3000:]
    assert producer.flush(10) == 0
    assert not [e for e in errors if e is not None], errors
    assert "session expired" not in broker.log()


def _metrics(broker: BrokerProcess) -> str:
    line = broker.wait_for_log(r"kcoord http on")
    address = re.search(r"http on ([\d.]+:\d+)", line)
    assert address
    with urllib.request.urlopen(f"http://{address.group(1)}/metrics", timeout=10) as response:
        return str(response.read().decode())


def _logins(broker: BrokerProcess, mechanism: str, result: str) -> float:
    pattern = rf'kcoord_authentications_total{{mechanism="{mechanism}",result="{result}"}} (\S+)'
    match = re.search(pattern, _metrics(broker))
    return float(match.group(1)) if match else 0.0


def test_failures_are_counted_per_mechanism(secure: tuple[BrokerProcess, Certificates]) -> None:
    broker, _ = secure
    before = _logins(broker, "PLAIN", "failure")
    with connect(broker, "SASL_PLAINTEXT") as client:
        login_plain(client, ALICE, "wrong")
    assert _logins(broker, "PLAIN", "failure") == before + 1


def test_max_connections_per_ip(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", {"max.connections.per.ip": 2}).start()
    try:
        first, second = (WireClient(broker.host, broker.port) for _ in range(2))
        for client in (first, second):
            assert client.request(ApiKey.API_VERSIONS, 0, {}).error_code == 0
        third = WireClient(broker.host, broker.port)
        assert serves_nothing(third)
        third.close()
        first.close()
        deadline = time.monotonic() + 10
        while True:  # the slot frees once the broker has seen the close
            fourth = WireClient(broker.host, broker.port)
            try:
                assert fourth.request(ApiKey.API_VERSIONS, 0, {}).error_code == 0
                break
            except (ConnectionError, OSError, AssertionError):
                if time.monotonic() > deadline:
                    raise
            finally:
                fourth.close()
        second.close()
    finally:
        broker.stop()


# ---------------------------------------------------------------------- durability and secrecy


SECRET = "correct-horse-battery-staple"


def test_credentials_and_acls_survive_kill_9_and_no_password_is_stored_or_logged(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    settings = secure_settings(certs, users_file(tmp_path, {ADMIN: ADMIN_PASSWORD}), authorizer=True)
    broker = BrokerProcess(tmp_path / "data", settings, extra_args=["--log-level", "DEBUG"]).start()
    pin_ports(broker)
    admin_config = tmp_path / "admin.properties"
    admin_config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        f'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="{ADMIN}" '
        f'password="{ADMIN_PASSWORD}";\nssl.truststore.location={certs.ca}\n')
    password_file = tmp_path / "carol.password"
    password_file.write_text(SECRET + "\n")

    def kcoord(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "kcoord.cli", *args, "--bootstrap-server",
                               broker.address("SASL_SSL"), "--command-config", str(admin_config)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr

    try:
        output = kcoord("users", "add", "carol", "--password-file", str(password_file), "--mechanism", "SCRAM-SHA-512",
                        "--mechanism", "SCRAM-SHA-256", "--iterations", "8192")
        output += kcoord("acls", "add", "--allow-principal", "User:carol", "--operation", "Read", "--topic", "ledger",
                         "--resource-pattern-type", "prefixed")
        output += kcoord("acls", "add", "--deny-principal", "User:carol", "--operation", "Read", "--topic",
                         "ledger-secret")
        with connect(broker, "SASL_PLAINTEXT") as client:  # PLAIN checks against the SCRAM credential
            assert login_plain(client, "carol", SECRET).error_code == 0
        broker.kill()  # kill -9: only what was fsynced before each reply survives
        broker.start()
        with connect(broker, "SASL_PLAINTEXT") as client:
            assert login_scram(client, "carol", SECRET).error_code == 0
        with connect(broker, "SASL_PLAINTEXT") as client:
            assert login_scram(client, "carol", SECRET, "SCRAM-SHA-256").error_code == 0
        listed = kcoord("acls", "list", "--principal", "User:carol")
        assert "PREFIXED" in listed and "ledger" in listed and "DENY" in listed and "ledger-secret" in listed
        users = kcoord("users", "list", "carol")
        assert "8192" in users and "SCRAM-SHA-256" in users
        output += listed + users
    finally:
        broker.stop()
    assert SECRET not in output
    log = broker.log()
    assert "logger=kcoord.audit SCRAM credential set by User:admin: user=carol mechanism=SCRAM-SHA-512" in log
    assert "logger=kcoord.audit ACL added by User:admin: (principal=User:carol, host=*, operation=READ, " \
           "permission=DENY) on TOPIC:LITERAL:ledger-secret" in log
    assert SECRET not in broker.log() and ALICE_PASSWORD not in broker.log() and ADMIN_PASSWORD not in broker.log()
    secret = SECRET.encode()
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert secret not in data and ADMIN_PASSWORD.encode() not in data, path


def test_users_add_offline_bootstraps_the_first_super_user(tmp_path: Path) -> None:
    data = tmp_path / "data"
    password_file = tmp_path / "root.password"
    password_file.write_text(SECRET)
    done = subprocess.run([sys.executable, "-m", "kcoord.cli", "users", "add", "root", "--data-dir", str(data),
                           "--password-file", str(password_file)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    broker = BrokerProcess(data, {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                                  "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                  "super.users": "User:root"}).start()
    try:
        security = ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-512", "root", SECRET)
        with AdminClient(broker.address("SASL_PLAINTEXT"), security=security) as admin:
            _, reply = admin.any_broker().request(ApiKey.DESCRIBE_ACLS, {
                "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
            assert reply.error_code == 0
        # The data directory is locked while the broker runs: the offline path refuses.
        again = subprocess.run([sys.executable, "-m", "kcoord.cli", "users", "add", "x", "--data-dir", str(data),
                                "--password-file", str(password_file)], capture_output=True, text=True, timeout=60)
        assert again.returncode == 2 and "in use" in again.stderr
    finally:
        broker.stop()
    assert not any(SECRET.encode() in p.read_bytes() for p in data.rglob("*") if p.is_file())


def test_nothing_listens_where_it_should_not(secure: tuple[BrokerProcess, Certificates]) -> None:
    """Each listener speaks only its own protocol: SASL is required on the SASL ones."""
    broker, _ = secure
    host, _, port = broker.address("SASL_PLAINTEXT").rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5):
        pass
    with connect(broker, "SASL_PLAINTEXT") as client:
        # ApiVersions is answered before authentication (clients need it to pick versions) ...
        assert client.request(ApiKey.API_VERSIONS, 0, {}).error_code == 0
        # ... and nothing else.
        assert serves_nothing(client)


def test_metadata_advertises_the_listener_the_client_connected_to(secure: tuple[BrokerProcess, Certificates]) -> None:
    broker, certs = secure
    for listener, tls in (("SASL_PLAINTEXT", None), ("SASL_SSL", client_tls(certs))):
        with connect(broker, listener, tls) as client:
            assert login_plain(client, ALICE, ALICE_PASSWORD).error_code == 0
            brokers = client.request(ApiKey.METADATA, 1, {"topics": []}).brokers
            coordinator = client.request(ApiKey.FIND_COORDINATOR, 1, {"key": "g", "key_type": 0})
        assert [f"{b.host}:{b.port}" for b in brokers] == [broker.address(listener)]
        assert f"{coordinator.host}:{coordinator.port}" == broker.address(listener)
