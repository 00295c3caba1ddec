"""ConsumerGroupDescribe (key 69): members, epochs and assignments of KIP-848 consumer groups."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, BOOL, Field, INT16, INT32, Message, STRING, Struct, UUID

_ASSIGNMENT = Struct(
    "Assignment",
    (
        Field(
            "topic_partitions",
            Array(
                Struct(
                    "TopicPartitions",
                    (
                        Field("topic_id", UUID, "0+"),
                        Field("topic_name", STRING, "0+"),
                        Field("partitions", Array(INT32), "0+"),
                    ),
                )
            ),
            "0+",
        ),
    ),
)

ConsumerGroupDescribeRequest = Message(
    "ConsumerGroupDescribeRequest",
    api_key=ApiKey.CONSUMER_GROUP_DESCRIBE,
    kind="request",
    versions="0",
    flexible="0+",
    fields=(
        Field("group_ids", Array(STRING), "0+"),
        Field("include_authorized_operations", BOOL, "0+"),
    ),
)

ConsumerGroupDescribeResponse = Message(
    "ConsumerGroupDescribeResponse",
    api_key=ApiKey.CONSUMER_GROUP_DESCRIBE,
    kind="response",
    versions="0",
    flexible="0+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field(
            "groups",
            Array(
                Struct(
                    "DescribedGroup",
                    (
                        Field("error_code", INT16, "0+"),
                        Field("error_message", STRING, "0+", nullable="0+"),
                        Field("group_id", STRING, "0+"),
                        Field("group_state", STRING, "0+"),
                        Field("group_epoch", INT32, "0+"),
                        Field("assignment_epoch", INT32, "0+"),
                        Field("assignor_name", STRING, "0+"),
                        Field(
                            "members",
                            Array(
                                Struct(
                                    "Member",
                                    (
                                        Field("member_id", STRING, "0+"),
                                        Field("instance_id", STRING, "0+", nullable="0+"),
                                        Field("rack_id", STRING, "0+", nullable="0+"),
                                        Field("member_epoch", INT32, "0+"),
                                        Field("client_id", STRING, "0+"),
                                        Field("client_host", STRING, "0+"),
                                        Field("subscribed_topic_names", Array(STRING), "0+"),
                                        Field("subscribed_topic_regex", STRING, "0+", nullable="0+"),
                                        Field("assignment", _ASSIGNMENT, "0+"),
                                        Field("target_assignment", _ASSIGNMENT, "0+"),
                                    ),
                                )
                            ),
                            "0+",
                        ),
                        Field("authorized_operations", INT32, "0+", default=-2147483648),
                    ),
                )
            ),
            "0+",
        ),
    ),
)
