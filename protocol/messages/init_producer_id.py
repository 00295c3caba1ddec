"""InitProducerId (key 22): a producer id and epoch for idempotence."""

from protocol.api_keys import ApiKey
from protocol.schema import Field, INT16, INT32, INT64, Message, STRING

InitProducerIdRequest = Message(
    "InitProducerIdRequest",
    api_key=ApiKey.INIT_PRODUCER_ID,
    kind="request",
    versions="0-4",
    flexible="2+",
    fields=(
        Field("transactional_id", STRING, "0+", nullable="0+"),
        Field("transaction_timeout_ms", INT32, "0+"),
        Field("producer_id", INT64, "3+", default=-1),
        Field("producer_epoch", INT16, "3+", default=-1),
    ),
)

InitProducerIdResponse = Message(
    "InitProducerIdResponse",
    api_key=ApiKey.INIT_PRODUCER_ID,
    kind="response",
    versions="0-4",
    flexible="2+",
    fields=(
        Field("throttle_time_ms", INT32, "0+", ignorable=True),
        Field("error_code", INT16, "0+"),
        Field("producer_id", INT64, "0+", default=-1),
        Field("producer_epoch", INT16, "0+"),
    ),
)
