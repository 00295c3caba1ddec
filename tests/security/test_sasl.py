"""SCRAM and PLAIN server sides, the credential records, and the SASL state machine."""

from __future__ import annotations

import struct

import pytest
from scramp import ScramClient

from protocol.api_keys import ApiKey
from protocol.codec import decode_response, encode_request
from protocol.errors import ErrorCode
from security.authenticator import SaslAuthenticator, State
from security.principal import Principal, map_certificate_name, parse_mapping_rules, rfc2253
from security.records import credential_record, decode
from security.scram import (
    SHA_256,
    SHA_512,
    AuthenticationFailed,
    ScramExchange,
    credential_from_password,
    credential_from_salted_password,
    password_matches,
    salted_password,
)
from security.state import SecurityState

ALICE_512 = credential_from_password(SHA_512, "alice-secret")
ALICE_256 = credential_from_password(SHA_256, "alice-secret", iterations=8192)


def lookup(name: str, mechanism: str):  # type: ignore[no-untyped-def]
    if name != "alice":
        return None
    return {SHA_512: ALICE_512, SHA_256: ALICE_256}.get(mechanism)


def scram_login(mechanism: str, username: str, password: str) -> ScramExchange:
    client = ScramClient([mechanism], username, password)
    server = ScramExchange(mechanism, lambda n: lookup(n, mechanism))
    client.set_server_first(server.evaluate(client.get_client_first().encode()).decode())
    client.set_server_final(server.evaluate(client.get_client_final().encode()).decode())
    return server


@pytest.mark.parametrize("mechanism", [SHA_256, SHA_512])
def test_scram_accepts_the_right_password(mechanism: str) -> None:
    server = scram_login(mechanism, "alice", "alice-secret")
    assert server.complete and server.user == "alice"


def test_scram_refuses_a_wrong_password_and_an_unknown_user() -> None:
    with pytest.raises(AuthenticationFailed):
        scram_login(SHA_512, "alice", "guess")
    with pytest.raises(AuthenticationFailed):
        scram_login(SHA_512, "mallory", "alice-secret")


def test_a_credential_from_the_salted_password_equals_one_from_the_password() -> None:
    salt = b"s" * 16
    direct = credential_from_password(SHA_256, "pw", 4096, salt)
    via_salted = credential_from_salted_password(SHA_256, salt, salted_password(SHA_256, "pw", salt, 4096), 4096)
    assert direct == via_salted
    assert password_matches(direct, "pw") and not password_matches(direct, "pW")
    with pytest.raises(ValueError):
        credential_from_password(SHA_256, "pw", iterations=100)
    assert "stored_key" not in repr(direct) and repr(direct.stored_key) not in repr(direct)


def test_credential_records_hold_no_password_and_replay() -> None:
    key, value = credential_record("alice", ALICE_512)
    assert value is not None and b"alice-secret" not in value
    state = SecurityState()
    state.replay(key, value)
    assert state.credential("alice", SHA_512) == ALICE_512
    state.replay(key, None)
    assert state.credentials == {}
    assert decode(key, None)[1] is None


def frame(api_key: int, version: int, body: dict, correlation_id: int = 1) -> bytes:  # type: ignore[type-arg]
    return encode_request(api_key, version, correlation_id, body)[4:]


def reply(step_reply: bytes | None, api_key: int, version: int):  # type: ignore[no-untyped-def]
    assert step_reply is not None
    return decode_response(api_key, version, step_reply[4:])[1]


def handshake(auth: SaslAuthenticator, mechanism: str, version: int = 1):  # type: ignore[no-untyped-def]
    step = auth.receive(frame(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism}), 0)
    return step, reply(step.reply, ApiKey.SASL_HANDSHAKE, version)


def authenticate(auth: SaslAuthenticator, token: bytes, now: int = 0, version: int = 2):  # type: ignore[no-untyped-def]
    step = auth.receive(frame(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token}), now)
    return step, reply(step.reply, ApiKey.SASL_AUTHENTICATE, version)


ENABLED = ("PLAIN", SHA_256, SHA_512)


def test_api_versions_then_plain_login() -> None:
    auth = SaslAuthenticator(ENABLED, lookup)
    assert auth.receive(frame(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                       "client_software_version": "1"}), 0).route
    step, body = handshake(auth, "PLAIN")
    assert body.error_code == 0 and list(body.mechanisms) == list(ENABLED) and step.close is None
    step, body = authenticate(auth, b"\0alice\0alice-secret")
    assert body.error_code == 0 and step.authenticated and auth.principal == Principal("User", "alice")
    assert auth.receive(frame(ApiKey.METADATA, 1, {"topics": None}), 0).route


