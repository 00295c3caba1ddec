"""AlterConfigs (key 33): replace the whole set of a resource's config overrides."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, BOOL, Field, INT16, INT32, INT8, Message, STRING, Struct

AlterConfigsRequest = Message(
    "AlterConfigsRequest",
    api_key=ApiKey.ALTER_CONFIGS,
    kind="request",
    versions="0-2",
    flexible="2+",
    fields=(
        Field(
            "resources",
            Array(
                Struct(
                    "AlterConfigsResource",
                    (
                        Field("resource_type", INT8, "0+"),
                        Field("resource_name", STRING, "0+"),
                        Field(
                            "configs",
                            Array(
                                Struct(
                                    "AlterableConfig",
                                    (
                                        Field("name", STRING, "0+"),
                                        Field("value", STRING, "0+", nullable="0+"),
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
        Field("validate_only", BOOL, "0+"),
    ),
)

AlterConfigsResponse = Message(
    "AlterConfigsResponse",
    api_key=ApiKey.ALTER_CONFIGS,
    kind="response",
    versions="0-2",
    flexible="2+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field(
            "responses",
            Array(
                Struct(
                    "AlterConfigsResourceResponse",
                    (
                        Field("error_code", INT16, "0+"),
                        Field("error_message", STRING, "0+", nullable="0+"),
                        Field("resource_type", INT8, "0+"),
                        Field("resource_name", STRING, "0+"),
                    ),
                )
            ),
            "0+",
        ),
    ),
)
