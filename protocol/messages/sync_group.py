"""SyncGroup (key 14): the leader hands out assignments; members collect theirs."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, BYTES, Field, INT16, INT32, Message, STRING, Struct

SyncGroupRequest = Message(
    "SyncGroupRequest",
    api_key=ApiKey.SYNC_GROUP,
    kind="request",
    versions="0-5",
    flexible="4+",
    fields=(
        Field("group_id", STRING, "0+"),
        Field("generation_id", INT32, "0+"),
        Field("member_id", STRING, "0+"),
        Field("group_instance_id", STRING, "3+", nullable="3+"),
        Field("protocol_type", STRING, "5+", nullable="5+", ignorable=True),
        Field("protocol_name", STRING, "5+", nullable="5+", ignorable=True),
        Field(
            "assignments",
            Array(
                Struct(
                    "SyncGroupRequestAssignment",
                    (
                        Field("member_id", STRING, "0+"),
                        Field("assignment", BYTES, "0+"),
                    ),
                )
            ),
            "0+",
        ),
    ),
)

SyncGroupResponse = Message(
    "SyncGroupResponse",
    api_key=ApiKey.SYNC_GROUP,
    kind="response",
    versions="0-5",
    flexible="4+",
    fields=(
        Field("throttle_time_ms", INT32, "1+", ignorable=True),
        Field("error_code", INT16, "0+"),
        Field("protocol_type", STRING, "5+", nullable="5+", ignorable=True),
        Field("protocol_name", STRING, "5+", nullable="5+", ignorable=True),
        Field("assignment", BYTES, "0+"),
    ),
)
