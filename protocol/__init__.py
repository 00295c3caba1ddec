"""The Kafka wire protocol, sans-IO: bytes in, plain objects out, and back."""

from protocol.codec import (
    Request,
    RequestHeader,
    decode_body,
    decode_request,
    decode_response,
    encode_body,
    encode_request,
    encode_response,
)
from protocol.errors import ErrorCode, ProtocolError, UnsupportedRequest

__all__ = [
    "ErrorCode",
    "ProtocolError",
    "Request",
    "RequestHeader",
    "UnsupportedRequest",
    "decode_body",
    "decode_request",
    "decode_response",
    "encode_body",
    "encode_request",
    "encode_response",
]
