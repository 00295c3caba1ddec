"""Fetch v13+ names its topics by id (KIP-516): each id is resolved to the topic's name
before the request is authorized, routed and answered, as Kafka's KafkaApis does with its
metadata cache; the handlers then read ``topic`` at every version, and copy each topic's
``topic_id`` into its response entry. A topic id the broker does not know is answered
UNKNOWN_TOPIC_ID for each of its partitions, without reaching a handler.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from protocol.api_keys import ApiKey
from protocol.codec import Request
from protocol.errors import ErrorCode
from security.gate import Body, copy_with, reply

#: The name of the topic with an id, None when the broker knows no such topic.
TopicNames = Callable[[uuid.UUID], "str | None"]

FIRST_VERSION_BY_ID = 13


def name_fetch_topics(request: Request, topic_name: TopicNames) -> tuple[Request, Callable[[Body], Body] | None]:
    """The request with every topic named, and the amendment that adds the unknown ids'
    errors to its reply (None when every id is known)."""
    version = request.header.api_version
    body = request.body
    known = []
    unknown = []
    for topic in body.topics:
        name = topic_name(topic.topic_id)
        if name is None:
            unknown.append(topic)
        else:
            topic["topic"] = name
            known.append(topic)
    if not unknown:
        return request, None
    api = ApiKey.FETCH
    errors = [reply(api, version, "responses", topic_id=topic.topic_id, partitions=[
        reply(api, version, "responses", "partitions", partition_index=part.partition,
              error_code=int(ErrorCode.UNKNOWN_TOPIC_ID), high_watermark=-1, last_stable_offset=-1,
              log_start_offset=-1, records=b"") for part in topic.partitions]) for topic in unknown]

    def amend(reply_body: Body) -> Body:
        return copy_with(reply_body, responses=[*reply_body["responses"], *errors])
    return Request(request.header, request.message, copy_with(body, topics=known)), amend
