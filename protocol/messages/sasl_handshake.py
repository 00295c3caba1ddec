"""SaslHandshake (key 17): the client names its SASL mechanism."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, Message, STRING

SaslHandshakeRequest = Message(
    "SaslHandshakeRequest",
    api_key=ApiKey.SASL_HANDSHAKE,
    kind="request",
    versions="0-1",
    flexible="none",
    fields=(
        Field("mechanism", STRING, "0+"),
    ),
)

SaslHandshakeResponse = Message(
    "SaslHandshakeResponse",
    api_key=ApiKey.SASL_HANDSHAKE,
    kind="response",
    versions="0-1",
    flexible="none",
    fields=(
        Field("error_code", INT16, "0+"),
        Field("mechanisms", Array(STRING), "0+"),
    ),
)
