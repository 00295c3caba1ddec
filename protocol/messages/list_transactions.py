"""ListTransactions (key 66, KIP-664; duration filter KIP-994): the transactional ids a coordinator holds."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT64, Message, STRING, Struct

ListTransactionsRequest = Message(
    "ListTransactionsRequest",
    api_key=ApiKey.LIST_TRANSACTIONS,
    kind="request",
    versions="0-1",
    flexible="0+",
    fields=(
        Field("state_filters", Array(STRING), "0+"),
        Field("producer_id_filters", Array(INT64), "0+"),
        Field("duration_filter", INT64, "1+", default=-1),
    ),
)

ListTransactionsResponse = Message(
    "ListTransactionsResponse",
    api_key=ApiKey.LIST_TRANSACTIONS,
    kind="response",
    versions="0-1",
    flexible="0+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field("error_code", INT16, "0+"),
        Field("unknown_state_filters", Array(STRING), "0+"),
        Field("transaction_states", Array(Struct(
            "TransactionState",
            (
                Field("transactional_id", STRING, "0+"),
                Field("producer_id", INT64, "0+"),
                Field("transaction_state", STRING, "0+"),
            ),
        )), "0+"),
    ),
)
