"""Requests and responses as whole frames: header rules, decode and encode.

This is the public face of ``protocol``: the broker hands it a frame and gets back a
``Request`` (header + decoded body), or a ``ProtocolError`` it can log. Nothing here
touches a socket or a clock.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any

import construct
from construct import Container

from protocol.schema import Message

API_VERSIONS_KEY = 18

_PREFIX = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")


class ProtocolError(Exception):
    """Bytes that are not a valid Kafka message. The only error decoding raises."""


class UnsupportedRequest(ProtocolError):
    """A well-framed request for an API or version this broker does not serve."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"unsupported api_key={api_key} api_version={api_version}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int


@dataclass(slots=True)
class Request:
    header: RequestHeader
    message: Message
    body: Container


def _registry() -> tuple[dict[int, Message], dict[int, Message], Message, Message]:
    from protocol.messages import REQUESTS, RESPONSES
    from protocol.messages.headers import RequestHeader, ResponseHeader

    return REQUESTS, RESPONSES, RequestHeader, ResponseHeader


def request_header_version(message: Message, api_version: int) -> int:
    """Header v2 for flexible versions, v1 otherwise (v0 only for ControlledShutdown v0)."""
    return 2 if message.is_flexible(api_version) else 1


def response_header_version(message: Message, api_version: int) -> int:
    """Header v1 for flexible versions, v0 otherwise; ApiVersions always v0 (KIP-511)."""
    if message.api_key == API_VERSIONS_KEY:
        return 0
    return 1 if message.is_flexible(api_version) else 0


def peek(frame: bytes) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id of a request frame, without decoding it."""
    if len(frame) < _PREFIX.size:
        raise ProtocolError("frame shorter than a request header")
    api_key, api_version, correlation_id = _PREFIX.unpack_from(frame, 0)
    return int(api_key), int(api_version), int(correlation_id)


def _parse(sub: construct.Construct, stream: io.BytesIO, what: str) -> Any:
    try:
        return sub._parsereport(stream, Container(), "(" + what + ")")
    except construct.ConstructError as exc:
        raise ProtocolError(f"malformed {what}: {exc}") from None


def decode_request(frame: bytes, served: dict[int, Message] | None = None) -> Request:
    """Decode one request frame (without its size prefix).

    Raises ``UnsupportedRequest`` when (api_key, api_version) is not in ``served``
    (default: everything declared) and ``ProtocolError`` for malformed bytes. Bytes after
    a complete body are ignored, as Kafka does: librdkafka sends some after Metadata v12.
    """
    requests, _, header_msg, _ = _registry()
    api_key, api_version, correlation_id = peek(frame)
    message = (requests if served is None else served).get(api_key)
    if message is None or not message.min_version <= api_version <= message.max_version:
        raise UnsupportedRequest(api_key, api_version, correlation_id)
    header_version = request_header_version(message, api_version)
    stream = io.BytesIO(frame)
    raw_header = _parse(header_msg.struct(header_version), stream, "request header")
    body = _parse(message.struct(api_version), stream, f"{message.name} v{api_version}")
    header = RequestHeader(
        api_key=api_key,
        api_version=api_version,
        correlation_id=correlation_id,
        client_id=raw_header.get("client_id"),
        header_version=header_version,
    )
    return Request(header, message, body)


def encode_body(message: Message, version: int, body: Any) -> bytes:
    """Encode a message body alone (no header, no size prefix)."""
    stream = io.BytesIO()
    try:
        message.struct(version)._build(body, stream, Container(), "(" + message.name + ")")
    except construct.ConstructError as exc:
        raise ProtocolError(f"cannot encode {message.name} v{version}: {exc}") from None
    return stream.getvalue()


def decode_body(message: Message, version: int, data: bytes) -> Container:
    """Decode a message body alone; every byte must be consumed."""
    stream = io.BytesIO(data)
    body = _parse(message.struct(version), stream, f"{message.name} v{version}")
    if stream.tell() != len(data):
        raise ProtocolError(f"trailing bytes after {message.name} v{version}")
    return body


def _frame(parts: list[bytes]) -> bytes:
    size = sum(len(p) for p in parts)
    return _SIZE.pack(size) + b"".join(parts)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """A whole response frame: size prefix, response header, body."""
    _, responses, _, header_msg = _registry()
    message = responses[api_key]
    header_version = response_header_version(message, api_version)
    header = encode_body(header_msg, header_version, {"correlation_id": correlation_id})
    return _frame([header, encode_body(message, api_version, body)])


def encode_request(
    api_key: int, api_version: int, correlation_id: int, body: Any, client_id: str | None = "kcoord"
) -> bytes:
    """A whole request frame (used by the load generator, the CLI and tests)."""
    requests, _, header_msg, _ = _registry()
    message = requests[api_key]
    header_version = request_header_version(message, api_version)
    header = encode_body(
        header_msg,
        header_version,
        {
            "request_api_key": api_key,
            "request_api_version": api_version,
            "correlation_id": correlation_id,
            "client_id": client_id,
        },
    )
    return _frame([header, encode_body(message, api_version, body)])


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Container]:
    """Decode a response frame (without its size prefix): (correlation_id, body)."""
    _, responses, _, header_msg = _registry()
    message = responses[api_key]
    stream = io.BytesIO(frame)
    header = _parse(
        header_msg.struct(response_header_version(message, api_version)), stream, "response header"
    )
    body = _parse(message.struct(api_version), stream, f"{message.name} v{api_version}")
    if stream.tell() != len(frame):
        raise ProtocolError(f"trailing bytes after {message.name} v{api_version}")
    return int(header.correlation_id), body
