"""Fetch (key 1): read record batches from partitions.

v13+ names topics by id (KIP-516); v15+ carries a follower's id in ``replica_state``
instead of ``replica_id`` (KIP-903); v16 adds the leaders' endpoints to a NOT_LEADER
answer (KIP-951); v17 a follower's log directory (KIP-853).
"""

from typing import Any

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT64, INT8, Message, RECORDS, STRING, Struct, UUID

FetchRequest = Message(
    "FetchRequest",
    api_key=ApiKey.FETCH,
    kind="request",
    versions="4-17",
    flexible="12+",
    fields=(
        Field("cluster_id", STRING, "12+", nullable="12+", tag=0, tagged="12+", ignorable=True),
        Field("replica_id", INT32, "0-14", default=-1),
        Field(
            "replica_state",
            Struct(
                "ReplicaState",
                (
                    Field("replica_id", INT32, "15+", default=-1),
                    Field("replica_epoch", INT64, "15+", default=-1),
                ),
            ),
            "15+",
            tag=1,
            tagged="15+",
        ),
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
                        Field("topic_id", UUID, "13+", ignorable=True),
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
                                        Field("replica_directory_id", UUID, "17+", tag=0, tagged="17+",
                                              ignorable=True),
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
                        Field("topic_id", UUID, "13+", ignorable=True),
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
    versions="4-17",
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
                        Field("topic_id", UUID, "13+", ignorable=True),
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
        Field(
            "node_endpoints",
            Array(
                Struct(
                    "NodeEndpoint",
                    (
                        Field("node_id", INT32, "16+"),
                        Field("host", STRING, "16+"),
                        Field("port", INT32, "16+"),
                        Field("rack", STRING, "16+", nullable="16+", default=None),
                    ),
                )
            ),
            "16+",
            tag=0,
            tagged="16+",
        ),
    ),
)


def fetching_replica(body: Any) -> int:
    """The replica a Fetch comes from (-1: a consumer): ``replica_id`` up to v14,
    ``replica_state.replica_id`` from v15 (KIP-903)."""
    replica = int(body.get("replica_id", -1))
    if replica < 0:
        state = body.get("replica_state")
        if state is not None:
            replica = int(state.get("replica_id", -1))
    return replica
