"""Which requests this node serves, and Kafka's errors for the rest. Sans-IO.

A cluster node serves a partition only while it leads it (and its lease holds), and a
group only while it leads the group's ``__consumer_offsets`` partition. Everything else is
answered with the error Kafka's brokers give, so the clients' own retry logic finds the
right node:

- Produce, Fetch, ListOffsets, OffsetForLeaderEpoch and DeleteRecords for a partition led
  elsewhere get NOT_LEADER_OR_FOLLOWER; Produce v10+ and Fetch v16+ also name the current leader, its
  epoch and its address (KIP-951's ``CurrentLeader`` and ``NodeEndpoints``), as Kafka's
  KafkaApis does (Fetch v12-v15 has the field, but Kafka leaves it unset). An acks=0
  Produce has no reply to carry the error, so the connection is closed, as KafkaApis does.
- A Fetch, ListOffsets or OffsetForLeaderEpoch whose ``current_leader_epoch`` is older
  than the leader's gets FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH (KIP-320),
  as Kafka's Partition checks it.
- Group requests for a group coordinated elsewhere get NOT_COORDINATOR: the client looks
  the coordinator up again with FindCoordinator.
- So do the transaction APIs (InitProducerId with a transactional id, AddPartitionsToTxn,
  AddOffsetsToTxn, EndTxn, DescribeTransactions) for a transactional id whose
  ``__transaction_state`` partition this node does not lead (Kafka's TransactionCoordinator
  answers NOT_COORDINATOR for an id not in its loaded partitions). ListTransactions needs
  no rule: a node only holds the ids of the partitions it leads.

A request about several partitions or groups is narrowed to the ones served here, and the
reply amended with the errors for the others (``security.gate``'s Refuse and Narrow, the
same shapes the authorization rules use). A partition this node has never heard of goes
through unchanged, so the handler answers UNKNOWN_TOPIC_OR_PARTITION as it always did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.fetch import fetching_replica
from security.gate import Body, Decision, Drop, Narrow, Refuse, copy_with, reply

NOT_LEADER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
NOT_COORDINATOR = int(ErrorCode.NOT_COORDINATOR)
FENCED = int(ErrorCode.FENCED_LEADER_EPOCH)
UNKNOWN_EPOCH = int(ErrorCode.UNKNOWN_LEADER_EPOCH)


class Directory(Protocol):
    """What the routing rules ask of the node's view of the cluster."""

    def known(self, topic: str, partition: int) -> bool:
        """The partition exists in the cluster."""

    def serving(self, topic: str, partition: int) -> bool:
        """This node leads the partition and may act as leader now."""

    def current_leader(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader id, leader epoch) as far as this node knows; (-1, -1) when none."""

    def coordinates(self, group_id: str) -> bool:
        """This node leads the group's coordinator partition and may act on it now."""

    def coordinates_transaction(self, transactional_id: str) -> bool:
        """This node leads the transactional id's ``__transaction_state`` partition and may act on it now."""

    def endpoint(self, node_id: int) -> tuple[str, int, str | None] | None:
        """A node's host, port and rack on the listener of this request."""


Rule = Callable[[int, Body, Directory], Decision]


def _epoch_error(d: Directory, topic: str, partition: int, asked: int) -> int:
    """KIP-320's check of the epoch a client believes in (-1: it does not say)."""
    if asked < 0:
        return 0
    _, epoch = d.current_leader(topic, partition)
    if asked < epoch:
        return FENCED
    if asked > epoch:
        return UNKNOWN_EPOCH
    return 0


def _merge(field: str, partitions: str, name: str, extra: list[Any]) -> Callable[[Body], Body]:
    """Amend a reply: the refused partitions join their topic's entry (or a new one). Topics
    are matched by ``name``, which may be ``topic_id`` (a reply decoded from a long poll's
    frame at Fetch v13+ has no names)."""
    def amend(body: Body) -> Body:
        topics = [copy_with(t) for t in body[field]]
        by_name = {t.get(name): t for t in topics}
        for topic in extra:
            existing = by_name.get(topic.get(name))
            if existing is not None:
                existing[partitions] = [*existing[partitions], *topic[partitions]]
            else:
                topics.append(topic)
                by_name[topic.get(name)] = topic
        return copy_with(body, **{field: topics})
    return amend


