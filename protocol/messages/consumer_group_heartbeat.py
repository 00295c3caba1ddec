"""ConsumerGroupHeartbeat (key 68): the KIP-848 consumer protocol, one request for join, heartbeat and leave."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, Message, STRING, Struct, UUID

_TOPIC_PARTITIONS = Struct(
    "TopicPartitions",
    (
        Field("topic_id", UUID, "0+"),
        Field("partitions", Array(INT32), "0+"),
    ),
)

ConsumerGroupHeartbeatRequest = Message(
    "ConsumerGroupHeartbeatRequest",
    api_key=ApiKey.CONSUMER_GROUP_HEARTBEAT,
    kind="request",
    versions="0-1",
    flexible="0+",
    fields=(
        Field("group_id", STRING, "0+"),
        Field("member_id", STRING, "0+"),
        Field("member_epoch", INT32, "0+"),
        Field("instance_id", STRING, "0+", nullable="0+"),
        Field("rack_id", STRING, "0+", nullable="0+"),
        Field("rebalance_timeout_ms", INT32, "0+", default=-1),
        Field("subscribed_topic_names", Array(STRING), "0+", nullable="0+"),
        Field("subscribed_topic_regex", STRING, "1+", nullable="1+"),
        Field("server_assignor", STRING, "0+", nullable="0+"),
        Field("topic_partitions", Array(_TOPIC_PARTITIONS), "0+", nullable="0+"),
    ),
)

ConsumerGroupHeartbeatResponse = Message(
    "ConsumerGroupHeartbeatResponse",
    api_key=ApiKey.CONSUMER_GROUP_HEARTBEAT,
    kind="response",
    versions="0-1",
    flexible="0+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field("error_code", INT16, "0+"),
        Field("error_message", STRING, "0+", nullable="0+"),
        Field("member_id", STRING, "0+", nullable="0+"),
        Field("member_epoch", INT32, "0+"),
        Field("heartbeat_interval_ms", INT32, "0+"),
        Field(
            "assignment",
            Struct("Assignment", (Field("topic_partitions", Array(_TOPIC_PARTITIONS), "0+"),)),
            "0+",
            nullable="0+",
        ),
    ),
)
