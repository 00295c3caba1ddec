"""What the console's pages show, asked of the broker over the Kafka protocol.

Every function here is blocking and takes an ``AdminClient``: the console is one more
admin client of the broker, so what it sees and changes passes through the same API
handlers (and, once the broker authenticates clients, the same ACLs) as ``kcoord groups``
and ``kcoord offsets``. The pages call these in worker threads.

Groups of both types are shown. Classic groups are described with DescribeGroups; a
KIP-848 ``consumer`` group, which the broker lists with ListGroups v5 ``group_type``, is
described with ConsumerGroupDescribe when the broker serves it (ApiVersions says so), with
each member's epoch and its current and target assignment.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from admin.client import (
    LATEST_TIMESTAMP,
    AdminClient,
    CommittedOffset,
    Connection,
    GroupDescription,
    Member,
    Node,
    TopicPartition,
)
from admin.errors import BrokerError
from admin.render import assigned_partitions, described_group, subscribed_topics
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS

CLASSIC = "classic"
CONSUMER = "consumer"
#: States in which a group accepts an administrative commit: it has no members.
COMMITTABLE_STATES = ("Empty", "Dead")


# ---------------------------------------------------------------------- results


@dataclass(frozen=True)
class ListedGroup:
    group: str
    state: str
    group_type: str  # "classic" or "consumer" (ListGroups v5); "classic" on older brokers
    protocol_type: str


@dataclass(frozen=True)
class GroupSummary:
    """One row of the groups list."""

    group: str
    state: str
    group_type: str
    protocol_type: str
    members: int
    partitions: int  # partitions with a committed offset
    lag: int | None  # None: no committed offset on an existing partition


@dataclass(frozen=True)
class TopicSummary:
    name: str
    partitions: int


@dataclass
class Overview:
    nodes: list[Node]
    topics: list[TopicSummary]
    groups_by_state: dict[str, int]
    groups_by_type: dict[str, int]


@dataclass
class MemberView:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    subscription: list[str] | None
    assignment: list[TopicPartition] | None  # None: not readable (a non-consumer protocol)
    target: list[TopicPartition] | None = None  # consumer groups: where the member is heading
    epoch: int | None = None  # consumer groups: the member epoch


@dataclass
class PartitionView:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    lag: int | None
    member_id: str | None
    client_id: str | None
    host: str | None


@dataclass
class GroupDetail:
    group: str
    state: str
    group_type: str
    protocol_type: str
    protocol: str
    coordinator: Node | None
    members: list[MemberView]
    partitions: list[PartitionView]
    #: consumer groups: group epoch, assignment epoch, assignor
    epochs: dict[str, Any] = field(default_factory=dict)

    @property
    def total_lag(self) -> int | None:
        lags = [p.lag for p in self.partitions if p.lag is not None]
        return sum(lags) if lags else None

    @property
    def exists(self) -> bool:
        return self.state != "Dead" or bool(self.partitions)

    @property
    def committable(self) -> bool:
        return self.state in COMMITTABLE_STATES


@dataclass
class TopicConsumer:
    group: str
    partitions: int
    committed_sum: int
    lag: int


@dataclass
class TopicDetail:
    name: str
    partitions: list[tuple[int, int, int]]  # partition, log start, log end
    consumers: list[TopicConsumer]


# ---------------------------------------------------------------------- listing


def _serves(conn: Connection, api_key: int) -> bool:
    """The broker and this client both speak the API."""
    message = REQUESTS.get(api_key)
    theirs = conn.versions.get(api_key)
    return message is not None and theirs is not None and theirs[0] <= message.max_version \
        and message.min_version <= theirs[1]


def list_groups(client: AdminClient) -> list[ListedGroup]:
    """Every group of every broker with its state and type, sorted by id."""
    cluster = client.metadata([])
    nodes = sorted(cluster.brokers.values(), key=lambda n: n.node_id)
    connections = [client.node(n) for n in nodes] if nodes else [client.any_broker()]
    found: dict[str, ListedGroup] = {}
    for conn in connections:
        version, reply = conn.request(ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": []})
        if reply.error_code != ErrorCode.NONE:
            raise BrokerError(f"ListGroups on {conn.address} failed", reply.error_code)
        for g in reply.groups:
            state = g.group_state if version >= 4 else ""
            group_type = (g.get("group_type") or CLASSIC) if version >= 5 else CLASSIC
            found[g.group_id] = ListedGroup(g.group_id, state, group_type.lower(), g.protocol_type)
    return sorted(found.values(), key=lambda g: g.group)


def _description(group: str, described: Any, node: Node | None) -> GroupDescription:
    members = [Member(m.member_id, m.get("group_instance_id"), m.client_id, m.client_host,
                      bytes(m.member_metadata), bytes(m.member_assignment)) for m in described.members]
    return GroupDescription(group, described.group_state, described.protocol_type, described.protocol_data,
                            members, node)


def describe_classic(client: AdminClient, groups: Iterable[str]) -> dict[str, GroupDescription]:
    """DescribeGroups, one request per coordinator for all of its groups."""
    by_node: dict[Node, list[str]] = {}
    for group in groups:
        by_node.setdefault(client.find_coordinator(group), []).append(group)
    found: dict[str, GroupDescription] = {}
    for node, names in by_node.items():
        _, reply = client.node(node).request(ApiKey.DESCRIBE_GROUPS, {
            "groups": names, "include_authorized_operations": False})
        for described in reply.groups:
            code = int(described.error_code)
            if code == ErrorCode.GROUP_ID_NOT_FOUND:
                found[described.group_id] = GroupDescription(described.group_id, "Dead", "", "", [], node)
            elif code != ErrorCode.NONE:
                raise BrokerError(f"DescribeGroups for group {described.group_id!r} failed", code)
            else:
                found[described.group_id] = _description(described.group_id, described, node)
    return found


def _assignment(blob: Any) -> list[TopicPartition]:
    return sorted((t.topic_name, int(p)) for t in blob.topic_partitions for p in t.partitions)


def describe_consumer(client: AdminClient, group: str) -> tuple[GroupDescription, list[MemberView], dict[str, Any]]:
    """ConsumerGroupDescribe (KIP-848) of one ``consumer`` group."""
    node = client.find_coordinator(group)
    conn = client.node(node)
    if not _serves(conn, ApiKey.CONSUMER_GROUP_DESCRIBE):
        raise BrokerError(f"group {group!r} is a consumer group (KIP-848) and the broker at {conn.address} "
                          "does not serve ConsumerGroupDescribe to this client")
    _, reply = conn.request(ApiKey.CONSUMER_GROUP_DESCRIBE, {"group_ids": [group],
                                                              "include_authorized_operations": False})
    (described,) = reply.groups
    if described.error_code != ErrorCode.NONE:
        raise BrokerError(f"ConsumerGroupDescribe for group {group!r} failed", described.error_code)
    members = [
        MemberView(m.member_id, m.instance_id, m.client_id, m.client_host, sorted(m.subscribed_topic_names),
                   _assignment(m.assignment), _assignment(m.target_assignment), int(m.member_epoch))
        for m in sorted(described.members, key=lambda m: (m.client_id, m.member_id))
    ]
    epochs = {"group_epoch": int(described.group_epoch), "assignment_epoch": int(described.assignment_epoch),
              "assignor": described.assignor_name}
    description = GroupDescription(group, described.group_state, CONSUMER, described.assignor_name, [], node)
    return description, members, epochs


def log_ends(client: AdminClient, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """Log end offsets of the partitions that exist (others are left out)."""
    wanted = set(partitions)
    if not wanted:
        return {}
    cluster = client.metadata(sorted({t for t, _ in wanted}))
    existing = {tp for tp in wanted if tp[1] in cluster.leaders.get(tp[0], {})}
    return client.list_offsets({tp: LATEST_TIMESTAMP for tp in existing}) if existing else {}


def _lag(committed: dict[TopicPartition, CommittedOffset], ends: dict[TopicPartition, int]) -> int | None:
    lags = [max(ends[tp] - c.offset, 0) for tp, c in committed.items() if tp in ends]
    return sum(lags) if lags else None


def group_summaries(client: AdminClient) -> list[GroupSummary]:
    """The groups list: state, type, members and total lag of every group."""
    listed = list_groups(client)
    classic = describe_classic(client, [g.group for g in listed if g.group_type == CLASSIC])
    committed = {g.group: client.fetch_offsets(g.group) for g in listed}
    ends = log_ends(client, {tp for offsets in committed.values() for tp in offsets})
    rows = []
    for g in listed:
        if g.group_type == CLASSIC:
            description = classic.get(g.group)
            members = len(description.members) if description else 0
        else:
            try:
                members = len(describe_consumer(client, g.group)[1])
            except BrokerError:
                members = 0
        offsets = committed[g.group]
        rows.append(GroupSummary(g.group, g.state, g.group_type, g.protocol_type, members, len(offsets),
                                 _lag(offsets, ends)))
    return rows


def overview(client: AdminClient) -> Overview:
    cluster = client.metadata()
    topics = [TopicSummary(name, len(leaders)) for name, leaders in sorted(cluster.leaders.items())]
    by_state: dict[str, int] = {}
    by_type: dict[str, int] = {}
    for g in list_groups(client):
        by_state[g.state] = by_state.get(g.state, 0) + 1
        by_type[g.group_type] = by_type.get(g.group_type, 0) + 1
    return Overview(sorted(cluster.brokers.values(), key=lambda n: n.node_id), topics, by_state, by_type)


# ---------------------------------------------------------------------- one group


def group_type_of(client: AdminClient, group: str) -> str:
    for g in list_groups(client):
        if g.group == group:
            return g.group_type
    return CLASSIC


def group_state(client: AdminClient, group: str) -> tuple[str, int]:
    """The group's state and how many members it has, for a group of either type."""
    if group_type_of(client, group) == CONSUMER:
        description, members, _ = describe_consumer(client, group)
        return description.state, len(members)
    description = client.describe_group(group)
    return description.state, len(description.members)