def _split(d: Directory, topics: Any, name: str, partitions: str, index: str,
           check: Callable[[str, Any], int]) -> tuple[list[Any], list[tuple[str, list[tuple[Any, int]]]]]:
    """(the request's topics narrowed to what is served, [(topic, [(partition, error)])] refused)."""
    kept: list[Any] = []
    refused: list[tuple[str, list[tuple[Any, int]]]] = []
    for topic in topics:
        keep: list[Any] = []
        bad: list[tuple[Any, int]] = []
        for part in topic[partitions]:
            error = check(topic[name], part)
            (bad.append((part, error)) if error else keep.append(part))
        if keep:
            kept.append(copy_with(topic, **{partitions: keep}) if bad else topic)
        if bad:
            refused.append((topic[name], bad))
    return kept, refused


def _leader_check(d: Directory, index: str, epoch_field: str | None) -> Callable[[str, Any], int]:
    def check(topic: str, part: Any) -> int:
        partition = part[index]
        if not d.known(topic, partition):
            return 0
        if not d.serving(topic, partition):
            return NOT_LEADER
        if epoch_field is not None:
            return _epoch_error(d, topic, partition, part.get(epoch_field, -1))
        return 0
    return check


def _produce(version: int, body: Body, d: Directory) -> Decision:
    api = ApiKey.PRODUCE
    kept, refused = _split(d, body.topic_data, "name", "partition_data", "index",
                           _leader_check(d, "index", None))
    if not refused:
        return None
    if body.acks == 0:
        return Drop("Produce with acks=0 to a partition this node does not lead: NOT_LEADER_OR_FOLLOWER")
    leaders: set[int] = set()
    errors = []
    for topic, parts in refused:
        entries = []
        for part, error in parts:
            entry = reply(api, version, "responses", "partition_responses", index=part.index, error_code=error,
                          base_offset=-1, log_append_time_ms=-1, log_start_offset=-1)
            if version >= 10:
                leader, epoch = d.current_leader(topic, part.index)
                entry["current_leader"] = {"leader_id": leader, "leader_epoch": epoch}
                if leader >= 0:
                    leaders.add(leader)
            entries.append(entry)
        errors.append(reply(api, version, "responses", name=topic, partition_responses=entries))
    endpoints = _endpoints(d, leaders) if version >= 10 else None
    if not kept:
        answer = reply(api, version, responses=errors, throttle_time_ms=0)
        if endpoints is not None:
            answer["node_endpoints"] = endpoints
        return Refuse(answer)
    merge = _merge("responses", "partition_responses", "name", errors)

    def amend(body: Body) -> Body:
        out = merge(body)
        if endpoints:
            out["node_endpoints"] = [*body.get("node_endpoints", []), *endpoints]
        return out
    return Narrow(copy_with(body, topic_data=kept), amend)


def _endpoints(d: Directory, nodes: set[int]) -> list[dict[str, Any]]:
    out = []
    for node in sorted(nodes):
        found = d.endpoint(node)
        if found is not None:
            host, port, rack = found
            out.append({"node_id": node, "host": host, "port": port, "rack": rack})
    return out


