"""Metadata and CreateTopics: the topic catalogue on the wire."""

from __future__ import annotations

import uuid
from typing import Any

from broker.context import BrokerContext
from broker.handlers.configs import described_topic_configs
from broker.topics import Topic, TopicCatalog, validate_topic_name
from protocol.codec import Request
from protocol.errors import ErrorCode
from security.acl import ResourceType
from security.authorizer import all_operations

INT32_MIN = -2147483648


def _partitions(ctx: BrokerContext, topic: Topic) -> list[dict[str, Any]]:
    placement = ctx.placement
    me = ctx.me
    out = []
    for index in range(len(topic.partitions)):
        where = placement.partition(topic.name, index, me)
        out.append({
            "error_code": int(where.error),
            "partition_index": index,
            "leader_id": where.leader_id,
            "leader_epoch": where.leader_epoch,
            "replica_nodes": list(where.replicas),
            "isr_nodes": list(where.isr),
            "offline_replicas": list(where.offline),
        })
    return out


def _described(ctx: BrokerContext, topic: Topic) -> dict[str, Any]:
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": False,
        "partitions": _partitions(ctx, topic),
        "topic_authorized_operations": INT32_MIN,
    }


def _missing(name: str | None, error: ErrorCode, topic_id: Any = None) -> dict[str, Any]:
    return {
        "error_code": int(error),
        "name": name,
        "topic_id": topic_id or uuid.UUID(int=0),
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": INT32_MIN,
    }


def handle_metadata(ctx: BrokerContext, catalog: TopicCatalog, request: Request,
                    authorizer_enabled: bool = False) -> dict[str, Any]:
    """Metadata. With an authorizer, the router's access rule fills in the authorized
    operations; without one every operation is allowed, so the answer names them all, as
    Kafka's ``KafkaApis.handleTopicMetadataRequest`` does through
    ``AuthHelper.authorizedOperations``."""
    version = request.header.api_version
    body = request.body
    requested = body.topics
    topics: list[dict[str, Any]] = []
    if requested is None or (version == 0 and not requested):
        topics = [_described(ctx, t) for t in catalog.topics.values()]
    else:
        auto = ctx.config["auto.create.topics.enable"] and body.get("allow_auto_topic_creation", True)
        for wanted in requested:
            name = wanted.name
            topic_id = wanted.get("topic_id")
            if name is None:
                by_id = catalog.by_id(topic_id) if topic_id is not None else None
                topics.append(_described(ctx, by_id) if by_id else
                              _missing(None, ErrorCode.UNKNOWN_TOPIC_ID, topic_id))
                continue
            topic = catalog.get(name)
            if topic is None and validate_topic_name(name) is not None:
                topics.append(_missing(name, ErrorCode.INVALID_TOPIC_EXCEPTION))
                continue
            if topic is None and auto:
                error, _, topic = catalog.create(name, -1, -1, {})
                if error is not ErrorCode.NONE:
                    topics.append(_missing(name, error))
                    continue
            if topic is None:
                topics.append(_missing(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                topics.append(_described(ctx, topic))
    cluster_operations = INT32_MIN
    if not authorizer_enabled and version >= 8:
        if body.get("include_topic_authorized_operations"):
            every = all_operations(ResourceType.TOPIC)
            for entry in topics:
                if entry["name"] is not None:  # an unknown topic id is answered apart, without them
                    entry["topic_authorized_operations"] = every
        if version <= 10 and body.get("include_cluster_authorized_operations"):
            cluster_operations = all_operations(ResourceType.CLUSTER)
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                    for b in ctx.placement.brokers(ctx.listener, ctx.me)],
        "cluster_id": ctx.cluster_id,
        "controller_id": ctx.placement.controller_id(ctx.me),
        "topics": topics,
        "cluster_authorized_operations": cluster_operations,
    }


def handle_create_topics(ctx: BrokerContext, catalog: TopicCatalog, request: Request) -> dict[str, Any]:
    version = request.header.api_version
    body = request.body
    validate_only = bool(body.get("validate_only", False))
    names = [t.name for t in body.topics]
    results = []
    for wanted in body.topics:
        result: dict[str, Any] = {"name": wanted.name, "num_partitions": -1, "replication_factor": -1,
                                  "configs": [], "error_message": None}
        if names.count(wanted.name) > 1:
            result.update(error_code=int(ErrorCode.INVALID_REQUEST),
                          error_message=f"topic {wanted.name!r} appears more than once in the request")
            results.append(result)
            continue
        if wanted.assignments:
            num_partitions = len(wanted.assignments)
            bad = [a.broker_ids for a in wanted.assignments if list(a.broker_ids) != [ctx.node_id]]
            if bad:
                result.update(error_code=int(ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                              error_message=f"replicas must be exactly [{ctx.node_id}]")
                results.append(result)
                continue
            replication = 1
        else:
            num_partitions, replication = wanted.num_partitions, wanted.replication_factor
        configs = {c.name: c.value for c in wanted.configs}
        error, message, topic = catalog.create(wanted.name, num_partitions, replication, configs, validate_only)
        result.update(error_code=int(error), error_message=message)
        if topic is not None:
            effective = ctx.config["num.partitions"] if num_partitions == -1 else num_partitions
            result.update(
                topic_id=topic.topic_id,
                num_partitions=effective,
                replication_factor=1,
                configs=[
                    {key: entry[key] for key in ("name", "value", "read_only", "config_source", "is_sensitive")}
                    for entry in described_topic_configs(topic)
                ] if version >= 5 else [],
            )
        results.append(result)
    return {"throttle_time_ms": 0, "topics": results}


def handle_delete_topics(ctx: BrokerContext, catalog: TopicCatalog, request: Request) -> dict[str, Any]:
    """Delete topics; the catalogue's listeners hear of each (the coordinator drops their offsets)."""
    version = request.header.api_version
    body = request.body
    if version >= 6:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    responses = []
    for name, topic_id in wanted:
        topic = catalog.get(name) if name is not None else catalog.by_id(topic_id) if topic_id else None
        entry: dict[str, Any] = {"name": name, "topic_id": topic_id or uuid.UUID(int=0), "error_message": None}
        if topic is None:
            error = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            entry.update(error_code=int(error))
        elif topic_id is not None and topic_id != uuid.UUID(int=0) and topic.topic_id != topic_id:
            entry.update(error_code=int(ErrorCode.UNKNOWN_TOPIC_ID))
        else:
            catalog.delete(topic.name)
            entry.update(name=topic.name, topic_id=topic.topic_id, error_code=0)
        responses.append(entry)
    return {"throttle_time_ms": 0, "responses": responses}


def handle_create_partitions(ctx: BrokerContext, catalog: TopicCatalog, request: Request) -> dict[str, Any]:
    """Grow topics; the catalogue's listeners hear of each grown one as it grows.

    The caller answers only once whatever the listeners recorded is durable, and nothing
    awaits between creating the partitions and telling the listeners, so no record can
    reach a new partition before the coordinator has seen it.
    """
    body = request.body
    names = [t.name for t in body.topics]
    results = []
    for wanted in body.topics:
        message: str | None
        if names.count(wanted.name) > 1:
            error, message = ErrorCode.INVALID_REQUEST, f"topic {wanted.name!r} appears more than once"
        elif wanted.assignments is not None and any(
            list(a.broker_ids) != [ctx.node_id] for a in wanted.assignments
        ):
            error, message = ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"replicas must be exactly [{ctx.node_id}]"
        else:
            error, message = catalog.add_partitions(wanted.name, wanted.count, bool(body.validate_only))
        results.append({"name": wanted.name, "error_code": int(error), "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
