"""Named listeners and their protocols, from Kafka's configuration names."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from broker.config import Config, ConfigError
from broker.listeners import ListenerSpec, parse_listeners, server_ssl_context


def test_without_listeners_the_listen_address_is_one_plaintext_listener() -> None:
    assert parse_listeners(Config(), ("0.0.0.0", 9092)) == [ListenerSpec("PLAINTEXT", "PLAINTEXT", "0.0.0.0", 9092)]
    advertised = parse_listeners(Config({"advertised.listeners": "PLAINTEXT://kcoord:9092"}), ("0.0.0.0", 9092))
    assert advertised[0].advertised_host == "kcoord" and advertised[0].advertised_port == 9092


def test_named_listeners_take_their_protocol_from_the_map() -> None:
    config = Config({
        "listeners": "INTERNAL://127.0.0.1:9092,CLIENTS://0.0.0.0:9094,SSL://:9095",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,CLIENTS:SASL_SSL,SSL:SSL",
        "advertised.listeners": "CLIENTS://broker.example:19094",
    })
    specs = parse_listeners(config)
    assert [(s.name, s.protocol, s.host, s.port) for s in specs] == [
        ("INTERNAL", "PLAINTEXT", "127.0.0.1", 9092), ("CLIENTS", "SASL_SSL", "0.0.0.0", 9094), ("SSL", "SSL", "", 9095)]
    assert (specs[1].advertised_host, specs[1].advertised_port, specs[1].sasl, specs[1].tls) == (
        "broker.example", 19094, True, True)


@pytest.mark.parametrize("settings, problem", [
    ({"listeners": "OTHER://h:1"}, "no entry in listener.security.protocol.map"),
    ({"listeners": "PLAINTEXT://h"}, "expected HOST:PORT"),
    ({"listeners": "PLAINTEXT://h:1,PLAINTEXT://h:2"}, "named twice"),
    ({"listeners": "PLAINTEXT://h:1", "advertised.listeners": "SSL://h:2"}, "not in listeners"),
    ({"listener.security.protocol.map": "A:TLS"}, "NAME:PROTOCOL"),
])
def test_bad_listener_settings_are_refused_by_name(settings: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_listeners(Config(settings), ("127.0.0.1", 9092))


def test_tls_needs_a_keystore_and_client_auth_a_truststore() -> None:
    with pytest.raises(ConfigError, match=r"ssl\.keystore\.location"):
        server_ssl_context(Config())
    with pytest.raises(ConfigError):
        Config({"ssl.enabled.protocols": "TLSv1.1"})
    with pytest.raises(ConfigError):
        Config({"sasl.enabled.mechanisms": "GSSAPI"})


def test_tls_is_1_2_or_1_3_without_renegotiation(tmp_path: Path) -> None:
    import trustme

    pem = tmp_path / "broker.pem"
    trustme.CA().issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
    context = server_ssl_context(Config({"ssl.keystore.location": str(pem)}))
    assert (context.minimum_version, context.maximum_version) == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)
    assert context.options & ssl.OP_NO_RENEGOTIATION


def test_an_unreadable_tls_file_is_named_with_its_setting(tmp_path: Path) -> None:
    missing = tmp_path / "broker.pem"
    with pytest.raises(ConfigError, match=rf"ssl\.keystore\.location={missing}: No such file or directory"):
        server_ssl_context(Config({"ssl.keystore.location": str(missing)}))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=rf"ssl\.keystore\.location={garbage}: "):
        server_ssl_context(Config({"ssl.keystore.location": str(garbage)}))
