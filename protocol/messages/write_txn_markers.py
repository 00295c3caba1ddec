"""WriteTxnMarkers (key 27): a transaction coordinator asks a partition leader to write markers."""

from protocol.api_keys import ApiKey
from protocol.schema import Array, BOOL, Field, INT16, INT32, INT64, Message, STRING, Struct

WriteTxnMarkersRequest = Message(
    "WriteTxnMarkersRequest",
    api_key=ApiKey.WRITE_TXN_MARKERS,
    kind="request",
    versions="0-1",
    flexible="1+",
    fields=(
        Field("markers", Array(Struct(
            "WritableTxnMarker",
            (
                Field("producer_id", INT64, "0+"),
                Field("producer_epoch", INT16, "0+"),
                Field("transaction_result", BOOL, "0+"),
                Field("topics", Array(Struct(
                    "WritableTxnMarkerTopic",
                    (
                        Field("name", STRING, "0+"),
                        Field("partition_indexes", Array(INT32), "0+"),
                    ),
                )), "0+"),
                Field("coordinator_epoch", INT32, "0+"),
            ),
        )), "0+"),
    ),
)

WriteTxnMarkersResponse = Message(
    "WriteTxnMarkersResponse",
    api_key=ApiKey.WRITE_TXN_MARKERS,
    kind="response",
    versions="0-1",
    flexible="1+",
    fields=(
        Field("markers", Array(Struct(
            "WritableTxnMarkerResult",
            (
                Field("producer_id", INT64, "0+"),
                Field("topics", Array(Struct(
                    "WritableTxnMarkerTopicResult",
                    (
                        Field("name", STRING, "0+"),
                        Field("partitions", Array(Struct(
                            "WritableTxnMarkerPartitionResult",
                            (
                                Field("partition_index", INT32, "0+"),
                                Field("error_code", INT16, "0+"),
                            ),
                        )), "0+"),
                    ),
                )), "0+"),
            ),
        )), "0+"),
    ),
)
