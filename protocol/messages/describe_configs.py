"""DescribeConfigs (key 32): the configs of topics and brokers, with their sources."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, BOOL, Field, INT16, INT32, INT8, Message, STRING, Struct

DescribeConfigsRequest = Message(
    "DescribeConfigsRequest",
    api_key=ApiKey.DESCRIBE_CONFIGS,
    kind="request",
    versions="0-4",
    flexible="4+",
    fields=(
        Field(
            "resources",
            Array(
                Struct(
                    "DescribeConfigsResource",
                    (
                        Field("resource_type", INT8, "0+"),
                        Field("resource_name", STRING, "0+"),
                        Field("configuration_keys", Array(STRING), "0+", nullable="0+"),
                    ),
                )
            ),
            "0+",
        ),
        Field("include_synonyms", BOOL, "1+", default=False),
        Field("include_documentation", BOOL, "3+", default=False),
    ),
)

DescribeConfigsResponse = Message(
    "DescribeConfigsResponse",
    api_key=ApiKey.DESCRIBE_CONFIGS,
    kind="response",
    versions="0-4",
    flexible="4+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field(
            "results",
            Array(
                Struct(
                    "DescribeConfigsResult",
                    (
                        Field("error_code", INT16, "0+"),
                        Field("error_message", STRING, "0+", nullable="0+"),
                        Field("resource_type", INT8, "0+"),
                        Field("resource_name", STRING, "0+"),
                        Field(
                            "configs",
                            Array(
                                Struct(
                                    "DescribeConfigsResourceResult",
                                    (
                                        Field("name", STRING, "0+"),
                                        Field("value", STRING, "0+", nullable="0+"),
                                        Field("read_only", BOOL, "0+"),
                                        Field("is_default", BOOL, "0"),
                                        Field("config_source", INT8, "1+", default=-1, ignorable=True),
                                        Field("is_sensitive", BOOL, "0+"),
                                        Field(
                                            "synonyms",
                                            Array(
                                                Struct(
                                                    "DescribeConfigsSynonym",
                                                    (
                                                        Field("name", STRING, "1+"),
                                                        Field("value", STRING, "1+", nullable="0+"),
                                                        Field("source", INT8, "1+"),
                                                    ),
                                                )
                                            ),
                                            "1+",
                                            ignorable=True,
                                        ),
                                        Field("config_type", INT8, "3+", default=0, ignorable=True),
                                        Field("documentation", STRING, "3+", nullable="0+", ignorable=True),
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
