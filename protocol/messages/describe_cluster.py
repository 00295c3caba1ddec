"""DescribeCluster (key 60): the brokers and the cluster's authorized operations (KIP-700)."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, BOOL, Field, INT16, INT32, INT8, Message, STRING, Struct

DescribeClusterRequest = Message(
    "DescribeClusterRequest",
    api_key=ApiKey.DESCRIBE_CLUSTER,
    kind="request",
    versions="0-1",
    flexible="0+",
    fields=(
        Field("include_cluster_authorized_operations", BOOL, "0+"),
        Field("endpoint_type", INT8, "1+", default=1),
    ),
)

DescribeClusterResponse = Message(
    "DescribeClusterResponse",
    api_key=ApiKey.DESCRIBE_CLUSTER,
    kind="response",
    versions="0-1",
    flexible="0+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field("error_code", INT16, "0+"),
        Field("error_message", STRING, "0+", nullable="0+"),
        Field("endpoint_type", INT8, "1+", default=1),
        Field("cluster_id", STRING, "0+"),
        Field("controller_id", INT32, "0+", default=-1),
        Field("brokers", Array(Struct(
            "DescribeClusterBroker",
            (
                Field("broker_id", INT32, "0+"),
                Field("host", STRING, "0+"),
                Field("port", INT32, "0+"),
                Field("rack", STRING, "0+", nullable="0+"),
            ),
        )), "0+"),
        Field("cluster_authorized_operations", INT32, "0+", default=-2147483648),
    ),
)
