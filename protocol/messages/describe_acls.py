"""DescribeAcls (key 29): the ACL bindings that match a filter."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT8, Message, STRING, Struct

DescribeAclsRequest = Message(
    "DescribeAclsRequest",
    api_key=ApiKey.DESCRIBE_ACLS,
    kind="request",
    versions="0-3",
    flexible="2+",
    fields=(
        Field("resource_type_filter", INT8, "0+"),
        Field("resource_name_filter", STRING, "0+", nullable="0+"),
        Field("pattern_type_filter", INT8, "1+", default=3),
        Field("principal_filter", STRING, "0+", nullable="0+"),
        Field("host_filter", STRING, "0+", nullable="0+"),
        Field("operation", INT8, "0+"),
        Field("permission_type", INT8, "0+"),
    ),
)

DescribeAclsResponse = Message(
    "DescribeAclsResponse",
    api_key=ApiKey.DESCRIBE_ACLS,
    kind="response",
    versions="0-3",
    flexible="2+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field("error_code", INT16, "0+"),
        Field("error_message", STRING, "0+", nullable="0+"),
        Field("resources", Array(Struct(
            "DescribeAclsResource",
            (
                Field("resource_type", INT8, "0+"),
                Field("resource_name", STRING, "0+"),
                Field("pattern_type", INT8, "1+", default=3),
                Field("acls", Array(Struct(
                    "AclDescription",
                    (
                        Field("principal", STRING, "0+"),
                        Field("host", STRING, "0+"),
                        Field("operation", INT8, "0+"),
                        Field("permission_type", INT8, "0+"),
                    ),
                )), "0+"),
            ),
        )), "0+"),
    ),
)
