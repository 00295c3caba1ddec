"""DescribeUserScramCredentials (key 50): which SCRAM mechanisms each user has (KIP-554)."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT8, Message, STRING, Struct

DescribeUserScramCredentialsRequest = Message(
    "DescribeUserScramCredentialsRequest",
    api_key=ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
    kind="request",
    versions="0",
    flexible="0+",
    fields=(
        Field("users", Array(Struct(
            "UserName",
            (
                Field("name", STRING, "0+"),
            ),
        )), "0+", nullable="0+"),
    ),
)

DescribeUserScramCredentialsResponse = Message(
    "DescribeUserScramCredentialsResponse",
    api_key=ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
    kind="response",
    versions="0",
    flexible="0+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field("error_code", INT16, "0+"),
        Field("error_message", STRING, "0+", nullable="0+"),
        Field("results", Array(Struct(
            "DescribeUserScramCredentialsResult",
            (
                Field("user", STRING, "0+"),
                Field("error_code", INT16, "0+"),
                Field("error_message", STRING, "0+", nullable="0+"),
                Field("credential_infos", Array(Struct(
                    "CredentialInfo",
                    (
                        Field("mechanism", INT8, "0+"),
                        Field("iterations", INT32, "0+"),
                    ),
                )), "0+"),
            ),
        )), "0+"),
    ),
)