def group_detail(client: AdminClient, group: str) -> GroupDetail:
    """Members with their assignments; per partition the committed offset, log end and lag.

    For a classic group the numbers are exactly ``kcoord groups describe``'s (the same
    ``admin.render.described_group`` builds both).
    """
    group_type = group_type_of(client, group)
    committed = client.fetch_offsets(group)
    if group_type == CONSUMER:
        description, members, epochs = describe_consumer(client, group)
        owners = {tp: m for m in members for tp in m.assignment or []}
        ends = log_ends(client, set(committed) | set(owners))
        partitions = []
        for tp in sorted(set(committed) | set(owners)):
            current = committed[tp].offset if tp in committed else None
            end = ends.get(tp)
            owner = owners.get(tp)
            partitions.append(PartitionView(
                tp[0], tp[1], current, end, None if current is None or end is None else max(end - current, 0),
                owner.member_id if owner else None, owner.client_id if owner else None,
                owner.host if owner else None))
        return GroupDetail(group, description.state, CONSUMER, CONSUMER, description.protocol,
                           description.coordinator, members, partitions, epochs)
    description = client.describe_group(group)
    wanted = set(committed)
    for member in description.members:
        wanted.update(assigned_partitions(member, description.protocol_type) or [])
    document = described_group(description, committed, log_ends(client, wanted))
    members = [
        MemberView(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                   subscribed_topics(m, description.protocol_type),
                   assigned_partitions(m, description.protocol_type))
        for m in sorted(description.members, key=lambda m: (m.client_id, m.member_id))
    ]
    partitions = [PartitionView(r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"],
                                r["member_id"], r["client_id"], r["host"]) for r in document["offsets"]]
    return GroupDetail(group, description.state, CLASSIC, description.protocol_type, description.protocol,
                       description.coordinator, members, partitions)


# ---------------------------------------------------------------------- one topic


def topic_detail(client: AdminClient, topic: str) -> TopicDetail | None:
    """Partitions with log start and end, and the groups with offsets on the topic; None if unknown."""
    cluster = client.metadata([topic])
    if cluster.topic_errors.get(topic) != ErrorCode.NONE:
        return None
    partitions = sorted(cluster.leaders[topic])
    ranges = client.log_range((topic, p) for p in partitions)
    consumers = []
    for g in list_groups(client):
        offsets = {tp: c for tp, c in client.fetch_offsets(g.group).items() if tp[0] == topic}
        if not offsets:
            continue
        lag = sum(max(ranges[tp][1] - c.offset, 0) for tp, c in offsets.items() if tp in ranges)
        consumers.append(TopicConsumer(g.group, len(offsets), sum(c.offset for c in offsets.values()), lag))
    return TopicDetail(topic, [(p, *ranges[(topic, p)]) for p in partitions], consumers)
