"""CreateAcls (key 30): add ACL bindings."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT8, Message, STRING, Struct

CreateAclsRequest = Message(
    "CreateAclsRequest",
    api_key=ApiKey.CREATE_ACLS,
    kind="request",
    versions="0-3",
    flexible="2+",
    fields=(
        Field("creations", Array(Struct(
            "AclCreation",
            (
                Field("resource_type", INT8, "0+"),
                Field("resource_name", STRING, "0+"),
                Field("resource_pattern_type", INT8, "1+", default=3),
                Field("principal", STRING, "0+"),
                Field("host", STRING, "0+"),
                Field("operation", INT8, "0+"),
                Field("permission_type", INT8, "0+"),
            ),
        )), "0+"),
    ),
)

CreateAclsResponse = Message(
    "CreateAclsResponse",
    api_key=ApiKey.CREATE_ACLS,
    kind="response",
    versions="0-3",
    flexible="2+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field("results", Array(Struct(
            "AclCreationResult",
            (
                Field("error_code", INT16, "0+"),
                Field("error_message", STRING, "0+", nullable="0+"),
            ),
        )), "0+"),
    ),
)
