"""The consumer protocol blobs carried inside JoinGroup metadata and SyncGroup assignments."""

from protocol.schema import Array, BYTES, Field, INT32, Message, STRING, Struct

ConsumerProtocolSubscription = Message(
    "ConsumerProtocolSubscription",
    api_key=None,
    kind="data",
    versions="0-3",
    flexible="none",
    fields=(
        Field("topics", Array(STRING), "0+"),
        Field("user_data", BYTES, "0+", nullable="0+"),
        Field(
            "owned_partitions",
            Array(
                Struct(
                    "TopicPartition",
                    (
                        Field("topic", STRING, "1+"),
                        Field("partitions", Array(INT32), "1+"),
                    ),
                )
            ),
            "1+",
            ignorable=True,
        ),
        Field("generation_id", INT32, "2+", default=-1, ignorable=True),
        Field("rack_id", STRING, "3+", nullable="3+", ignorable=True),
    ),
)

ConsumerProtocolAssignment = Message(
    "ConsumerProtocolAssignment",
    api_key=None,
    kind="data",
    versions="0-3",
    flexible="none",
    fields=(
        Field(
            "assigned_partitions",
            Array(
                Struct(
                    "TopicPartition",
                    (
                        Field("topic", STRING, "0+"),
                        Field("partitions", Array(INT32), "0+"),
                    ),
                )
            ),
            "0+",
        ),
        Field("user_data", BYTES, "0+", nullable="0+"),
    ),
)
