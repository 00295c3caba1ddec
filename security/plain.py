"""SASL/PLAIN (RFC 4616) checked against the stored SCRAM credentials.

A PLAIN user is a user with a SCRAM credential (SHA-512 preferred, else SHA-256): the
password is salted with that credential's salt and iterations and must produce its
StoredKey. So there is one user store, managed with AlterUserScramCredentials, and no
password is ever kept in clear. The rules are Kafka's PlainSaslServer's: the message is
``[authzid] NUL authcid NUL passwd``, and an authorization id, if given, must equal the
user name.
"""

from __future__ import annotations

from collections.abc import Callable

from security.scram import SHA_256, SHA_512, AuthenticationFailed, ScramCredential, password_matches

#: (username, mechanism) -> the stored credential, or None.
CredentialsLookup = Callable[[str, str], ScramCredential | None]


def authenticate_plain(token: bytes, lookup: CredentialsLookup) -> str:
    """The authenticated user name; AuthenticationFailed with Kafka's message otherwise."""
    try:
        text = token.decode()
    except UnicodeDecodeError:
        raise AuthenticationFailed("Authentication failed: Invalid PLAIN message encoding") from None
    parts = text.split("\0")
    if len(parts) != 3:
        raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
    authzid, username, password = parts
    if not username:
        raise AuthenticationFailed("Authentication failed: username not specified")
    if not password:
        raise AuthenticationFailed("Authentication failed: password not specified")
    if authzid and authzid != username:
        raise AuthenticationFailed(
            "Authentication failed: Client requested an authorization id that is different from username")
    credential = lookup(username, SHA_512) or lookup(username, SHA_256)
    if credential is None or not password_matches(credential, password):
        raise AuthenticationFailed("Authentication failed: Invalid username or password")
    return username
