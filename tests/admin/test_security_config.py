"""--command-config: Kafka client property files for the admin client."""

from __future__ import annotations

from pathlib import Path

import pytest

from admin.errors import UsageError
from admin.security import from_properties, load_command_config, read_properties


def test_a_java_client_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# the admin\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism = SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="admin" password="p\\"w";\n'
        "ssl.truststore.location: /etc/ca.pem\n"
        "ssl.endpoint.identification.algorithm=\n")
    security = load_command_config(path)
    assert (security.protocol, security.mechanism, security.username, security.password) == (
        "SASL_SSL", "SCRAM-SHA-512", "admin", 'p"w')
    assert security.cafile == "/etc/ca.pem" and not security.check_hostname
    assert "p\"w" not in repr(security)


def test_librdkafka_names_and_ssl_client_certificates() -> None:
    security = from_properties(read_properties(
        "security.protocol=ssl\nssl.ca.location=ca.pem\nssl.certificate.location=c.pem\nssl.key.location=k.pem\n"))
    assert (security.protocol, security.cafile, security.certfile, security.keyfile) == (
        "SSL", "ca.pem", "c.pem", "k.pem")
    sasl = from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                            "sasl.username": "u", "sasl.password": "p"})
    assert (sasl.mechanism, sasl.username, sasl.password) == ("PLAIN", "u", "p")


@pytest.mark.parametrize("props", [
    {"security.protocol": "TLS"},
    {"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.username": "u", "sasl.password": "p"},
    {"security.protocol": "SASL_SSL"},
    {"ssl.truststore.type": "JKS"},
])
def test_unusable_settings_are_usage_errors(props: dict[str, str]) -> None:
    with pytest.raises(UsageError):
        from_properties(props)
