"""ListGroups (key 16): the groups this coordinator knows, optionally by state (v4) and type (v5, KIP-848)."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, Message, STRING, Struct

ListGroupsRequest = Message(
    "ListGroupsRequest",
    api_key=ApiKey.LIST_GROUPS,
    kind="request",
    versions="0-5",
    flexible="3+",
    fields=(
        Field("states_filter", Array(STRING), "4+"),
        Field("types_filter", Array(STRING), "5+"),
    ),
)

ListGroupsResponse = Message(
    "ListGroupsResponse",
    api_key=ApiKey.LIST_GROUPS,
    kind="response",
    versions="0-5",
    flexible="3+",
    fields=(
        Field("throttle_time_ms", INT32, "1+", ignorable=True),
        Field("error_code", INT16, "0+"),
        Field(
            "groups",
            Array(
                Struct(
                    "ListedGroup",
                    (
                        Field("group_id", STRING, "0+"),
                        Field("protocol_type", STRING, "0+"),
                        Field("group_state", STRING, "4+", ignorable=True),
                        Field("group_type", STRING, "5+", ignorable=True),
                    ),
                )
            ),
            "0+",
        ),
    ),
)
