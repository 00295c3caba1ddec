"""The authorization matrix: every API the broker serves, against the real broker process.

The APIs come from the broker itself (its ApiVersions reply is the router's table), so an
API added later fails here until it has a rule in ``security.access.RULES`` and a case
below. Each case runs four cells, each on its own authenticated connection:

- ``nobody``: a principal with no ACL at all;
- ``deny``: a principal with the ACLs the API needs plus a DENY for each of them;
- ``allowed``: a principal with exactly the ACLs the API needs;
- ``admin``: a super user, with no ACL.

The first two must get Kafka's error code (or, for ListGroups and Metadata, silent
filtering) and leave the broker's state as it was (no commit written, no group joined, no
offsets, ACLs or credentials revealed or changed); the last two must not be refused.
Principals are per API so that one API's grants cannot help another's cells.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from construct import Container

from admin.client import RESOURCE_GROUP, AdminClient, CommittedOffset
from admin.security import ClientSecurity
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from protocol.records import build_records, encode_batch
from protocol.schema import Array, Struct, default_struct
from security.access import RULES
from security.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType, bit_field
from tests.support.broker_process import BrokerProcess
from tests.support.security import login_plain
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

E = ErrorCode
Op = AclOperation
R = ResourceType
AUTH_ERRORS = {E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED,
               E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
PASSWORD = "matrix-secret"
ADMIN = "admin"
CLUSTER = "kafka-cluster"
CELLS = ("nobody", "deny", "allowed", "admin")


# ---------------------------------------------------------------------- request bodies


def _fields_at(key: int, path: tuple[str, ...]) -> Any:
    fields = REQUESTS[key].fields
    for name in path:
        f = next(f for f in fields if f.name == name)
        kind = f.type.of if isinstance(f.type, Array) else f.type
        assert isinstance(kind, Struct)
        fields = kind.fields
    return fields


def body(key: int, version: int, **values: Any) -> Container:
    out = REQUESTS[key].default(version)
    out.update(values)
    return out


def item(key: int, version: int, path: tuple[str, ...], **values: Any) -> Container:
    out = default_struct(_fields_at(key, path), version)
    out.update(values)
    return out


def errors_in(value: Any) -> set[int]:
    """Every error code anywhere in a reply."""
    found: set[int] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            if k in ("error_code", "partition_error_code") and isinstance(v, int):
                found.add(v)
            else:
                found |= errors_in(v)
    elif isinstance(value, list):
        for v in value:
            found |= errors_in(v)
    return found


# ---------------------------------------------------------------------- the broker and its helpers


@dataclass
class World:
    broker: BrokerProcess
    admin: AdminClient

    def raw(self, key: int, request: dict[str, Any]) -> Any:
        return self.admin.any_broker().request(key, request)[1]

    def create_topic(self, name: str, partitions: int = 1) -> None:
        conn = self.admin.any_broker()
        v = conn.version(ApiKey.CREATE_TOPICS)
        reply = self.raw(ApiKey.CREATE_TOPICS, body(ApiKey.CREATE_TOPICS, v, topics=[
            item(ApiKey.CREATE_TOPICS, v, ("topics",), name=name, num_partitions=partitions, replication_factor=1,
                 assignments=[], configs=[])], timeout_ms=5000))
        assert reply.topics[0].error_code in (0, E.TOPIC_ALREADY_EXISTS), reply

    def produce(self, topic: str, count: int = 1) -> None:
        records = encode_batch(build_records([(None, b"v%d" % i) for i in range(count)]), base_timestamp=0)
        v = self.admin.any_broker().version(ApiKey.PRODUCE)
        reply = self.raw(ApiKey.PRODUCE, body(ApiKey.PRODUCE, v, acks=-1, timeout_ms=5000, topic_data=[
            {"name": topic, "partition_data": [{"index": 0, "records": records}]}]))
        assert errors_in(reply) == {0}, reply

    def end_offset(self, topic: str) -> int:
        return self.admin.list_offsets({(topic, 0): -1})[(topic, 0)]

    def commit(self, group: str, topic: str, offset: int = 1) -> None:
        self.admin.commit_offsets(group, {(topic, 0): CommittedOffset(offset)})

    def offsets(self, group: str) -> dict[Any, Any]:
        return self.admin.fetch_offsets(group)

    def topic_exists(self, name: str) -> bool:
        return name in self.admin.metadata([name]).leaders and \
            self.admin.metadata([name]).topic_errors.get(name, 0) == 0

    def partitions(self, name: str) -> int:
        return len(self.admin.metadata([name]).leaders.get(name, {}))

    def topic_id(self, name: str) -> uuid.UUID:
        v = self.admin.any_broker().version(ApiKey.METADATA)
        reply = self.raw(ApiKey.METADATA, body(ApiKey.METADATA, v, topics=[
            item(ApiKey.METADATA, v, ("topics",), name=name)]))
        found: uuid.UUID = reply.topics[0].topic_id
        return found

    def acls(self, resource_type: ResourceType, name: str) -> list[Any]:
        reply = self.raw(ApiKey.DESCRIBE_ACLS, {
            "resource_type_filter": int(resource_type), "resource_name_filter": name, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
        return list(reply.resources)

    def scram_users(self) -> set[str]:
        reply = self.raw(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": None})
        return {r.user for r in reply.results}

    def init_transaction(self, transactional_id: str) -> tuple[int, int]:
        """A transactional producer's id and epoch (as the super user)."""
        reply = self.raw(ApiKey.INIT_PRODUCER_ID, {"transactional_id": transactional_id,
                                                   "transaction_timeout_ms": 60000, "producer_id": -1,
                                                   "producer_epoch": -1})
        assert reply.error_code == 0, reply
        PRODUCERS[transactional_id] = (reply.producer_id, reply.producer_epoch)
        return reply.producer_id, reply.producer_epoch

    def begin_transaction(self, transactional_id: str, topic: str) -> None:
        """An open transaction with ``topic``'s partition 0 in it."""
        producer_id, epoch = self.init_transaction(transactional_id)
        reply = self.raw(ApiKey.ADD_PARTITIONS_TO_TXN, {
            "v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": producer_id,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
        assert errors_in(reply) == {0}, reply

    def add_offsets(self, transactional_id: str, group: str) -> None:
        producer_id, epoch = PRODUCERS[transactional_id]
        reply = self.raw(ApiKey.ADD_OFFSETS_TO_TXN, {"transactional_id": transactional_id,
                                                     "producer_id": producer_id, "producer_epoch": epoch,
                                                     "group_id": group})
        assert reply.error_code == 0, reply

    def transaction_state(self, transactional_id: str) -> str:
        reply = self.raw(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]})
        state = reply.transaction_states[0]
        return str(state.transaction_state) if state.error_code == 0 else ErrorCode(state.error_code).name

    def pending_offsets(self, group: str, topic: str) -> list[int]:
        """The partitions of ``topic`` whose offsets in ``group`` wait for a transaction."""
        reply = self.raw(ApiKey.OFFSET_FETCH, {"require_stable": True, "groups": [
            {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}]})
        return [p.partition_index for t in reply.groups[0].topics for p in t.partitions
                if p.error_code == E.UNSTABLE_OFFSET_COMMIT]

    def grant(self, principal: str, bindings: list[tuple[ResourceType, str, AclOperation]],
              permission: AclPermissionType = AclPermissionType.ALLOW, pattern: PatternType = PatternType.LITERAL
              ) -> None:
        if not bindings:
            return
        reply = self.raw(ApiKey.CREATE_ACLS, {"creations": [
            {"resource_type": int(r), "resource_name": n, "resource_pattern_type": int(pattern),
             "principal": principal, "host": "*", "operation": int(op), "permission_type": int(permission)}
            for r, n, op in bindings]})
        assert errors_in(reply) == {0}, reply


