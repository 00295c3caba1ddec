"""Request header v0-v2 and response header v0-v1."""

from protocol.schema import Field, INT16, INT32, Message, STRING

RequestHeader = Message(
    "RequestHeader",
    api_key=None,
    kind="header",
    versions="0-2",
    flexible="2+",
    fields=(
        Field("request_api_key", INT16, "0+"),
        Field("request_api_version", INT16, "0+"),
        Field("correlation_id", INT32, "0+"),
        Field("client_id", STRING, "1+", nullable="1+", flexible="none", ignorable=True),
    ),
)

ResponseHeader = Message(
    "ResponseHeader",
    api_key=None,
    kind="header",
    versions="0-1",
    flexible="1+",
    fields=(Field("correlation_id", INT32, "0+"),),
)
