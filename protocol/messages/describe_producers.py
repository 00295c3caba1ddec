"""DescribeProducers (key 61, KIP-664): the active producers of partitions, with open transactions."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT64, Message, STRING, Struct

DescribeProducersRequest = Message(
    "DescribeProducersRequest",
    api_key=ApiKey.DESCRIBE_PRODUCERS,
    kind="request",
    versions="0",
    flexible="0+",
    fields=(
        Field("topics", Array(Struct(
            "TopicRequest",
            (
                Field("name", STRING, "0+"),
                Field("partition_indexes", Array(INT32), "0+"),
            ),
        )), "0+"),
    ),
)

DescribeProducersResponse = Message(
    "DescribeProducersResponse",
    api_key=ApiKey.DESCRIBE_PRODUCERS,
    kind="response",
    versions="0",
    flexible="0+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field("topics", Array(Struct(
            "TopicResponse",
            (
                Field("name", STRING, "0+"),
                Field("partitions", Array(Struct(
                    "PartitionResponse",
                    (
                        Field("partition_index", INT32, "0+"),
                        Field("error_code", INT16, "0+"),
                        Field("error_message", STRING, "0+", nullable="0+", default=None),
                        Field("active_producers", Array(Struct(
                            "ProducerState",
                            (
                                Field("producer_id", INT64, "0+"),
                                Field("producer_epoch", INT32, "0+"),
                                Field("last_sequence", INT32, "0+", default=-1),
                                Field("last_timestamp", INT64, "0+", default=-1),
                                Field("coordinator_epoch", INT32, "0+"),
                                Field("current_txn_start_offset", INT64, "0+", default=-1),
                            ),
                        )), "0+"),
                    ),
                )), "0+"),
            ),
        )), "0+"),
    ),
)
