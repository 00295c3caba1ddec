"""ListOffsets (key 2): offsets by timestamp, earliest or latest."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT64, INT8, Message, STRING, Struct

ListOffsetsRequest = Message(
    "ListOffsetsRequest",
    api_key=ApiKey.LIST_OFFSETS,
    kind="request",
    versions="1-7",
    flexible="6+",
    fields=(
        Field("replica_id", INT32, "0+"),
        Field("isolation_level", INT8, "2+"),
        Field(
            "topics",
            Array(
                Struct(
                    "ListOffsetsTopic",
                    (
                        Field("name", STRING, "0+"),
                        Field(
                            "partitions",
                            Array(
                                Struct(
                                    "ListOffsetsPartition",
                                    (
                                        Field("partition_index", INT32, "0+"),
                                        Field(
                                            "current_leader_epoch", INT32, "4+", default=-1, ignorable=True
                                        ),
                                        Field("timestamp", INT64, "0+"),
                                    ),
                                )
                            ),
                            "0+",
                        ),
                    ),
                )
            ),
            "0+",
        ),
    ),
)

ListOffsetsResponse = Message(
    "ListOffsetsResponse",
    api_key=ApiKey.LIST_OFFSETS,
    kind="response",
    versions="1-7",
    flexible="6+",
    fields=(
        Field("throttle_time_ms", INT32, "2+", ignorable=True),
        Field(
            "topics",
            Array(
                Struct(
                    "ListOffsetsTopicResponse",
                    (
                        Field("name", STRING, "0+"),
                        Field(
                            "partitions",
                            Array(
                                Struct(
                                    "ListOffsetsPartitionResponse",
                                    (
                                        Field("partition_index", INT32, "0+"),
                                        Field("error_code", INT16, "0+"),
                                        Field("timestamp", INT64, "1+", default=-1),
                                        Field("offset", INT64, "1+", default=-1),
                                        Field("leader_epoch", INT32, "4+", default=-1),
                                    ),
                                )
                            ),
                            "0+",
                        ),
                    ),
                )
            ),
            "0+",
        ),
    ),
)
