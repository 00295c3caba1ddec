"""The __transaction_state record schemas: Kafka's TransactionLogKey and TransactionLogValue."""

from protocol.schema import Array, Field, INT8, INT16, INT32, INT64, Message, STRING, Struct

TransactionLogKey = Message(
    "TransactionLogKey",
    api_key=None,
    kind="data",
    versions="0",
    flexible="none",
    fields=(Field("transactional_id", STRING, "0"),),
)

TransactionLogValue = Message(
    "TransactionLogValue",
    api_key=None,
    kind="data",
    versions="0-1",
    flexible="1+",
    fields=(
        Field("producer_id", INT64, "0+"),
        Field("previous_producer_id", INT64, "1+", default=-1, tag=0, tagged="1+"),
        Field("next_producer_id", INT64, "1+", default=-1, tag=1, tagged="1+"),
        Field("producer_epoch", INT16, "0+"),
        Field("transaction_timeout_ms", INT32, "0+"),
        Field("transaction_status", INT8, "0+"),
        Field("transaction_partitions", Array(Struct(
            "PartitionsSchema",
            (
                Field("topic", STRING, "0+"),
                Field("partition_ids", Array(INT32), "0+"),
            ),
        )), "0+", nullable="0+"),
        Field("transaction_last_update_timestamp_ms", INT64, "0+"),
        Field("transaction_start_timestamp_ms", INT64, "0+"),
        Field("client_transaction_version", INT16, "1+", default=0, tag=2, tagged="1+"),
    ),
)
