"""Named listeners and their TLS settings, from Kafka's configuration names.

``listeners=PLAINTEXT://127.0.0.1:9092,CLIENTS://0.0.0.0:9094`` names each listener;
``listener.security.protocol.map`` gives each name its security protocol (a name that is
itself a protocol needs no entry); ``advertised.listeners`` says which address clients of
each listener are told. TLS uses the stdlib ``ssl`` module with Kafka's PEM settings
(KIP-651): ``ssl.keystore.location`` or ``ssl.keystore.certificate.chain`` +
``ssl.keystore.key``, ``ssl.truststore.location`` or ``ssl.truststore.certificates``.
Everything is checked before the broker binds a socket.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any

from broker.config import ConfigError
from broker.config import parse_listeners as parse_listener_list

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def protocol_map(config: Any) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in config["listener.security.protocol.map"].split(","):
        if not item.strip():
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or protocol not in PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: {item.strip()!r} is not NAME:PROTOCOL "
                              f"with PROTOCOL one of {', '.join(PROTOCOLS)}")
        mapping[name.strip().upper()] = protocol
    return mapping


def parse_listeners(config: Any, listen: tuple[str, int] | None = None) -> list[ListenerSpec]:
    """The listeners to open; without ``listeners``, one PLAINTEXT listener on ``listen``."""
    mapping = protocol_map(config)
    raw = config["listeners"].strip()
    if raw:
        addresses = parse_listener_list(raw, "listeners", allow_any_port=True)
    else:
        host, port = listen if listen is not None else ("127.0.0.1", 9092)
        addresses = [("PLAINTEXT", host, port)]
    advertised: dict[str, tuple[str, int]] = {}
    for name, host, port in parse_listener_list(config["advertised.listeners"], "advertised.listeners"):
        advertised[name] = (host, port)
    if not raw and advertised and "PLAINTEXT" not in advertised and len(advertised) == 1:
        # A single advertised address without listeners describes the --listen listener.
        advertised = {"PLAINTEXT": next(iter(advertised.values()))}
    specs: list[ListenerSpec] = []
    for name, host, port in addresses:
        protocol = mapping.get(name, name if name in PROTOCOLS else "")
        if not protocol:
            raise ConfigError(f"listeners: listener {name} has no entry in listener.security.protocol.map")
        if any(s.name == name for s in specs):
            raise ConfigError(f"listeners: listener {name} is named twice")
        adv = advertised.get(name)
        specs.append(ListenerSpec(name, protocol, host, port, *(adv or (None, None))))
    unknown = set(advertised) - {s.name for s in specs}
    if unknown:
        raise ConfigError(f"advertised.listeners: {', '.join(sorted(unknown))} is not in listeners")
    return specs


def _pem_file(text: str) -> str:
    """ssl loads certificates from files only: write PEM text to a private temporary file."""
    handle, path = tempfile.mkstemp(prefix="kcoord-", suffix=".pem")
    with os.fdopen(handle, "w") as out:
        out.write(text)
    return path


def server_ssl_context(config: Any, client_auth: bool = True) -> ssl.SSLContext:
    """The TLS context of the SSL (``client_auth``) or SASL_SSL listeners (TLS 1.2 and 1.3 only).

    As in Kafka since KIP-684, ``ssl.client.auth`` applies to SSL listeners: a SASL_SSL
    client proves who it is with SASL, not with a certificate.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    protocols = [p.strip() for p in config["ssl.enabled.protocols"].split(",")]
    context.minimum_version = ssl.TLSVersion.TLSv1_2 if "TLSv1.2" in protocols else ssl.TLSVersion.TLSv1_3
    context.maximum_version = ssl.TLSVersion.TLSv1_3 if "TLSv1.3" in protocols else ssl.TLSVersion.TLSv1_2
    # TLS 1.2 renegotiation is refused, as Kafka's SslTransportLayer refuses it.
    context.options |= ssl.OP_NO_RENEGOTIATION
    password = config["ssl.key.password"] or None
    location = config["ssl.keystore.location"]
    chain, key = config["ssl.keystore.certificate.chain"], config["ssl.keystore.key"]
    temporary: list[str] = []
    setting = "TLS settings"  # which setting a failure below names
    try:
        if location:
            setting = f"ssl.keystore.location={location}"
            context.load_cert_chain(location, password=password)
        elif chain and key:
            setting = "ssl.keystore.certificate.chain and ssl.keystore.key"
            temporary += [_pem_file(chain), _pem_file(key)]
            context.load_cert_chain(temporary[0], temporary[1], password=password)
        else:
            raise ConfigError("ssl.keystore.location (or ssl.keystore.certificate.chain and ssl.keystore.key) "
                              "is needed for SSL and SASL_SSL listeners")
        trust_file = config["ssl.truststore.location"]
        trust_text = config["ssl.truststore.certificates"]
        if trust_file:
            setting = f"ssl.truststore.location={trust_file}"
            context.load_verify_locations(cafile=trust_file)
        elif trust_text:
            setting = "ssl.truststore.certificates"
            context.load_verify_locations(cadata=trust_text)
        client_auth_mode = config["ssl.client.auth"] if client_auth else "none"
        if client_auth_mode != "none":
            if not (trust_file or trust_text):
                raise ConfigError(f"ssl.client.auth={client_auth_mode} needs ssl.truststore.location or "
                                  "ssl.truststore.certificates")
            context.verify_mode = ssl.CERT_REQUIRED if client_auth_mode == "required" else ssl.CERT_OPTIONAL
    except OSError as exc:
        raise ConfigError(f"{setting}: {exc.strerror or exc}") from None
    except ssl.SSLError as exc:
        raise ConfigError(f"{setting}: {exc.reason or exc}") from None
    finally:
        for path in temporary:
            os.unlink(path)
    return context
