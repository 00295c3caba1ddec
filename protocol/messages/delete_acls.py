"""DeleteAcls (key 31): remove the ACL bindings that match each filter."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT8, Message, STRING, Struct

DeleteAclsRequest = Message(
    "DeleteAclsRequest",
    api_key=ApiKey.DELETE_ACLS,
    kind="request",
    versions="0-3",
    flexible="2+",
    fields=(
        Field("filters", Array(Struct(
            "DeleteAclsFilter",
            (
                Field("resource_type_filter", INT8, "0+"),
                Field("resource_name_filter", STRING, "0+", nullable="0+"),
                Field("pattern_type_filter", INT8, "1+", default=3),
                Field("principal_filter", STRING, "0+", nullable="0+"),
                Field("host_filter", STRING, "0+", nullable="0+"),
                Field("operation", INT8, "0+"),
                Field("permission_type", INT8, "0+"),
            ),
        )), "0+"),
    ),
)

DeleteAclsResponse = Message(
    "DeleteAclsResponse",
    api_key=ApiKey.DELETE_ACLS,
    kind="response",
    versions="0-3",
    flexible="2+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field("filter_results", Array(Struct(
            "DeleteAclsFilterResult",
            (
                Field("error_code", INT16, "0+"),
                Field("error_message", STRING, "0+", nullable="0+"),
                Field("matching_acls", Array(Struct(
                    "DeleteAclsMatchingAcl",
                    (
                        Field("error_code", INT16, "0+"),
                        Field("error_message", STRING, "0+", nullable="0+"),
                        Field("resource_type", INT8, "0+"),
                        Field("resource_name", STRING, "0+"),
                        Field("pattern_type", INT8, "1+", default=3),
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
