"""IncrementalAlterConfigs (key 44): set, delete, append to or subtract from single configs (KIP-339)."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, BOOL, Field, INT16, INT32, INT8, Message, STRING, Struct

IncrementalAlterConfigsRequest = Message(
    "IncrementalAlterConfigsRequest",
    api_key=ApiKey.INCREMENTAL_ALTER_CONFIGS,
    kind="request",
    versions="0-1",
    flexible="1+",
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
                                        Field("config_operation", INT8, "0+"),
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

IncrementalAlterConfigsResponse = Message(
    "IncrementalAlterConfigsResponse",
    api_key=ApiKey.INCREMENTAL_ALTER_CONFIGS,
    kind="response",
    versions="0-1",
    flexible="1+",
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
