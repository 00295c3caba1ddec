"""Heartbeat (key 12): a member stays alive and learns of rebalances."""

from protocol.api_keys import ApiKey
from protocol.schema import Field, INT16, INT32, Message, STRING

HeartbeatRequest = Message(
    "HeartbeatRequest",
    api_key=ApiKey.HEARTBEAT,
    kind="request",
    versions="0-4",
    flexible="4+",
    fields=(
        Field("group_id", STRING, "0+"),
        Field("generation_id", INT32, "0+"),
        Field("member_id", STRING, "0+"),
        Field("group_instance_id", STRING, "3+", nullable="3+"),
    ),
)

HeartbeatResponse = Message(
    "HeartbeatResponse",
    api_key=ApiKey.HEARTBEAT,
    kind="response",
    versions="0-4",
    flexible="4+",
    fields=(
        Field("throttle_time_ms", INT32, "1+", ignorable=True),
        Field("error_code", INT16, "0+"),
    ),
)
