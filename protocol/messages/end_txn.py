"""EndTxn (key 26): commit or abort a producer's transaction."""

from protocol.api_keys import ApiKey
from protocol.schema import BOOL, Field, INT16, INT32, INT64, Message, STRING

EndTxnRequest = Message(
    "EndTxnRequest",
    api_key=ApiKey.END_TXN,
    kind="request",
    versions="0-3",
    flexible="3+",
    fields=(
        Field("transactional_id", STRING, "0+"),
        Field("producer_id", INT64, "0+"),
        Field("producer_epoch", INT16, "0+"),
        Field("committed", BOOL, "0+"),
    ),
)

EndTxnResponse = Message(
    "EndTxnResponse",
    api_key=ApiKey.END_TXN,
    kind="response",
    versions="0-3",
    flexible="3+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field("error_code", INT16, "0+"),
    ),
)
