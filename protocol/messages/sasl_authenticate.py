"""SaslAuthenticate (key 36): one SASL token each way, inside a Kafka request (KIP-152)."""

from protocol.api_keys import ApiKey
from protocol.schema import BYTES, Field, INT16, INT64, Message, STRING

SaslAuthenticateRequest = Message(
    "SaslAuthenticateRequest",
    api_key=ApiKey.SASL_AUTHENTICATE,
    kind="request",
    versions="0-2",
    flexible="2+",
    fields=(
        Field("auth_bytes", BYTES, "0+"),
    ),
)

SaslAuthenticateResponse = Message(
    "SaslAuthenticateResponse",
    api_key=ApiKey.SASL_AUTHENTICATE,
    kind="response",
    versions="0-2",
    flexible="2+",
    fields=(
        Field("error_code", INT16, "0+"),
        Field("error_message", STRING, "0+", nullable="0+"),
        Field("auth_bytes", BYTES, "0+"),
        Field("session_lifetime_ms", INT64, "1+", default=0, ignorable=True),
    ),
)
