"""DeleteTopics (key 20): delete topics by name (or id from v6)."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, Message, STRING, Struct, UUID

DeleteTopicsRequest = Message(
    "DeleteTopicsRequest",
    api_key=ApiKey.DELETE_TOPICS,
    kind="request",
    versions="0-6",
    flexible="4+",
    fields=(
        Field(
            "topics",
            Array(
                Struct(
                    "DeleteTopicState",
                    (
                        Field("name", STRING, "6+", nullable="6+"),
                        Field("topic_id", UUID, "6+"),
                    ),
                )
            ),
            "6+",
        ),
        Field("topic_names", Array(STRING), "0-5", ignorable=True),
        Field("timeout_ms", INT32, "0+"),
    ),
)

DeleteTopicsResponse = Message(
    "DeleteTopicsResponse",
    api_key=ApiKey.DELETE_TOPICS,
    kind="response",
    versions="0-6",
    flexible="4+",
    fields=(
        Field("throttle_time_ms", INT32, "1+", ignorable=True),
        Field(
            "responses",
            Array(
                Struct(
                    "DeletableTopicResult",
                    (
                        Field("name", STRING, "0+", nullable="6+"),
                        Field("topic_id", UUID, "6+", ignorable=True),
                        Field("error_code", INT16, "0+"),
                        Field("error_message", STRING, "5+", nullable="5+", ignorable=True),
                    ),
                )
            ),
            "0+",
        ),
    ),
)
