"""CreatePartitions (key 37): add partitions to topics."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, BOOL, Field, INT16, INT32, Message, STRING, Struct

CreatePartitionsRequest = Message(
    "CreatePartitionsRequest",
    api_key=ApiKey.CREATE_PARTITIONS,
    kind="request",
    versions="0-3",
    flexible="2+",
    fields=(
        Field(
            "topics",
            Array(
                Struct(
                    "CreatePartitionsTopic",
                    (
                        Field("name", STRING, "0+"),
                        Field("count", INT32, "0+"),
                        Field(
                            "assignments",
                            Array(
                                Struct(
                                    "CreatePartitionsAssignment", (Field("broker_ids", Array(INT32), "0+"),)
                                )
                            ),
                            "0+",
                            nullable="0+",
                        ),
                    ),
                )
            ),
            "0+",
        ),
        Field("timeout_ms", INT32, "0+"),
        Field("validate_only", BOOL, "0+"),
    ),
)

CreatePartitionsResponse = Message(
    "CreatePartitionsResponse",
    api_key=ApiKey.CREATE_PARTITIONS,
    kind="response",
    versions="0-3",
    flexible="2+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field(
            "results",
            Array(
                Struct(
                    "CreatePartitionsTopicResult",
                    (
                        Field("name", STRING, "0+"),
                        Field("error_code", INT16, "0+"),
                        Field("error_message", STRING, "0+", nullable="0+"),
                    ),
                )
            ),
            "0+",
        ),
    ),
)
