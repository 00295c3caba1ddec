"""Metadata (key 3): brokers, cluster id, controller, topics and partitions."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, BOOL, Field, INT16, INT32, Message, STRING, Struct, UUID

MetadataRequest = Message(
    "MetadataRequest",
    api_key=ApiKey.METADATA,
    kind="request",
    versions="0-12",
    flexible="9+",
    fields=(
        Field(
            "topics",
            Array(
                Struct(
                    "MetadataRequestTopic",
                    (
                        Field("topic_id", UUID, "10+", ignorable=True),
                        Field("name", STRING, "0+", nullable="10+"),
                    ),
                )
            ),
            "0+",
            nullable="1+",
        ),
        Field("allow_auto_topic_creation", BOOL, "4+", default=True),
        Field("include_cluster_authorized_operations", BOOL, "8-10"),
        Field("include_topic_authorized_operations", BOOL, "8+"),
    ),
)

MetadataResponse = Message(
    "MetadataResponse",
    api_key=ApiKey.METADATA,
    kind="response",
    versions="0-12",
    flexible="9+",
    fields=(
        Field("throttle_time_ms", INT32, "3+", ignorable=True),
        Field(
            "brokers",
            Array(
                Struct(
                    "MetadataResponseBroker",
                    (
                        Field("node_id", INT32, "0+"),
                        Field("host", STRING, "0+"),
                        Field("port", INT32, "0+"),
                        Field("rack", STRING, "1+", nullable="1+", ignorable=True),
                    ),
                )
            ),
            "0+",
        ),
        Field("cluster_id", STRING, "2+", nullable="2+", ignorable=True),
        Field("controller_id", INT32, "1+", default=-1, ignorable=True),
        Field(
            "topics",
            Array(
                Struct(
                    "MetadataResponseTopic",
                    (
                        Field("error_code", INT16, "0+"),
                        Field("name", STRING, "0+", nullable="12+"),
                        Field("topic_id", UUID, "10+", ignorable=True),
                        Field("is_internal", BOOL, "1+", ignorable=True),
                        Field(
                            "partitions",
                            Array(
                                Struct(
                                    "MetadataResponsePartition",
                                    (
                                        Field("error_code", INT16, "0+"),
                                        Field("partition_index", INT32, "0+"),
                                        Field("leader_id", INT32, "0+"),
                                        Field("leader_epoch", INT32, "7+", default=-1, ignorable=True),
                                        Field("replica_nodes", Array(INT32), "0+"),
                                        Field("isr_nodes", Array(INT32), "0+"),
                                        Field("offline_replicas", Array(INT32), "5+", ignorable=True),
                                    ),
                                )
                            ),
                            "0+",
                        ),
                        Field("topic_authorized_operations", INT32, "8+", default=-2147483648),
                    ),
                )
            ),
            "0+",
        ),
        Field("cluster_authorized_operations", INT32, "8-10", default=-2147483648),
    ),
)
