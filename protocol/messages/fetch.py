"""Fetch (key 1): read record batches from partitions."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT64, INT8, Message, RECORDS, STRING, Struct

FetchRequest = Message(
    "FetchRequest",
    api_key=ApiKey.FETCH,
    kind="request",
    versions="4-12",
    flexible="12+",
    fields=(
        Field("cluster_id", STRING, "12+", nullable="12+", tag=0, tagged="12+", ignorable=True),
        Field("replica_id", INT32, "0-14", default=-1),
        Field("max_wait_ms", INT32, "0+"),
        Field("min_bytes", INT32, "0+"),
        Field("max_bytes", INT32, "3+", default=2147483647, ignorable=True),
        Field("isolation_level", INT8, "4+", ignorable=True),
        Field("session_id", INT32, "7+", ignorable=True),
        Field("session_epoch", INT32, "7+", default=-1, ignorable=True),
        Field(
            "topics",
            Array(
                Struct(
                    "FetchTopic",
                    (
                        Field("topic", STRING, "0-12", ignorable=True),
                        Field(
                            "partitions",
                            Array(
                                Struct(
                                    "FetchPartition",
                                    (
                                        Field("partition", INT32, "0+"),
                                        Field(
                                            "current_leader_epoch", INT32, "9+", default=-1, ignorable=True
                                        ),
                                        Field("fetch_offset", INT64, "0+"),
                                        Field("last_fetched_epoch", INT32, "12+", default=-1),
                                        Field("log_start_offset", INT64, "5+", default=-1, ignorable=True),
                                        Field("partition_max_bytes", INT32, "0+"),
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
        Field(
            "forgotten_topics_data",
            Array(
                Struct(
                    "ForgottenTopic",
                    (
                        Field("topic", STRING, "7-12", ignorable=True),
                        Field("partitions", Array(INT32), "7+"),
                    ),
                )
            ),
            "7+",
        ),
        Field("rack_id", STRING, "11+", ignorable=True),
    ),
)

FetchResponse = Message(
    "FetchResponse",
    api_key=ApiKey.FETCH,
    kind="response",
    versions="4-12",
    flexible="12+",
    fields=(
        Field("throttle_time_ms", INT32, "1+", ignorable=True),
        Field("error_code", INT16, "7+", ignorable=True),
        Field("session_id", INT32, "7+"),
        Field(
            "responses",
            Array(
                Struct(
                    "FetchableTopicResponse",
                    (
                        Field("topic", STRING, "0-12", ignorable=True),
                        Field(
                            "partitions",
                            Array(
                                Struct(
                                    "PartitionData",
                                    (
                                        Field("partition_index", INT32, "0+"),
                                        Field("error_code", INT16, "0+"),
                                        Field("high_watermark", INT64, "0+"),
                                        Field("last_stable_offset", INT64, "4+", default=-1, ignorable=True),
                                        Field("log_start_offset", INT64, "5+", default=-1, ignorable=True),
                                        Field(
                                            "diverging_epoch",
                                            Struct(
                                                "EpochEndOffset",
                                                (
                                                    Field("epoch", INT32, "12+", default=-1),
                                                    Field("end_offset", INT64, "12+", default=-1),
                                                ),
                                            ),
                                            "12+",
                                            tag=0,
                                            tagged="12+",
                                        ),
                                        Field(
                                            "current_leader",
                                            Struct(
                                                "LeaderIdAndEpoch",
                                                (
                                                    Field("leader_id", INT32, "12+", default=-1),
                                                    Field("leader_epoch", INT32, "12+", default=-1),
                                                ),
                                            ),
                                            "12+",
                                            tag=1,
                                            tagged="12+",
                                        ),
                                        Field(
                                            "snapshot_id",
                                            Struct(
                                                "SnapshotId",
                                                (
                                                    Field("end_offset", INT64, "0+", default=-1),
                                                    Field("epoch", INT32, "0+", default=-1),
                                                ),
                                            ),
                                            "12+",
                                            tag=2,
                                            tagged="12+",
                                        ),
                                        Field(
                                            "aborted_transactions",
                                            Array(
                                                Struct(
                                                    "AbortedTransaction",
                                                    (
                                                        Field("producer_id", INT64, "4+"),
                                                        Field("first_offset", INT64, "4+"),
                                                    ),
                                                )
                                            ),
                                            "4+",
                                            nullable="4+",
                                            ignorable=True,
                                        ),
                                        Field("preferred_read_replica", INT32, "11+", default=-1),
                                        Field("records", RECORDS, "0+", nullable="0+"),
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
