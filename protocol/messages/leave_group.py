"""LeaveGroup (key 13): members leave a group (batched from v3)."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, Message, STRING, Struct

LeaveGroupRequest = Message(
    "LeaveGroupRequest",
    api_key=ApiKey.LEAVE_GROUP,
    kind="request",
    versions="0-5",
    flexible="4+",
    fields=(
        Field("group_id", STRING, "0+"),
        Field("member_id", STRING, "0-2"),
        Field(
            "members",
            Array(
                Struct(
                    "MemberIdentity",
                    (
                        Field("member_id", STRING, "3+"),
                        Field("group_instance_id", STRING, "3+", nullable="3+"),
                        Field("reason", STRING, "5+", nullable="5+", ignorable=True),
                    ),
                )
            ),
            "3+",
        ),
    ),
)

LeaveGroupResponse = Message(
    "LeaveGroupResponse",
    api_key=ApiKey.LEAVE_GROUP,
    kind="response",
    versions="0-5",
    flexible="4+",
    fields=(
        Field("throttle_time_ms", INT32, "1+", ignorable=True),
        Field("error_code", INT16, "0+"),
        Field(
            "members",
            Array(
                Struct(
                    "MemberResponse",
                    (
                        Field("member_id", STRING, "3+"),
                        Field("group_instance_id", STRING, "3+", nullable="3+"),
                        Field("error_code", INT16, "3+"),
                    ),
                )
            ),
            "3+",
        ),
    ),
)
