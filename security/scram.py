"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), on ``scramp``.

Credentials are stored as Kafka stores them (``ScramCredential``): salt, StoredKey,
ServerKey and the iteration count, never the password. Kafka accepts 4096 to 16384
iterations. ``credential_from_salted_password`` is what AlterUserScramCredentials carries
(the client salts the password; KIP-554); ``credential_from_password`` is for the
bootstrap file and ``kcoord users add``.

``ScramExchange`` is the server side of one authentication: client-first in,
server-first out; client-final in, server-final out (Kafka's ScramSaslServer).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass

from scramp import ScramException, ScramMechanism

SHA_256 = "SCRAM-SHA-256"
SHA_512 = "SCRAM-SHA-512"
#: Kafka's ScramMechanism type codes, used by the Describe/AlterUserScramCredentials APIs.
MECHANISM_CODES: dict[str, int] = {SHA_256: 1, SHA_512: 2}
MECHANISM_NAMES: dict[int, str] = {code: name for name, code in MECHANISM_CODES.items()}
_HASHES = {SHA_256: "sha256", SHA_512: "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class AuthenticationFailed(Exception):
    """Credentials were wrong or unknown; the message is safe to send to the client."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # keys stay out of logs and tracebacks
        return f"ScramCredential({self.mechanism}, iterations={self.iterations})"


def _check(mechanism: str, iterations: int) -> str:
    if mechanism not in _HASHES:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, got {iterations}")
    return _HASHES[mechanism]


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with the mechanism's hash."""
    return hashlib.pbkdf2_hmac(_check(mechanism, iterations), password.encode(), salt, iterations)


def credential_from_salted_password(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    name = _check(mechanism, iterations)
    client_key = hmac.digest(salted, b"Client Key", name)
    stored_key = hashlib.new(name, client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", name)
    return ScramCredential(mechanism, salt, stored_key, server_key, iterations)


def credential_from_password(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                             salt: bytes | None = None) -> ScramCredential:
    salt = os.urandom(32) if salt is None else salt
    return credential_from_salted_password(mechanism, salt, salted_password(mechanism, password, salt, iterations),
                                           iterations)


def password_matches(credential: ScramCredential, password: str) -> bool:
    """Does ``password`` produce this credential's StoredKey? (constant-time compare)"""
    derived = credential_from_salted_password(
        credential.mechanism, credential.salt,
        salted_password(credential.mechanism, password, credential.salt, credential.iterations),
        credential.iterations)
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


#: username -> that user's credential for this mechanism, or None.
CredentialLookup = Callable[[str], ScramCredential | None]


class ScramExchange:
    """The server side of one SCRAM authentication: two client messages, two answers."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        self.mechanism = mechanism
        self.user: str | None = None
        self.complete = False
        self._step = 0

        def auth_info(username: str) -> tuple[bytes, bytes, bytes, int] | None:
            credential = lookup(username)
            if credential is None:
                return None
            self.user = username
            return credential.salt, credential.stored_key, credential.server_key, credential.iterations

        self._server = ScramMechanism(mechanism).make_server(auth_info)

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's next message; AuthenticationFailed when it fails."""
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("Authentication failed: Invalid SCRAM message encoding") from None
        if self._step == 0:
            self._step = 1
            try:
                self._server.set_client_first(text)
                return str(self._server.get_server_first()).encode()
            except ScramException:
                raise AuthenticationFailed("Authentication failed: Invalid user credentials") from None
        if self._step == 1:
            self._step = 2
            try:
                self._server.set_client_final(text)
                final = str(self._server.get_server_final()).encode()
            except ScramException:
                raise AuthenticationFailed("Authentication failed: Invalid client final message") from None
            self.complete = True
            return final
        raise AuthenticationFailed("Authentication failed: Unexpected SCRAM message")
