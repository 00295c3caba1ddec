"""A fake-clock driver for the sans-IO group coordinator.

Every request body is built exactly as the broker would hand it over: encoded with the
request schema at the given version and decoded again, then turned into a typed request by
the version adapter (``broker.coordinator.api``). Every reply is shaped by the adapter for
the request's version and checked to encode with the response schema. All replies are kept by ticket (a ticket
answered twice fails at once) and every record written is kept in order, so a test reads
as: state before, action, state after.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from broker.coordinator import CoordinatorConfig, Effects, GroupCoordinatorShard
from broker.coordinator.api import BINDINGS, Binding, Rejected
from broker.coordinator.classic.group import ClassicGroup
from broker.coordinator.classic.state import ClassicGroupState
from broker.coordinator.modern.consumer.group import ConsumerGroup
from broker.coordinator.records import encode as encode_record
from broker.coordinator.requests import ClientInfo
from protocol.codec import decode_body, encode_body
from protocol.consumer_offsets import (
    GroupKey,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from protocol.errors import ErrorCode
from protocol.messages import (
    RESPONSES,
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from protocol.schema import Message

E = ErrorCode
S = ClassicGroupState
GroupState = ClassicGroupState
Group = ClassicGroup

DEFAULT_CLIENT = ClientInfo("client", "/127.0.0.1")
START = 1_000_000_000  # epoch ms the fake clock starts at
CONSUMER = "consumer"
RANGE = (("range", b"range-meta"),)


def body_of(message: Message, version: int, fields: dict[str, Any]) -> Any:
    """A request body exactly as the broker's decoder would produce it."""
    return decode_body(message, version, encode_body(message, version, fields))


@dataclass(frozen=True)
class _Partitions:
    """A topics view answering from a test's function."""

    exists: Callable[[str, int], bool]

    def partition_exists(self, topic: str, partition: int) -> bool:
        return self.exists(topic, partition)

    def partitions_of(self, topic: str) -> _Indexes:
        return _Indexes(topic, self.exists)


@dataclass(frozen=True)
class _Indexes:
    """A topic's partitions as the test's function answers for them."""

    topic: str
    exists: Callable[[str, int], bool]

    def __contains__(self, partition: object) -> bool:
        return isinstance(partition, int) and self.exists(self.topic, partition)