# ---------------------------------------------------------------------- the cases


Check = Callable[[Any, World], None]

#: transactional id -> (producer id, epoch), as the cases' setups initialized them.
PRODUCERS: dict[str, tuple[int, int]] = {}


def _producer_of(transactional_id: str) -> dict[str, int]:
    producer_id, epoch = PRODUCERS.get(transactional_id, (-1, -1))
    return {"producer_id": producer_id, "producer_epoch": epoch}


@dataclass
class Case:
    """One API: what to set up, what to send, what the cells must see."""

    grants: list[tuple[ResourceType, str, AclOperation]]
    request: Callable[[int, str], dict[str, Any]]  # (version, cell) -> body
    refused: Check  # the reply of ``nobody`` and ``deny``
    unchanged: Callable[[World], None] = lambda world: None
    setup: Callable[[World], None] = lambda world: None
    allowed: Check = field(default=lambda reply, world: _not_refused(reply))
    grant_pattern: PatternType = PatternType.LITERAL


def _not_refused(reply: Any) -> None:
    assert not errors_in(reply) & AUTH_ERRORS, reply


def _only(*codes: ErrorCode) -> Check:
    def check(reply: Any, world: World) -> None:
        assert errors_in(reply) == {int(c) for c in codes}, reply
    return check


def _no_error(reply: Any, world: World) -> None:
    assert errors_in(reply) <= {0}, reply


def _metadata_refused(reply: Any, world: World) -> None:
    by_name = {t.name: t for t in reply.topics}
    assert by_name["t-3"].error_code == E.TOPIC_AUTHORIZATION_FAILED and not by_name["t-3"].partitions
    assert by_name["t-3-auto"].error_code == E.TOPIC_AUTHORIZATION_FAILED


def _metadata_allowed(reply: Any, world: World) -> None:
    by_name = {t.name: t for t in reply.topics}
    assert by_name["t-3"].error_code == 0 and by_name["t-3"].partitions
    assert by_name["t-3"].topic_authorized_operations != -2147483648


def _list_groups_refused(reply: Any, world: World) -> None:
    assert reply.error_code == 0 and "g-16" not in {g.group_id for g in reply.groups}


def _list_groups_allowed(reply: Any, world: World) -> None:
    assert reply.error_code == 0 and "g-16" in {g.group_id for g in reply.groups}


def _describe_groups_refused(reply: Any, world: World) -> None:
    group = reply.groups[0]
    assert group.error_code == E.GROUP_AUTHORIZATION_FAILED and group.group_state == "" and not group.members


def _describe_groups_allowed(reply: Any, world: World) -> None:
    group = reply.groups[0]
    assert group.error_code == 0 and group.group_state == "Empty"
    assert group.authorized_operations & bit_field([Op.DESCRIBE])


def _offset_fetch_refused(reply: Any, world: World) -> None:
    group = reply.groups[0]
    assert group.error_code == E.GROUP_AUTHORIZATION_FAILED and not group.topics


def _offset_fetch_allowed(reply: Any, world: World) -> None:
    group = reply.groups[0]
    assert group.error_code == 0
    assert [(t.name, p.committed_offset) for t in group.topics for p in t.partitions] == [("t-9", 7)]


def _fetch_refused(reply: Any, world: World) -> None:
    parts = [p for t in reply.responses for p in t.partitions]
    assert [p.error_code for p in parts] == [E.TOPIC_AUTHORIZATION_FAILED]
    assert not parts[0].records and parts[0].high_watermark == -1


def _cluster_ops(expect_describe: bool) -> Check:
    def check(reply: Any, world: World) -> None:
        assert reply.error_code == 0
        assert bool(reply.cluster_authorized_operations & bit_field([Op.DESCRIBE])) == expect_describe, reply
    return check