def _fetch(version: int, body: Body, d: Directory) -> Decision:
    if fetching_replica(body) >= 0:
        return None  # a replica's fetch: the cluster's own handler answers it
    api = ApiKey.FETCH
    kept, refused = _split(d, body.topics, "topic", "partitions", "partition",
                           _leader_check(d, "partition", "current_leader_epoch" if version >= 9 else None))
    if not refused:
        return None
    leaders: set[int] = set()
    ids = {t.topic: t.get("topic_id") for t in body.topics}  # v13+ (KIP-516): entries are matched by id
    errors = []
    for topic, parts in refused:
        entries = []
        for part, error in parts:
            entry = reply(api, version, "responses", "partitions", partition_index=part.partition, error_code=error,
                          high_watermark=-1, last_stable_offset=-1, log_start_offset=-1, records=b"")
            # Only from v16, where node_endpoints says where that leader is (Kafka's
            # KafkaApis.handleFetchRequest): a v12-v15 client handed a leader it has no address
            # for may try to send to it (kafka-python 3.0.12 raises UnknownBrokerIdError from poll).
            if version >= 16 and error in (NOT_LEADER, FENCED):
                leader, epoch = d.current_leader(topic, part.partition)
                entry["current_leader"] = {"leader_id": leader, "leader_epoch": epoch}
                if leader >= 0:
                    leaders.add(leader)
            entries.append(entry)
        errors.append(reply(api, version, "responses", topic=topic, partitions=entries,
                            **({"topic_id": ids[topic]} if ids.get(topic) is not None else {})))
    # v16+ (KIP-951): where the leaders named in current_leader are.
    endpoints = _endpoints(d, leaders) if version >= 16 else []
    if not kept:
        answer = reply(api, version, throttle_time_ms=0, error_code=0, session_id=0, responses=errors)
        if endpoints:
            answer["node_endpoints"] = endpoints
        return Refuse(answer)
    merge = _merge("responses", "partitions", "topic_id" if version >= 13 else "topic", errors)

    def amend(reply_body: Body) -> Body:
        out = merge(reply_body)
        if endpoints:
            out["node_endpoints"] = [*reply_body.get("node_endpoints", []), *endpoints]
        return out
    return Narrow(copy_with(body, topics=kept), amend)


def _per_partition(api: ApiKey, topic_field: str, partition_field: str, epoch_from: int | None,
                   **unanswered: int) -> Rule:
    """A request about ``topics[].partitions[]`` only a partition's leader answers (ListOffsets,
    OffsetForLeaderEpoch, DeleteRecords): narrowed to the partitions led here, the others
    answered with their error and ``unanswered``'s values; from version ``epoch_from`` the
    client's ``current_leader_epoch`` is checked too (KIP-320)."""
    def rule(version: int, body: Body, d: Directory) -> Decision:
        epoch_field = "current_leader_epoch" if epoch_from is not None and version >= epoch_from else None
        kept, refused = _split(d, body.topics, topic_field, "partitions", partition_field,
                               _leader_check(d, partition_field, epoch_field))
        if not refused:
            return None
        errors = [reply(api, version, "topics", **{topic_field: topic}, partitions=[
            reply(api, version, "topics", "partitions", **{partition_field: part[partition_field]},
                  error_code=error, **unanswered) for part, error in parts]) for topic, parts in refused]
        if not kept:
            return Refuse(reply(api, version, throttle_time_ms=0, topics=errors))
        return Narrow(copy_with(body, topics=kept), _merge("topics", "partitions", topic_field, errors))
    return rule


# ---------------------------------------------------------------------- groups


def _one_group(make: Callable[[int, Body], Any]) -> Rule:
    def rule(version: int, body: Body, d: Directory) -> Decision:
        if d.coordinates(body.group_id):
            return None
        return Refuse(make(version, body))
    return rule


def _simple(api: ApiKey, **values: Any) -> Callable[[int, Body], Any]:
    return lambda version, body: reply(api, version, error_code=NOT_COORDINATOR, **values)


def _join_refused(version: int, body: Body) -> Any:
    return reply(ApiKey.JOIN_GROUP, version, error_code=NOT_COORDINATOR, generation_id=-1, leader="",
                 member_id=body.member_id, members=[], protocol_name=None if version >= 7 else "")


