"""The admin client's own security: TLS and SASL with Kafka client property names.

``--command-config FILE`` reads a Java-properties file as Kafka's tools do:
``security.protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), ``sasl.mechanism``
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with the user and password from ``sasl.jaas.config``
(``... required username="u" password="p";``) or librdkafka's ``sasl.username`` /
``sasl.password``, and PEM TLS settings: ``ssl.truststore.location`` (or
``ssl.ca.location``), ``ssl.keystore.location`` (key and certificate chain in one PEM, or
``ssl.certificate.location`` + ``ssl.key.location``), ``ssl.key.password``, and
``ssl.endpoint.identification.algorithm`` (empty: no host name check).
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scramp import ScramClient, ScramException

from admin.errors import BrokerError, UsageError
from protocol.errors import ErrorCode

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')

#: ``(api_key, version, body) -> reply body``: one request on the connection being set up.
Roundtrip = Callable[[int, int, dict[str, Any]], Any]


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = None
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    key_password: str | None = None
    check_hostname: bool = True
    #: False only for a connection that stays on this machine to a listener whose certificate
    #: the caller has no CA for (the console reaching its own broker): no verification at all.
    verify: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __repr__(self) -> str:  # the password stays out of logs and tracebacks
        return f"ClientSecurity({self.protocol}, {self.mechanism}, username={self.username!r})"


def read_properties(text: str) -> dict[str, str]:
    """Java properties: ``key=value`` or ``key: value`` lines, ``#``/``!`` comments, ``\\`` continuations."""
    props: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", logical)
        if match:
            props[match.group(1)] = match.group(2).strip()
        logical = ""
    return props


def from_properties(props: dict[str, str]) -> ClientSecurity:
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise UsageError(f"security.protocol: {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    mechanism = props.get("sasl.mechanism", props.get("sasl.mechanisms", "PLAIN")).upper()
    username, password = props.get("sasl.username"), props.get("sasl.password")
    jaas = props.get("sasl.jaas.config")
    if jaas:
        options = {key: value.replace('\\"', '"') for key, value in _JAAS_OPTION.findall(jaas)}
        username, password = options.get("username", username), options.get("password", password)
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        if mechanism not in MECHANISMS:
            raise UsageError(f"sasl.mechanism: {mechanism!r} is not one of {', '.join(MECHANISMS)}")
        if not username or password is None:
            raise UsageError("SASL needs a username and password (sasl.jaas.config or sasl.username/sasl.password)")
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        if props.get(key, "PEM").upper() != "PEM":
            raise UsageError(f"{key}: only PEM files are supported")
    keystore = props.get("ssl.keystore.location")
    return ClientSecurity(
        protocol=protocol, mechanism=mechanism, username=username, password=password,
        cafile=props.get("ssl.truststore.location") or props.get("ssl.ca.location"),
        certfile=keystore or props.get("ssl.certificate.location"),
        keyfile=None if keystore else props.get("ssl.key.location"),
        key_password=props.get("ssl.key.password"),
        check_hostname=props.get("ssl.endpoint.identification.algorithm", "https").lower() == "https",
    )


def load_command_config(path: Path) -> ClientSecurity:
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"--command-config {path}: {exc.strerror}") from None
    return from_properties(read_properties(text))


def client_security(args: Any) -> ClientSecurity | None:
    """The ``--command-config`` settings of parsed arguments, if given."""
    path = getattr(args, "command_config", None)
    return None if path is None else load_command_config(path)


def client_ssl_context(security: ClientSecurity) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=security.cafile)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = security.check_hostname and security.verify
    if not security.verify:
        context.verify_mode = ssl.CERT_NONE
    if security.certfile:
        context.load_cert_chain(security.certfile, security.keyfile, password=security.key_password)
    return context


def wrap(sock: socket.socket, host: str, security: ClientSecurity) -> socket.socket:
    """The TLS side of a connection, when the protocol has one."""
    if not security.tls:
        return sock
    try:
        return client_ssl_context(security).wrap_socket(sock, server_hostname=host)
    except (ssl.SSLError, ssl.CertificateError) as exc:
        sock.close()
        raise BrokerError(f"TLS handshake with {host} failed: {exc}") from None


def authenticate(security: ClientSecurity, roundtrip: Roundtrip, address: str) -> None:
    """SaslHandshake v1 then SaslAuthenticate until the mechanism completes."""
    reply = roundtrip(SASL_HANDSHAKE, 1, {"mechanism": security.mechanism})
    if reply.error_code != ErrorCode.NONE:
        raise BrokerError(f"{address} refused SASL mechanism {security.mechanism} "
                          f"(it offers {', '.join(reply.mechanisms)})", reply.error_code)
    assert security.username is not None and security.password is not None

    def step(token: bytes) -> bytes:
        answer = roundtrip(SASL_AUTHENTICATE, 1, {"auth_bytes": token})
        if answer.error_code != ErrorCode.NONE:
            raise BrokerError(f"authentication to {address} failed: {answer.error_message}", answer.error_code)
        return bytes(answer.auth_bytes)

    if security.mechanism == "PLAIN":
        step(f"\0{security.username}\0{security.password}".encode())
        return
    client = ScramClient([security.mechanism], security.username, security.password)
    try:
        client.set_server_first(step(client.get_client_first().encode()).decode())
        client.set_server_final(step(client.get_client_final().encode()).decode())
    except ScramException as exc:
        raise BrokerError(f"authentication to {address} failed: {exc}") from None

