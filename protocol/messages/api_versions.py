"""ApiVersions (key 18): which APIs and versions the broker serves."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, BOOL, Field, INT16, INT32, INT64, Message, STRING, Struct

ApiVersionsRequest = Message(
    "ApiVersionsRequest",
    api_key=ApiKey.API_VERSIONS,
    kind="request",
    versions="0-3",
    flexible="3+",
    fields=(
        Field("client_software_name", STRING, "3+", ignorable=True),
        Field("client_software_version", STRING, "3+", ignorable=True),
    ),
)

ApiVersionsResponse = Message(
    "ApiVersionsResponse",
    api_key=ApiKey.API_VERSIONS,
    kind="response",
    versions="0-3",
    flexible="3+",
    fields=(
        Field("error_code", INT16, "0+"),
        Field(
            "api_keys",
            Array(
                Struct(
                    "ApiVersion",
                    (
                        Field("api_key", INT16, "0+"),
                        Field("min_version", INT16, "0+"),
                        Field("max_version", INT16, "0+"),
                    ),
                )
            ),
            "0+",
        ),
        Field("throttle_time_ms", INT32, "1+", ignorable=True),
        Field(
            "supported_features",
            Array(
                Struct(
                    "SupportedFeatureKey",
                    (
                        Field("name", STRING, "3+"),
                        Field("min_version", INT16, "3+"),
                        Field("max_version", INT16, "3+"),
                    ),
                )
            ),
            "3+",
            tag=0,
            tagged="3+",
            ignorable=True,
        ),
        Field("finalized_features_epoch", INT64, "3+", default=-1, tag=1, tagged="3+", ignorable=True),
        Field(
            "finalized_features",
            Array(
                Struct(
                    "FinalizedFeatureKey",
                    (
                        Field("name", STRING, "3+"),
                        Field("max_version_level", INT16, "3+"),
                        Field("min_version_level", INT16, "3+"),
                    ),
                )
            ),
            "3+",
            tag=2,
            tagged="3+",
            ignorable=True,
        ),
        Field("zk_migration_ready", BOOL, "3+", tag=3, tagged="3+", ignorable=True),
    ),
)