def _partitions_refused(api: ApiKey) -> Callable[[int, Body], Any]:
    def make(version: int, body: Body) -> Any:
        return reply(api, version, topics=[
            reply(api, version, "topics", name=t.name, partitions=[
                reply(api, version, "topics", "partitions", partition_index=p.partition_index,
                      error_code=NOT_COORDINATOR) for p in t.partitions]) for t in body.topics])
    return make


def _offset_fetch(version: int, body: Body, d: Directory) -> Decision:
    api = ApiKey.OFFSET_FETCH
    if version < 8:
        if d.coordinates(body.group_id):
            return None
        if version >= 2:
            return Refuse(reply(api, version, error_code=NOT_COORDINATOR, topics=[]))
        return Refuse(reply(api, version, topics=[
            reply(api, version, "topics", name=t.name, partitions=[
                reply(api, version, "topics", "partitions", partition_index=p, committed_offset=-1, metadata="",
                      error_code=NOT_COORDINATOR) for p in t.partition_indexes]) for t in body.topics or []]))
    kept = [g for g in body.groups if d.coordinates(g.group_id)]
    if len(kept) == len(body.groups):
        return None
    errors = [reply(api, version, "groups", group_id=g.group_id, topics=[], error_code=NOT_COORDINATOR)
              for g in body.groups if not d.coordinates(g.group_id)]
    if not kept:
        return Refuse(reply(api, version, groups=errors))
    return Narrow(copy_with(body, groups=kept), lambda b: copy_with(b, groups=[*b["groups"], *errors]))


def _groups_list(api: ApiKey, field: str, answer_field: str, entry: Callable[[int, str], Any]) -> Rule:
    """A request naming several groups (``field``): narrowed to the ones coordinated here."""
    def rule(version: int, body: Body, d: Directory) -> Decision:
        names = list(body[field])
        kept = [g for g in names if d.coordinates(g)]
        if len(kept) == len(names):
            return None
        errors = [entry(version, g) for g in names if not d.coordinates(g)]
        if not kept:
            return Refuse(reply(api, version, **{answer_field: errors}))
        return Narrow(copy_with(body, **{field: kept}),
                      lambda b: copy_with(b, **{answer_field: [*b[answer_field], *errors]}))
    return rule


# ---------------------------------------------------------------------- transactions


def _one_transaction(field: str, make: Callable[[int, Body], Any]) -> Rule:
    def rule(version: int, body: Body, d: Directory) -> Decision:
        transactional_id = body[field]
        if transactional_id is None or d.coordinates_transaction(transactional_id):
            return None  # an idempotent producer's InitProducerId: any node answers it
        return Refuse(make(version, body))
    return rule


def _add_partitions_refused(version: int, body: Body) -> Any:
    api = ApiKey.ADD_PARTITIONS_TO_TXN
    path = ("results_by_topic_v3_and_below",)
    return reply(api, version, throttle_time_ms=0, results_by_topic_v3_and_below=[
        reply(api, version, *path, name=t.name, results_by_partition=[
            reply(api, version, *path, "results_by_partition", partition_index=p,
                  partition_error_code=NOT_COORDINATOR) for p in t.partitions])
        for t in body.v3_and_below_topics])


def _add_partitions_to_txn(version: int, body: Body, d: Directory) -> Decision:
    if version >= 4:
        return None  # broker to broker (KIP-890 verification): not sent to a kcoord cluster
    return _one_transaction("v3_and_below_transactional_id", _add_partitions_refused)(version, body, d)


def _describe_transactions(version: int, body: Body, d: Directory) -> Decision:
    api = ApiKey.DESCRIBE_TRANSACTIONS
    ids = list(body.transactional_ids)
    kept = [t for t in ids if d.coordinates_transaction(t)]
    if len(kept) == len(ids):
        return None
    errors = [reply(api, version, "transaction_states", error_code=NOT_COORDINATOR, transactional_id=t,
                    transaction_state="", transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                    producer_epoch=-1, topics=[]) for t in ids if t not in kept]
    if not kept:
        return Refuse(reply(api, version, throttle_time_ms=0, transaction_states=errors))
    return Narrow(copy_with(body, transactional_ids=kept),
                  lambda b: copy_with(b, transaction_states=[*b["transaction_states"], *errors]))


