"""JoinGroup (key 11): a member joins a group and waits for the rebalance."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, BOOL, BYTES, Field, INT16, INT32, Message, STRING, Struct

JoinGroupRequest = Message(
    "JoinGroupRequest",
    api_key=ApiKey.JOIN_GROUP,
    kind="request",
    versions="0-9",
    flexible="6+",
    fields=(
        Field("group_id", STRING, "0+"),
        Field("session_timeout_ms", INT32, "0+"),
        Field("rebalance_timeout_ms", INT32, "1+", default=-1, ignorable=True),
        Field("member_id", STRING, "0+"),
        Field("group_instance_id", STRING, "5+", nullable="5+"),
        Field("protocol_type", STRING, "0+"),
        Field(
            "protocols",
            Array(
                Struct(
                    "JoinGroupRequestProtocol",
                    (
                        Field("name", STRING, "0+"),
                        Field("metadata", BYTES, "0+"),
                    ),
                )
            ),
            "0+",
        ),
        Field("reason", STRING, "8+", nullable="8+", ignorable=True),
    ),
)

JoinGroupResponse = Message(
    "JoinGroupResponse",
    api_key=ApiKey.JOIN_GROUP,
    kind="response",
    versions="0-9",
    flexible="6+",
    fields=(
        Field("throttle_time_ms", INT32, "2+", ignorable=True),
        Field("error_code", INT16, "0+"),
        Field("generation_id", INT32, "0+", default=-1),
        Field("protocol_type", STRING, "7+", nullable="7+", ignorable=True),
        Field("protocol_name", STRING, "0+", nullable="7+"),
        Field("leader", STRING, "0+"),
        Field("skip_assignment", BOOL, "9+"),
        Field("member_id", STRING, "0+"),
        Field(
            "members",
            Array(
                Struct(
                    "JoinGroupResponseMember",
                    (
                        Field("member_id", STRING, "0+"),
                        Field("group_instance_id", STRING, "5+", nullable="5+", ignorable=True),
                        Field("metadata", BYTES, "0+"),
                    ),
                )
            ),
            "0+",
        ),
    ),
)
