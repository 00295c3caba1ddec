"""DeleteRecords (key 21): move partitions' log start offsets forward (kafka-delete-records)."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, Field, INT16, INT32, INT64, Message, STRING, Struct

DeleteRecordsRequest = Message(
    "DeleteRecordsRequest",
    api_key=ApiKey.DELETE_RECORDS,
    kind="request",
    versions="0-2",
    flexible="2+",
    fields=(
        Field(
            "topics",
            Array(
                Struct(
                    "DeleteRecordsTopic",
                    (
                        Field("name", STRING, "0+"),
                        Field(
                            "partitions",
                            Array(
                                Struct(
                                    "DeleteRecordsPartition",
                                    (
                                        Field("partition_index", INT32, "0+"),
                                        Field("offset", INT64, "0+"),
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
        Field("timeout_ms", INT32, "0+"),
    ),
)

DeleteRecordsResponse = Message(
    "DeleteRecordsResponse",
    api_key=ApiKey.DELETE_RECORDS,
    kind="response",
    versions="0-2",
    flexible="2+",
    fields=(
        Field("throttle_time_ms", INT32, "0+"),
        Field(
            "topics",
            Array(
                Struct(
                    "DeleteRecordsTopicResult",
                    (
                        Field("name", STRING, "0+"),
                        Field(
                            "partitions",
                            Array(
                                Struct(
                                    "DeleteRecordsPartitionResult",
                                    (
                                        Field("partition_index", INT32, "0+"),
                                        Field("low_watermark", INT64, "0+"),
                                        Field("error_code", INT16, "0+"),
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
