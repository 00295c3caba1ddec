"""CreateTopics (key 19): create topics with partitions and configs."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, BOOL, Field, INT16, INT32, INT8, Message, STRING, Struct, UUID

CreateTopicsRequest = Message(
    "CreateTopicsRequest",
    api_key=ApiKey.CREATE_TOPICS,
    kind="request",
    versions="0-7",
    flexible="5+",
    fields=(
        Field(
            "topics",
            Array(
                Struct(
                    "CreatableTopic",
                    (
                        Field("name", STRING, "0+"),
                        Field("num_partitions", INT32, "0+"),
                        Field("replication_factor", INT16, "0+"),
                        Field(
                            "assignments",
                            Array(
                                Struct(
                                    "CreatableReplicaAssignment",
                                    (
                                        Field("partition_index", INT32, "0+"),
                                        Field("broker_ids", Array(INT32), "0+"),
                                    ),
                                )
                            ),
                            "0+",
                        ),
                        Field(
                            "configs",
                            Array(
                                Struct(
                                    "CreatableTopicConfig",
                                    (
                                        Field("name", STRING, "0+"),
                                        Field("value", STRING, "0+", nullable="0+"),
                                    ),
                                )
                            ),
                            "0+",
                        ),
                    ),
                )
            ),
            "0+",
        ),
        Field("timeout_ms", INT32, "0+", default=60000),
        Field("validate_only", BOOL, "1+"),
    ),
)

CreateTopicsResponse = Message(
    "CreateTopicsResponse",
    api_key=ApiKey.CREATE_TOPICS,
    kind="response",
    versions="0-7",
    flexible="5+",
    fields=(
        Field("throttle_time_ms", INT32, "2+", ignorable=True),
        Field(
            "topics",
            Array(
                Struct(
                    "CreatableTopicResult",
                    (
                        Field("name", STRING, "0+"),
                        Field("topic_id", UUID, "7+", ignorable=True),
                        Field("error_code", INT16, "0+"),
                        Field("error_message", STRING, "1+", nullable="0+", ignorable=True),
                        Field("topic_config_error_code", INT16, "5+", tag=0, tagged="5+", ignorable=True),
                        Field("num_partitions", INT32, "5+", default=-1, ignorable=True),
                        Field("replication_factor", INT16, "5+", default=-1, ignorable=True),
                        Field(
                            "configs",
                            Array(
                                Struct(
                                    "CreatableTopicConfigs",
                                    (
                                        Field("name", STRING, "5+"),
                                        Field("value", STRING, "5+", nullable="5+"),
                                        Field("read_only", BOOL, "5+"),
                                        Field("config_source", INT8, "5+", default=-1, ignorable=True),
                                        Field("is_sensitive", BOOL, "5+"),
                                    ),
                                )
                            ),
                            "5+",
                            nullable="5+",
                            ignorable=True,
                        ),
                    ),
                )
            ),
            "0+",
        ),
    ),
)
