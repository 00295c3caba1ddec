"""OffsetForLeaderEpoch (key 23): the end offset of a leader epoch (KIP-101, KIP-320).

Consumers send it to a partition's new leader to validate their position after a leader
change; followers send it to find where to truncate their log.
"""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT64, Message, STRING, Struct

OffsetForLeaderEpochRequest = Message(
    "OffsetForLeaderEpochRequest",
    api_key=ApiKey.OFFSET_FOR_LEADER_EPOCH,
    kind="request",
    versions="0-4",
    flexible="4+",
    fields=(
        Field("replica_id", INT32, "3+", default=-2, ignorable=True),
        Field(
            "topics",
            Array(
                Struct(
                    "OffsetForLeaderTopic",
                    (
                        Field("topic", STRING, "0+"),
                        Field(
                            "partitions",
                            Array(
                                Struct(
                                    "OffsetForLeaderPartition",
                                    (
                                        Field("partition", INT32, "0+"),
                                        Field(
                                            "current_leader_epoch", INT32, "2+", default=-1, ignorable=True
                                        ),
                                        Field("leader_epoch", INT32, "0+"),
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

OffsetForLeaderEpochResponse = Message(
    "OffsetForLeaderEpochResponse",
    api_key=ApiKey.OFFSET_FOR_LEADER_EPOCH,
    kind="response",
    versions="0-4",
    flexible="4+",
    fields=(
        Field("throttle_time_ms", INT32, "2+", ignorable=True),
        Field(
            "topics",
            Array(
                Struct(
                    "OffsetForLeaderTopicResult",
                    (
                        Field("topic", STRING, "0+"),
                        Field(
                            "partitions",
                            Array(
                                Struct(
                                    "EpochEndOffset",
                                    (
                                        Field("error_code", INT16, "0+"),
                                        Field("partition", INT32, "0+"),
                                        Field("leader_epoch", INT32, "1+", default=-1, ignorable=True),
                                        Field("end_offset", INT64, "0+", default=-1),
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