def test_a_request_before_authentication_gets_illegal_sasl_state_and_closes() -> None:
    auth = SaslAuthenticator(ENABLED, lookup)
    step = auth.receive(frame(ApiKey.METADATA, 1, {"topics": None}), 0)
    assert step.close and not step.route and "ILLEGAL_SASL_STATE" in step.close
    auth = SaslAuthenticator(ENABLED, lookup)
    handshake(auth, "PLAIN")
    step = auth.receive(frame(ApiKey.FIND_COORDINATOR, 1, {"key": "g", "key_type": 0}), 0)
    assert step.close and reply(step.reply, ApiKey.FIND_COORDINATOR, 1).error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_an_unknown_mechanism_gets_the_enabled_list_and_closes() -> None:
    auth = SaslAuthenticator(("SCRAM-SHA-512",), lookup)
    step, body = handshake(auth, "GSSAPI")
    assert body.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and list(body.mechanisms) == ["SCRAM-SHA-512"]
    assert step.close and step.failure


def test_bad_credentials_fail_and_close() -> None:
    auth = SaslAuthenticator(ENABLED, lookup)
    handshake(auth, "PLAIN")
    step, body = authenticate(auth, b"\0alice\0wrong")
    assert body.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and step.close and step.failure
    assert auth.state is State.FAILED and auth.principal is None


def test_scram_over_sasl_authenticate_and_kip368_reauthentication() -> None:
    auth = SaslAuthenticator(ENABLED, lookup, reauth_ms=1000)
    handshake(auth, SHA_512)
    client = ScramClient([SHA_512], "alice", "alice-secret")
    _, first = authenticate(auth, client.get_client_first().encode())
    client.set_server_first(bytes(first.auth_bytes).decode())
    step, final = authenticate(auth, client.get_client_final().encode(), now=100)
    client.set_server_final(bytes(final.auth_bytes).decode())
    assert step.authenticated and final.session_lifetime_ms == 1000 and auth.session_expires_ms == 1100
    assert auth.receive(frame(ApiKey.METADATA, 1, {"topics": None}), 1099).route
    # Re-authentication with the same mechanism and principal renews the session.
    handshake(auth, SHA_512)
    client = ScramClient([SHA_512], "alice", "alice-secret")
    _, first = authenticate(auth, client.get_client_first().encode(), now=1050)
    client.set_server_first(bytes(first.auth_bytes).decode())
    step, _ = authenticate(auth, client.get_client_final().encode(), now=1050)
    assert step.authenticated and auth.session_expires_ms == 2050
    assert auth.receive(frame(ApiKey.METADATA, 1, {"topics": None}), 2049).route
    expired = auth.receive(frame(ApiKey.METADATA, 1, {"topics": None}), 2050)
    assert expired.close and not expired.route


def test_reauthentication_may_not_change_mechanism() -> None:
    auth = SaslAuthenticator(ENABLED, lookup, reauth_ms=1000)
    handshake(auth, "PLAIN")
    authenticate(auth, b"\0alice\0alice-secret")
    step, body = handshake(auth, SHA_256)
    assert body.error_code == 0
    step, body = authenticate(auth, b"whatever")
    assert body.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and step.close


def test_handshake_v0_carries_bare_tokens() -> None:
    auth = SaslAuthenticator(ENABLED, lookup)
    handshake(auth, "PLAIN", version=0)
    step = auth.receive(b"\0alice\0alice-secret", 0)
    assert step.authenticated and step.reply == struct.pack(">i", 0)
    auth = SaslAuthenticator(ENABLED, lookup)
    handshake(auth, "PLAIN", version=0)
    step = auth.receive(b"\0alice\0nope", 0)
    assert step.close and step.reply is None


def test_certificate_names_map_to_principals() -> None:
    dn = rfc2253(((("countryName", "DE"),), (("organizationName", "Acme, Inc"),), (("commonName", "alice"),)))
    assert dn == "CN=alice,O=Acme\\, Inc,C=DE"
    assert map_certificate_name(parse_mapping_rules("DEFAULT"), dn) == Principal("User", dn)
    rules = parse_mapping_rules("RULE:^CN=([^,]*),.*$/$1/U,DEFAULT")
    assert map_certificate_name(rules, dn) == Principal("User", "ALICE")
    assert map_certificate_name(rules, "OU=x") == Principal("User", "OU=x")
    with pytest.raises(ValueError):
        parse_mapping_rules("RULE:[/x/")