class IdCounter:
    """Deterministic member id suffixes: 1, 2, 3, ..."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return str(self.n)


@dataclass
class Harness:
    config: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    now: int = START

    def __post_init__(self) -> None:
        self.ids = IdCounter()
        self.coord = GroupCoordinatorShard(self.config, new_id=self.ids)
        self.replies: dict[int, dict[str, Any]] = {}
        self.records: list[tuple[bytes, bytes | None]] = []
        self.last: Effects = Effects()
        self._ticket = 0
        # ticket -> (binding, response message, version): how its reply is shaped and checked
        self._sent: dict[int, tuple[Binding, Message, int]] = {}

    # ------------------------------------------------------------ plumbing

    @classmethod
    def with_config(cls, **settings: Any) -> Harness:
        return cls(CoordinatorConfig(**settings))

    def ticket(self) -> int:
        self._ticket += 1
        return self._ticket

    def apply(self, fx: Effects) -> Effects:
        for records in fx.records.values():
            self.records.extend(encode_record(r) for r in records)
        for ticket, result in fx.replies:
            sent = self._sent.get(ticket)
            assert sent is not None, f"reply for a ticket never sent: {ticket}"
            binding, message, version = sent
            body = binding.encode(version, result)
            assert ticket not in self.replies, f"ticket {ticket} answered twice: {self.replies[ticket]} / {body}"
            # The reply must be encodable at the request's version, as the broker will encode it.
            decode_body(message, version, encode_body(message, version, body))
            self.replies[ticket] = body
        self.last = fx
        return fx

    def request(self, message: Message, version: int, fields: dict[str, Any] | Any, *,
                client: ClientInfo = DEFAULT_CLIENT,
                partition_exists: Callable[[str, int], bool] | None = None) -> int:
        """Send one request (fields, or a body as the broker decoded it) through the adapter; returns its ticket."""
        body = body_of(message, version, fields) if isinstance(fields, dict) else fields
        binding = BINDINGS[message.api_key]
        response = RESPONSES[message.api_key]
        t = self.ticket()
        self._sent[t] = (binding, response, version)
        typed = binding.decode(version, body, client)
        if isinstance(typed, Rejected):
            fx = Effects()
            fx.reply(t, typed.result)
            self.apply(fx)
            return t
        saved = self.coord.topics
        if partition_exists is not None:
            self.coord.topics = _Partitions(partition_exists)
        try:
            self.apply(binding.handle(self.coord, t, self.now, typed))
        finally:
            self.coord.topics = saved
        return t

    def request_now(self, message: Message, version: int, fields: dict[str, Any] | Any,
                    **kw: Any) -> dict[str, Any]:
        """``request`` for an API that always answers at once; returns the reply body."""
        t = self.request(message, version, fields, **kw)
        assert t in self.replies, f"{message.name} was parked"
        return self.replies[t]

    def reply(self, ticket: int) -> dict[str, Any] | None:
        return self.replies.get(ticket)

    def answered(self, ticket: int) -> bool:
        return ticket in self.replies

    def error(self, ticket: int) -> ErrorCode:
        body = self.replies[ticket]
        return ErrorCode(body["error_code"])

    def parked(self) -> list[int]:
        return [t for t in self._sent if t not in self.replies]

    # ------------------------------------------------------------ clock

    def advance(self, ms: int) -> Effects:
        """Move the clock forward, firing each deadline at its own time (as a real timer would)."""
        target = self.now + ms
        fx = Effects()
        while True:
            deadline = self.coord.next_deadline()
            if deadline is None or deadline > target:
                break
            self.now = max(self.now, deadline)
            fx.merge(self.apply(self.coord.on_time(self.now)))
        self.now = target
        fx.merge(self.apply(self.coord.on_time(self.now)))
        self.last = fx
        return fx

    def advance_to(self, when: int) -> Effects:
        assert when >= self.now
        return self.advance(when - self.now)

    def run_timers(self, limit: int = 10_000) -> None:
        """Fire every deadline until none is left (or ``limit`` steps)."""
        for _ in range(limit):
            deadline = self.coord.next_deadline()
            if deadline is None:
                return
            self.advance_to(max(deadline, self.now))

    # ------------------------------------------------------------ requests

    def join(self, group: str, member_id: str = "", *, version: int = 5, instance: str | None = None,
             session: int = 10_000, rebalance: int = 30_000,
             protocols: Iterable[tuple[str, bytes]] = RANGE, protocol_type: str = CONSUMER,
             client_id: str = "client", client_host: str = "/127.0.0.1", reason: str | None = None) -> int:
        fields: dict[str, Any] = {
            "group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": rebalance,
            "member_id": member_id, "group_instance_id": instance, "protocol_type": protocol_type,
            "protocols": [{"name": n, "metadata": m} for n, m in protocols], "reason": reason,
        }
        return self.request(JoinGroupRequest, version, fields, client=ClientInfo(client_id, client_host))

    def sync(self, group: str, member_id: str, generation: int, *, version: int = 3,
             instance: str | None = None, assignments: dict[str, bytes] | None = None,
             protocol_type: str | None = CONSUMER, protocol_name: str | None = "range") -> int:
        fields = {
            "group_id": group, "generation_id": generation, "member_id": member_id,
            "group_instance_id": instance, "protocol_type": protocol_type, "protocol_name": protocol_name,
            "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
        }
        return self.request(SyncGroupRequest, version, fields)

    def heartbeat(self, group: str, member_id: str, generation: int, *, version: int = 3,
                  instance: str | None = None) -> ErrorCode:
        reply = self.request_now(HeartbeatRequest, version, {
            "group_id": group, "generation_id": generation, "member_id": member_id,
            "group_instance_id": instance})
        return ErrorCode(reply["error_code"])

    def leave(self, group: str, member_id: str = "", *, version: int = 3,
              members: list[tuple[str, str | None]] | None = None) -> dict[str, Any]:
        """v0-2: ``member_id``; v3+: ``members`` [(member_id, instance)] (default [(member_id, None)])."""
        if version >= 3:
            listed = members if members is not None else [(member_id, None)]
            fields: dict[str, Any] = {"group_id": group, "members": [
                {"member_id": m, "group_instance_id": i, "reason": None} for m, i in listed]}
        else:
            fields = {"group_id": group, "member_id": member_id}
        return self.request_now(LeaveGroupRequest, version, fields)

    def commit(self, group: str, offsets: dict[tuple[str, int], int | tuple[int, str | None]], *,
               member_id: str = "", generation: int = -1, instance: str | None = None, version: int = 7,
               retention: int = -1, commit_timestamp: int = -1, leader_epoch: int = -1,
               partition_exists: Callable[[str, int], bool] | None = None) -> dict[tuple[str, int], ErrorCode]:
        """Commit {(topic, partition): offset or (offset, metadata)}; returns errors by partition."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), spec in offsets.items():
            offset, metadata = spec if isinstance(spec, tuple) else (spec, "")
            topics.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": offset,
                "committed_leader_epoch": leader_epoch, "commit_timestamp": commit_timestamp,
                "committed_metadata": metadata})
        fields = {
            "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
            "group_instance_id": instance, "retention_time_ms": retention,
            "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()],
        }
        reply = self.request_now(OffsetCommitRequest, version, fields, partition_exists=partition_exists)
        return {(tp["name"], p["partition_index"]): ErrorCode(p["error_code"])
                for tp in reply["topics"] for p in tp["partitions"]}

    def fetch(self, group: str, topics: dict[str, list[int]] | None, *, version: int = 7) -> dict[str, Any]:
        if version >= 8:
            fields: dict[str, Any] = {"groups": [{"group_id": group, "topics": None if topics is None else [
                {"name": n, "partition_indexes": ps} for n, ps in topics.items()]}], "require_stable": False}
        else:
            fields = {"group_id": group, "require_stable": False, "topics": None if topics is None else [
                {"name": n, "partition_indexes": ps} for n, ps in topics.items()]}
        return self.fetch_raw(fields, version)

    def fetch_raw(self, fields: dict[str, Any], version: int) -> dict[str, Any]:
        return self.request_now(OffsetFetchRequest, version, fields)

    def describe(self, *groups: str, version: int = 5) -> list[dict[str, Any]]:
        reply = self.request_now(DescribeGroupsRequest, version, {
            "groups": list(groups), "include_authorized_operations": False})
        return list(reply["groups"])

    def list_groups(self, states: list[str] | None = None, *, version: int = 4) -> list[dict[str, Any]]:
        reply = self.request_now(ListGroupsRequest, version, {"states_filter": states or []})
        assert reply["error_code"] == 0
        return list(reply["groups"])

    def delete_groups(self, *groups: str, version: int = 2) -> dict[str, ErrorCode]:
        reply = self.request_now(DeleteGroupsRequest, version, {"groups_names": list(groups)})
        return {r["group_id"]: ErrorCode(r["error_code"]) for r in reply["results"]}

    def cg_heartbeat(self, group: str, member_id: str, epoch: int, *, instance: str | None = None,
                      rack: str | None = None, rebalance: int = -1, topics: list[str] | None = None,
                      regex: str | None = None, assignor: str | None = None,
                      owned: list[dict[str, Any]] | None = None, version: int = 1,
                      client: ClientInfo = DEFAULT_CLIENT) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "group_id": group, "member_id": member_id, "member_epoch": epoch, "instance_id": instance,
            "rack_id": rack, "rebalance_timeout_ms": rebalance, "subscribed_topic_names": topics,
            "subscribed_topic_regex": regex, "server_assignor": assignor, "topic_partitions": owned,
        }
        return self.request_now(ConsumerGroupHeartbeatRequest, version, fields, client=client)

    # ------------------------------------------------------------ scenarios

    def new_member(self, group: str, *, version: int = 5, **kw: Any) -> tuple[str, int]:
        """Join as a new member (doing the KIP-394 MEMBER_ID_REQUIRED round trip for dynamic v4+).

        Returns (member id, ticket of the join now parked or answered)."""
        t = self.join(group, version=version, **kw)
        reply = self.reply(t)
        if version >= 4 and kw.get("instance") is None:
            assert reply is not None and reply["error_code"] == E.MEMBER_ID_REQUIRED, reply
            member_id = reply["member_id"]
            t = self.join(group, member_id, version=version, **kw)
            return member_id, t
        g = self.coord.groups[group]
        if reply is not None and reply["error_code"] == 0:
            return reply["member_id"], t
        # Parked: the member is the one holding this ticket.
        member_id = next(m.member_id for m in g.members.values() if m.join_ticket == t)
        return member_id, t

    def stable_group(self, group: str, count: int = 2, *, instances: list[str | None] | None = None,
                     version: int = 5, session: int = 10_000, rebalance: int = 30_000,
                     protocols: Iterable[tuple[str, bytes]] = RANGE,
                     assign: Callable[[str], bytes] = lambda m: b"assign-" + m.encode()) -> list[str]:
        """A Stable group of ``count`` members (first is leader); returns their member ids."""
        instances = instances or [None] * count
        members: list[str] = []
        tickets: list[int] = []
        for i, inst in enumerate(instances):
            m, t = self.new_member(group, version=version, instance=inst, client_id=f"c{i}",
                                   session=session, rebalance=rebalance, protocols=protocols)
            members.append(m)
            tickets.append(t)
        self.run_join_phase(group)
        generation = self.generation(group)
        leader = self.group(group).leader
        assert leader is not None
        order = [leader] + [m for m in members if m != leader]
        for m in order:
            self.sync(group, m, generation, instance=self.group(group).members[m].group_instance_id,
                      protocol_name=self.group(group).protocol,
                      assignments={x: assign(x) for x in members} if m == leader else None)
        assert self.state(group) is S.STABLE
        return order

    def consumer_group(self, group: str, subscriptions: list[bytes], *, protocol_type: str = "consumer",
                       **member: Any) -> list[str]:
        """A Stable group whose members carry the given subscription bytes (one member each,
        in order); ``member`` goes to ``new_member`` (e.g. session, rebalance). Returns ids."""
        members = []
        for i, subscription in enumerate(subscriptions):
            m, _ = self.new_member(group, client_id=f"c{i}", protocols=[("range", subscription)],
                                   protocol_type=protocol_type, **member)
            members.append(m)
        self.run_join_phase(group)
        generation = self.generation(group)
        leader = self.group(group).leader
        assert leader is not None
        for m in [leader] + [x for x in members if x != leader]:
            self.sync(group, m, generation, protocol_type=protocol_type,
                      assignments={x: b"" for x in members} if m == leader else None)
        assert self.state(group) is S.STABLE
        return members

    def run_join_phase(self, group: str) -> None:
        """Advance the clock until the group leaves PreparingRebalance."""
        for _ in range(100):
            if self.state(group) is not S.PREPARING_REBALANCE:
                return
            deadline = self.coord.next_deadline()
            assert deadline is not None
            self.advance_to(max(deadline, self.now))
        raise AssertionError("join phase never completed")

    # ------------------------------------------------------------ inspection

    def group(self, group: str) -> Group:
        return self.coord.groups[group]

    def state(self, group: str) -> GroupState | None:
        g = self.coord.groups.get(group)
        return None if g is None else g.state

    def generation(self, group: str) -> int:
        return self.coord.groups[group].generation

    def decoded_records(self, since: int = 0) -> list[tuple[Any, Any]]:
        """(key, value) decoded: OffsetKey -> OffsetValue, GroupKey -> Container, value None = tombstone."""
        out: list[tuple[Any, Any]] = []
        for key, value in self.records[since:]:
            k = decode_key(key)
            if value is None:
                out.append((k, None))
            elif isinstance(k, OffsetKey):
                out.append((k, decode_offset_value(value)))
            elif isinstance(k, GroupKey):
                out.append((k, decode_group_value(value)))
            else:
                out.append((k, value))
        return out

    def group_records(self, group: str, since: int = 0) -> list[Any]:
        return [v for k, v in self.decoded_records(since) if isinstance(k, GroupKey) and k.group == group]

    def replayed(self, config: CoordinatorConfig | None = None, now: int | None = None) -> Harness:
        """A fresh harness whose coordinator replayed every record written so far (a restart)."""
        fresh = Harness(config or self.config, now=self.now if now is None else now)
        fresh.ids.n = self.ids.n + 1000
        for key, value in self.records:
            fresh.coord.replay_bytes(key, value)
        fresh.records = list(self.records)
        fresh.apply(fresh.coord.finish_load(fresh.now))
        return fresh


