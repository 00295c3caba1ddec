"""A small blocking Kafka admin client built on the project's own codecs.

It talks to any Kafka-compatible broker (kcoord or Apache Kafka): it bootstraps from a
list of ``host:port``, negotiates every API's version with ApiVersions (the highest both
sides speak), finds partition leaders with Metadata and group coordinators with
FindCoordinator, and retries the coordinator errors a client is expected to retry.
Every failure leaves as an ``AdminError`` carrying the command's exit code.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from admin.errors import BrokerError, GroupStateError, UnreachableError, UsageError, error_name
from admin.security import ClientSecurity, authenticate, wrap
from protocol.codec import decode_response, encode_request
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import REQUESTS

E = ErrorCode
TopicPartition = tuple[str, int]
T = TypeVar("T")

API_VERSIONS = 18
PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
CREATE_PARTITIONS = 37
DELETE_GROUPS = 42
INCREMENTAL_ALTER_CONFIGS = 44
OFFSET_DELETE = 47
CONSUMER_GROUP_DESCRIBE = 69

#: ConfigResource types and IncrementalAlterConfigs operations (Kafka's ids).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32  # KIP-848's group configs (Kafka's ConfigResource.Type.GROUP)
CONFIG_SET = 0
CONFIG_DELETE = 1
#: DescribeConfigs config_source ids, by Kafka's names.
CONFIG_SOURCES = {0: "UNKNOWN", 1: "TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                  4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
                  7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1

#: Errors after which the group's coordinator is looked up again and the request retried.
COORDINATOR_RETRIABLE = frozenset({E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE,
                                   E.NOT_COORDINATOR})
#: Errors after which partition leaders are looked up again and ListOffsets retried.
LEADER_RETRIABLE = frozenset({E.NOT_LEADER_OR_FOLLOWER, E.LEADER_NOT_AVAILABLE, E.REPLICA_NOT_AVAILABLE,
                              E.UNKNOWN_LEADER_EPOCH, E.FENCED_LEADER_EPOCH, E.OFFSET_NOT_AVAILABLE,
                              E.KAFKA_STORAGE_ERROR})
#: Errors meaning "this group has live members": an admin commit is refused.
ACTIVE_GROUP_ERRORS = frozenset({E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION, E.REBALANCE_IN_PROGRESS,
                                 E.FENCED_INSTANCE_ID})

CLIENT_ID = "kcoord-admin"
_SIZE = struct.Struct(">i")


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]`` (IPv6 hosts in brackets) as a list of addresses."""
    addresses = []
    for item in text.split(","):
        item = item.strip()
        host, sep, port = item.rpartition(":")
        if not item or not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"--bootstrap-server: {item!r} is not HOST:PORT")
        addresses.append((host.strip("[]"), int(port)))
    return addresses


