"""AlterUserScramCredentials (key 51): upsert or delete SCRAM credentials (KIP-554)."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, BYTES, Field, INT16, INT32, INT8, Message, STRING, Struct

AlterUserScramCredentialsRequest = Message(
    "AlterUserScramCredentialsRequest",
    api_key=ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    kind="request",
    versions="0",
    flexible="0+",
    fields=(
        Field("deletions", Array(Struct(
            "ScramCredentialDeletion",
            (
                Field("name", STRING, "0+"),
                Field("mechanism", INT8, "0+"),
            ),
        )), "0+"),
        Field("upsertions", Array(Struct(
            "ScramCredentialUpsertion",
            (
                Field("name", STRING, "0+"),
                Field("mechanism", INT8, "0+"),
                Field("iterations", INT32, "0+"),
                Field("salt", BYTES, "0+"),
                Field("salted_password", BYTES, "0+"),
            ),
        )), "0+"),
    ),
)

AlterUserScramCredentialsResponse = Message(
    "AlterUserScramCredentialsResponse",
    api_key=ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    kind="response",
    versions="0",
    flexible="0+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field("results", Array(Struct(
            "AlterUserScramCredentialsResult",
            (
                Field("user", STRING, "0+"),
                Field("error_code", INT16, "0+"),
                Field("error_message", STRING, "0+", nullable="0+"),
            ),
        )), "0+"),
    ),
)
