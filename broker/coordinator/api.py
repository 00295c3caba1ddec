"""The version adapter: wire bodies of any version in, typed requests out, and back.

This is the one place that knows API versions. ``decode`` turns a decoded request body into
a frozen request of ``broker.coordinator.requests``, folding what the version says into
fields the rules understand; ``encode`` shapes a typed result as the response body of the
version asked. Checks Kafka makes in KafkaApis before the coordinator sees a request
(SyncGroup v5+ must name its protocol) are answered here with an immediate result.
``error_result`` is Kafka's AbstractRequest.getErrorResponse: the reply a request gets when
it fails as a whole (a write that times out).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.coordinator.effects import Effects
from broker.coordinator.packed import (
    offset_fetch_body,
    read_consumer_group_heartbeat,
    read_offset_commit,
    read_offset_fetch,
)
from broker.coordinator.requests import (
    ClientInfo,
    CommitPartition,
    CommitTopic,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResult,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResult,
    DeleteGroupsRequest,
    DeleteGroupsResult,
    DescribedAssignment,
    DescribeGroupsRequest,
    DescribeGroupsResult,
    FetchedGroup,
    FetchGroup,
    HeartbeatRequest,
    HeartbeatResult,
    JoinGroupRequest,
    JoinGroupResult,
    LeaveGroupRequest,
    LeaveGroupResult,
    LeavingMember,
    ListGroupsRequest,
    ListGroupsResult,
    OffsetCommitRequest,
    OffsetCommitResult,
    OffsetDeleteRequest,
    OffsetDeleteResult,
    OffsetFetchRequest,
    OffsetFetchResult,
    PartitionErrors,
    Result,
    SyncGroupRequest,
    SyncGroupResult,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResult,
)
from broker.coordinator.shard import GroupCoordinatorShard
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

E = ErrorCode
INT32_MIN = -2147483648

Body = Any  # a decoded request body (construct Container)
TypedRequest = Any  # one of broker.coordinator.requests' request classes


@dataclass(frozen=True, slots=True)
class Binding:
    """How one API reaches the shard: decode the body, call the rules, shape the result."""

    name: str
    decode: Callable[[int, Body, ClientInfo], TypedRequest]
    handle: Callable[[GroupCoordinatorShard, int, int, TypedRequest], Effects]
    encode: Callable[[int, Result], dict[str, Any]]
    #: The reply body's bytes straight from the result, where a hot API has such an encoder:
    #: the same bytes as ``encode`` through the generic codec (``broker.group_service``).
    encode_body: Callable[[int, Result], bytes] | None = None
    #: The typed request read straight from the frame, where a hot API has such a reader:
    #: ``read(version, frame, body_position)``, what ``decode`` gives after the generic
    #: decoder, or None to leave the bytes to it (``protocol.codec.decode_request``).
    read: Callable[[int, bytes, int], TypedRequest | None] | None = None
    #: Where what ``read`` gives lacks the client that ``decode`` puts in (it reads the frame
    #: before the connection is known): that request with the client put in.
    with_client: Callable[[TypedRequest, ClientInfo], TypedRequest] | None = None


class Rejected:
    """A request KafkaApis answers before the coordinator sees it; ``result`` is the answer."""

    __slots__ = ("result",)

    def __init__(self, result: Result) -> None:
        self.result = result


# ---------------------------------------------------------------------- JoinGroup


def decode_join_group(version: int, body: Body, client: ClientInfo) -> JoinGroupRequest:
    session = body.session_timeout_ms
    return JoinGroupRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        group_instance_id=body.get("group_instance_id") if version >= 5 else None,
        session_timeout_ms=session,
        rebalance_timeout_ms=body.rebalance_timeout_ms if version >= 1 else session,
        protocol_type=body.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in body.protocols),
        reason=body.get("reason") if version >= 8 else None,
        client=client,
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
    )


def encode_join_group(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, JoinGroupResult)
    # Below v7 the protocol name is not nullable: Kafka sends "" when there is none.
    protocol_name = r.protocol_name if r.protocol_name is not None or version >= 7 else ""
    return {
        "throttle_time_ms": 0,
        "error_code": int(r.error),
        "generation_id": r.generation_id,
        "protocol_type": r.protocol_type,
        "protocol_name": protocol_name,
        "leader": r.leader,
        "skip_assignment": r.skip_assignment,
        "member_id": r.member_id,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
            for m in r.members
        ],
    }


# ---------------------------------------------------------------------- SyncGroup


def decode_sync_group(version: int, body: Body, client: ClientInfo) -> SyncGroupRequest | Rejected:
    protocol_type = body.get("protocol_type") if version >= 5 else None
    protocol_name = body.get("protocol_name") if version >= 5 else None
    if version >= 5 and (protocol_type is None or protocol_name is None):
        return Rejected(SyncGroupResult(E.INCONSISTENT_GROUP_PROTOCOL))
    return SyncGroupRequest(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=body.get("group_instance_id") if version >= 3 else None,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in body.assignments),
    )


def encode_sync_group(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, SyncGroupResult)
    return {
        "throttle_time_ms": 0,
        "error_code": int(r.error),
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol_name,
        "assignment": r.assignment,
    }


# ---------------------------------------------------------------------- Heartbeat, LeaveGroup


def decode_heartbeat(version: int, body: Body, client: ClientInfo) -> HeartbeatRequest:
    # Item access: a heartbeat is the most frequent request, and a construct Container's
    # attribute access is a Python call.
    return tuple.__new__(HeartbeatRequest, (body["group_id"], body["generation_id"], body["member_id"],
                                            body.get("group_instance_id") if version >= 3 else None))


def encode_heartbeat(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, HeartbeatResult)
    return {"throttle_time_ms": 0, "error_code": int(r.error)}


def decode_leave_group(version: int, body: Body, client: ClientInfo) -> LeaveGroupRequest:
    if version >= 3:
        members = tuple(LeavingMember(m.member_id, m.get("group_instance_id"), m.get("reason"))
                        for m in body.members)
    else:
        members = (LeavingMember(body.member_id, None),)
    return LeaveGroupRequest(body.group_id, members)


def encode_leave_group(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, LeaveGroupResult)
    if version >= 3:
        return {
            "throttle_time_ms": 0,
            "error_code": int(r.error),
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "error_code": int(error)}
                for m, error in r.members
            ] if r.error is E.NONE else [],
        }
    # One member per request before v3: its own error is the answer.
    first = next((error for _, error in r.members if error is not E.NONE), E.NONE)
    return {"throttle_time_ms": 0, "error_code": int(r.error if r.error is not E.NONE else first)}


# ---------------------------------------------------------------------- OffsetCommit


def decode_offset_commit(version: int, body: Body, client: ClientInfo) -> OffsetCommitRequest:
    # Item access: the body is a construct Container, whose attribute access is a Python call.
    # The named tuples are built with tuple.__new__ and every field in order: a named tuple's
    # own constructor is a Python call, and this runs for every commit and committed offset.
    new_tuple = tuple.__new__
    partition_type = CommitPartition
    epochs = version >= 6
    client_time = version == 1  # the client's own commit time
    topics = []
    for topic in body["topics"]:
        partitions = [new_tuple(partition_type, (p["partition_index"], p["committed_offset"],
                                                 p["committed_leader_epoch"] if epochs else -1,
                                                 p["committed_metadata"] or "",
                                                 p["commit_timestamp"] if client_time else -1))
                      for p in topic["partitions"]]
        topics.append(new_tuple(CommitTopic, (topic["name"], tuple(partitions))))
    return new_tuple(OffsetCommitRequest, (
        body["group_id"],
        body["generation_id_or_member_epoch"] if version >= 1 else -1,  # generation_id_or_member_epoch
        body["member_id"] if version >= 1 else "",  # member_id
        body.get("group_instance_id") if version >= 7 else None,  # group_instance_id
        body.get("retention_time_ms", -1) if 2 <= version <= 4 else -1,  # retention_ms
        tuple(topics),
        version >= 9,  # consumer_protocol_version
        False,  # transactional
    ))


def _partition_errors(topics: PartitionErrors) -> list[dict[str, Any]]:
    return [
        {"name": name, "partitions": [{"partition_index": p, "error_code": int(e)} for p, e in partitions]}
        for name, partitions in topics
    ]


def encode_offset_commit(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, OffsetCommitResult)
    return {"throttle_time_ms": 0, "topics": _partition_errors(r.topics)}


# ---------------------------------------------------------------------- TxnOffsetCommit


def decode_txn_offset_commit(version: int, body: Body, client: ClientInfo) -> TxnOffsetCommitRequest:
    kip447 = version >= 3
    return TxnOffsetCommitRequest(
        transactional_id=body.transactional_id,
        group_id=body.group_id,
        producer_id=body.producer_id,
        producer_epoch=body.producer_epoch,
        generation_id=body.generation_id if kip447 else -1,
        member_id=body.member_id if kip447 else "",
        group_instance_id=body.get("group_instance_id") if kip447 else None,
        topics=tuple(
            CommitTopic(topic.name, tuple(
                CommitPartition(p.partition_index, p.committed_offset,
                                p.committed_leader_epoch if version >= 2 else -1, p.committed_metadata or "")
                for p in topic.partitions
            ))
            for topic in body.topics
        ),
    )


def encode_txn_offset_commit(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, TxnOffsetCommitResult)
    return {"throttle_time_ms": 0, "topics": _partition_errors(r.topics)}


# ---------------------------------------------------------------------- OffsetFetch


def _fetch_topics(topics: Any) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    if topics is None:
        return None
    if len(topics) == 1:  # nearly every fetch: 3.5k fewer instructions than the expression below
        topic = topics[0]
        return ((topic["name"], tuple(topic["partition_indexes"])),)
    return tuple((t["name"], tuple(t["partition_indexes"])) for t in topics)


def decode_offset_fetch(version: int, body: Body, client: ClientInfo) -> OffsetFetchRequest:
    # Built with tuple.__new__, every field in order, as decode_offset_commit does.
    new_tuple = tuple.__new__
    if version >= 8:
        groups = tuple(
            new_tuple(FetchGroup, (g["group_id"], _fetch_topics(g["topics"]), g.get("member_id"),
                                   g.get("member_epoch", -1)))
            for g in body["groups"]
        )
    else:
        groups = (new_tuple(FetchGroup, (body["group_id"], _fetch_topics(body["topics"]), None, -1)),)
    return new_tuple(OffsetFetchRequest, (groups, bool(body.get("require_stable", False)) if version >= 7 else False))


def _fetched_topics(group: FetchedGroup, version: int) -> list[dict[str, Any]]:
    epochs = version >= 5
    return [
        {
            "name": name,
            "partitions": [
                {
                    "partition_index": p.partition,
                    "committed_offset": p.offset,
                    "committed_leader_epoch": p.leader_epoch if epochs else -1,
                    "metadata": p.metadata,
                    "error_code": int(p.error),
                }
                for p in partitions
            ],
        }
        for name, partitions in group.topics
    ]


def encode_offset_fetch(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, OffsetFetchResult)
    if version >= 8:
        return {
            "throttle_time_ms": 0,
            "groups": [
                {"group_id": g.group_id, "topics": _fetched_topics(g, version), "error_code": int(g.error)}
                for g in r.groups
            ],
        }
    group = r.groups[0]
    return {"throttle_time_ms": 0, "topics": _fetched_topics(group, version), "error_code": int(group.error)}


# ---------------------------------------------------------------------- OffsetDelete


def decode_offset_delete(version: int, body: Body, client: ClientInfo) -> OffsetDeleteRequest:
    return OffsetDeleteRequest(
        body.group_id,
        tuple((t.name, tuple(p.partition_index for p in t.partitions)) for t in body.topics),
    )


def encode_offset_delete(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, OffsetDeleteResult)
    return {"error_code": int(r.error), "throttle_time_ms": 0, "topics": _partition_errors(r.topics)}


# ---------------------------------------------------------------------- admin


def decode_describe_groups(version: int, body: Body, client: ClientInfo) -> DescribeGroupsRequest:
    return DescribeGroupsRequest(tuple(body.groups),
                                 bool(body.get("include_authorized_operations", False)) if version >= 3 else False)


def encode_describe_groups(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, DescribeGroupsResult)
    return {
        "throttle_time_ms": 0,
        "groups": [
            {
                "error_code": int(g.error),
                "group_id": g.group_id,
                "group_state": g.state,
                "protocol_type": g.protocol_type,
                "protocol_data": g.protocol_data,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in g.members
                ],
                # Kafka reports operations only when asked (v3+), else INT32_MIN.
                "authorized_operations": INT32_MIN if g.authorized_operations is None else g.authorized_operations,
            }
            for g in r.groups
        ],
    }


def decode_list_groups(version: int, body: Body, client: ClientInfo) -> ListGroupsRequest:
    return ListGroupsRequest(
        tuple(body.get("states_filter") or ()) if version >= 4 else (),
        tuple(body.get("types_filter") or ()) if version >= 5 else (),
    )


def encode_list_groups(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, ListGroupsResult)
    return {
        "throttle_time_ms": 0,
        "error_code": int(r.error),
        "groups": [
            {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state,
             **({"group_type": g.group_type} if version >= 5 else {})}
            for g in r.groups
        ],
    }


def decode_delete_groups(version: int, body: Body, client: ClientInfo) -> DeleteGroupsRequest:
    return DeleteGroupsRequest(tuple(body.groups_names))


def encode_delete_groups(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, DeleteGroupsResult)
    return {"throttle_time_ms": 0,
            "results": [{"group_id": g, "error_code": int(e)} for g, e in r.results]}


# ---------------------------------------------------------------------- KIP-848


def decode_consumer_group_heartbeat(version: int, body: Body, client: ClientInfo) -> ConsumerGroupHeartbeatRequest:
    # Item access throughout, as in decode_heartbeat: a member sends one every few seconds.
    names = body["subscribed_topic_names"]
    owned = body["topic_partitions"]
    return tuple.__new__(ConsumerGroupHeartbeatRequest, (  # in the fields' order
        body["group_id"],
        body["member_id"],
        body["member_epoch"],
        body["instance_id"],
        body["rack_id"],
        body["rebalance_timeout_ms"],
        None if names is None else tuple(names),
        body.get("subscribed_topic_regex") if version >= 1 else None,
        body["server_assignor"],
        None if owned is None else tuple((tp["topic_id"], tuple(tp["partitions"])) for tp in owned),
        client,
        version >= 1,
    ))


def consumer_group_heartbeat_with_client(request: TypedRequest, client: ClientInfo) -> ConsumerGroupHeartbeatRequest:
    """``read_consumer_group_heartbeat``'s request with the connection's client in it."""
    assert isinstance(request, ConsumerGroupHeartbeatRequest)
    *fields, _, client_member_id = request
    return tuple.__new__(ConsumerGroupHeartbeatRequest, (*fields, client, client_member_id))


def encode_consumer_group_heartbeat(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, ConsumerGroupHeartbeatResult)
    assignment = None if r.assignment is None else {
        "topic_partitions": [{"topic_id": t, "partitions": list(ps)} for t, ps in r.assignment]}
    return {
        "throttle_time_ms": 0,
        "error_code": int(r.error),
        "error_message": r.error_message,
        "member_id": r.member_id,
        "member_epoch": r.member_epoch,
        "heartbeat_interval_ms": r.heartbeat_interval_ms,
        "assignment": assignment,
    }


def decode_consumer_group_describe(version: int, body: Body, client: ClientInfo) -> ConsumerGroupDescribeRequest:
    return ConsumerGroupDescribeRequest(tuple(body.group_ids), bool(body.include_authorized_operations))


def _described_assignment(a: DescribedAssignment) -> dict[str, Any]:
    return {"topic_partitions": [{"topic_id": t, "topic_name": n, "partitions": list(ps)}
                                 for t, n, ps in a.topic_partitions]}


def encode_consumer_group_describe(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, ConsumerGroupDescribeResult)
    return {
        "throttle_time_ms": 0,
        "groups": [
            {
                "error_code": int(g.error),
                "error_message": g.error_message,
                "group_id": g.group_id,
                "group_state": g.state,
                "group_epoch": g.group_epoch,
                "assignment_epoch": g.assignment_epoch,
                "assignor_name": g.assignor_name,
                "members": [
                    {
                        "member_id": m.member_id,
                        "instance_id": m.instance_id,
                        "rack_id": m.rack_id,
                        "member_epoch": m.member_epoch,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "subscribed_topic_names": list(m.subscribed_topic_names),
                        "subscribed_topic_regex": m.subscribed_topic_regex,
                        "assignment": _described_assignment(m.assignment),
                        "target_assignment": _described_assignment(m.target_assignment),
                    }
                    for m in g.members
                ],
                "authorized_operations": INT32_MIN if g.authorized_operations is None else g.authorized_operations,
            }
            for g in r.groups
        ],
    }


# ---------------------------------------------------------------------- whole-request failures


def error_result(request: TypedRequest, error: ErrorCode) -> Result:
    """The reply to ``request`` when it fails as a whole with ``error``."""
    if isinstance(request, OffsetCommitRequest):
        return OffsetCommitResult(tuple(
            (t.name, tuple((p.partition, error) for p in t.partitions)) for t in request.topics
        ))
    if isinstance(request, TxnOffsetCommitRequest):
        return TxnOffsetCommitResult(tuple(
            (t.name, tuple((p.partition, error) for p in t.partitions)) for t in request.topics
        ))
    if isinstance(request, JoinGroupRequest):
        return JoinGroupResult(error, request.member_id)
    if isinstance(request, SyncGroupRequest):
        return SyncGroupResult(error)
    if isinstance(request, HeartbeatRequest):
        return HeartbeatResult(error)
    if isinstance(request, LeaveGroupRequest):
        return LeaveGroupResult(error)
    if isinstance(request, OffsetFetchRequest):
        return OffsetFetchResult(tuple(FetchedGroup(g.group_id, (), error) for g in request.groups))
    if isinstance(request, OffsetDeleteRequest):
        return OffsetDeleteResult(error)
    if isinstance(request, DeleteGroupsRequest):
        return DeleteGroupsResult(tuple((g, error) for g in request.group_ids))
    if isinstance(request, ListGroupsRequest):
        return ListGroupsResult((), error)
    if isinstance(request, DescribeGroupsRequest):
        return DescribeGroupsResult(())
    if isinstance(request, ConsumerGroupHeartbeatRequest):
        return ConsumerGroupHeartbeatResult(error)
    if isinstance(request, ConsumerGroupDescribeRequest):
        return ConsumerGroupDescribeResult(())
    raise TypeError(f"no error reply for {type(request).__name__}")


# ---------------------------------------------------------------------- the table


#: API -> how it reaches the shard.
BINDINGS: dict[int, Binding] = {
    ApiKey.OFFSET_COMMIT: Binding("OffsetCommit", decode_offset_commit, GroupCoordinatorShard.offset_commit, encode_offset_commit,
                                  read=read_offset_commit),
    ApiKey.OFFSET_FETCH: Binding("OffsetFetch", decode_offset_fetch, GroupCoordinatorShard.offset_fetch, encode_offset_fetch,
                                 offset_fetch_body, read=read_offset_fetch),
    ApiKey.TXN_OFFSET_COMMIT: Binding("TxnOffsetCommit", decode_txn_offset_commit, GroupCoordinatorShard.txn_offset_commit,
                                      encode_txn_offset_commit),
    ApiKey.JOIN_GROUP: Binding("JoinGroup", decode_join_group, GroupCoordinatorShard.join_group, encode_join_group),
    ApiKey.HEARTBEAT: Binding("Heartbeat", decode_heartbeat, GroupCoordinatorShard.heartbeat, encode_heartbeat),
    ApiKey.LEAVE_GROUP: Binding("LeaveGroup", decode_leave_group, GroupCoordinatorShard.leave_group, encode_leave_group),
    ApiKey.SYNC_GROUP: Binding("SyncGroup", decode_sync_group, GroupCoordinatorShard.sync_group, encode_sync_group),
    ApiKey.DESCRIBE_GROUPS: Binding("DescribeGroups", decode_describe_groups, GroupCoordinatorShard.describe_groups,
                encode_describe_groups),
    ApiKey.LIST_GROUPS: Binding("ListGroups", decode_list_groups, GroupCoordinatorShard.list_groups, encode_list_groups),
    ApiKey.DELETE_GROUPS: Binding("DeleteGroups", decode_delete_groups, GroupCoordinatorShard.delete_groups, encode_delete_groups),
    ApiKey.OFFSET_DELETE: Binding("OffsetDelete", decode_offset_delete, GroupCoordinatorShard.offset_delete, encode_offset_delete),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: Binding(
        "ConsumerGroupHeartbeat", decode_consumer_group_heartbeat, GroupCoordinatorShard.consumer_group_heartbeat,
        encode_consumer_group_heartbeat, read=read_consumer_group_heartbeat,
        with_client=consumer_group_heartbeat_with_client),
    ApiKey.CONSUMER_GROUP_DESCRIBE: Binding(
        "ConsumerGroupDescribe", decode_consumer_group_describe, GroupCoordinatorShard.consumer_group_describe,
        encode_consumer_group_describe),
}

#: APIs bound here but registered by another service: TxnOffsetCommit goes through the
#: transaction coordinator first (the producer's epoch, its open transaction), which then
#: hands it to the group service.
CHECKED_ELSEWHERE = frozenset({ApiKey.TXN_OFFSET_COMMIT})

#: The APIs of the KIP-848 consumer protocol, offered when group.coordinator.rebalance.protocols names it.
CONSUMER_PROTOCOL_APIS = frozenset({ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE})