def _scram_refused(reply: Any, world: World) -> None:
    assert reply.error_code == E.CLUSTER_AUTHORIZATION_FAILED and not reply.results


def _acls_refused(reply: Any, world: World) -> None:
    assert reply.error_code == E.CLUSTER_AUTHORIZATION_FAILED and not reply.resources


def _join(v: int, cell: str) -> dict[str, Any]:
    return body(ApiKey.JOIN_GROUP, v, group_id="g-11", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                member_id="", protocol_type="consumer", protocols=[{"name": "range", "metadata": b""}])


def _group_unchanged(group: str) -> Callable[[World], None]:
    def check(world: World) -> None:
        described = world.admin.describe_group(group)
        assert not described.members and described.state in ("Dead", "Empty"), described
    return check


def _offsets_unchanged(group: str, expected: dict[tuple[str, int], int]) -> Callable[[World], None]:
    def check(world: World) -> None:
        assert {tp: c.offset for tp, c in world.offsets(group).items()} == expected
    return check


#: Topic ids learnt in a case's setup, for requests that name topics by id.
TOPIC_IDS: dict[str, uuid.UUID] = {}

CASES: dict[int, Case] = {
    ApiKey.PRODUCE: Case(
        grants=[(R.TOPIC, "t-0", Op.WRITE)],
        setup=lambda w: w.create_topic("t-0"),
        request=lambda v, cell: body(ApiKey.PRODUCE, v, acks=1, timeout_ms=5000, topic_data=[
            {"name": "t-0", "partition_data": [{"index": 0, "records": encode_batch(build_records([(None, b"x")]),
                                                                                      base_timestamp=0)}]}]),
        refused=_only(E.TOPIC_AUTHORIZATION_FAILED),
        unchanged=lambda w: _assert_equal(w.end_offset("t-0"), 0)),
    ApiKey.FETCH: Case(
        grants=[(R.TOPIC, "t-1", Op.READ)],
        setup=lambda w: (w.create_topic("t-1"), w.produce("t-1", 3), TOPIC_IDS.update({"t-1": w.topic_id("t-1")})),
        # v13+ names the topic by its id (KIP-516).
        request=lambda v, cell: body(ApiKey.FETCH, v, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[
            item(ApiKey.FETCH, v, ("topics",), topic="t-1", topic_id=TOPIC_IDS.get("t-1"), partitions=[
                item(ApiKey.FETCH, v, ("topics", "partitions"), partition=0, fetch_offset=0,
                     partition_max_bytes=1 << 20)])]),
        refused=_fetch_refused,
        allowed=lambda reply, w: _assert_equal(bool(reply.responses[0].partitions[0].records), True)),
    ApiKey.LIST_OFFSETS: Case(
        grants=[(R.TOPIC, "t-2", Op.DESCRIBE)],
        setup=lambda w: (w.create_topic("t-2"), w.produce("t-2", 2)),
        request=lambda v, cell: body(ApiKey.LIST_OFFSETS, v, replica_id=-1, topics=[
            item(ApiKey.LIST_OFFSETS, v, ("topics",), name="t-2", partitions=[
                item(ApiKey.LIST_OFFSETS, v, ("topics", "partitions"), partition_index=0, timestamp=-1)])]),
        refused=lambda reply, w: (_only(E.TOPIC_AUTHORIZATION_FAILED)(reply, w),
                                  _assert_equal(reply.topics[0].partitions[0].offset, -1)),
        allowed=lambda reply, w: _assert_equal(reply.topics[0].partitions[0].offset, 2)),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Case(
        grants=[(R.TOPIC, "t-23", Op.DESCRIBE)],
        setup=lambda w: (w.create_topic("t-23"), w.produce("t-23", 2)),
        request=lambda v, cell: body(ApiKey.OFFSET_FOR_LEADER_EPOCH, v, replica_id=-1, topics=[
            item(ApiKey.OFFSET_FOR_LEADER_EPOCH, v, ("topics",), topic="t-23", partitions=[
                item(ApiKey.OFFSET_FOR_LEADER_EPOCH, v, ("topics", "partitions"), partition=0,
                     current_leader_epoch=-1, leader_epoch=0)])]),
        refused=lambda reply, w: (_only(E.TOPIC_AUTHORIZATION_FAILED)(reply, w),
                                  _assert_equal(reply.topics[0].partitions[0].end_offset, -1)),
        allowed=_no_error),
    ApiKey.METADATA: Case(
        grants=[(R.TOPIC, "t-3", Op.DESCRIBE)],
        setup=lambda w: w.create_topic("t-3"),
        request=lambda v, cell: body(ApiKey.METADATA, v, allow_auto_topic_creation=True,
                                     include_topic_authorized_operations=True, topics=[
            item(ApiKey.METADATA, v, ("topics",), name="t-3"),
            item(ApiKey.METADATA, v, ("topics",), name="t-3-auto")]),
        refused=_metadata_refused, allowed=_metadata_allowed,
        unchanged=lambda w: _assert_equal(w.topic_exists("t-3-auto"), False)),
    ApiKey.OFFSET_COMMIT: Case(
        grants=[(R.GROUP, "g-8", Op.READ), (R.TOPIC, "t-8", Op.READ)],
        setup=lambda w: w.create_topic("t-8"),
        request=lambda v, cell: body(ApiKey.OFFSET_COMMIT, v, group_id="g-8", generation_id_or_member_epoch=-1,
                                     member_id="", topics=[{"name": "t-8", "partitions": [
                                         item(ApiKey.OFFSET_COMMIT, v, ("topics", "partitions"), partition_index=0,
                                              committed_offset=5, committed_metadata="")]}]),
        refused=_only(E.GROUP_AUTHORIZATION_FAILED),
        unchanged=_offsets_unchanged("g-8", {})),
    ApiKey.OFFSET_FETCH: Case(
        grants=[(R.GROUP, "g-9", Op.DESCRIBE), (R.TOPIC, "t-9", Op.DESCRIBE)],
        setup=lambda w: (w.create_topic("t-9"), w.commit("g-9", "t-9", 7)),
        request=lambda v, cell: body(ApiKey.OFFSET_FETCH, v, groups=[
            item(ApiKey.OFFSET_FETCH, v, ("groups",), group_id="g-9", topics=None)]),
        refused=_offset_fetch_refused, allowed=_offset_fetch_allowed),
    ApiKey.FIND_COORDINATOR: Case(
        grants=[(R.GROUP, "g-10", Op.DESCRIBE)],
        request=lambda v, cell: body(ApiKey.FIND_COORDINATOR, v, key_type=0, coordinator_keys=["g-10"]),
        refused=lambda reply, w: (_only(E.GROUP_AUTHORIZATION_FAILED)(reply, w),
                                  _assert_equal(reply.coordinators[0].node_id, -1))),
    ApiKey.JOIN_GROUP: Case(
        grants=[(R.GROUP, "g-11", Op.READ)],
        request=_join, refused=_only(E.GROUP_AUTHORIZATION_FAILED), unchanged=_group_unchanged("g-11")),
    ApiKey.HEARTBEAT: Case(
        grants=[(R.GROUP, "g-12", Op.READ)],
        request=lambda v, cell: body(ApiKey.HEARTBEAT, v, group_id="g-12", generation_id=1, member_id="m"),
        refused=_only(E.GROUP_AUTHORIZATION_FAILED), unchanged=_group_unchanged("g-12")),
    ApiKey.LEAVE_GROUP: Case(
        grants=[(R.GROUP, "g-13", Op.READ)],
        request=lambda v, cell: body(ApiKey.LEAVE_GROUP, v, group_id="g-13", member_id="m", members=[
            item(ApiKey.LEAVE_GROUP, v, ("members",), member_id="m")] if v >= 3 else []),
        refused=_only(E.GROUP_AUTHORIZATION_FAILED), unchanged=_group_unchanged("g-13")),
    ApiKey.SYNC_GROUP: Case(
        grants=[(R.GROUP, "g-14", Op.READ)],
        request=lambda v, cell: body(ApiKey.SYNC_GROUP, v, group_id="g-14", generation_id=1, member_id="m",
                                     protocol_type="consumer", protocol_name="range", assignments=[]),
        refused=_only(E.GROUP_AUTHORIZATION_FAILED), unchanged=_group_unchanged("g-14")),
    ApiKey.DESCRIBE_GROUPS: Case(
        grants=[(R.GROUP, "g-15", Op.DESCRIBE)],
        setup=lambda w: (w.create_topic("t-15"), w.commit("g-15", "t-15")),
        request=lambda v, cell: body(ApiKey.DESCRIBE_GROUPS, v, groups=["g-15"], include_authorized_operations=True),
        refused=_describe_groups_refused, allowed=_describe_groups_allowed),
    ApiKey.LIST_GROUPS: Case(
        grants=[(R.GROUP, "g-16", Op.DESCRIBE)],
        setup=lambda w: (w.create_topic("t-16"), w.commit("g-16", "t-16")),
        request=lambda v, cell: body(ApiKey.LIST_GROUPS, v),
        refused=_list_groups_refused, allowed=_list_groups_allowed),
    ApiKey.CREATE_TOPICS: Case(
        grants=[(R.TOPIC, "t-19-", Op.CREATE)], grant_pattern=PatternType.PREFIXED,
        request=lambda v, cell: body(ApiKey.CREATE_TOPICS, v, timeout_ms=5000, topics=[
            item(ApiKey.CREATE_TOPICS, v, ("topics",), name=f"t-19-{cell}", num_partitions=1, replication_factor=1,
                 assignments=[], configs=[])]),
        refused=_only(E.TOPIC_AUTHORIZATION_FAILED),
        unchanged=lambda w: _assert_equal((w.topic_exists("t-19-nobody"), w.topic_exists("t-19-deny")),
                                          (False, False))),
    ApiKey.DELETE_TOPICS: Case(
        grants=[(R.TOPIC, "t-20", Op.DELETE)],
        setup=lambda w: w.create_topic("t-20"),
        request=lambda v, cell: body(ApiKey.DELETE_TOPICS, v, timeout_ms=5000, topic_names=["t-20"], topics=[
            item(ApiKey.DELETE_TOPICS, v, ("topics",), name="t-20", topic_id=uuid.UUID(int=0))]),
        refused=_only(E.TOPIC_AUTHORIZATION_FAILED),
        unchanged=lambda w: _assert_equal(w.topic_exists("t-20"), True)),
    ApiKey.INIT_PRODUCER_ID: Case(
        grants=[(R.CLUSTER, CLUSTER, Op.IDEMPOTENT_WRITE)],
        request=lambda v, cell: body(ApiKey.INIT_PRODUCER_ID, v, transactional_id=None, transaction_timeout_ms=60000),
        refused=lambda reply, w: (_only(E.CLUSTER_AUTHORIZATION_FAILED)(reply, w),
                                  _assert_equal(reply.producer_id, -1))),
    ApiKey.DESCRIBE_ACLS: Case(
        grants=[(R.CLUSTER, CLUSTER, Op.DESCRIBE)],
        request=lambda v, cell: body(ApiKey.DESCRIBE_ACLS, v, resource_type_filter=1, resource_name_filter=None,
                                     pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1,
                                     permission_type=1),
        refused=_acls_refused,
        allowed=lambda reply, w: _assert_equal((reply.error_code, bool(reply.resources)), (0, True))),
    ApiKey.CREATE_ACLS: Case(
        grants=[(R.CLUSTER, CLUSTER, Op.ALTER)],
        request=lambda v, cell: body(ApiKey.CREATE_ACLS, v, creations=[
            item(ApiKey.CREATE_ACLS, v, ("creations",), resource_type=2, resource_name=f"acl-30-{cell}",
                 resource_pattern_type=3, principal="User:mallory", host="*", operation=2, permission_type=3)]),
        refused=_only(E.CLUSTER_AUTHORIZATION_FAILED),
        unchanged=lambda w: _assert_equal(w.acls(R.TOPIC, "acl-30-nobody") + w.acls(R.TOPIC, "acl-30-deny"), [])),
    ApiKey.DELETE_ACLS: Case(
        grants=[(R.CLUSTER, CLUSTER, Op.ALTER)],
        setup=lambda w: w.grant("User:someone", [(R.TOPIC, "acl-31", Op.READ)]),
        request=lambda v, cell: body(ApiKey.DELETE_ACLS, v, filters=[
            item(ApiKey.DELETE_ACLS, v, ("filters",), resource_type_filter=2, resource_name_filter="acl-31",
                 pattern_type_filter=3, principal_filter=None, host_filter=None, operation=1, permission_type=1)]),
        refused=lambda reply, w: (_only(E.CLUSTER_AUTHORIZATION_FAILED)(reply, w),
                                  _assert_equal(list(reply.filter_results[0].matching_acls), [])),
        unchanged=lambda w: _assert_equal(len(w.acls(R.TOPIC, "acl-31")), 1)),
    ApiKey.CREATE_PARTITIONS: Case(
        grants=[(R.TOPIC, "t-37", Op.ALTER)],
        setup=lambda w: w.create_topic("t-37"),
        request=lambda v, cell: body(ApiKey.CREATE_PARTITIONS, v, timeout_ms=5000, validate_only=False, topics=[
            item(ApiKey.CREATE_PARTITIONS, v, ("topics",), name="t-37", count=2, assignments=None)]),
        refused=_only(E.TOPIC_AUTHORIZATION_FAILED),
        unchanged=lambda w: _assert_equal(w.partitions("t-37"), 1)),
    ApiKey.DELETE_GROUPS: Case(
        grants=[(R.GROUP, "g-42", Op.DELETE)],
        setup=lambda w: (w.create_topic("t-42"), w.commit("g-42", "t-42", 3)),
        request=lambda v, cell: body(ApiKey.DELETE_GROUPS, v, groups_names=["g-42"]),
        refused=_only(E.GROUP_AUTHORIZATION_FAILED),
        unchanged=_offsets_unchanged("g-42", {("t-42", 0): 3})),
    ApiKey.OFFSET_DELETE: Case(
        grants=[(R.GROUP, "g-47", Op.DELETE), (R.TOPIC, "t-47", Op.READ)],
        setup=lambda w: (w.create_topic("t-47"), w.commit("g-47", "t-47", 4)),
        request=lambda v, cell: body(ApiKey.OFFSET_DELETE, v, group_id="g-47", topics=[
            {"name": "t-47", "partitions": [{"partition_index": 0}]}]),
        refused=_only(E.GROUP_AUTHORIZATION_FAILED),
        unchanged=_offsets_unchanged("g-47", {("t-47", 0): 4})),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: Case(
        grants=[(R.CLUSTER, CLUSTER, Op.DESCRIBE)],
        request=lambda v, cell: body(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, v, users=None),
        refused=_scram_refused,
        allowed=lambda reply, w: _assert_equal((reply.error_code, ADMIN in {r.user for r in reply.results}),
                                               (0, True))),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Case(
        grants=[(R.CLUSTER, CLUSTER, Op.ALTER)],
        request=lambda v, cell: body(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, v, deletions=[], upsertions=[
            item(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, v, ("upsertions",), name=f"victim-{cell}", mechanism=2,
                 iterations=4096, salt=b"s" * 32, salted_password=b"p" * 64)]),
        refused=_only(E.CLUSTER_AUTHORIZATION_FAILED),
        unchanged=lambda w: _assert_equal({"victim-nobody", "victim-deny"} & w.scram_users(), set())),
    ApiKey.DESCRIBE_CLUSTER: Case(
        grants=[(R.CLUSTER, CLUSTER, Op.DESCRIBE)],
        request=lambda v, cell: body(ApiKey.DESCRIBE_CLUSTER, v, include_cluster_authorized_operations=True),
        refused=_cluster_ops(False), allowed=_cluster_ops(True)),
    # APIs other work adds to the broker: each case runs from the moment its API is served.
    ApiKey.CONSUMER_GROUP_HEARTBEAT: Case(
        grants=[(R.GROUP, "g-68", Op.READ), (R.TOPIC, "t-68", Op.DESCRIBE)],
        setup=lambda w: w.create_topic("t-68"),
        request=lambda v, cell: body(ApiKey.CONSUMER_GROUP_HEARTBEAT, v, group_id="g-68",
                                     member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout_ms=10000,
                                     subscribed_topic_names=["t-68"], topic_partitions=[]),
        refused=_only(E.GROUP_AUTHORIZATION_FAILED), unchanged=_group_unchanged("g-68")),
    ApiKey.CONSUMER_GROUP_DESCRIBE: Case(
        grants=[(R.GROUP, "g-69", Op.DESCRIBE)],
        request=lambda v, cell: body(ApiKey.CONSUMER_GROUP_DESCRIBE, v, group_ids=["g-69"],
                                     include_authorized_operations=True),
        refused=lambda reply, w: (_only(E.GROUP_AUTHORIZATION_FAILED)(reply, w),
                                  _assert_equal(list(reply.groups[0].members), []))),
    ApiKey.DESCRIBE_CONFIGS: Case(
        grants=[(R.TOPIC, "t-32", Op.DESCRIBE_CONFIGS)],
        setup=lambda w: w.create_topic("t-32"),
        request=lambda v, cell: body(ApiKey.DESCRIBE_CONFIGS, v, resources=[
            item(ApiKey.DESCRIBE_CONFIGS, v, ("resources",), resource_type=2, resource_name="t-32",
                 configuration_keys=None)]),
        refused=lambda reply, w: (_only(E.TOPIC_AUTHORIZATION_FAILED)(reply, w),
                                  _assert_equal(list(reply.results[0].configs), []))),
    ApiKey.ALTER_CONFIGS: Case(
        grants=[(R.TOPIC, "t-33", Op.ALTER_CONFIGS)],
        setup=lambda w: w.create_topic("t-33"),
        request=lambda v, cell: body(ApiKey.ALTER_CONFIGS, v, validate_only=False, resources=[
            item(ApiKey.ALTER_CONFIGS, v, ("resources",), resource_type=2, resource_name="t-33",
                 configs=[{"name": "retention.ms", "value": "1000"}])]),
        refused=_only(E.TOPIC_AUTHORIZATION_FAILED)),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Case(
        grants=[(R.TOPIC, "t-44", Op.ALTER_CONFIGS)],
        setup=lambda w: w.create_topic("t-44"),
        request=lambda v, cell: body(ApiKey.INCREMENTAL_ALTER_CONFIGS, v, validate_only=False, resources=[
            item(ApiKey.INCREMENTAL_ALTER_CONFIGS, v, ("resources",), resource_type=2, resource_name="t-44",
                 configs=[{"name": "retention.ms", "config_operation": 0, "value": "1000"}])]),
        refused=_only(E.TOPIC_AUTHORIZATION_FAILED)),
    ApiKey.DELETE_RECORDS: Case(
        grants=[(R.TOPIC, "t-21", Op.DELETE)],
        setup=lambda w: (w.create_topic("t-21"), w.produce("t-21", 3)),
        request=lambda v, cell: body(ApiKey.DELETE_RECORDS, v, timeout_ms=5000, topics=[
            {"name": "t-21", "partitions": [{"partition_index": 0, "offset": 2}]}]),
        refused=_only(E.TOPIC_AUTHORIZATION_FAILED),
        unchanged=lambda w: _assert_equal(w.admin.list_offsets({("t-21", 0): -2})[("t-21", 0)], 0)),
    # Transactions: KafkaApis checks the transactional id first, then the group or topics.
    ApiKey.ADD_PARTITIONS_TO_TXN: Case(
        grants=[(R.TRANSACTIONAL_ID, "x-24", Op.WRITE), (R.TOPIC, "t-24", Op.WRITE)],
        setup=lambda w: (w.create_topic("t-24"), w.init_transaction("x-24")),
        request=lambda v, cell: body(ApiKey.ADD_PARTITIONS_TO_TXN, v, v3_and_below_transactional_id="x-24",
                                     v3_and_below_producer_id=PRODUCERS["x-24"][0],
                                     v3_and_below_producer_epoch=PRODUCERS["x-24"][1],
                                     v3_and_below_topics=[{"name": "t-24", "partitions": [0]}]),
        refused=_only(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        unchanged=lambda w: _assert_equal(w.transaction_state("x-24"), "Empty"),
        allowed=lambda reply, w: (_no_error(reply, w), _assert_equal(w.transaction_state("x-24"), "Ongoing"))),
    ApiKey.ADD_OFFSETS_TO_TXN: Case(
        grants=[(R.TRANSACTIONAL_ID, "x-25", Op.WRITE), (R.GROUP, "g-25", Op.READ)],
        setup=lambda w: w.init_transaction("x-25"),
        request=lambda v, cell: body(ApiKey.ADD_OFFSETS_TO_TXN, v, transactional_id="x-25", group_id="g-25",
                                     **_producer_of("x-25")),
        refused=_only(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        unchanged=lambda w: _assert_equal(w.transaction_state("x-25"), "Empty"),
        allowed=lambda reply, w: (_no_error(reply, w), _assert_equal(w.transaction_state("x-25"), "Ongoing"))),
    ApiKey.END_TXN: Case(
        grants=[(R.TRANSACTIONAL_ID, "x-26", Op.WRITE)],
        setup=lambda w: (w.create_topic("t-26"), w.begin_transaction("x-26", "t-26")),
        request=lambda v, cell: body(ApiKey.END_TXN, v, transactional_id="x-26", committed=False,
                                     **_producer_of("x-26")),
        refused=_only(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        unchanged=lambda w: _assert_equal(w.transaction_state("x-26"), "Ongoing"),
        allowed=lambda reply, w: (_no_error(reply, w), _assert_equal(w.transaction_state("x-26"), "CompleteAbort"))),
    ApiKey.TXN_OFFSET_COMMIT: Case(
        grants=[(R.TRANSACTIONAL_ID, "x-28", Op.WRITE), (R.GROUP, "g-28", Op.READ), (R.TOPIC, "t-28", Op.READ)],
        setup=lambda w: (w.create_topic("t-28"), w.init_transaction("x-28"), w.add_offsets("x-28", "g-28")),
        request=lambda v, cell: body(ApiKey.TXN_OFFSET_COMMIT, v, transactional_id="x-28", group_id="g-28",
                                     generation_id=-1, member_id="", group_instance_id=None, topics=[
            {"name": "t-28", "partitions": [item(ApiKey.TXN_OFFSET_COMMIT, v, ("topics", "partitions"),
                                                 partition_index=0, committed_offset=3, committed_metadata="")]}],
            **_producer_of("x-28")),
        refused=_only(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        unchanged=lambda w: _assert_equal(w.pending_offsets("g-28", "t-28"), []),
        allowed=lambda reply, w: (_no_error(reply, w), _assert_equal(w.pending_offsets("g-28", "t-28"), [0]))),
    ApiKey.WRITE_TXN_MARKERS: Case(
        grants=[(R.CLUSTER, CLUSTER, Op.CLUSTER_ACTION)],
        setup=lambda w: w.create_topic("t-27"),
        request=lambda v, cell: body(ApiKey.WRITE_TXN_MARKERS, v, markers=[
            item(ApiKey.WRITE_TXN_MARKERS, v, ("markers",), producer_id=990027, producer_epoch=0,
                 transaction_result=False, coordinator_epoch=0, topics=[{"name": "t-27", "partition_indexes": [0]}])]),
        refused=_only(E.CLUSTER_AUTHORIZATION_FAILED),
        unchanged=lambda w: _assert_equal(w.end_offset("t-27"), 0)),
    ApiKey.DESCRIBE_PRODUCERS: Case(
        grants=[(R.TOPIC, "t-61", Op.READ)],
        setup=lambda w: (w.create_topic("t-61"), w.produce("t-61")),
        request=lambda v, cell: body(ApiKey.DESCRIBE_PRODUCERS, v, topics=[{"name": "t-61", "partition_indexes": [0]}]),
        refused=lambda reply, w: (_only(E.TOPIC_AUTHORIZATION_FAILED)(reply, w),
                                  _assert_equal(list(reply.topics[0].partitions[0].active_producers), []))),
    ApiKey.DESCRIBE_TRANSACTIONS: Case(
        grants=[(R.TRANSACTIONAL_ID, "x-65", Op.DESCRIBE)],
        setup=lambda w: w.init_transaction("x-65"),
        request=lambda v, cell: body(ApiKey.DESCRIBE_TRANSACTIONS, v, transactional_ids=["x-65"]),
        refused=lambda reply, w: (_only(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)(reply, w),
                                  _assert_equal(reply.transaction_states[0].producer_id, -1)),
        allowed=lambda reply, w: _assert_equal((reply.transaction_states[0].error_code,
                                                reply.transaction_states[0].transaction_state), (0, "Empty"))),
    ApiKey.LIST_TRANSACTIONS: Case(
        grants=[(R.TRANSACTIONAL_ID, "x-66", Op.DESCRIBE)],
        setup=lambda w: w.init_transaction("x-66"),
        request=lambda v, cell: body(ApiKey.LIST_TRANSACTIONS, v, state_filters=[], producer_id_filters=[]),
        refused=lambda reply, w: _assert_equal(
            (reply.error_code, "x-66" in {s.transactional_id for s in reply.transaction_states}), (0, False)),
        allowed=lambda reply, w: _assert_equal(
            (reply.error_code, "x-66" in {s.transactional_id for s in reply.transaction_states}), (0, True))),
    # Served to everyone: the SASL exchange's own state rules apply (test_security_outcomes).
    ApiKey.API_VERSIONS: Case(grants=[], request=lambda v, cell: body(ApiKey.API_VERSIONS, v,
                                                                        client_software_name="matrix",
                                                                        client_software_version="1"),
                              refused=_no_error, allowed=_no_error),
    ApiKey.SASL_AUTHENTICATE: Case(grants=[], request=lambda v, cell: body(ApiKey.SASL_AUTHENTICATE, v,
                                                                            auth_bytes=b"x"),
                                   refused=_only(E.ILLEGAL_SASL_STATE), allowed=_only(E.ILLEGAL_SASL_STATE)),
}
OPEN_APIS = {ApiKey.API_VERSIONS, ApiKey.SASL_AUTHENTICATE, ApiKey.SASL_HANDSHAKE}


def _group_config(world: World, group: str, name: str) -> str | None:
    return {c.name: c.value for c in world.admin.describe_configs(RESOURCE_GROUP, group)}[name]


#: The config APIs on GROUP resources (KIP-848 group configs): Kafka asks DESCRIBE_CONFIGS or
#: ALTER_CONFIGS on the group and answers GROUP_AUTHORIZATION_FAILED for that resource.
GROUP_CONFIG_CASES: dict[str, tuple[int, Case]] = {
    "describe-group-configs": (ApiKey.DESCRIBE_CONFIGS, Case(
        grants=[(R.GROUP, "g-cfg-1", Op.DESCRIBE_CONFIGS)],
        request=lambda v, cell: body(ApiKey.DESCRIBE_CONFIGS, v, resources=[
            item(ApiKey.DESCRIBE_CONFIGS, v, ("resources",), resource_type=RESOURCE_GROUP, resource_name="g-cfg-1",
                 configuration_keys=None)]),
        refused=lambda reply, w: (_only(E.GROUP_AUTHORIZATION_FAILED)(reply, w),
                                  _assert_equal(list(reply.results[0].configs), [])),
        allowed=lambda reply, w: (_no_error(reply, w),
                                  _assert_equal("kcoord.initial.offset" in {c.name for c in reply.results[0].configs},
                                                True)))),
    "alter-group-configs": (ApiKey.ALTER_CONFIGS, Case(
        grants=[(R.GROUP, "g-cfg-2", Op.ALTER_CONFIGS)],
        request=lambda v, cell: body(ApiKey.ALTER_CONFIGS, v, validate_only=False, resources=[
            item(ApiKey.ALTER_CONFIGS, v, ("resources",), resource_type=RESOURCE_GROUP, resource_name="g-cfg-2",
                 configs=[{"name": "kcoord.initial.offset", "value": "latest"}])]),
        refused=_only(E.GROUP_AUTHORIZATION_FAILED),
        unchanged=lambda w: _assert_equal(_group_config(w, "g-cfg-2", "kcoord.initial.offset"), "none"),
        allowed=_no_error)),
    "incremental-alter-group-configs": (ApiKey.INCREMENTAL_ALTER_CONFIGS, Case(
        grants=[(R.GROUP, "g-cfg-3", Op.ALTER_CONFIGS)],
        request=lambda v, cell: body(ApiKey.INCREMENTAL_ALTER_CONFIGS, v, validate_only=False, resources=[
            item(ApiKey.INCREMENTAL_ALTER_CONFIGS, v, ("resources",), resource_type=RESOURCE_GROUP,
                 resource_name="g-cfg-3",
                 configs=[{"name": "kcoord.offset.out.of.range", "config_operation": 0, "value": "nearest"}])]),
        refused=_only(E.GROUP_AUTHORIZATION_FAILED),
        unchanged=lambda w: _assert_equal(_group_config(w, "g-cfg-3", "kcoord.offset.out.of.range"), "none"),
        allowed=_no_error)),
}


def _assert_equal(actual: Any, expected: Any) -> None:
    assert actual == expected, (actual, expected)


# ---------------------------------------------------------------------- running it


def _principals(key: int | str) -> dict[str, str]:
    return {"nobody": f"nobody-{key}", "deny": f"deny-{key}", "allowed": f"allowed-{key}", "admin": ADMIN}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("matrix")
    names = {ADMIN} | {name for key in [*ApiKey, *GROUP_CONFIG_CASES] for name in _principals(key).values()}
    users = tmp / "users.txt"
    users.write_text("".join(f"SCRAM-SHA-256=[name={n},password={PASSWORD}]\n" for n in sorted(names)))
    broker = BrokerProcess(tmp / "data", {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN}",
        "scram.credentials.bootstrap.file": users,
        "group.initial.rebalance.delay.ms": 0,
        "connection.failed.authentication.delay.ms": 0,
    }).start()
    admin = AdminClient(broker.bootstrap, security=ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", ADMIN, PASSWORD))
    try:
        yield World(broker, admin)
    finally:
        admin.close()
        broker.stop()


def _served(world: World) -> dict[int, int]:
    """API -> highest version, from the broker's own ApiVersions (the router's table)."""
    conn = world.admin.any_broker()
    return {key: high for key, (_, high) in conn.versions.items()}


def test_every_served_api_has_a_rule_and_a_case(world: World) -> None:
    served = _served(world)
    assert not [ApiKey(k).name for k in served if k not in RULES], "APIs served without an authorization rule"
    missing = [ApiKey(k).name for k in served if k not in CASES and k not in OPEN_APIS - {ApiKey.API_VERSIONS}]
    assert not missing, f"APIs served without an authorization matrix case: {missing}"
    for key in OPEN_APIS:
        assert RULES[key].check is None
    for key in set(served) - OPEN_APIS:
        assert RULES[key].check is not None and RULES[key].needs, ApiKey(key).name


def _session(world: World, user: str) -> WireClient:
    host, _, port = world.broker.bootstrap.rpartition(":")
    client = WireClient(host, int(port))
    assert login_plain(client, user, PASSWORD).error_code == 0
    return client


@pytest.mark.parametrize("key", sorted(CASES), ids=lambda k: ApiKey(k).name)
def test_authorization_matrix(world: World, key: int) -> None:
    served = _served(world)
    if key not in served:
        pytest.skip(f"{ApiKey(key).name} is not served by this broker")
    _run_cells(world, key, served[key], CASES[key], _principals(key))


@pytest.mark.parametrize("name", sorted(GROUP_CONFIG_CASES))
def test_authorization_matrix_of_group_config_resources(world: World, name: str) -> None:
    key, case = GROUP_CONFIG_CASES[name]
    _run_cells(world, key, _served(world)[key], case, _principals(name))


def _run_cells(world: World, key: int, version: int, case: Case, principals: dict[str, str]) -> None:
    case.setup(world)
    world.grant(f"User:{principals['allowed']}", case.grants, pattern=case.grant_pattern)
    world.grant(f"User:{principals['deny']}", case.grants, pattern=case.grant_pattern)
    world.grant(f"User:{principals['deny']}", case.grants, AclPermissionType.DENY, pattern=case.grant_pattern)
    for cell in CELLS:
        with _session(world, principals[cell]) as client:
            reply = client.request(key, version, case.request(version, cell))
        if cell in ("nobody", "deny"):
            case.refused(reply, world)
            case.unchanged(world)
        else:
            case.allowed(reply, world)


def test_sasl_handshake_after_login_reauthenticates_every_principal(world: World) -> None:
    """SaslHandshake is never authorized: after a login it starts re-authentication (KIP-368)."""
    for user in _principals(ApiKey.SASL_HANDSHAKE).values():
        with _session(world, user) as client:
            assert login_plain(client, user, PASSWORD).error_code == 0
            assert client.request(ApiKey.METADATA, 1, {"topics": []}).brokers


def test_denials_are_audited(world: World) -> None:
    world.broker.wait_for_log(r"logger=kcoord\.audit authorization denied principal=User:nobody-\d+ host=127\.0\.0\.1")


def test_acl_binding_strings_are_stable() -> None:
    """Audit lines name bindings the same way every time."""
    from security.acl import AccessControlEntry, ResourcePattern
    binding = AclBinding(ResourcePattern(R.TOPIC, "t", PatternType.LITERAL),
                         AccessControlEntry("User:a", "*", Op.READ, AclPermissionType.ALLOW))
    assert str(binding) == "(principal=User:a, host=*, operation=READ, permission=ALLOW) on TOPIC:LITERAL:t"

