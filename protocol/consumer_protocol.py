"""The "consumer" embedded protocol: Subscription and Assignment blobs.

JoinGroup metadata and SyncGroup assignments are, for protocol type "consumer", an int16
version followed by ConsumerProtocolSubscription / ConsumerProtocolAssignment. Newer
versions only append fields, so a blob of a version newer than ours is read with our
newest layout and its tail ignored.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from construct import ConstructError, Container

from protocol.builder import struct_for
from protocol.codec import encode_body
from protocol.errors import ProtocolError
from protocol.messages.consumer_protocol import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from protocol.schema import Message

_VERSION = struct.Struct(">h")


def _decode(message: Message, data: bytes) -> Container:
    if len(data) < 2:
        raise ProtocolError(f"{message.name} shorter than its version")
    (version,) = _VERSION.unpack_from(data)
    if version < 0:
        raise ProtocolError(f"{message.name} has negative version {version}")
    version = min(version, message.max_version)
    try:
        body = struct_for(message, version)._parsereport(io.BytesIO(data[2:]), Container(), "(blob)")
    except ConstructError as exc:
        raise ProtocolError(f"malformed {message.name}: {exc}") from None
    body["version"] = version
    return body


def decode_subscription(data: bytes) -> Container:
    return _decode(ConsumerProtocolSubscription, data)


def decode_assignment(data: bytes) -> Container:
    return _decode(ConsumerProtocolAssignment, data)


def encode_subscription(body: dict[str, Any], version: int = 3) -> bytes:
    return _VERSION.pack(version) + encode_body(ConsumerProtocolSubscription, version, body)


def encode_assignment(body: dict[str, Any], version: int = 3) -> bytes:
    return _VERSION.pack(version) + encode_body(ConsumerProtocolAssignment, version, body)


def subscribed_topics(data: bytes) -> set[str] | None:
    """The topics of a Subscription (its v0 prefix); None when it cannot be parsed."""
    try:
        if len(data) < 2:
            return None
        body = struct_for(ConsumerProtocolSubscription, 0)._parsereport(io.BytesIO(data[2:]), Container(), "(blob)")
    except ConstructError:
        return None
    return set(body.topics)
