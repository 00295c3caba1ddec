"""The operations each API needs: one table, consulted by the router before any handler.

Each entry follows Kafka's KafkaApis (and AuthHelper, ConfigHelper, AclApis): which
operation on which resource, which error a refusal carries, and for batch APIs which
items are refused one by one while the rest are served. ListGroups, Metadata for all
topics, OffsetFetch for all topics and ListTransactions filter silently instead of failing.

``RULES`` has an entry for every API kcoord declares or is expected to serve; an API the
router serves without an entry is refused with a closed connection, and the
authorization matrix test fails for it. ``needs`` lists the operations an entry checks,
for the documentation and the tests; ``check`` applies them to one request.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.fetch import fetching_replica
from security.acl import CLUSTER_NAME, AclOperation, ResourceType
from security.gate import Body, Decision, Drop, Gate, Narrow, Refuse, copy_with, reply

Op = AclOperation
R = ResourceType
E = ErrorCode
INT32_MIN = -2147483648
TOPIC_FAILED = int(E.TOPIC_AUTHORIZATION_FAILED)
GROUP_FAILED = int(E.GROUP_AUTHORIZATION_FAILED)
CLUSTER_FAILED = int(E.CLUSTER_AUTHORIZATION_FAILED)
TXN_FAILED = int(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)

Check = Callable[[int, Body, Gate], Decision]


@dataclass(frozen=True, slots=True)
class Need:
    operation: AclOperation
    resource: ResourceType
    note: str = ""

    def __str__(self) -> str:
        return f"{self.operation.name} on {self.resource.name}" + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True, slots=True)
class Rule:
    needs: tuple[Need, ...]
    check: Check | None  # None: served to anyone (ApiVersions and the SASL exchange)


def _rule(*needs: Need) -> Callable[[Check], Rule]:
    def wrap(check: Check) -> Rule:
        return Rule(tuple(needs), check)
    return wrap


# ---------------------------------------------------------------------- shared shapes


def _split_topics(gate: Gate, op: AclOperation, topics: Iterable[Any], name: Callable[[Any], str]
                  ) -> tuple[list[Any], list[Any]]:
    """(allowed, denied) items, one decision per distinct topic name."""
    decided: dict[str, bool] = {}
    allowed: list[Any] = []
    denied: list[Any] = []
    for item in topics:
        topic = name(item)
        ok = decided.get(topic)
        if ok is None:
            ok = decided[topic] = gate.allowed(op, R.TOPIC, topic)
        (allowed if ok else denied).append(item)
    return allowed, denied


def _append(field: str, extra: list[Any]) -> Callable[[Body], Body]:
    def amend(body: Body) -> Body:
        return copy_with(body, **{field: [*body[field], *extra]})
    return amend


def _prepend(field: str, extra: list[Any]) -> Callable[[Body], Body]:
    def amend(body: Body) -> Body:
        return copy_with(body, **{field: [*extra, *body[field]]})
    return amend


def _partition_errors(api: int, version: int, topics: list[Any], error: int, *, topic_path: str = "topics",
                      partitions: str = "partitions", name: str = "name", index: str = "partition_index",
                      request_partitions: str = "partitions", request_index: str | None = "partition_index",
                      **extra: Any) -> list[Any]:
    """Response topics giving every requested partition of ``topics`` the error ``error``."""
    out = []
    for topic in topics:
        parts = [
            reply(api, version, topic_path, partitions,
                  **{index: p if request_index is None else p[request_index], "error_code": error}, **extra)
            for p in topic[request_partitions]
        ]
        out.append(reply(api, version, topic_path, **{name: topic[name if name in topic else "name"],
                                                       partitions: parts}))
    return out


def _group(op: AclOperation, error_body: Callable[[int, Body], Any]) -> Check:
    """One group, named by ``group_id``: refused as a whole."""
    def check(version: int, body: Body, gate: Gate) -> Decision:
        if gate.allowed(op, R.GROUP, body.group_id):
            return None
        return Refuse(error_body(version, body))
    return check


def _cluster(op: AclOperation, error_body: Callable[[int, Body], Any]) -> Check:
    def check(version: int, body: Body, gate: Gate) -> Decision:
        if gate.allowed(op, R.CLUSTER, CLUSTER_NAME):
            return None
        return Refuse(error_body(version, body))
    return check


# ---------------------------------------------------------------------- Produce, Fetch, ListOffsets


@_rule(Need(Op.WRITE, R.TOPIC), Need(Op.WRITE, R.TRANSACTIONAL_ID, "transactional producers"))
def _produce(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.PRODUCE

    def failing(topics: list[Any], error: int) -> list[Any]:
        return _partition_errors(api, version, topics, error, topic_path="responses",
                                 partitions="partition_responses", index="index", request_partitions="partition_data",
                                 request_index="index", base_offset=-1, log_append_time_ms=-1, log_start_offset=-1)

    transactional_id = body.get("transactional_id")
    if transactional_id is not None and not gate.allowed(Op.WRITE, R.TRANSACTIONAL_ID, transactional_id):
        if body.acks == 0:
            return Drop("Produce with acks=0 refused: TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
        return Refuse(reply(api, version, responses=failing(list(body.topic_data), TXN_FAILED)))
    allowed, denied = _split_topics(gate, Op.WRITE, body.topic_data, lambda t: t.name)
    if not denied:
        return None
    if body.acks == 0:
        # Kafka closes the connection when an acks=0 produce fails: there is no reply to carry the error.
        return Drop("Produce with acks=0 refused: TOPIC_AUTHORIZATION_FAILED")
    errors = failing(denied, TOPIC_FAILED)
    if not allowed:
        return Refuse(reply(api, version, responses=errors))
    return Narrow(copy_with(body, topic_data=allowed), _append("responses", errors))


@_rule(Need(Op.READ, R.TOPIC), Need(Op.CLUSTER_ACTION, R.CLUSTER, "fetches from a replica"))
def _fetch(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.FETCH

    def failing(topics: list[Any], error: int) -> list[Any]:
        out = _partition_errors(api, version, topics, error, topic_path="responses", name="topic",
                                request_index="partition", high_watermark=-1, last_stable_offset=-1,
                                log_start_offset=-1, records=b"")
        for entry, topic in zip(out, topics, strict=True):
            if topic.get("topic_id") is not None:  # v13+ (KIP-516): the client matches entries by id
                entry["topic_id"] = topic.topic_id
        return out

    if fetching_replica(body) >= 0 and not gate.allowed(Op.CLUSTER_ACTION, R.CLUSTER, CLUSTER_NAME):
        return Refuse(reply(api, version, responses=failing(list(body.topics), TOPIC_FAILED)))
    allowed, denied = _split_topics(gate, Op.READ, body.topics, lambda t: t.topic)
    if not denied:
        return None
    errors = failing(denied, TOPIC_FAILED)
    if not allowed:
        return Refuse(reply(api, version, responses=errors))
    return Narrow(copy_with(body, topics=allowed), _append("responses", errors))


@_rule(Need(Op.DESCRIBE, R.TOPIC))
def _list_offsets(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.LIST_OFFSETS
    allowed, denied = _split_topics(gate, Op.DESCRIBE, body.topics, lambda t: t.name)
    if not denied:
        return None
    errors = _partition_errors(api, version, denied, TOPIC_FAILED, timestamp=-1, offset=-1, leader_epoch=-1)
    if not allowed:
        return Refuse(reply(api, version, topics=errors))
    return Narrow(copy_with(body, topics=allowed), _append("topics", errors))


@_rule(Need(Op.DESCRIBE, R.TOPIC), Need(Op.CLUSTER_ACTION, R.CLUSTER, "followers: every topic"))
def _offset_for_leader_epoch(version: int, body: Body, gate: Gate) -> Decision:
    """Kafka's KafkaApis.handleOffsetForLeaderEpochRequest: CLUSTER_ACTION on the cluster (a
    follower) may ask about any topic; anyone else needs DESCRIBE on each topic."""
    api = ApiKey.OFFSET_FOR_LEADER_EPOCH
    if gate.allowed(Op.CLUSTER_ACTION, R.CLUSTER, CLUSTER_NAME, quiet=True):
        return None
    allowed, denied = _split_topics(gate, Op.DESCRIBE, body.topics, lambda t: t.topic)
    if not denied:
        return None
    errors = _partition_errors(api, version, denied, TOPIC_FAILED, name="topic", index="partition",
                               request_index="partition", leader_epoch=-1, end_offset=-1)
    if not allowed:
        return Refuse(reply(api, version, topics=errors))
    return Narrow(copy_with(body, topics=allowed), _append("topics", errors))


@_rule(Need(Op.DELETE, R.TOPIC))
def _delete_records(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.DELETE_RECORDS
    allowed, denied = _split_topics(gate, Op.DELETE, body.topics, lambda t: t.name)
    if not denied:
        return None
    errors = _partition_errors(api, version, denied, TOPIC_FAILED, low_watermark=-1)
    if not allowed:
        return Refuse(reply(api, version, topics=errors))
    return Narrow(copy_with(body, topics=allowed), _append("topics", errors))


# ---------------------------------------------------------------------- Metadata


@_rule(Need(Op.DESCRIBE, R.TOPIC), Need(Op.CREATE, R.TOPIC, "auto-created topics; or CREATE on the cluster"),
       Need(Op.DESCRIBE, R.CLUSTER, "cluster authorized operations"))
def _metadata(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.METADATA
    requested = body.topics
    all_topics = requested is None or (version == 0 and not requested)
    topic_ops = version >= 8 and bool(body.get("include_topic_authorized_operations"))
    cluster_ops = 8 <= version <= 10 and bool(body.get("include_cluster_authorized_operations"))
    denied: list[Any] = []
    keep: set[str] = set()
    keep_ids: set[Any] = set()
    narrowed = body
    if not all_topics:
        auto = gate.auto_create and bool(body.get("allow_auto_topic_creation", True))
        may_create_any = None
        allowed_entries = []
        for wanted in requested:
            name = wanted.name
            topic_id = wanted.get("topic_id")
            by_id = name is None
            if by_id:
                name = gate.topics.topic_name(topic_id) if topic_id is not None else None
                if name is None:  # an unknown id: the handler answers UNKNOWN_TOPIC_ID
                    allowed_entries.append(wanted)
                    continue
            if not gate.allowed(Op.DESCRIBE, R.TOPIC, name):
                denied.append(reply(api, version, "topics", error_code=TOPIC_FAILED, name=None if by_id else name,
                                    topic_id=topic_id if by_id else _zero_uuid(), is_internal=False, partitions=[],
                                    topic_authorized_operations=INT32_MIN))
                continue
            if auto and not by_id and not gate.topics.topic_exists(name):
                if may_create_any is None:
                    may_create_any = gate.allowed(Op.CREATE, R.CLUSTER, CLUSTER_NAME, quiet=True)
                if not may_create_any and not gate.allowed(Op.CREATE, R.TOPIC, name):
                    denied.append(reply(api, version, "topics", error_code=TOPIC_FAILED, name=name,
                                        topic_id=_zero_uuid(), is_internal=False, partitions=[],
                                        topic_authorized_operations=INT32_MIN))
                    continue
            keep.add(name)
            allowed_entries.append(wanted)
        if denied:
            narrowed = copy_with(body, topics=allowed_entries)
        keep_ids = {w.get("topic_id") for w in allowed_entries if w.name is None}
    if not denied and not all_topics and not topic_ops and not cluster_ops:
        return None

    def amend(response: Body) -> Body:
        topics = []
        for topic in response["topics"]:
            name = topic["name"]
            if all_topics:
                if name is None or not gate.allowed(Op.DESCRIBE, R.TOPIC, name, quiet=True):
                    continue
            elif denied and name not in keep and not (name is None or topic.get("topic_id") in keep_ids):
                continue  # v0 with every topic denied: the handler listed them all
            if topic_ops and name is not None and topic["error_code"] == 0:
                topic = copy_with(topic, topic_authorized_operations=gate.operations(R.TOPIC, name))
            topics.append(topic)
        changes: dict[str, Any] = {"topics": topics + denied}
        if cluster_ops:
            changes["cluster_authorized_operations"] = (
                gate.operations(R.CLUSTER, CLUSTER_NAME) if gate.allowed(Op.DESCRIBE, R.CLUSTER, CLUSTER_NAME) else 0)
        return copy_with(response, **changes)

    return Narrow(narrowed, amend)


def _zero_uuid() -> uuid.UUID:
    return uuid.UUID(int=0)


# ---------------------------------------------------------------------- topics


@_rule(Need(Op.CREATE, R.TOPIC, "or CREATE on the cluster"), Need(Op.DESCRIBE_CONFIGS, R.TOPIC, "to see the configs"))
def _create_topics(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.CREATE_TOPICS
    names = [t.name for t in body.topics]
    on_cluster = gate.allowed(Op.CREATE, R.CLUSTER, CLUSTER_NAME, quiet=True)
    allowed: list[Any] = []
    denied: list[Any] = []
    for topic in body.topics:
        # Duplicates go to the handler, which refuses them all with INVALID_REQUEST.
        if names.count(topic.name) > 1 or on_cluster or gate.allowed(Op.CREATE, R.TOPIC, topic.name):
            allowed.append(topic)
        else:
            denied.append(reply(api, version, "topics", name=topic.name, error_code=TOPIC_FAILED,
                                error_message="Authorization failed.", num_partitions=-1, replication_factor=-1,
                                configs=[], topic_config_error_code=TOPIC_FAILED))
    no_configs = {t.name for t in allowed if not gate.allowed(Op.DESCRIBE_CONFIGS, R.TOPIC, t.name, quiet=True)}
    if not denied and not no_configs:
        return None
    if not allowed:
        return Refuse(reply(api, version, topics=denied))

    def amend(response: Body) -> Body:
        topics = []
        for topic in response["topics"]:
            if topic["name"] in no_configs and topic["error_code"] == 0:
                topic = copy_with(topic, configs=[], topic_config_error_code=TOPIC_FAILED)
            topics.append(topic)
        return copy_with(response, topics=topics + denied)

    return Narrow(copy_with(body, topics=allowed), amend)


@_rule(Need(Op.DELETE, R.TOPIC), Need(Op.DESCRIBE, R.TOPIC, "deleting by topic id"))
def _delete_topics(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.DELETE_TOPICS
    by_ids = version >= 6
    entries = list(body.topics) if by_ids else list(body.topic_names)
    allowed: list[Any] = []
    denied: list[Any] = []
    for entry in entries:
        if by_ids:
            name, topic_id = entry.name, entry.topic_id
            if name is None:
                name = gate.topics.topic_name(topic_id)
                if name is None:  # unknown id: the handler answers UNKNOWN_TOPIC_ID
                    allowed.append(entry)
                    continue
                if not gate.allowed(Op.DESCRIBE, R.TOPIC, name):
                    denied.append(reply(api, version, "responses", name=None, topic_id=topic_id,
                                        error_code=TOPIC_FAILED))
                    continue
        else:
            name, topic_id = entry, _zero_uuid()
        if gate.allowed(Op.DELETE, R.TOPIC, name):
            allowed.append(entry)
        else:
            denied.append(reply(api, version, "responses", name=name, topic_id=topic_id, error_code=TOPIC_FAILED))
    if not denied:
        return None
    if not allowed:
        return Refuse(reply(api, version, responses=denied))
    field = "topics" if by_ids else "topic_names"
    return Narrow(copy_with(body, **{field: allowed}), _append("responses", denied))


@_rule(Need(Op.ALTER, R.TOPIC))
def _create_partitions(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.CREATE_PARTITIONS
    names = [t.name for t in body.topics]
    allowed: list[Any] = []
    denied: list[Any] = []
    for topic in body.topics:
        if names.count(topic.name) > 1 or gate.allowed(Op.ALTER, R.TOPIC, topic.name):
            allowed.append(topic)
        else:
            denied.append(reply(api, version, "results", name=topic.name, error_code=TOPIC_FAILED,
                                error_message="The topic authorization is failed."))
    if not denied:
        return None
    if not allowed:
        return Refuse(reply(api, version, results=denied))
    return Narrow(copy_with(body, topics=allowed), _append("results", denied))


# ---------------------------------------------------------------------- configs


_CONFIG_BROKER_TYPES = {4, 8, 16}  # BROKER, BROKER_LOGGER, CLIENT_METRICS
_CONFIG_TOPIC, _CONFIG_GROUP = 2, 32


def _config_resources(op: AclOperation, response_field: str, api: int) -> Check:
    """DescribeConfigs, AlterConfigs, IncrementalAlterConfigs: each resource by its type."""
    def check(version: int, body: Body, gate: Gate) -> Decision:
        allowed: list[Any] = []
        denied: list[Any] = []
        for resource in body.resources:
            rtype, name = resource.resource_type, resource.resource_name
            if rtype in _CONFIG_BROKER_TYPES:
                ok, error = gate.allowed(op, R.CLUSTER, CLUSTER_NAME), CLUSTER_FAILED
            elif rtype == _CONFIG_TOPIC:
                ok, error = gate.allowed(op, R.TOPIC, name), TOPIC_FAILED
            elif rtype == _CONFIG_GROUP:
                ok, error = gate.allowed(op, R.GROUP, name), GROUP_FAILED
            else:  # an unknown type: the handler refuses it
                ok, error = True, 0
            if ok:
                allowed.append(resource)
            else:
                extra: dict[str, Any] = {"configs": []} if response_field == "results" else {}
                denied.append(reply(api, version, response_field, error_code=error,
                                    error_message=ErrorCode(error).name, resource_type=rtype,
                                    resource_name=name, **extra))
        if not denied:
            return None
        if not allowed:
            return Refuse(reply(api, version, **{response_field: denied}))
        return Narrow(copy_with(body, resources=allowed), _append(response_field, denied))
    return check


_describe_configs = Rule(
    (Need(Op.DESCRIBE_CONFIGS, R.TOPIC), Need(Op.DESCRIBE_CONFIGS, R.GROUP),
     Need(Op.DESCRIBE_CONFIGS, R.CLUSTER, "broker resources")),
    _config_resources(Op.DESCRIBE_CONFIGS, "results", ApiKey.DESCRIBE_CONFIGS))
_alter_configs = Rule(
    (Need(Op.ALTER_CONFIGS, R.TOPIC), Need(Op.ALTER_CONFIGS, R.GROUP),
     Need(Op.ALTER_CONFIGS, R.CLUSTER, "broker resources")),
    _config_resources(Op.ALTER_CONFIGS, "responses", ApiKey.ALTER_CONFIGS))
_incremental_alter_configs = Rule(
    (Need(Op.ALTER_CONFIGS, R.TOPIC), Need(Op.ALTER_CONFIGS, R.GROUP),
     Need(Op.ALTER_CONFIGS, R.CLUSTER, "broker resources")),
    _config_resources(Op.ALTER_CONFIGS, "responses", ApiKey.INCREMENTAL_ALTER_CONFIGS))


# ---------------------------------------------------------------------- groups: membership


def _join_error(version: int, body: Body) -> Any:
    return reply(ApiKey.JOIN_GROUP, version, error_code=GROUP_FAILED, generation_id=-1,
                 protocol_name=None if version >= 7 else "", leader="", member_id="", members=[])


def _sync_error(version: int, body: Body) -> Any:
    return reply(ApiKey.SYNC_GROUP, version, error_code=GROUP_FAILED, assignment=b"")


def _error_only(api: int) -> Callable[[int, Body], Any]:
    return lambda version, body: reply(api, version, error_code=GROUP_FAILED)


_join_group = Rule((Need(Op.READ, R.GROUP),), _group(Op.READ, _join_error))
_sync_group = Rule((Need(Op.READ, R.GROUP),), _group(Op.READ, _sync_error))
_heartbeat = Rule((Need(Op.READ, R.GROUP),), _group(Op.READ, _error_only(ApiKey.HEARTBEAT)))
_leave_group = Rule((Need(Op.READ, R.GROUP),), _group(Op.READ, lambda v, b: reply(
    ApiKey.LEAVE_GROUP, v, error_code=GROUP_FAILED, members=[])))


@_rule(Need(Op.READ, R.GROUP), Need(Op.DESCRIBE, R.TOPIC, "subscribed topics"))
def _consumer_group_heartbeat(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.CONSUMER_GROUP_HEARTBEAT
    if not gate.allowed(Op.READ, R.GROUP, body.group_id):
        return Refuse(reply(api, version, error_code=GROUP_FAILED, member_id=None, assignment=None))
    subscribed = body.get("subscribed_topic_names") or ()
    denied = [t for t in dict.fromkeys(subscribed) if not gate.allowed(Op.DESCRIBE, R.TOPIC, t)]
    if denied:
        return Refuse(reply(api, version, error_code=TOPIC_FAILED, member_id=None, assignment=None,
                            error_message=f"The client is not authorized to describe topics: {', '.join(denied)}"))
    return None


# ---------------------------------------------------------------------- groups: offsets


@_rule(Need(Op.READ, R.GROUP), Need(Op.READ, R.TOPIC))
def _offset_commit(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.OFFSET_COMMIT
    if not gate.allowed(Op.READ, R.GROUP, body.group_id):
        return Refuse(reply(api, version, topics=_partition_errors(api, version, list(body.topics), GROUP_FAILED)))
    allowed, denied = _split_topics(gate, Op.READ, body.topics, lambda t: t.name)
    if not denied:
        return None
    errors = _partition_errors(api, version, denied, TOPIC_FAILED)
    if not allowed:
        return Refuse(reply(api, version, topics=errors))
    return Narrow(copy_with(body, topics=allowed), _prepend("topics", errors))


@_rule(Need(Op.WRITE, R.TRANSACTIONAL_ID), Need(Op.READ, R.GROUP), Need(Op.READ, R.TOPIC))
def _txn_offset_commit(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.TXN_OFFSET_COMMIT
    if not gate.allowed(Op.WRITE, R.TRANSACTIONAL_ID, body.transactional_id):
        return Refuse(reply(api, version, topics=_partition_errors(api, version, list(body.topics), TXN_FAILED)))
    if not gate.allowed(Op.READ, R.GROUP, body.group_id):
        return Refuse(reply(api, version, topics=_partition_errors(api, version, list(body.topics), GROUP_FAILED)))
    allowed, denied = _split_topics(gate, Op.READ, body.topics, lambda t: t.name)
    if not denied:
        return None
    errors = _partition_errors(api, version, denied, TOPIC_FAILED)
    if not allowed:
        return Refuse(reply(api, version, topics=errors))
    return Narrow(copy_with(body, topics=allowed), _prepend("topics", errors))


def _fetched_topics(api: int, version: int, path: tuple[str, ...], topics: list[Any], error: int) -> list[Any]:
    return [reply(api, version, *path, name=t.name, partitions=[
        reply(api, version, *path, "partitions", partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
              metadata="", error_code=error) for p in t.partition_indexes]) for t in topics]


def _offset_fetch_group(api: int, version: int, path: tuple[str, ...], topics: Any, gate: Gate
                        ) -> tuple[Any, Callable[[Any], Any]]:
    """One group's topics: (what to ask the coordinator, how to amend its answer)."""
    if topics is None:  # all topics: silently only those the caller may describe
        def keep_described(group: Any) -> Any:
            return copy_with(group, topics=[t for t in group["topics"]
                                            if gate.allowed(Op.DESCRIBE, R.TOPIC, t["name"], quiet=True)])
        return None, keep_described
    allowed, denied = _split_topics(gate, Op.DESCRIBE, topics, lambda t: t.name)
    errors = _fetched_topics(api, version, path, denied, TOPIC_FAILED)

    def add_denied(group: Any) -> Any:
        if group["error_code"] != 0:
            return group
        return copy_with(group, topics=[*group["topics"], *errors])
    return allowed, add_denied


