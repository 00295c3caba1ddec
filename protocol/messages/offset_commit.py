"""OffsetCommit (key 8): store consumed positions for a group (v9: member epochs, KIP-848)."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT64, Message, STRING, Struct

OffsetCommitRequest = Message(
    "OffsetCommitRequest",
    api_key=ApiKey.OFFSET_COMMIT,
    kind="request",
    versions="0-9",
    flexible="8+",
    fields=(
        Field("group_id", STRING, "0+"),
        Field("generation_id_or_member_epoch", INT32, "1+", default=-1, ignorable=True),
        Field("member_id", STRING, "1+", ignorable=True),
        Field("group_instance_id", STRING, "7+", nullable="7+"),
        Field("retention_time_ms", INT64, "2-4", default=-1, ignorable=True),
        Field(
            "topics",
            Array(
                Struct(
                    "OffsetCommitRequestTopic",
                    (
                        Field("name", STRING, "0+"),
                        Field(
                            "partitions",
                            Array(
                                Struct(
                                    "OffsetCommitRequestPartition",
                                    (
                                        Field("partition_index", INT32, "0+"),
                                        Field("committed_offset", INT64, "0+"),
                                        Field(
                                            "committed_leader_epoch", INT32, "6+", default=-1, ignorable=True
                                        ),
                                        Field("commit_timestamp", INT64, "1", default=-1),
                                        Field("committed_metadata", STRING, "0+", nullable="0+"),
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
    ),
)

OffsetCommitResponse = Message(
    "OffsetCommitResponse",
    api_key=ApiKey.OFFSET_COMMIT,
    kind="response",
    versions="0-9",
    flexible="8+",
    fields=(
        Field("throttle_time_ms", INT32, "3+", ignorable=True),
        Field(
            "topics",
            Array(
                Struct(
                    "OffsetCommitResponseTopic",
                    (
                        Field("name", STRING, "0+"),
                        Field(
                            "partitions",
                            Array(
                                Struct(
                                    "OffsetCommitResponsePartition",
                                    (
                                        Field("partition_index", INT32, "0+"),
                                        Field("error_code", INT16, "0+"),
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
    ),
)
