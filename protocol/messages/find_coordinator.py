"""FindCoordinator (key 10): which broker coordinates a group (batched from v4)."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT8, Message, STRING, Struct

FindCoordinatorRequest = Message(
    "FindCoordinatorRequest",
    api_key=ApiKey.FIND_COORDINATOR,
    kind="request",
    versions="0-4",
    flexible="3+",
    fields=(
        Field("key", STRING, "0-3"),
        Field("key_type", INT8, "1+"),
        Field("coordinator_keys", Array(STRING), "4+"),
    ),
)

FindCoordinatorResponse = Message(
    "FindCoordinatorResponse",
    api_key=ApiKey.FIND_COORDINATOR,
    kind="response",
    versions="0-4",
    flexible="3+",
    fields=(
        Field("throttle_time_ms", INT32, "1+", ignorable=True),
        Field("error_code", INT16, "0-3"),
        Field("error_message", STRING, "1-3", nullable="1-3", ignorable=True),
        Field("node_id", INT32, "0-3"),
        Field("host", STRING, "0-3"),
        Field("port", INT32, "0-3"),
        Field(
            "coordinators",
            Array(
                Struct(
                    "Coordinator",
                    (
                        Field("key", STRING, "4+"),
                        Field("node_id", INT32, "4+"),
                        Field("host", STRING, "4+"),
                        Field("port", INT32, "4+"),
                        Field("error_code", INT16, "4+"),
                        Field("error_message", STRING, "4+", nullable="4+", ignorable=True),
                    ),
                )
            ),
            "4+",
        ),
    ),
)
