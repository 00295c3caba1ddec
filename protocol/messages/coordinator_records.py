"""The __consumer_offsets record schemas: keys and values of offset and group records."""

from protocol.schema import Array, BYTES, Field, INT32, INT64, Message, STRING, Struct

OffsetCommitKey = Message(
    "OffsetCommitKey",
    api_key=None,
    kind="data",
    versions="0-1",
    flexible="none",
    fields=(
        Field("group", STRING, "0-1"),
        Field("topic", STRING, "0-1"),
        Field("partition", INT32, "0-1"),
    ),
)

OffsetCommitValue = Message(
    "OffsetCommitValue",
    api_key=None,
    kind="data",
    versions="0-4",
    flexible="4+",
    fields=(
        Field("offset", INT64, "0+"),
        Field("leader_epoch", INT32, "3+", default=-1, ignorable=True),
        Field("metadata", STRING, "0+"),
        Field("commit_timestamp", INT64, "0+"),
        Field("expire_timestamp", INT64, "1", default=-1, ignorable=True),
    ),
)

GroupMetadataKey = Message(
    "GroupMetadataKey",
    api_key=None,
    kind="data",
    versions="2",
    flexible="none",
    fields=(Field("group", STRING, "2"),),
)

GroupMetadataValue = Message(
    "GroupMetadataValue",
    api_key=None,
    kind="data",
    versions="0-4",
    flexible="4+",
    fields=(
        Field("protocol_type", STRING, "0+"),
        Field("generation", INT32, "0+"),
        Field("protocol", STRING, "0+", nullable="0+"),
        Field("leader", STRING, "0+", nullable="0+"),
        Field("current_state_timestamp", INT64, "2+", default=-1, ignorable=True),
        Field(
            "members",
            Array(
                Struct(
                    "MemberMetadata",
                    (
                        Field("member_id", STRING, "0+"),
                        Field("group_instance_id", STRING, "3+", nullable="3+", ignorable=True),
                        Field("client_id", STRING, "0+"),
                        Field("client_host", STRING, "0+"),
                        Field("rebalance_timeout", INT32, "1+", default=-1, ignorable=True),
                        Field("session_timeout", INT32, "0+"),
                        Field("subscription", BYTES, "0+"),
                        Field("assignment", BYTES, "0+"),
                    ),
                )
            ),
            "0+",
        ),
    ),
)