@_rule(Need(Op.DESCRIBE, R.GROUP), Need(Op.DESCRIBE, R.TOPIC))
def _offset_fetch(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.OFFSET_FETCH
    if version < 8:
        if not gate.allowed(Op.DESCRIBE, R.GROUP, body.group_id):
            if version < 2:  # no top-level error yet: every partition carries it
                return Refuse(reply(api, version, topics=_fetched_topics(api, version, ("topics",),
                                                                         list(body.topics or ()), GROUP_FAILED)))
            return Refuse(reply(api, version, error_code=GROUP_FAILED, topics=[]))
        asked, amend_group = _offset_fetch_group(api, version, ("topics",), body.topics, gate)
        return Narrow(copy_with(body, topics=asked), amend_group)
    allowed_groups = []
    denied: dict[str, Any] = {}
    amends: dict[str, Callable[[Any], Any]] = {}
    for group in body.groups:
        if not gate.allowed(Op.DESCRIBE, R.GROUP, group.group_id):
            denied[group.group_id] = reply(api, version, "groups", group_id=group.group_id, topics=[],
                                           error_code=GROUP_FAILED)
            continue
        asked, amends[group.group_id] = _offset_fetch_group(api, version, ("groups", "topics"), group.topics, gate)
        allowed_groups.append(copy_with(group, topics=asked))
    order = [g.group_id for g in body.groups]
    if not allowed_groups:
        return Refuse(reply(api, version, groups=[denied[g] for g in order if g in denied]))

    def amend(response: Body) -> Body:
        answered = {g["group_id"]: amends[g["group_id"]](g) if g["group_id"] in amends else g
                    for g in response["groups"]}
        answered.update(denied)
        return copy_with(response, groups=[answered[g] for g in dict.fromkeys(order) if g in answered])

    return Narrow(copy_with(body, groups=allowed_groups), amend)


@_rule(Need(Op.DELETE, R.GROUP), Need(Op.READ, R.TOPIC))
def _offset_delete(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.OFFSET_DELETE
    if not gate.allowed(Op.DELETE, R.GROUP, body.group_id):
        return Refuse(reply(api, version, error_code=GROUP_FAILED, topics=[]))
    allowed, denied = _split_topics(gate, Op.READ, body.topics, lambda t: t.name)
    if not denied:
        return None
    errors = _partition_errors(api, version, denied, TOPIC_FAILED)
    if not allowed:
        return Refuse(reply(api, version, error_code=0, topics=errors))
    return Narrow(copy_with(body, topics=allowed), _prepend("topics", errors))


# ---------------------------------------------------------------------- groups: admin


def _described_groups(api: int, ids_field: str, denied_item: Callable[[int, str], Any],
                      topics_of: Callable[[Any], set[str]] | None = None) -> Check:
    """DescribeGroups and ConsumerGroupDescribe: per group DESCRIBE, real authorized operations."""
    def check(version: int, body: Body, gate: Gate) -> Decision:
        ids = list(body[ids_field])
        allowed = [g for g in ids if gate.allowed(Op.DESCRIBE, R.GROUP, g)]
        denied = [denied_item(version, g) for g in ids if g not in allowed]
        if not allowed:
            return Refuse(reply(api, version, groups=denied))
        with_ops = bool(body.get("include_authorized_operations", False))

        def amend(response: Body) -> Body:
            groups = []
            for group in response["groups"]:
                if group["error_code"] == 0:
                    if topics_of is not None:
                        hidden = [t for t in sorted(topics_of(group)) if not gate.allowed(Op.DESCRIBE, R.TOPIC, t)]
                        if hidden:
                            group = copy_with(group, error_code=TOPIC_FAILED, members=[], error_message=(
                                "The group has described topic(s) that the client is not authorized to describe."))
                    if with_ops and group["error_code"] == 0:
                        group = copy_with(group, authorized_operations=gate.operations(R.GROUP, group["group_id"]))
                groups.append(group)
            return copy_with(response, groups=groups + denied)

        return Narrow(copy_with(body, **{ids_field: allowed}), amend)
    return check


_describe_groups = Rule((Need(Op.DESCRIBE, R.GROUP),), _described_groups(
    ApiKey.DESCRIBE_GROUPS, "groups",
    lambda v, g: reply(ApiKey.DESCRIBE_GROUPS, v, "groups", error_code=GROUP_FAILED, group_id=g, group_state="",
                       protocol_type="", protocol_data="", members=[], authorized_operations=INT32_MIN)))


def _assigned_topics(group: Any) -> set[str]:
    names: set[str] = set()
    for member in group["members"]:
        for which in ("assignment", "target_assignment"):
            for tp in (member.get(which) or {}).get("topic_partitions", ()):
                names.add(tp["topic_name"])
    return names


_consumer_group_describe = Rule((Need(Op.DESCRIBE, R.GROUP), Need(Op.DESCRIBE, R.TOPIC, "assigned topics")),
                                _described_groups(
    ApiKey.CONSUMER_GROUP_DESCRIBE, "group_ids",
    lambda v, g: reply(ApiKey.CONSUMER_GROUP_DESCRIBE, v, "groups", error_code=GROUP_FAILED, group_id=g,
                       group_state="", assignor_name="", members=[], authorized_operations=INT32_MIN),
    _assigned_topics))


@_rule(Need(Op.DESCRIBE, R.CLUSTER, "all groups; otherwise DESCRIBE on each group"))
def _list_groups(version: int, body: Body, gate: Gate) -> Decision:
    if gate.allowed(Op.DESCRIBE, R.CLUSTER, CLUSTER_NAME, quiet=True):
        return None
    return Narrow(body, lambda response: copy_with(response, groups=[
        g for g in response["groups"] if gate.allowed(Op.DESCRIBE, R.GROUP, g["group_id"], quiet=True)]))


@_rule(Need(Op.DELETE, R.GROUP))
def _delete_groups(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.DELETE_GROUPS
    names = list(body.groups_names)
    allowed = [g for g in names if gate.allowed(Op.DELETE, R.GROUP, g)]
    if len(allowed) == len(names):
        return None
    denied = [reply(api, version, "results", group_id=g, error_code=GROUP_FAILED) for g in names if g not in allowed]
    if not allowed:
        return Refuse(reply(api, version, results=denied))
    return Narrow(copy_with(body, groups_names=allowed), _append("results", denied))


# ---------------------------------------------------------------------- FindCoordinator


_KEY_GROUP, _KEY_TRANSACTION = 0, 1


def _coordinator_key_allowed(gate: Gate, key_type: int, key: str) -> int:
    """0 when allowed, else the error code."""
    if key_type == _KEY_GROUP and not gate.allowed(Op.DESCRIBE, R.GROUP, key):
        return GROUP_FAILED
    if key_type == _KEY_TRANSACTION and not gate.allowed(Op.DESCRIBE, R.TRANSACTIONAL_ID, key):
        return TXN_FAILED
    return 0


@_rule(Need(Op.DESCRIBE, R.GROUP), Need(Op.DESCRIBE, R.TRANSACTIONAL_ID, "transaction coordinators"))
def _find_coordinator(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.FIND_COORDINATOR
    key_type = body.get("key_type", _KEY_GROUP)
    if version < 4:
        error = _coordinator_key_allowed(gate, key_type, body.key)
        if not error:
            return None
        return Refuse(reply(api, version, error_code=error, error_message=ErrorCode(error).name, node_id=-1,
                            host="", port=-1))
    allowed: list[Any] = []
    denied: list[Any] = []
    for key in body.coordinator_keys:
        error = _coordinator_key_allowed(gate, key_type, key)
        if error:
            denied.append(reply(api, version, "coordinators", key=key, node_id=-1, host="", port=-1,
                                error_code=error, error_message=ErrorCode(error).name))
        else:
            allowed.append(key)
    if not denied:
        return None
    if not allowed:
        return Refuse(reply(api, version, coordinators=denied))
    return Narrow(copy_with(body, coordinator_keys=allowed), _append("coordinators", denied))


# ---------------------------------------------------------------------- producers and transactions


@_rule(Need(Op.IDEMPOTENT_WRITE, R.CLUSTER, "or WRITE on any topic"),
       Need(Op.WRITE, R.TRANSACTIONAL_ID, "transactional producers"))
def _init_producer_id(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.INIT_PRODUCER_ID
    transactional_id = body.transactional_id
    if transactional_id is not None:
        if gate.allowed(Op.WRITE, R.TRANSACTIONAL_ID, transactional_id):
            return None
        return Refuse(reply(api, version, error_code=TXN_FAILED, producer_id=-1, producer_epoch=-1))
    if gate.allowed(Op.IDEMPOTENT_WRITE, R.CLUSTER, CLUSTER_NAME, quiet=True) or gate.allowed_on_any(Op.WRITE, R.TOPIC):
        return None
    gate.denied.append((Op.IDEMPOTENT_WRITE, R.CLUSTER, CLUSTER_NAME))
    return Refuse(reply(api, version, error_code=CLUSTER_FAILED, producer_id=-1, producer_epoch=-1))


@_rule(Need(Op.WRITE, R.TRANSACTIONAL_ID), Need(Op.WRITE, R.TOPIC))
def _add_partitions_to_txn(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.ADD_PARTITIONS_TO_TXN
    if version >= 4:  # broker to broker only
        if gate.allowed(Op.CLUSTER_ACTION, R.CLUSTER, CLUSTER_NAME):
            return None
        return Refuse(reply(api, version, error_code=CLUSTER_FAILED, results_by_transaction=[]))
    topics = list(body.v3_and_below_topics)

    def results(error_of: Callable[[str], int]) -> list[Any]:
        path = ("results_by_topic_v3_and_below",)
        return [reply(api, version, *path, name=t.name, results_by_partition=[
            reply(api, version, *path, "results_by_partition", partition_index=p, partition_error_code=error_of(t.name))
            for p in t.partitions]) for t in topics]

    if not gate.allowed(Op.WRITE, R.TRANSACTIONAL_ID, body.v3_and_below_transactional_id):
        return Refuse(reply(api, version, results_by_topic_v3_and_below=results(lambda _: TXN_FAILED)))
    _, denied = _split_topics(gate, Op.WRITE, topics, lambda t: t.name)
    if not denied:
        return None
    # Any refused partition fails the whole transaction: unknown topics say so, the others
    # were not attempted.
    refused = {t.name for t in denied}
    not_attempted = int(E.OPERATION_NOT_ATTEMPTED)
    unknown = int(E.UNKNOWN_TOPIC_OR_PARTITION)
    return Refuse(reply(api, version, results_by_topic_v3_and_below=results(
        lambda name: TOPIC_FAILED if name in refused
        else not_attempted if gate.topics.topic_exists(name) else unknown)))


@_rule(Need(Op.WRITE, R.TRANSACTIONAL_ID), Need(Op.READ, R.GROUP))
def _add_offsets_to_txn(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.ADD_OFFSETS_TO_TXN
    if not gate.allowed(Op.WRITE, R.TRANSACTIONAL_ID, body.transactional_id):
        return Refuse(reply(api, version, error_code=TXN_FAILED))
    if not gate.allowed(Op.READ, R.GROUP, body.group_id):
        return Refuse(reply(api, version, error_code=GROUP_FAILED))
    return None


@_rule(Need(Op.WRITE, R.TRANSACTIONAL_ID))
def _end_txn(version: int, body: Body, gate: Gate) -> Decision:
    if gate.allowed(Op.WRITE, R.TRANSACTIONAL_ID, body.transactional_id):
        return None
    return Refuse(reply(ApiKey.END_TXN, version, error_code=TXN_FAILED, producer_id=-1, producer_epoch=-1))


@_rule(Need(Op.DESCRIBE, R.TRANSACTIONAL_ID), Need(Op.DESCRIBE, R.TOPIC, "partitions shown"))
def _describe_transactions(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.DESCRIBE_TRANSACTIONS
    ids = list(body.transactional_ids)
    allowed = [t for t in ids if gate.allowed(Op.DESCRIBE, R.TRANSACTIONAL_ID, t)]
    denied = [reply(api, version, "transaction_states", error_code=TXN_FAILED, transactional_id=t,
                    transaction_state="", transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                    producer_epoch=-1, topics=[]) for t in ids if t not in allowed]
    if not allowed:
        return Refuse(reply(api, version, transaction_states=denied))

    def amend(response: Body) -> Body:
        states = [copy_with(s, topics=[t for t in s["topics"] if gate.allowed(Op.DESCRIBE, R.TOPIC, t["topic"])])
                  for s in response["transaction_states"]]
        return copy_with(response, transaction_states=states + denied)

    return Narrow(copy_with(body, transactional_ids=allowed), amend)


@_rule(Need(Op.DESCRIBE, R.TRANSACTIONAL_ID, "each one listed"))
def _list_transactions(version: int, body: Body, gate: Gate) -> Decision:
    return Narrow(body, lambda response: copy_with(response, transaction_states=[
        s for s in response["transaction_states"]
        if gate.allowed(Op.DESCRIBE, R.TRANSACTIONAL_ID, s["transactional_id"], quiet=True)]))


@_rule(Need(Op.CLUSTER_ACTION, R.CLUSTER, "a transaction coordinator's markers"))
def _write_txn_markers(version: int, body: Body, gate: Gate) -> Decision:
    if gate.allowed(Op.CLUSTER_ACTION, R.CLUSTER, CLUSTER_NAME):
        return None
    api = ApiKey.WRITE_TXN_MARKERS
    return Refuse(reply(api, version, markers=[
        reply(api, version, "markers", producer_id=m.producer_id, topics=[
            reply(api, version, "markers", "topics", name=t.name, partitions=[
                reply(api, version, "markers", "topics", "partitions", partition_index=p, error_code=CLUSTER_FAILED)
                for p in t.partition_indexes])
            for t in m.topics])
        for m in body.markers]))


@_rule(Need(Op.READ, R.TOPIC))
def _describe_producers(version: int, body: Body, gate: Gate) -> Decision:
    api = ApiKey.DESCRIBE_PRODUCERS
    allowed, denied = _split_topics(gate, Op.READ, body.topics, lambda t: t.name)
    if not denied:
        return None
    errors = [reply(api, version, "topics", name=t.name, partitions=[
        reply(api, version, "topics", "partitions", partition_index=p, error_code=TOPIC_FAILED,
              error_message=None, active_producers=[]) for p in t.partition_indexes]) for t in denied]
    if not allowed:
        return Refuse(reply(api, version, topics=errors))
    return Narrow(copy_with(body, topics=allowed), _append("topics", errors))


# ---------------------------------------------------------------------- cluster: ACLs, users, cluster


_describe_acls = Rule((Need(Op.DESCRIBE, R.CLUSTER),), _cluster(Op.DESCRIBE, lambda v, b: reply(
    ApiKey.DESCRIBE_ACLS, v, error_code=CLUSTER_FAILED, error_message="Cluster authorization failed.",
    resources=[])))
_create_acls = Rule((Need(Op.ALTER, R.CLUSTER),), _cluster(Op.ALTER, lambda v, b: reply(
    ApiKey.CREATE_ACLS, v, results=[
        reply(ApiKey.CREATE_ACLS, v, "results", error_code=CLUSTER_FAILED,
              error_message="Cluster authorization failed.") for _ in b.creations])))
_delete_acls = Rule((Need(Op.ALTER, R.CLUSTER),), _cluster(Op.ALTER, lambda v, b: reply(
    ApiKey.DELETE_ACLS, v, filter_results=[
        reply(ApiKey.DELETE_ACLS, v, "filter_results", error_code=CLUSTER_FAILED,
              error_message="Cluster authorization failed.", matching_acls=[]) for _ in b.filters])))
_describe_user_scram_credentials = Rule((Need(Op.DESCRIBE, R.CLUSTER),), _cluster(Op.DESCRIBE, lambda v, b: reply(
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, v, error_code=CLUSTER_FAILED,
    error_message="Cluster authorization failed.", results=[])))
_alter_user_scram_credentials = Rule((Need(Op.ALTER, R.CLUSTER),), _cluster(Op.ALTER, lambda v, b: reply(
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS, v, results=[
        reply(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, v, "results", user=user, error_code=CLUSTER_FAILED,
              error_message="Cluster authorization failed.")
        for user in dict.fromkeys([d.name for d in b.deletions] + [u.name for u in b.upsertions])])))


@_rule(Need(Op.DESCRIBE, R.CLUSTER, "cluster authorized operations"))
def _describe_cluster(version: int, body: Body, gate: Gate) -> Decision:
    if not body.include_cluster_authorized_operations:
        return None
    allowed = gate.allowed(Op.DESCRIBE, R.CLUSTER, CLUSTER_NAME)
    return Narrow(body, lambda response: copy_with(
        response, cluster_authorized_operations=gate.operations(R.CLUSTER, CLUSTER_NAME) if allowed else 0))


#: Served to anyone, before and after authentication.
OPEN = Rule((), None)

#: API -> what it needs. Every API kcoord serves must be here.
RULES: dict[int, Rule] = {
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.METADATA: _metadata,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.JOIN_GROUP: _join_group,
    ApiKey.HEARTBEAT: _heartbeat,
    ApiKey.LEAVE_GROUP: _leave_group,
    ApiKey.SYNC_GROUP: _sync_group,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.SASL_HANDSHAKE: OPEN,
    ApiKey.API_VERSIONS: OPEN,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.DELETE_RECORDS: _delete_records,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: _add_offsets_to_txn,
    ApiKey.END_TXN: _end_txn,
    ApiKey.WRITE_TXN_MARKERS: _write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.DESCRIBE_ACLS: _describe_acls,
    ApiKey.CREATE_ACLS: _create_acls,
    ApiKey.DELETE_ACLS: _delete_acls,
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
    ApiKey.ALTER_CONFIGS: _alter_configs,
    ApiKey.SASL_AUTHENTICATE: OPEN,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.DELETE_GROUPS: _delete_groups,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _incremental_alter_configs,
    ApiKey.OFFSET_DELETE: _offset_delete,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _alter_user_scram_credentials,
    ApiKey.DESCRIBE_CLUSTER: _describe_cluster,
    ApiKey.DESCRIBE_PRODUCERS: _describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: _describe_transactions,
    ApiKey.LIST_TRANSACTIONS: _list_transactions,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: _consumer_group_describe,
}


def reference_markdown() -> str:
    """The table of docs/security.md: each API and what it needs (kept in step by a test)."""
    lines = ["| API | key | needs |", "|---|---|---|"]
    for key in sorted(RULES):
        rule = RULES[key]
        needs = "; ".join(str(n) for n in rule.needs) if rule.check is not None else "nothing (served to everyone)"
        lines.append(f"| {ApiKey(key).name.title().replace('_', '')} | {int(key)} | {needs} |")
    return "\n".join(lines) + "\n"