RULES: dict[int, Rule] = {
    ApiKey.INIT_PRODUCER_ID: _one_transaction("transactional_id", _simple(
        ApiKey.INIT_PRODUCER_ID, throttle_time_ms=0, producer_id=-1, producer_epoch=-1)),
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: _one_transaction("transactional_id", _simple(ApiKey.ADD_OFFSETS_TO_TXN,
                                                                            throttle_time_ms=0)),
    ApiKey.END_TXN: _one_transaction("transactional_id", _simple(ApiKey.END_TXN, throttle_time_ms=0)),
    ApiKey.DESCRIBE_TRANSACTIONS: _describe_transactions,
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _per_partition(ApiKey.LIST_OFFSETS, "name", "partition_index", 4,
                                        timestamp=-1, offset=-1, leader_epoch=-1),
    ApiKey.DELETE_RECORDS: _per_partition(ApiKey.DELETE_RECORDS, "name", "partition_index", None,
                                          low_watermark=-1),
    # Kafka's ReplicaManager.lastOffsetForLeaderEpoch: only the leader answers (a consumer
    # validating its position after a leader change asks the new one).
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _per_partition(ApiKey.OFFSET_FOR_LEADER_EPOCH, "topic", "partition", 2,
                                                   leader_epoch=-1, end_offset=-1),
    ApiKey.JOIN_GROUP: _one_group(_join_refused),
    ApiKey.SYNC_GROUP: _one_group(_simple(ApiKey.SYNC_GROUP, assignment=b"")),
    ApiKey.HEARTBEAT: _one_group(_simple(ApiKey.HEARTBEAT)),
    ApiKey.LEAVE_GROUP: _one_group(_simple(ApiKey.LEAVE_GROUP, members=[])),
    ApiKey.OFFSET_COMMIT: _one_group(_partitions_refused(ApiKey.OFFSET_COMMIT)),
    ApiKey.TXN_OFFSET_COMMIT: _one_group(_partitions_refused(ApiKey.TXN_OFFSET_COMMIT)),
    ApiKey.OFFSET_DELETE: _one_group(_simple(ApiKey.OFFSET_DELETE, topics=[])),
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _one_group(_simple(
        ApiKey.CONSUMER_GROUP_HEARTBEAT, error_message="This node is not the group's coordinator.",
        member_epoch=-1)),
    ApiKey.DESCRIBE_GROUPS: _groups_list(ApiKey.DESCRIBE_GROUPS, "groups", "groups", lambda v, g: reply(
        ApiKey.DESCRIBE_GROUPS, v, "groups", error_code=NOT_COORDINATOR, group_id=g, group_state="",
        protocol_type="", protocol_data="", members=[])),
    ApiKey.DELETE_GROUPS: _groups_list(ApiKey.DELETE_GROUPS, "groups_names", "results", lambda v, g: reply(
        ApiKey.DELETE_GROUPS, v, "results", group_id=g, error_code=NOT_COORDINATOR)),
    ApiKey.CONSUMER_GROUP_DESCRIBE: _groups_list(
        ApiKey.CONSUMER_GROUP_DESCRIBE, "group_ids", "groups", lambda v, g: reply(
            ApiKey.CONSUMER_GROUP_DESCRIBE, v, "groups", error_code=NOT_COORDINATOR, group_id=g,
            error_message="This node is not the group's coordinator.")),
}


def decide(api_key: int, version: int, body: Body, directory: Directory) -> Decision:
    """The routing decision for one request: None (serve it), Refuse, Narrow or Drop."""
    rule = RULES.get(api_key)
    return None if rule is None else rule(version, body, directory)
