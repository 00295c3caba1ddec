"""Produce (key 0): append record batches to partitions.

v10 (KIP-951) adds the current leader of a partition a NOT_LEADER_OR_FOLLOWER answers, and that
leader's address, as tagged fields; the request is the same as v9.
"""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT64, Message, RECORDS, STRING, Struct

ProduceRequest = Message(
    "ProduceRequest",
    api_key=ApiKey.PRODUCE,
    kind="request",
    versions="3-10",
    flexible="9+",
    fields=(
        Field("transactional_id", STRING, "3+", nullable="3+"),
        Field("acks", INT16, "0+"),
        Field("timeout_ms", INT32, "0+"),
        Field(
            "topic_data",
            Array(
                Struct(
                    "TopicProduceData",
                    (
                        Field("name", STRING, "0+"),
                        Field(
                            "partition_data",
                            Array(
                                Struct(
                                    "PartitionProduceData",
                                    (
                                        Field("index", INT32, "0+"),
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

ProduceResponse = Message(
    "ProduceResponse",
    api_key=ApiKey.PRODUCE,
    kind="response",
    versions="3-10",
    flexible="9+",
    fields=(
        Field(
            "responses",
            Array(
                Struct(
                    "TopicProduceResponse",
                    (
                        Field("name", STRING, "0+"),
                        Field(
                            "partition_responses",
                            Array(
                                Struct(
                                    "PartitionProduceResponse",
                                    (
                                        Field("index", INT32, "0+"),
                                        Field("error_code", INT16, "0+"),
                                        Field("base_offset", INT64, "0+"),
                                        Field("log_append_time_ms", INT64, "2+", default=-1, ignorable=True),
                                        Field("log_start_offset", INT64, "5+", default=-1, ignorable=True),
                                        Field(
                                            "record_errors",
                                            Array(
                                                Struct(
                                                    "BatchIndexAndErrorMessage",
                                                    (
                                                        Field("batch_index", INT32, "8+"),
                                                        Field(
                                                            "batch_index_error_message",
                                                            STRING,
                                                            "8+",
                                                            nullable="8+",
                                                        ),
                                                    ),
                                                )
                                            ),
                                            "8+",
                                            ignorable=True,
                                        ),
                                        Field("error_message", STRING, "8+", nullable="8+", ignorable=True),
                                        Field(
                                            "current_leader",
                                            Struct(
                                                "LeaderIdAndEpoch",
                                                (
                                                    Field("leader_id", INT32, "10+", default=-1),
                                                    Field("leader_epoch", INT32, "10+", default=-1),
                                                ),
                                            ),
                                            "10+",
                                            tag=0,
                                            tagged="10+",
                                        ),
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
        Field("throttle_time_ms", INT32, "1+", ignorable=True),
        Field(
            "node_endpoints",
            Array(
                Struct(
                    "NodeEndpoint",
                    (
                        Field("node_id", INT32, "10+"),
                        Field("host", STRING, "10+"),
                        Field("port", INT32, "10+"),
                        Field("rack", STRING, "10+", nullable="10+", default=None),
                    ),
                )
            ),
            "10+",
            tag=0,
            tagged="10+",
        ),
    ),
)
