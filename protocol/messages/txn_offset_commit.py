"""TxnOffsetCommit (key 28): offsets committed inside a transaction (pending until its marker)."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT64, Message, STRING, Struct

TxnOffsetCommitRequest = Message(
    "TxnOffsetCommitRequest",
    api_key=ApiKey.TXN_OFFSET_COMMIT,
    kind="request",
    versions="0-3",
    flexible="3+",
    fields=(
        Field("transactional_id", STRING, "0+"),
        Field("group_id", STRING, "0+"),
        Field("producer_id", INT64, "0+"),
        Field("producer_epoch", INT16, "0+"),
        Field("generation_id", INT32, "3+", default=-1),
        Field("member_id", STRING, "3+", default=""),
        Field("group_instance_id", STRING, "3+", nullable="3+", default=None),
        Field("topics", Array(Struct(
            "TxnOffsetCommitRequestTopic",
            (
                Field("name", STRING, "0+"),
                Field("partitions", Array(Struct(
                    "TxnOffsetCommitRequestPartition",
                    (
                        Field("partition_index", INT32, "0+"),
                        Field("committed_offset", INT64, "0+"),
                        Field("committed_leader_epoch", INT32, "2+", default=-1, ignorable=True),
                        Field("committed_metadata", STRING, "0+", nullable="0+"),
                    ),
                )), "0+"),
            ),
        )), "0+"),
    ),
)

TxnOffsetCommitResponse = Message(
    "TxnOffsetCommitResponse",
    api_key=ApiKey.TXN_OFFSET_COMMIT,
    kind="response",
    versions="0-3",
    flexible="3+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field("topics", Array(Struct(
            "TxnOffsetCommitResponseTopic",
            (
                Field("name", STRING, "0+"),
                Field("partitions", Array(Struct(
                    "TxnOffsetCommitResponsePartition",
                    (
                        Field("partition_index", INT32, "0+"),
                        Field("error_code", INT16, "0+"),
                    ),
                )), "0+"),
            ),
        )), "0+"),
    ),
)
