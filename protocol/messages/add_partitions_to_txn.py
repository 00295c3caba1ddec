"""AddPartitionsToTxn (key 24): add partitions to a producer's ongoing transaction.

Versions 0-3 are the ones clients send; 4 and up batch several transactions and are
spoken between brokers only (KIP-890), so they are not declared.
"""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT64, Message, STRING, Struct

AddPartitionsToTxnRequest = Message(
    "AddPartitionsToTxnRequest",
    api_key=ApiKey.ADD_PARTITIONS_TO_TXN,
    kind="request",
    versions="0-3",
    flexible="3+",
    fields=(
        Field("v3_and_below_transactional_id", STRING, "0-3"),
        Field("v3_and_below_producer_id", INT64, "0-3"),
        Field("v3_and_below_producer_epoch", INT16, "0-3"),
        Field("v3_and_below_topics", Array(Struct(
            "AddPartitionsToTxnTopic",
            (
                Field("name", STRING, "0+"),
                Field("partitions", Array(INT32), "0+"),
            ),
        )), "0-3"),
    ),
)

AddPartitionsToTxnResponse = Message(
    "AddPartitionsToTxnResponse",
    api_key=ApiKey.ADD_PARTITIONS_TO_TXN,
    kind="response",
    versions="0-3",
    flexible="3+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field("results_by_topic_v3_and_below", Array(Struct(
            "AddPartitionsToTxnTopicResult",
            (
                Field("name", STRING, "0+"),
                Field("results_by_partition", Array(Struct(
                    "AddPartitionsToTxnPartitionResult",
                    (
                        Field("partition_index", INT32, "0+"),
                        Field("partition_error_code", INT16, "0+"),
                    ),
                )), "0+"),
            ),
        )), "0-3"),
    ),
)
