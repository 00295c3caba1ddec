"""AddOffsetsToTxn (key 25): a group's offsets join the transaction (its __consumer_offsets partition)."""

from protocol.api_keys import ApiKey
from protocol.schema import Field, INT16, INT32, INT64, Message, STRING

AddOffsetsToTxnRequest = Message(
    "AddOffsetsToTxnRequest",
    api_key=ApiKey.ADD_OFFSETS_TO_TXN,
    kind="request",
    versions="0-3",
    flexible="3+",
    fields=(
        Field("transactional_id", STRING, "0+"),
        Field("producer_id", INT64, "0+"),
        Field("producer_epoch", INT16, "0+"),
        Field("group_id", STRING, "0+"),
    ),
)

AddOffsetsToTxnResponse = Message(
    "AddOffsetsToTxnResponse",
    api_key=ApiKey.ADD_OFFSETS_TO_TXN,
    kind="response",
    versions="0-3",
    flexible="3+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field("error_code", INT16, "0+"),
    ),
)
