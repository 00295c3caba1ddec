"""DeleteGroups (key 42): remove empty groups and their offsets."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, Message, STRING, Struct

DeleteGroupsRequest = Message(
    "DeleteGroupsRequest",
    api_key=ApiKey.DELETE_GROUPS,
    kind="request",
    versions="0-2",
    flexible="2+",
    fields=(Field("groups_names", Array(STRING), "0+"),),
)

DeleteGroupsResponse = Message(
    "DeleteGroupsResponse",
    api_key=ApiKey.DELETE_GROUPS,
    kind="response",
    versions="0-2",
    flexible="2+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field(
            "results",
            Array(
                Struct(
                    "DeletableGroupResult",
                    (
                        Field("group_id", STRING, "0+"),
                        Field("error_code", INT16, "0+"),
                    ),
                )
            ),
            "0+",
        ),
    ),
)
