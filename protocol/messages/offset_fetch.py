"""OffsetFetch (key 9): read a group's committed positions (multi-group from v8, member epochs from v9)."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, BOOL, Field, INT16, INT32, INT64, Message, STRING, Struct

OffsetFetchRequest = Message(
    "OffsetFetchRequest",
    api_key=ApiKey.OFFSET_FETCH,
    kind="request",
    versions="0-9",
    flexible="6+",
    fields=(
        Field("group_id", STRING, "0-7"),
        Field(
            "topics",
            Array(
                Struct(
                    "OffsetFetchRequestTopic",
                    (
                        Field("name", STRING, "0-7"),
                        Field("partition_indexes", Array(INT32), "0-7"),
                    ),
                )
            ),
            "0-7",
            nullable="2-7",
        ),
        Field(
            "groups",
            Array(
                Struct(
                    "OffsetFetchRequestGroup",
                    (
                        Field("group_id", STRING, "8+"),
                        Field("member_id", STRING, "9+", nullable="9+", ignorable=True),
                        Field("member_epoch", INT32, "9+", default=-1, ignorable=True),
                        Field(
                            "topics",
                            Array(
                                Struct(
                                    "OffsetFetchRequestTopics",
                                    (
                                        Field("name", STRING, "8+"),
                                        Field("partition_indexes", Array(INT32), "8+"),
                                    ),
                                )
                            ),
                            "8+",
                            nullable="8+",
                        ),
                    ),
                )
            ),
            "8+",
        ),
        Field("require_stable", BOOL, "7+"),
    ),
)

OffsetFetchResponse = Message(
    "OffsetFetchResponse",
    api_key=ApiKey.OFFSET_FETCH,
    kind="response",
    versions="0-9",
    flexible="6+",
    fields=(
        Field("throttle_time_ms", INT32, "3+", ignorable=True),
        Field(
            "topics",
            Array(
                Struct(
                    "OffsetFetchResponseTopic",
                    (
                        Field("name", STRING, "0-7"),
                        Field(
                            "partitions",
                            Array(
                                Struct(
                                    "OffsetFetchResponsePartition",
                                    (
                                        Field("partition_index", INT32, "0-7"),
                                        Field("committed_offset", INT64, "0-7"),
                                        Field(
                                            "committed_leader_epoch", INT32, "5-7", default=-1, ignorable=True
                                        ),
                                        Field("metadata", STRING, "0-7", nullable="0-7"),
                                        Field("error_code", INT16, "0-7"),
                                    ),
                                )
                            ),
                            "0-7",
                        ),
                    ),
                )
            ),
            "0-7",
        ),
        Field("error_code", INT16, "2-7", ignorable=True),
        Field(
            "groups",
            Array(
                Struct(
                    "OffsetFetchResponseGroup",
                    (
                        Field("group_id", STRING, "8+"),
                        Field(
                            "topics",
                            Array(
                                Struct(
                                    "OffsetFetchResponseTopics",
                                    (
                                        Field("name", STRING, "8+"),
                                        Field(
                                            "partitions",
                                            Array(
                                                Struct(
                                                    "OffsetFetchResponsePartitions",
                                                    (
                                                        Field("partition_index", INT32, "8+"),
                                                        Field("committed_offset", INT64, "8+"),
                                                        Field(
                                                            "committed_leader_epoch",
                                                            INT32,
                                                            "8+",
                                                            default=-1,
                                                            ignorable=True,
                                                        ),
                                                        Field("metadata", STRING, "8+", nullable="8+"),
                                                        Field("error_code", INT16, "8+"),
                                                    ),
                                                )
                                            ),
                                            "8+",
                                        ),
                                    ),
                                )
                            ),
                            "8+",
                        ),
                        Field("error_code", INT16, "8+"),
                    ),
                )
            ),
            "8+",
        ),
    ),
)