# ---------------------------------------------------------------- KIP-848 consumer groups


def topic_id(name: str) -> uuid.UUID:
    """The id ``StaticImage.of`` gives a topic."""
    return uuid.uuid5(uuid.NAMESPACE_URL, name)


def partitions_of(reply: dict[str, Any]) -> set[tuple[uuid.UUID, int]] | None:
    """The assignment in a ConsumerGroupHeartbeat reply, or None when the reply carries none."""
    assignment = reply.get("assignment")
    if assignment is None:
        return None
    return {(tp["topic_id"], p) for tp in assignment["topic_partitions"] for p in tp["partitions"]}


@dataclass
class ConsumerClient:
    """A KIP-848 consumer as librdkafka behaves: it keeps what it is given, gives up what it loses
    (acknowledging on its next heartbeat), and rejoins at epoch 0 when fenced."""

    h: Harness
    group: str
    member_id: str
    topics: list[str] | None = None
    regex: str | None = None
    instance: str | None = None
    rebalance: int = 30_000
    assignor: str | None = None
    epoch: int = 0
    owned: set[tuple[uuid.UUID, int]] = field(default_factory=set)
    last: dict[str, Any] = field(default_factory=dict)
    revoked: list[set[tuple[uuid.UUID, int]]] = field(default_factory=list)

    def owned_wire(self) -> list[dict[str, Any]]:
        by_topic: dict[uuid.UUID, list[int]] = {}
        for t, p in sorted(self.owned, key=lambda tp: (str(tp[0]), tp[1])):
            by_topic.setdefault(t, []).append(p)
        return [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()]

    def heartbeat(self, *, full: bool = False) -> dict[str, Any]:
        joining = self.epoch == 0
        reply = self.h.cg_heartbeat(
            self.group, self.member_id, self.epoch, instance=self.instance,
            rebalance=self.rebalance if joining or full else -1,
            topics=self.topics if joining or full else None,
            regex=self.regex if joining or full else None,
            assignor=self.assignor if joining or full else None,
            owned=[] if joining else self.owned_wire())
        self.last = reply
        error = ErrorCode(reply["error_code"])
        if error in (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID):
            if self.owned:
                self.revoked.append(set(self.owned))
            self.owned = set()
            self.epoch = 0
            return reply
        if error is not E.NONE:
            return reply
        self.epoch = reply["member_epoch"]
        assigned = partitions_of(reply)
        if assigned is not None:
            lost = self.owned - assigned
            if lost:
                self.revoked.append(lost)
            self.owned = assigned
        return reply

    def leave(self, *, static: bool = False) -> dict[str, Any]:
        reply = self.h.cg_heartbeat(self.group, self.member_id, -2 if static else -1, instance=self.instance)
        self.owned = set()
        self.epoch = 0
        return reply




def consumer_group(h: Harness, group: str) -> ConsumerGroup:
    g = h.coord.groups[group]
    assert isinstance(g, ConsumerGroup), g
    return g
