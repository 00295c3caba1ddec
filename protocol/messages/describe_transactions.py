"""DescribeTransactions (key 65, KIP-664): the state of transactional ids."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT64, Message, STRING, Struct

DescribeTransactionsRequest = Message(
    "DescribeTransactionsRequest",
    api_key=ApiKey.DESCRIBE_TRANSACTIONS,
    kind="request",
    versions="0",
    flexible="0+",
    fields=(
        Field("transactional_ids", Array(STRING), "0+"),
    ),
)

DescribeTransactionsResponse = Message(
    "DescribeTransactionsResponse",
    api_key=ApiKey.DESCRIBE_TRANSACTIONS,
    kind="response",
    versions="0",
    flexible="0+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field("transaction_states", Array(Struct(
            "TransactionState",
            (
                Field("error_code", INT16, "0+"),
                Field("transactional_id", STRING, "0+"),
                Field("transaction_state", STRING, "0+"),
                Field("transaction_timeout_ms", INT32, "0+"),
                Field("transaction_start_time_ms", INT64, "0+"),
                Field("producer_id", INT64, "0+"),
                Field("producer_epoch", INT16, "0+"),
                Field("topics", Array(Struct(
                    "TopicData",
                    (
                        Field("topic", STRING, "0+"),
                        Field("partitions", Array(INT32), "0+"),
                    ),
                )), "0+"),
            ),
        )), "0+"),
    ),
)
