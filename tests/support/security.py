"""A broker with SSL, SASL_PLAINTEXT and SASL_SSL listeners, and what clients need to reach it.

Certificates are made at run time with trustme (never committed): a CA, the broker's
certificate for 127.0.0.1 and localhost, and a client certificate whose subject is
``CN=alice-cert,O=kcoord tests``. Users are bootstrapped from a credentials file with
kafka-storage's ``--add-scram`` syntax.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme
from scramp import ScramClient

from protocol.api_keys import ApiKey
from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
ALICE, ALICE_PASSWORD = "alice", "alice-secret"
CLIENT_CERT_SUBJECT = "CN=alice-cert,O=kcoord tests"
LISTENERS = "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"


@dataclass
class Certificates:
    ca: Path  # the CA certificate, PEM
    server: Path  # the broker's key and chain, PEM
    client_cert: Path
    client_key: Path
    client_chain: Path  # key and chain in one PEM (for ssl.keystore.location)
    untrusted_cert: Path  # a client certificate from another CA
    untrusted_key: Path


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert(common_name="alice-cert", organization_name="kcoord tests")
    stranger = trustme.CA().issue_cert(common_name="mallory", organization_name="elsewhere")
    out = Certificates(*(directory / name for name in (
        "ca.pem", "server.pem", "client-cert.pem", "client-key.pem", "client.pem", "untrusted-cert.pem",
        "untrusted-key.pem")))
    ca.cert_pem.write_to_path(str(out.ca))
    server.private_key_and_cert_chain_pem.write_to_path(str(out.server))
    for blob in client.cert_chain_pems:
        blob.write_to_path(str(out.client_cert), append=True)
    client.private_key_pem.write_to_path(str(out.client_key))
    client.private_key_and_cert_chain_pem.write_to_path(str(out.client_chain))
    stranger.cert_chain_pems[0].write_to_path(str(out.untrusted_cert))
    stranger.private_key_pem.write_to_path(str(out.untrusted_key))
    return out


def users_file(directory: Path, users: dict[str, str] | None = None) -> Path:
    users = users or {ADMIN: ADMIN_PASSWORD, ALICE: ALICE_PASSWORD}
    path = directory / "users.txt"
    path.write_text("".join(
        f"{mechanism}=[name={name},password={password}]\n"
        for name, password in users.items() for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")))
    return path


def secure_settings(certs: Certificates, users: Path, *, authorizer: bool = False,
                    listeners: str = LISTENERS, **extra: Any) -> dict[str, object]:
    settings: dict[str, object] = {
        "listeners": listeners,
        "ssl.keystore.location": certs.server,
        "ssl.truststore.location": certs.ca,
        "ssl.client.auth": "requested",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "scram.credentials.bootstrap.file": users,
        "connection.failed.authentication.delay.ms": 10,
        "group.initial.rebalance.delay.ms": 0,
    }
    if authorizer:
        settings["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        settings["super.users"] = f"User:{ADMIN};User:{CLIENT_CERT_SUBJECT}"
    settings.update(extra)
    return settings


def start_secure_broker(tmp_path: Path, **kwargs: Any) -> tuple[BrokerProcess, Certificates]:
    certs = make_certificates(tmp_path / "certs")
    broker = BrokerProcess(tmp_path / "data", secure_settings(certs, users_file(tmp_path), **kwargs))
    broker.start()
    for name in ("SASL_SSL", "SASL_PLAINTEXT", "SSL"):
        if name in broker.sets.get("listeners", LISTENERS):  # type: ignore[operator]
            broker.address(name)
    return broker, certs


def pin_ports(broker: BrokerProcess) -> None:
    """Keep the ports the listeners got, so a restart binds the same ones."""
    names = [item.split("://")[0] for item in str(broker.sets["listeners"]).split(",")]
    broker.sets["listeners"] = ",".join(f"{name}://{broker.address(name)}" for name in names)


def client_tls(certs: Certificates, with_cert: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca))
    if with_cert:
        context.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    return context


def sasl_handshake(client: WireClient, mechanism: str, version: int = 1) -> Any:
    return client.request(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism})


def sasl_authenticate(client: WireClient, token: bytes, version: int = 2) -> Any:
    return client.request(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token})


def login_plain(client: WireClient, user: str, password: str) -> Any:
    """SaslHandshake v1 + one SaslAuthenticate; the SaslAuthenticate reply."""
    assert sasl_handshake(client, "PLAIN").error_code == 0
    return sasl_authenticate(client, f"\0{user}\0{password}".encode())


def login_scram(client: WireClient, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> Any:
    """The SCRAM exchange; the last SaslAuthenticate reply (an error stops it early)."""
    assert sasl_handshake(client, mechanism).error_code == 0
    scram = ScramClient([mechanism], user, password)
    first = sasl_authenticate(client, scram.get_client_first().encode())
    if first.error_code:
        return first
    scram.set_server_first(bytes(first.auth_bytes).decode())
    final = sasl_authenticate(client, scram.get_client_final().encode())
    if final.error_code == 0:
        scram.set_server_final(bytes(final.auth_bytes).decode())
    return final
