"""Make what the SASL_SSL compose profile needs, into one directory (a volume).

- ``ca.pem``: a private CA; ``broker.pem``: the broker's key and certificate chain for the
  host names given (ssl.keystore.location);
- ``users.txt``: the SCRAM users the broker bootstraps (scram.credentials.bootstrap.file),
  ``admin`` and ``demo``, with passwords from KCOORD_ADMIN_PASSWORD / KCOORD_DEMO_PASSWORD
  or random ones;
- ``admin.properties`` and ``demo.properties``: client settings with Kafka's property names,
  for ``kcoord ... --command-config`` and for applications.

Nothing is overwritten: a second run keeps the first run's CA, keys and passwords. Files
holding keys or passwords are readable by their owner only.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

DAYS = 825


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kcoord compose"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _chosen_password(variable: str) -> str | None:
    """The password set in ``variable``, None when unset or empty.

    Refused (the script exits 2, nothing made): text a compose tool left uninterpolated
    (``${...}``), which would otherwise become a password anyone can read in the compose
    file, and characters the JAAS line of the client settings cannot hold.
    """
    value = os.environ.get(variable) or None
    if value is None:
        return None
    if "${" in value:
        sys.exit(f"{variable} holds {value!r}, a compose variable that was not interpolated: "
                 "set it to a password or leave it unset for a random one")
    if any(ch in value for ch in '"\\\n\r'):
        sys.exit(f"{variable}: a password may not hold a quote, a backslash or a line break")
    return value


def make(directory: Path, hosts: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "broker.pem").exists():
        print(f"{directory}: certificates already made, kept")
        return
    passwords = {"admin": _chosen_password("KCOORD_ADMIN_PASSWORD") or secrets.token_urlsafe(18),
                 "demo": _chosen_password("KCOORD_DEMO_PASSWORD") or secrets.token_urlsafe(18)}
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("kcoord compose CA")).issuer_name(_name("kcoord compose CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=DAYS))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    _private(directory / "broker.pem", _pem_key(key) + cert.public_bytes(pem) + ca.public_bytes(pem))
    _private(directory / "users.txt", "".join(
        f"SCRAM-SHA-512=[name={user},password={password}]\n" for user, password in passwords.items()).encode())
    for user, password in passwords.items():
        _private(directory / f"{user}.properties", (
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user}" password="{password}";\n'
            f"ssl.truststore.type=PEM\nssl.truststore.location={directory / 'ca.pem'}\n").encode())
    print(f"{directory}: CA, broker certificate for {', '.join(hosts)}, users admin and demo")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print("usage: make_certs.py DIRECTORY HOST [HOST...]", file=sys.stderr)
        sys.exit(2)
    make(Path(sys.argv[1]), sys.argv[2:])
