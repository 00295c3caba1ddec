"""OffsetDelete (key 47, KIP-496): delete a group's committed offsets."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, Message, STRING, Struct

OffsetDeleteRequest = Message(
    "OffsetDeleteRequest",
    api_key=ApiKey.OFFSET_DELETE,
    kind="request",
    versions="0",
    flexible="none",
    fields=(
        Field("group_id", STRING, "0+"),
        Field(
            "topics",
            Array(
                Struct(
                    "OffsetDeleteRequestTopic",
                    (
                        Field("name", STRING, "0+"),
                        Field(
                            "partitions",
                            Array(
                                Struct(
                                    "OffsetDeleteRequestPartition", (Field("partition_index", INT32, "0+"),)
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

OffsetDeleteResponse = Message(
    "OffsetDeleteResponse",
    api_key=ApiKey.OFFSET_DELETE,
    kind="response",
    versions="0",
    flexible="none",
    fields=(
        Field("error_code", INT16, "0+"),
        Field("throttle_time_ms", INT32, "0+", ignorable=True),
        Field(
            "topics",
            Array(
                Struct(
                    "OffsetDeleteResponseTopic",
                    (
                        Field("name", STRING, "0+"),
                        Field(
                            "partitions",
                            Array(
                                Struct(
                                    "OffsetDeleteResponsePartition",
                                    (
                                        Field("partition_index", INT32, "0+"),
                                        Field("error_code", INT16, "0+"),
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
