"""A connection's SASL authentication, as a state machine: frames in, steps out.

The rules are Kafka's SaslServerAuthenticator's:

- before authentication a client may send ApiVersions (answered by the router) and then
  SaslHandshake; any other request gets ILLEGAL_SASL_STATE and the connection closes;
- SaslHandshake names a mechanism: an enabled one is accepted (with the enabled list),
  any other gets UNSUPPORTED_SASL_MECHANISM (with the enabled list) and the connection closes;
- after SaslHandshake v1 the tokens travel in SaslAuthenticate requests; after v0 they
  travel as bare size-prefixed tokens, as in Kafka 0.10;
- wrong or unknown credentials get SASL_AUTHENTICATION_FAILED and the connection closes
  (the shell waits ``connection.failed.authentication.delay.ms`` before answering);
- KIP-368: with ``connections.max.reauth.ms`` the SaslAuthenticate reply carries the
  session lifetime; a SaslHandshake on an authenticated connection starts
  re-authentication, which must use the same mechanism and end with the same principal;
  a request other than SaslHandshake after the session expired closes the connection.

Nothing here reads a clock: ``now_ms`` comes with every frame.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from protocol.api_keys import ApiKey
from protocol.codec import decode_request, encode_response, peek
from protocol.errors import ErrorCode, ProtocolError, UnsupportedRequest
from protocol.messages import REQUESTS, RESPONSES
from protocol.schema import Message
from security.plain import CredentialsLookup, authenticate_plain
from security.principal import Principal, user
from security.scram import MECHANISM_CODES, AuthenticationFailed, ScramExchange

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *MECHANISM_CODES)

_SASL_APIS: dict[int, Message] = {
    ApiKey.SASL_HANDSHAKE: REQUESTS[ApiKey.SASL_HANDSHAKE],
    ApiKey.SASL_AUTHENTICATE: REQUESTS[ApiKey.SASL_AUTHENTICATE],
}
_API_VERSIONS_MAX = REQUESTS[ApiKey.API_VERSIONS].max_version
_SIZE = struct.Struct(">i")
_UNKNOWN_IDS = frozenset({"node_id", "port", "generation_id", "producer_id", "producer_epoch"})


class Mechanism(Protocol):
    complete: bool
    user: str | None

    def evaluate(self, token: bytes) -> bytes: ...


class PlainMechanism:
    def __init__(self, lookup: CredentialsLookup) -> None:
        self.lookup = lookup
        self.complete = False
        self.user: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed("Authentication failed: PLAIN takes one message")
        self.user = authenticate_plain(token, self.lookup)
        self.complete = True
        return b""


def make_mechanism(name: str, lookup: CredentialsLookup) -> Mechanism:
    if name == PLAIN:
        return PlainMechanism(lookup)
    return ScramExchange(name, lambda username: lookup(username, name))


class State(Enum):
    HANDSHAKE_OR_VERSIONS = "handshake or ApiVersions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"  # tokens inside SaslAuthenticate (handshake v1)
    AUTHENTICATE_RAW = "authenticate (raw tokens)"  # bare tokens (handshake v0)
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(slots=True)
class Step:
    """What the shell does with one frame.

    ``route``: hand the frame to the router (an authenticated request, or ApiVersions).
    ``reply``: bytes to send (a whole frame, size prefix included).
    ``close``: close the connection after sending ``reply``; the reason is for the log.
    ``failure``: a login failed (the shell delays the reply and counts it).
    ``authenticated``: this frame completed (re-)authentication.
    """

    route: bool = False
    reply: bytes | None = None
    close: str | None = None
    failure: bool = False
    authenticated: bool = False


ROUTE = Step(route=True)


def error_reply(frame: bytes, error: ErrorCode) -> bytes | None:
    """A reply to any request carrying ``error`` at its top level, or None when its response
    has no top-level error (Metadata, Produce): then the connection just closes.

    Used when a request arrives in the wrong SASL state: the connection closes right after,
    so a body of defaults with the error is enough to tell the client why.
    """
    try:
        api_key, version, correlation_id = peek(frame)
    except ProtocolError:
        return None
    message = RESPONSES.get(api_key)
    if message is None or not message.has_version(version):
        return None
    body = message.default(version)
    if "error_code" not in body:
        return None
    body["error_code"] = int(error)
    for unknown in _UNKNOWN_IDS.intersection(body):  # "no node", "no generation", as Kafka's error replies
        body[unknown] = -1
    try:
        return encode_response(api_key, version, correlation_id, body)
    except ProtocolError:
        return None


class SaslAuthenticator:
    def __init__(self, enabled: tuple[str, ...], lookup: CredentialsLookup, reauth_ms: int = 0,
                 mechanism_factory: Callable[[str, CredentialsLookup], Mechanism] = make_mechanism) -> None:
        self.enabled = enabled
        self.lookup = lookup
        self.reauth_ms = reauth_ms
        self.factory = mechanism_factory
        self.state = State.HANDSHAKE_OR_VERSIONS
        self.mechanism_name: str | None = None
        self.principal: Principal | None = None
        self.session_expires_ms: int | None = None
        self.reauthenticating = False
        self._mechanism: Mechanism | None = None
        self._bad_reauth_mechanism: str | None = None

    @property
    def complete(self) -> bool:
        return self.state is State.COMPLETE

    def receive(self, frame: bytes, now_ms: int) -> Step:
        state = self.state
        if state is State.COMPLETE:
            api_key = frame[1] | (frame[0] << 8) if len(frame) >= 2 else -1
            if api_key == ApiKey.SASL_HANDSHAKE:
                self.reauthenticating = True
                return self._handshake(frame)
            if self.session_expires_ms is not None and now_ms >= self.session_expires_ms:
                self.state = State.FAILED
                return Step(close="the SASL session expired without re-authentication (connections.max.reauth.ms)")
            return ROUTE
        if state is State.AUTHENTICATE_RAW:
            return self._token(frame, None, now_ms)
        try:
            api_key, version, _ = peek(frame)
        except ProtocolError as exc:
            return self._fail_state(frame, f"unreadable request during SASL {state.value}: {exc}")
        if state is State.AUTHENTICATE:
            if api_key != ApiKey.SASL_AUTHENTICATE:
                return self._fail_state(frame, f"api_key={api_key} during SASL authentication")
            if self._bad_reauth_mechanism is not None:
                self.state = State.FAILED
                return Step(reply=self._authenticate_reply(frame, ErrorCode.SASL_AUTHENTICATION_FAILED,
                                                           self._bad_reauth_mechanism),
                            close=self._bad_reauth_mechanism, failure=True)
            return self._token(frame, version, now_ms)
        # HANDSHAKE_OR_VERSIONS or HANDSHAKE
        if api_key == ApiKey.API_VERSIONS and state is State.HANDSHAKE_OR_VERSIONS:
            if 0 <= version <= _API_VERSIONS_MAX:
                self.state = State.HANDSHAKE
            return ROUTE  # the router answers (an unsupported version gets its v0 reply)
        if api_key == ApiKey.SASL_HANDSHAKE:
            return self._handshake(frame)
        return self._fail_state(frame, f"api_key={api_key} before SASL authentication")

    def _fail_state(self, frame: bytes, reason: str) -> Step:
        self.state = State.FAILED
        return Step(reply=error_reply(frame, ErrorCode.ILLEGAL_SASL_STATE), close=f"ILLEGAL_SASL_STATE: {reason}")

    def _handshake(self, frame: bytes) -> Step:
        try:
            request = decode_request(frame, _SASL_APIS)
        except (UnsupportedRequest, ProtocolError) as exc:
            self.state = State.FAILED
            return Step(close=f"bad SaslHandshake: {exc}")
        header = request.header
        mechanism = request.body.mechanism
        if mechanism not in self.enabled:
            self.state = State.FAILED
            body = {"error_code": int(ErrorCode.UNSUPPORTED_SASL_MECHANISM), "mechanisms": list(self.enabled)}
            return Step(reply=encode_response(header.api_key, header.api_version, header.correlation_id, body),
                        close=f"UNSUPPORTED_SASL_MECHANISM: {mechanism!r} (enabled: {', '.join(self.enabled)})",
                        failure=True)
        self._bad_reauth_mechanism = None
        if self.reauthenticating and mechanism != self.mechanism_name:
            # Kafka answers the handshake and fails the SaslAuthenticate that follows.
            self._bad_reauth_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not supported "
                                          f"for re-authentication of mechanism '{self.mechanism_name}'")
        else:
            self.mechanism_name = mechanism
        self._mechanism = self.factory(mechanism, self.lookup)
        self.state = State.AUTHENTICATE if header.api_version >= 1 else State.AUTHENTICATE_RAW
        body = {"error_code": 0, "mechanisms": list(self.enabled)}
        return Step(reply=encode_response(header.api_key, header.api_version, header.correlation_id, body))

    def _authenticate_reply(self, frame: bytes, error: ErrorCode, message: str | None,
                            auth_bytes: bytes = b"", lifetime_ms: int = 0) -> bytes | None:
        try:
            api_key, version, correlation_id = peek(frame)
        except ProtocolError:
            return None
        body: dict[str, Any] = {"error_code": int(error), "error_message": message, "auth_bytes": auth_bytes,
                                "session_lifetime_ms": lifetime_ms}
        return encode_response(api_key, version, correlation_id, body)

    def _token(self, frame: bytes, version: int | None, now_ms: int) -> Step:
        """One SASL token: bare (``version`` None) or inside SaslAuthenticate."""
        mechanism = self._mechanism
        assert mechanism is not None
        if version is None:
            token = frame
        else:
            try:
                request = decode_request(frame, _SASL_APIS)
            except (UnsupportedRequest, ProtocolError) as exc:
                self.state = State.FAILED
                return Step(close=f"bad SaslAuthenticate: {exc}")
            token = bytes(request.body.auth_bytes)
        try:
            answer = mechanism.evaluate(token)
            if mechanism.complete:
                assert mechanism.user is not None
                principal = user(mechanism.user)
                if self.reauthenticating and principal != self.principal:
                    raise AuthenticationFailed(
                        f"Cannot change principals during re-authentication from {self.principal}: {principal}")
        except AuthenticationFailed as exc:
            self.state = State.FAILED
            reply = None if version is None else self._authenticate_reply(
                frame, ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc))
            return Step(reply=reply, close=f"SASL_AUTHENTICATION_FAILED ({self.mechanism_name}): {exc}",
                        failure=True)
        lifetime = 0
        done = mechanism.complete
        if done:
            self.principal = principal
            self.state = State.COMPLETE
            self.reauthenticating = False
            if self.reauth_ms > 0:
                lifetime = self.reauth_ms
                self.session_expires_ms = now_ms + lifetime
        if version is None:
            reply = _SIZE.pack(len(answer)) + answer
        else:
            reply = self._authenticate_reply(frame, ErrorCode.NONE, None, answer, lifetime)
        return Step(reply=reply, authenticated=done)