def _reason(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out"
    return (exc.strerror or str(exc) or type(exc).__name__).lower()


class Connection:
    """One socket to one broker, one request in flight, versions negotiated on connect."""

    def __init__(self, host: str, port: int, timeout: float, security: ClientSecurity | None = None) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.correlation_id = 0
        security = security or ClientSecurity()
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock = wrap(sock, host, security)
        except OSError as exc:
            raise UnreachableError(f"cannot reach {self.address}: {_reason(exc)}") from None
        self.versions: dict[int, tuple[int, int]] = {}
        self._negotiate()
        if security.sasl:
            authenticate(security, lambda key, version, body: self.request(key, body, version)[1], self.address)

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def close(self) -> None:
        self.sock.close()

    # ------------------------------------------------------------------ framing

    def _roundtrip(self, api_key: int, version: int, body: dict[str, Any]) -> bytes:
        self.correlation_id += 1
        frame = encode_request(api_key, version, self.correlation_id, body, CLIENT_ID)
        try:
            self.sock.sendall(frame)
            (size,) = _SIZE.unpack(self._recv_exactly(4))
            return self._recv_exactly(size)
        except TimeoutError:
            raise UnreachableError(f"no answer from {self.address} within {self.timeout:g} s") from None
        except OSError as exc:
            raise UnreachableError(f"lost the connection to {self.address}: {_reason(exc)}") from None

    def _recv_exactly(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionResetError(0, "closed by the broker")
            data += chunk
        return bytes(data)

    def _negotiate(self) -> None:
        """ApiVersions at our newest version; a broker that does not know it answers v0."""
        ours = REQUESTS[API_VERSIONS].max_version
        body = {"client_software_name": CLIENT_ID, "client_software_version": "1"}
        frame = self._roundtrip(API_VERSIONS, ours, body)
        try:
            _, reply = decode_response(API_VERSIONS, ours, frame)
        except ProtocolError:
            reply = None
        if reply is None or reply.error_code == E.UNSUPPORTED_VERSION:
            frame = self._roundtrip(API_VERSIONS, 0, {})
            _, reply = self._decode(API_VERSIONS, 0, frame)
        if reply.error_code != E.NONE:
            raise BrokerError(f"ApiVersions to {self.address} failed", reply.error_code)
        self.versions = {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in reply.api_keys}

    def _decode(self, api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
        try:
            return decode_response(api_key, version, frame)
        except ProtocolError as exc:
            raise BrokerError(f"cannot read the answer of {self.address}: {exc}") from None

    def version(self, api_key: int) -> int:
        """The highest version of an API both this client and the broker speak."""
        message = REQUESTS[api_key]
        theirs = self.versions.get(api_key)
        name = message.name.removesuffix("Request")
        if theirs is None:
            raise BrokerError(f"the broker at {self.address} does not serve {name}")
        low, high = max(theirs[0], message.min_version), min(theirs[1], message.max_version)
        if low > high:
            raise BrokerError(
                f"the broker at {self.address} serves {name} v{theirs[0]}-{theirs[1]}, "
                f"this client speaks v{message.min_version}-{message.max_version}")
        return high

    def send_only(self, api_key: int, body: dict[str, Any]) -> None:
        """Send a request the broker does not answer (Produce with acks=0)."""
        self.correlation_id += 1
        frame = encode_request(api_key, self.version(api_key), self.correlation_id, body, CLIENT_ID)
        try:
            self.sock.sendall(frame)
        except OSError as exc:
            raise UnreachableError(f"lost the connection to {self.address}: {_reason(exc)}") from None

    def request(self, api_key: int, body: dict[str, Any], version: int | None = None) -> tuple[int, Any]:
        """Send ``body`` at the negotiated version; (version, decoded response body)."""
        if version is None:
            version = self.version(api_key)
        frame = self._roundtrip(api_key, version, body)
        correlation_id, reply = self._decode(api_key, version, frame)
        if correlation_id != self.correlation_id:
            raise BrokerError(f"{self.address} answered correlation id {correlation_id}, "
                              f"expected {self.correlation_id}")
        return version, reply


# ---------------------------------------------------------------------- results


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...] = ()


@dataclass
class Cluster:
    """What Metadata said: brokers, and for each topic its error and partition leaders."""

    brokers: dict[int, Node]
    topic_errors: dict[str, int]
    leaders: dict[str, dict[int, int]]  # topic -> partition -> leader node id
    controller: int = -1
    partitions: dict[str, list[PartitionInfo]] = field(default_factory=dict)
    internal: set[str] = field(default_factory=set)
    topic_ids: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ConfigValue:
    """One config as DescribeConfigs reported it."""

    name: str
    value: str | None
    source: str
    read_only: bool = False
    sensitive: bool = False
    synonyms: tuple[tuple[str, str | None, str], ...] = ()

    @property
    def is_default(self) -> bool:
        return self.source == "DEFAULT_CONFIG"


@dataclass(frozen=True)
class TopicResult:
    """One topic's answer to CreateTopics, DeleteTopics, CreatePartitions or an alter."""

    name: str
    error: int
    message: str | None = None


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


@dataclass(frozen=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str | None  # None when the broker's ListGroups is older than v4
    group_type: str | None = None  # "classic" or "consumer" (KIP-848); None before ListGroups v5


@dataclass(frozen=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes
    # Consumer group (KIP-848) members: epoch, subscription, current and target partitions.
    member_epoch: int | None = None
    subscription: list[str] | None = None
    partitions: list[tuple[str, int]] | None = None
    target: list[tuple[str, int]] | None = None


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[Member] = field(default_factory=list)
    coordinator: Node | None = None
    group_type: str = "classic"
    # Consumer groups (KIP-848): the group and target assignment epochs.
    group_epoch: int | None = None
    assignment_epoch: int | None = None


# ---------------------------------------------------------------------- the client


class AdminClient:
    """Group and offset administration against a cluster, in plain blocking calls."""

    def __init__(self, bootstrap: str, timeout: float = 10.0, retry_backoff: float = 0.1,
                 security: ClientSecurity | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.security = security
        self.timeout = timeout
        self.retry_backoff = retry_backoff
        self._connections: dict[tuple[str, int], Connection] = {}
        self._coordinators: dict[str, Node] = {}

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    # ------------------------------------------------------------------ connections

    def _connect(self, host: str, port: int) -> Connection:
        conn = self._connections.get((host, port))
        if conn is None:
            conn = Connection(host, port, self.timeout, self.security)
            self._connections[(host, port)] = conn
        return conn

    def any_broker(self) -> Connection:
        """A connection to the first bootstrap server that answers."""
        if self._connections:
            return next(iter(self._connections.values()))
        failures = []
        for host, port in self.bootstrap:
            try:
                return self._connect(host, port)
            except UnreachableError as exc:
                failures.append(exc.message)
        raise UnreachableError("; ".join(failures))

    def node(self, node: Node) -> Connection:
        return self._connect(node.host, node.port)

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout

    def _retry_or_raise(self, deadline: float, attempt: int, failure: BrokerError) -> None:
        if time.monotonic() + self.retry_backoff * attempt > deadline:
            raise failure
        time.sleep(min(self.retry_backoff * (2 ** attempt), 1.0))

    # ------------------------------------------------------------------ metadata

    def metadata(self, topics: Iterable[str] | None = None) -> Cluster:
        """Brokers and partition leaders; ``topics`` None means every topic."""
        conn = self.any_broker()
        version = conn.version(METADATA)
        wanted = None if topics is None else [{"name": t} for t in topics]
        if wanted is None and version == 0:
            wanted = []  # v0 spells "all topics" as an empty list
        _, reply = conn.request(METADATA, {
            "topics": wanted, "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False,
        }, version)
        brokers = {int(b.node_id): Node(int(b.node_id), b.host, int(b.port)) for b in reply.brokers}
        cluster = Cluster(brokers, {}, {}, int(reply.get("controller_id", -1)))
        for topic in reply.topics:
            if topic.name is None:
                continue
            cluster.topic_errors[topic.name] = int(topic.error_code)
            if topic.get("is_internal", False):
                cluster.internal.add(topic.name)
            if topic.get("topic_id") is not None:
                cluster.topic_ids[topic.name] = str(topic.topic_id)
            if topic.error_code == E.NONE:
                cluster.leaders[topic.name] = {int(p.partition_index): int(p.leader_id) for p in topic.partitions}
                cluster.partitions[topic.name] = sorted(
                    (PartitionInfo(int(p.partition_index), int(p.leader_id), tuple(p.replica_nodes),
                                   tuple(p.isr_nodes), tuple(p.get("offline_replicas", []) or []))
                     for p in topic.partitions), key=lambda info: info.partition)
        return cluster

    def partitions_of(self, topics: Iterable[str]) -> dict[str, list[int]]:
        """Each topic's partitions, in order; an unknown topic is a usage error."""
        names = sorted(set(topics))
        if not names:
            return {}
        cluster = self.metadata(names)
        result = {}
        for name in names:
            code = cluster.topic_errors.get(name, E.UNKNOWN_TOPIC_OR_PARTITION)
            if code == E.UNKNOWN_TOPIC_OR_PARTITION:
                raise UsageError(f"topic {name!r} does not exist")
            if code != E.NONE:
                raise BrokerError(f"Metadata for topic {name!r} failed", code)
            result[name] = sorted(cluster.leaders[name])
        return result

    # ------------------------------------------------------------------ coordinators

    def find_coordinator(self, group: str) -> Node:
        cached = self._coordinators.get(group)
        if cached is not None:
            return cached
        deadline = self._deadline()
        attempt = 0
        while True:
            conn = self.any_broker()
            version = conn.version(FIND_COORDINATOR)
            _, reply = conn.request(FIND_COORDINATOR, {"key": group, "key_type": 0, "coordinator_keys": [group]},
                                    version)
            if version >= 4:
                (found,) = reply.coordinators
            else:
                found = reply
            code = int(found.error_code)
            if code == E.NONE:
                node = Node(int(found.node_id), found.host, int(found.port))
                self._coordinators[group] = node
                return node
            failure = BrokerError(f"FindCoordinator for group {group!r} failed", code)
            if code not in COORDINATOR_RETRIABLE:
                raise failure
            attempt += 1
            self._retry_or_raise(deadline, attempt, failure)

    def _with_coordinator(self, group: str, what: str, call: Callable[[Connection], tuple[T, int]]) -> T:
        """Run ``call`` on the group's coordinator; retry while it answers a coordinator error.

        ``call`` returns (result, error code); a non-retriable error code is the caller's
        to interpret, so it is returned as part of the result.
        """
        deadline = self._deadline()
        attempt = 0
        while True:
            conn = self.node(self.find_coordinator(group))
            result, code = call(conn)
            if code not in COORDINATOR_RETRIABLE:
                return result
            self._coordinators.pop(group, None)
            attempt += 1
            self._retry_or_raise(deadline, attempt, BrokerError(f"{what} for group {group!r} failed", code))

    # ------------------------------------------------------------------ groups

    def list_groups(self, states: list[str] | None = None) -> list[ListedGroup]:
        """Every group of every broker (each coordinator lists its own), sorted by id.

        With ``states``, filtered by the broker (ListGroups v4+) or here, after a
        DescribeGroups, for older brokers.
        """
        cluster = self.metadata([])
        nodes = sorted(cluster.brokers.values(), key=lambda n: n.node_id)
        found: dict[str, ListedGroup] = {}
        stateless: list[str] = []
        connections = [self.node(n) for n in nodes] if nodes else [self.any_broker()]
        for conn in connections:
            version = conn.version(LIST_GROUPS)
            deadline = self._deadline()
            attempt = 0
            while True:
                _, reply = conn.request(LIST_GROUPS, {"states_filter": states or [], "types_filter": []}, version)
                code = int(reply.error_code)
                if code == E.NONE:
                    break
                failure = BrokerError(f"ListGroups on {conn.address} failed", code)
                if code not in COORDINATOR_RETRIABLE:
                    raise failure
                attempt += 1
                self._retry_or_raise(deadline, attempt, failure)
            for g in reply.groups:
                state = g.group_state if version >= 4 else None
                found[g.group_id] = ListedGroup(g.group_id, g.protocol_type, state,
                                                g.group_type if version >= 5 else None)
                if state is None:
                    stateless.append(g.group_id)
        if stateless:
            for group_id in stateless:
                found[group_id] = ListedGroup(group_id, found[group_id].protocol_type,
                                              self.describe_group(group_id).state, found[group_id].group_type)
        groups = sorted(found.values(), key=lambda g: g.group_id)
        if states:
            wanted = {s.lower() for s in states}
            groups = [g for g in groups if (g.state or "").lower() in wanted]
        return groups

    def describe_group(self, group: str) -> GroupDescription:
        """State, protocol and members; an unknown group is described as ``Dead``.

        DescribeGroups describes classic groups; a group it calls Dead may be a KIP-848
        consumer group, which ConsumerGroupDescribe describes (when the broker has it).
        """

        def call(conn: Connection) -> tuple[GroupDescription, int]:
            _, reply = conn.request(DESCRIBE_GROUPS, {"groups": [group], "include_authorized_operations": False})
            (described,) = reply.groups
            code = int(described.error_code)
            if (code == E.GROUP_ID_NOT_FOUND or described.group_state == "Dead") \
                    and CONSUMER_GROUP_DESCRIBE in conn.versions:
                consumer = self._consumer_group(conn, group)
                if consumer is not None:
                    return consumer, E.NONE
            if code == E.GROUP_ID_NOT_FOUND:
                return GroupDescription(group, "Dead", "", ""), E.NONE
            if code != E.NONE and code not in COORDINATOR_RETRIABLE:
                raise BrokerError(f"DescribeGroups for group {group!r} failed", code)
            members = [
                Member(m.member_id, m.get("group_instance_id"), m.client_id, m.client_host,
                       bytes(m.member_metadata), bytes(m.member_assignment))
                for m in described.members
            ]
            node = self._coordinators.get(group)
            return GroupDescription(group, described.group_state, described.protocol_type,
                                    described.protocol_data, members, node), code

        return self._with_coordinator(group, "DescribeGroups", call)

    def _consumer_group(self, conn: Connection, group: str) -> GroupDescription | None:
        _, reply = conn.request(CONSUMER_GROUP_DESCRIBE, {"group_ids": [group], "include_authorized_operations": False})
        (described,) = reply.groups
        code = int(described.error_code)
        if code == E.GROUP_ID_NOT_FOUND:
            return None
        if code != E.NONE:
            raise BrokerError(f"ConsumerGroupDescribe for group {group!r} failed", code)

        def partitions(assignment: Any) -> list[tuple[str, int]]:
            return sorted((tp.topic_name, int(p)) for tp in assignment.topic_partitions for p in tp.partitions)

        members = [
            Member(m.member_id, m.instance_id, m.client_id, m.client_host, b"", b"", m.member_epoch,
                   sorted(m.subscribed_topic_names) if m.subscribed_topic_regex is None
                   else [*sorted(m.subscribed_topic_names), f"/{m.subscribed_topic_regex}/"],
                   partitions(m.assignment), partitions(m.target_assignment))
            for m in described.members
        ]
        return GroupDescription(group, described.group_state, "consumer", described.assignor_name, members,
                                self._coordinators.get(group), "consumer", described.group_epoch,
                                described.assignment_epoch)

    def delete_group(self, group: str) -> None:
        def call(conn: Connection) -> tuple[int, int]:
            _, reply = conn.request(DELETE_GROUPS, {"groups_names": [group]})
            (result,) = reply.results
            return int(result.error_code), int(result.error_code)

        code = self._with_coordinator(group, "DeleteGroups", call)
        if code == E.NON_EMPTY_GROUP:
            raise GroupStateError(
                f"group {group!r} still has members ({error_name(code)}); stop its consumers, "
                "wait for the group to be Empty, then delete it")
        if code == E.GROUP_ID_NOT_FOUND:
            raise BrokerError(f"group {group!r} does not exist", code)
        if code != E.NONE:
            raise BrokerError(f"DeleteGroups for group {group!r} failed", code)

    # ------------------------------------------------------------------ offsets

    def fetch_offsets(self, group: str,
                      partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, CommittedOffset]:
        """The group's committed offsets (all of them when ``partitions`` is None)."""
        topics: list[dict[str, Any]] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(set(partitions)):
                by_topic.setdefault(topic, []).append(partition)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]

        def call(conn: Connection) -> tuple[Any, int]:
            version = conn.version(OFFSET_FETCH)
            if topics is None and version < 2:
                raise BrokerError(f"the broker at {conn.address} cannot list all of a group's offsets "
                                  "(OffsetFetch older than v2)")
            if version >= 8:
                _, reply = conn.request(OFFSET_FETCH, {"groups": [{"group_id": group, "topics": topics}],
                                                       "require_stable": False}, version)
                (result,) = reply.groups
                return result.topics, int(result.error_code)
            _, reply = conn.request(OFFSET_FETCH, {"group_id": group, "topics": topics,
                                                   "require_stable": False}, version)
            code = int(reply.error_code) if version >= 2 else E.NONE
            if code == E.NONE:  # v0-1 carry coordinator errors per partition
                codes = {int(p.error_code) for t in reply.topics for p in t.partitions}
                code = next(iter(codes & COORDINATOR_RETRIABLE), E.NONE)
            return reply.topics, code

        result_topics = self._with_coordinator(group, "OffsetFetch", call)
        committed: dict[TopicPartition, CommittedOffset] = {}
        for topic in result_topics:
            for p in topic.partitions:
                if p.error_code not in (E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION):
                    raise BrokerError(f"OffsetFetch for {topic.name}-{p.partition_index} failed", p.error_code)
                if p.error_code == E.NONE and p.committed_offset >= 0:
                    committed[(topic.name, int(p.partition_index))] = CommittedOffset(
                        int(p.committed_offset), int(p.get("committed_leader_epoch", -1)), p.metadata or "")
        return committed

    def commit_offsets(self, group: str, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        """An administrative commit (generation -1, no member): only an Empty group accepts it."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), committed in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": committed.offset,
                "committed_leader_epoch": committed.leader_epoch, "commit_timestamp": -1,
                "committed_metadata": committed.metadata,
            })
        body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        def call(conn: Connection) -> tuple[dict[TopicPartition, int], int]:
            _, reply = conn.request(OFFSET_COMMIT, body)
            errors = {(t.name, int(p.partition_index)): int(p.error_code) for t in reply.topics for p in t.partitions}
            codes = set(errors.values())
            retriable = codes & COORDINATOR_RETRIABLE
            return errors, (next(iter(retriable)) if retriable else E.NONE)

        errors = self._with_coordinator(group, "OffsetCommit", call)
        failed = {tp: code for tp, code in errors.items() if code != E.NONE}
        if not failed:
            return
        codes = set(failed.values())
        if codes & ACTIVE_GROUP_ERRORS:
            code = next(iter(codes & ACTIVE_GROUP_ERRORS))
            raise GroupStateError(
                f"group {group!r} refused the commit ({error_name(code)}): it has active members; "
                "stop its consumers and retry once the group is Empty")
        raise BrokerError("OffsetCommit failed for " + describe_failures(failed))

    def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> None:
        by_topic: dict[str, list[dict[str, int]]] = {}
        for topic, partition in sorted(set(partitions)):
            by_topic.setdefault(topic, []).append({"partition_index": partition})
        body = {"group_id": group, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        def call(conn: Connection) -> tuple[tuple[int, dict[TopicPartition, int]], int]:
            _, reply = conn.request(OFFSET_DELETE, body)
            errors = {(t.name, int(p.partition_index)): int(p.error_code) for t in reply.topics for p in t.partitions}
            return (int(reply.error_code), errors), int(reply.error_code)

        top, errors = self._with_coordinator(group, "OffsetDelete", call)
        if top == E.GROUP_ID_NOT_FOUND:
            raise BrokerError(f"group {group!r} does not exist", top)
        if top == E.NON_EMPTY_GROUP:
            raise GroupStateError(f"group {group!r} is not a consumer group with members that may "
                                  f"have offsets deleted ({error_name(top)}); stop its members first")
        if top != E.NONE:
            raise BrokerError(f"OffsetDelete for group {group!r} failed", top)
        failed = {tp: code for tp, code in errors.items() if code != E.NONE}
        subscribed = sorted({t for (t, _), code in failed.items() if code == E.GROUP_SUBSCRIBED_TO_TOPIC})
        if subscribed:
            raise GroupStateError(
                f"group {group!r} still subscribes to {', '.join(subscribed)} "
                f"({error_name(E.GROUP_SUBSCRIBED_TO_TOPIC)}); stop the consumers of those topics "
                "(or change their subscription) first")
        if failed:
            raise BrokerError("OffsetDelete failed for " + describe_failures(failed))

    def list_offsets(self, wanted: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Offsets by timestamp (or ``EARLIEST_TIMESTAMP``/``LATEST_TIMESTAMP``), asked of each leader.

        A timestamp with no record at or after it gives -1, as Kafka answers.
        """
        result: dict[TopicPartition, int] = {}
        pending = dict(wanted)
        deadline = self._deadline()
        attempt = 0
        while pending:
            cluster = self.metadata(sorted({t for t, _ in pending}))
            by_leader: dict[int, dict[str, list[dict[str, int]]]] = {}
            for (topic, partition), timestamp in sorted(pending.items()):
                leader = cluster.leaders.get(topic, {}).get(partition)
                if leader is None:
                    code = cluster.topic_errors.get(topic, E.UNKNOWN_TOPIC_OR_PARTITION)
                    raise BrokerError(f"no leader for {topic}-{partition}",
                                      code if code != E.NONE else E.UNKNOWN_TOPIC_OR_PARTITION)
                by_leader.setdefault(leader, {}).setdefault(topic, []).append(
                    {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp})
            retry: dict[TopicPartition, int] = {}
            last_code: int = E.NONE
            for leader, topics in by_leader.items():
                node = cluster.brokers.get(leader)
                if node is None:
                    retry.update({(t, p["partition_index"]): pending[(t, p["partition_index"])]
                                  for t, ps in topics.items() for p in ps})
                    last_code = E.LEADER_NOT_AVAILABLE
                    continue
                _, reply = self.node(node).request(LIST_OFFSETS, {
                    "replica_id": -1, "isolation_level": 0,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
                for topic in reply.topics:
                    for p in topic.partitions:
                        tp = (topic.name, int(p.partition_index))
                        code = int(p.error_code)
                        if code == E.NONE:
                            result[tp] = int(p.offset)
                        elif code in LEADER_RETRIABLE:
                            retry[tp] = pending[tp]
                            last_code = code
                        else:
                            raise BrokerError(f"ListOffsets for {tp[0]}-{tp[1]} failed", code)
            pending = retry
            if pending:
                attempt += 1
                self._retry_or_raise(deadline, attempt, BrokerError("ListOffsets failed", last_code))
        return result

    def log_range(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start offset, log end offset) of each partition."""
        partitions = sorted(set(partitions))
        if not partitions:
            return {}
        earliest = self.list_offsets({tp: EARLIEST_TIMESTAMP for tp in partitions})
        latest = self.list_offsets({tp: LATEST_TIMESTAMP for tp in partitions})
        return {tp: (earliest[tp], latest[tp]) for tp in partitions}


    # ------------------------------------------------------------------ topics

    def controller(self) -> Connection:
        """The controller when Metadata names one (topic changes go there on ZooKeeper-era Kafka)."""
        cluster = self.metadata([])
        node = cluster.brokers.get(cluster.controller)
        return self.node(node) if node is not None else self.any_broker()

    def create_topics(self, topics: list[tuple[str, int, int, dict[str, str]]], validate_only: bool = False,
                      timeout_ms: int = 30000) -> list[TopicResult]:
        """CreateTopics for (name, partitions, replication factor, configs); -1 takes the broker default."""
        conn = self.controller()
        version = conn.version(CREATE_TOPICS)
        body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication,
                            "assignments": [],
                            "configs": [{"name": k, "value": v} for k, v in configs.items()]}
                           for name, partitions, replication, configs in topics],
                "timeout_ms": timeout_ms, "validate_only": validate_only}
        if validate_only and version < 1:
            raise BrokerError(f"the broker at {conn.address} cannot validate without creating (CreateTopics v0)")
        _, reply = conn.request(CREATE_TOPICS, body, version)
        return [TopicResult(t.name, int(t.error_code), t.get("error_message")) for t in reply.topics]

    def delete_topics(self, names: list[str], timeout_ms: int = 30000) -> list[TopicResult]:
        conn = self.controller()
        version = conn.version(DELETE_TOPICS)
        body: dict[str, Any] = {"timeout_ms": timeout_ms}
        if version >= 6:
            body["topics"] = [{"name": name, "topic_id": uuid.UUID(int=0)} for name in names]
        else:
            body["topic_names"] = list(names)
        _, reply = conn.request(DELETE_TOPICS, body, version)
        return [TopicResult(r.name, int(r.error_code), r.get("error_message")) for r in reply.responses]

    def create_partitions(self, counts: dict[str, int], validate_only: bool = False,
                          timeout_ms: int = 30000) -> list[TopicResult]:
        conn = self.controller()
        body = {"topics": [{"name": name, "count": count, "assignments": None} for name, count in counts.items()],
                "timeout_ms": timeout_ms, "validate_only": validate_only}
        _, reply = conn.request(CREATE_PARTITIONS, body)
        return [TopicResult(r.name, int(r.error_code), r.get("error_message")) for r in reply.results]

    # ------------------------------------------------------------------ configs

    def describe_configs(self, resource_type: int, name: str, keys: list[str] | None = None,
                         synonyms: bool = False) -> list[ConfigValue]:
        """One resource's configs (a broker's are asked of that broker)."""
        conn = self.any_broker()
        if resource_type == RESOURCE_BROKER and name:
            node = self.metadata([]).brokers.get(int(name)) if name.isdigit() else None
            if node is None:
                raise UsageError(f"broker {name!r} is not in the cluster")
            conn = self.node(node)
        version = conn.version(DESCRIBE_CONFIGS)
        _, reply = conn.request(DESCRIBE_CONFIGS, {
            "resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
            "include_synonyms": synonyms, "include_documentation": False}, version)
        (result,) = reply.results
        if result.error_code == E.UNKNOWN_TOPIC_OR_PARTITION:
            raise UsageError(f"topic {name!r} does not exist")
        if result.error_code != E.NONE:
            raise BrokerError(f"DescribeConfigs for {name!r} failed" + (f" ({result.error_message})"
                                                                       if result.error_message else ""),
                              result.error_code)
        values = []
        for c in result.configs:
            source = CONFIG_SOURCES.get(int(c.get("config_source", -1)), "UNKNOWN")
            if version == 0:
                source = "DEFAULT_CONFIG" if c.get("is_default") else (
                    "TOPIC_CONFIG" if resource_type == RESOURCE_TOPIC else "STATIC_BROKER_CONFIG")
            values.append(ConfigValue(
                c.name, c.value, source, bool(c.read_only), bool(c.is_sensitive),
                tuple((s.name, s.value, CONFIG_SOURCES.get(int(s.source), "UNKNOWN"))
                      for s in c.get("synonyms", []) or [])))
        return sorted(values, key=lambda v: v.name)

    def alter_configs(self, resource_type: int, name: str, set_configs: dict[str, str],
                      delete_configs: list[str], validate_only: bool = False) -> None:
        """IncrementalAlterConfigs SET and DELETE (KIP-339); a refusal is a BrokerError naming Kafka's reason."""
        conn = self.any_broker()
        configs = [{"name": k, "config_operation": CONFIG_SET, "value": v} for k, v in set_configs.items()]
        configs += [{"name": k, "config_operation": CONFIG_DELETE, "value": None} for k in delete_configs]
        _, reply = conn.request(INCREMENTAL_ALTER_CONFIGS, {
            "resources": [{"resource_type": resource_type, "resource_name": name, "configs": configs}],
            "validate_only": validate_only})
        (response,) = reply.responses
        if response.error_code == E.UNKNOWN_TOPIC_OR_PARTITION:
            raise UsageError(f"topic {name!r} does not exist")
        if response.error_code in (E.INVALID_CONFIG, E.INVALID_REQUEST):
            raise UsageError(f"{response.error_message or 'invalid config'} ({error_name(response.error_code)})")
        if response.error_code != E.NONE:
            raise BrokerError(f"IncrementalAlterConfigs for {name!r} failed"
                              + (f" ({response.error_message})" if response.error_message else ""),
                              response.error_code)

    # ------------------------------------------------------------------ records

    def delete_records(self, offsets: dict[TopicPartition, int],
                       timeout_ms: int = 30000) -> dict[TopicPartition, tuple[int, int]]:
        """DeleteRecords, asked of each partition's leader: (error code, low watermark) per partition."""
        cluster = self.metadata(sorted({t for t, _ in offsets}))
        by_leader: dict[int, dict[str, list[dict[str, int]]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            leader = cluster.leaders.get(topic, {}).get(partition)
            if leader is None:
                raise UsageError(f"topic {topic!r} has no partition {partition}" if topic in cluster.leaders
                                 else f"topic {topic!r} does not exist")
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(
                {"partition_index": partition, "offset": offset})
        result: dict[TopicPartition, tuple[int, int]] = {}
        for leader, topics in by_leader.items():
            node = cluster.brokers.get(leader)
            if node is None:
                raise BrokerError(f"the leader of {', '.join(topics)} is not available", E.LEADER_NOT_AVAILABLE)
            _, reply = self.node(node).request(DELETE_RECORDS, {
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()], "timeout_ms": timeout_ms})
            for topic in reply.topics:
                for p in topic.partitions:
                    result[(topic.name, int(p.partition_index))] = (int(p.error_code), int(p.low_watermark))
        return result

    def leader_of(self, topic: str, partition: int) -> Connection:
        cluster = self.metadata([topic])
        leader = cluster.leaders.get(topic, {}).get(partition)
        node = cluster.brokers.get(leader) if leader is not None else None
        if node is None:
            code = cluster.topic_errors.get(topic, E.UNKNOWN_TOPIC_OR_PARTITION)
            if code in (E.UNKNOWN_TOPIC_OR_PARTITION, E.NONE):
                raise UsageError(f"topic {topic!r} does not exist" if code else
                                 f"topic {topic!r} has no partition {partition}")
            raise BrokerError(f"no leader for {topic}-{partition}", code)
        return self.node(node)


def describe_failures(failed: dict[TopicPartition, int]) -> str:
    by_code: dict[int, list[str]] = {}
    for (topic, partition), code in sorted(failed.items()):
        by_code.setdefault(code, []).append(f"{topic}-{partition}")
    return "; ".join(f"{', '.join(tps)}: {error_name(code)}" for code, tps in sorted(by_code.items()))
