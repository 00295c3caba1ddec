"""The __consumer_offsets record schemas: keys and values of offset and group records."""

from protocol.schema import Array, BYTES, Field, INT8, INT32, INT64, Message, STRING, Struct, UUID

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


# --- KIP-848 consumer groups. Each record type has its own key version (3-8); values are
# flexible from v0. Kafka's ConsumerGroup*Key / ConsumerGroup*Value.

_TOPIC_PARTITIONS = Struct(
    "TopicPartitions",
    (
        Field("topic_id", UUID, "0+"),
        Field("partitions", Array(INT32), "0+"),
    ),
)

ConsumerGroupMetadataKey = Message(
    "ConsumerGroupMetadataKey", api_key=None, kind="data", versions="3", flexible="none",
    fields=(Field("group_id", STRING, "3"),),
)

ConsumerGroupMetadataValue = Message(
    "ConsumerGroupMetadataValue", api_key=None, kind="data", versions="0", flexible="0+",
    fields=(Field("epoch", INT32, "0+"),),
)

ConsumerGroupPartitionMetadataKey = Message(
    "ConsumerGroupPartitionMetadataKey", api_key=None, kind="data", versions="4", flexible="none",
    fields=(Field("group_id", STRING, "4"),),
)

ConsumerGroupPartitionMetadataValue = Message(
    "ConsumerGroupPartitionMetadataValue", api_key=None, kind="data", versions="0", flexible="0+",
    fields=(
        Field(
            "topics",
            Array(
                Struct(
                    "TopicMetadata",
                    (
                        Field("topic_id", UUID, "0+"),
                        Field("topic_name", STRING, "0+"),
                        Field("num_partitions", INT32, "0+"),
                        Field(
                            "partition_metadata",
                            Array(
                                Struct(
                                    "PartitionMetadata",
                                    (
                                        Field("partition", INT32, "0+"),
                                        Field("racks", Array(STRING), "0+"),
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

ConsumerGroupMemberMetadataKey = Message(
    "ConsumerGroupMemberMetadataKey", api_key=None, kind="data", versions="5", flexible="none",
    fields=(Field("group_id", STRING, "5"), Field("member_id", STRING, "5")),
)

ConsumerGroupMemberMetadataValue = Message(
    "ConsumerGroupMemberMetadataValue", api_key=None, kind="data", versions="0", flexible="0+",
    fields=(
        Field("instance_id", STRING, "0+", nullable="0+"),
        Field("rack_id", STRING, "0+", nullable="0+"),
        Field("client_id", STRING, "0+"),
        Field("client_host", STRING, "0+"),
        Field("subscribed_topic_names", Array(STRING), "0+"),
        Field("subscribed_topic_regex", STRING, "0+", nullable="0+"),
        Field("rebalance_timeout_ms", INT32, "0+", default=-1),
        Field("server_assignor", STRING, "0+", nullable="0+"),
        Field(
            "classic_member_metadata",
            Struct(
                "ClassicMemberMetadata",
                (
                    Field("session_timeout_ms", INT32, "0+"),
                    Field(
                        "supported_protocols",
                        Array(Struct("ClassicProtocol", (Field("name", STRING, "0+"), Field("metadata", BYTES, "0+")))),
                        "0+",
                    ),
                ),
            ),
            "0+",
            nullable="0+",
            tag=0,
            tagged="0+",
        ),
    ),
)

ConsumerGroupTargetAssignmentMetadataKey = Message(
    "ConsumerGroupTargetAssignmentMetadataKey", api_key=None, kind="data", versions="6", flexible="none",
    fields=(Field("group_id", STRING, "6"),),
)

ConsumerGroupTargetAssignmentMetadataValue = Message(
    "ConsumerGroupTargetAssignmentMetadataValue", api_key=None, kind="data", versions="0", flexible="0+",
    fields=(Field("assignment_epoch", INT32, "0+"),),
)

ConsumerGroupTargetAssignmentMemberKey = Message(
    "ConsumerGroupTargetAssignmentMemberKey", api_key=None, kind="data", versions="7", flexible="none",
    fields=(Field("group_id", STRING, "7"), Field("member_id", STRING, "7")),
)

ConsumerGroupTargetAssignmentMemberValue = Message(
    "ConsumerGroupTargetAssignmentMemberValue", api_key=None, kind="data", versions="0", flexible="0+",
    fields=(
        Field(
            "topic_partitions",
            Array(Struct("TopicPartition", (Field("topic_id", UUID, "0+"), Field("partitions", Array(INT32), "0+")))),
            "0+",
        ),
    ),
)

ConsumerGroupCurrentMemberAssignmentKey = Message(
    "ConsumerGroupCurrentMemberAssignmentKey", api_key=None, kind="data", versions="8", flexible="none",
    fields=(Field("group_id", STRING, "8"), Field("member_id", STRING, "8")),
)

ConsumerGroupCurrentMemberAssignmentValue = Message(
    "ConsumerGroupCurrentMemberAssignmentValue", api_key=None, kind="data", versions="0", flexible="0+",
    fields=(
        Field("member_epoch", INT32, "0+"),
        Field("previous_member_epoch", INT32, "0+"),
        Field("state", INT8, "0+"),
        Field("assigned_partitions", Array(_TOPIC_PARTITIONS), "0+"),
        Field("partitions_pending_revocation", Array(_TOPIC_PARTITIONS), "0+"),
    ),
)
