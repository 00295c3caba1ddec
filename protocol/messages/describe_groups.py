"""DescribeGroups (key 15): state, protocol and members of groups."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, BOOL, BYTES, Field, INT16, INT32, Message, STRING, Struct

DescribeGroupsRequest = Message(
    "DescribeGroupsRequest",
    api_key=ApiKey.DESCRIBE_GROUPS,
    kind="request",
    versions="0-5",
    flexible="5+",
    fields=(
        Field("groups", Array(STRING), "0+"),
        Field("include_authorized_operations", BOOL, "3+"),
    ),
)

DescribeGroupsResponse = Message(
    "DescribeGroupsResponse",
    api_key=ApiKey.DESCRIBE_GROUPS,
    kind="response",
    versions="0-5",
    flexible="5+",
    fields=(
        Field("throttle_time_ms", INT32, "1+", ignorable=True),
        Field(
            "groups",
            Array(
                Struct(
                    "DescribedGroup",
                    (
                        Field("error_code", INT16, "0+"),
                        Field("group_id", STRING, "0+"),
                        Field("group_state", STRING, "0+"),
                        Field("protocol_type", STRING, "0+"),
                        Field("protocol_data", STRING, "0+"),
                        Field(
                            "members",
                            Array(
                                Struct(
                                    "DescribedGroupMember",
                                    (
                                        Field("member_id", STRING, "0+"),
                                        Field(
                                            "group_instance_id", STRING, "4+", nullable="4+", ignorable=True
                                        ),
                                        Field("client_id", STRING, "0+"),
                                        Field("client_host", STRING, "0+"),
                                        Field("member_metadata", BYTES, "0+"),
                                        Field("member_assignment", BYTES, "0+"),
                                    ),
                                )
                            ),
                            "0+",
                        ),
                        Field("authorized_operations", INT32, "3+", default=-2147483648),
                    ),
                )
            ),
            "0+",
        ),
    ),
)
