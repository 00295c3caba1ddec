"""The cluster's state as etcd holds it, and the image each node keeps of it. Sans-IO.

Every key lives under ``/kcoord/<cluster.name>/``:

- ``meta``: the cluster id, written once by the first node;
- ``nodes/<id>``: a live node (its listeners and rack), attached to the node's lease, so it
  disappears when the node stops renewing it;
- ``controller``: the node elected controller, attached to its lease;
- ``topics/<name>``: a topic (id, partition count, config overrides); ``__consumer_offsets``
  is one too, with ``offsets.topic.num.partitions`` partitions;
- ``assignments/<topic>/<p>``: where a partition lives (Kafka's replica assignment, with
  KIP-455's adding and removing replicas while it moves);
- ``leaders/<topic>/<p>``: who leads the partition, attached to the leader's lease. It is
  written only when leadership changes, so its mod revision is the leader epoch; it
  disappears with the leader's lease.

- ``isr/<topic>/<p>``: the partition's in-sync replicas (Kafka's PartitionRegistration.isr).
  The controller writes it with the partition's first assignment; afterwards only the
  partition's leader changes it, by compare-and-set on its revision and on the leader key's
  (so a deposed leader cannot), and a new leader is chosen only from it. It is a key of its
  own so that ISR changes never move the leader epoch.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

COORDINATOR_TOPIC = "__consumer_offsets"
TRANSACTION_TOPIC = "__transaction_state"
#: The coordinators' own topics: placed and replicated like any other, but led by loading them.
COORDINATOR_TOPICS = frozenset({COORDINATOR_TOPIC, TRANSACTION_TOPIC})

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A registered node: where each of its listeners is reachable, and its rack."""

    node_id: int
    listeners: dict[str, tuple[str, int]]
    rack: str | None = None

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """The node's address on ``listener``, else on its first listener."""
        found = self.listeners.get(listener)
        if found is None and self.listeners:
            found = next(iter(self.listeners.values()))
        return found

    def encode(self) -> bytes:
        return json.dumps({"id": self.node_id, "rack": self.rack,
                           "listeners": {name: [host, port] for name, (host, port) in self.listeners.items()}
                           }, sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> NodeInfo:
        data = json.loads(raw)
        return cls(int(data["id"]), {name: (str(h), int(p)) for name, (h, p) in data["listeners"].items()},
                   data.get("rack"))


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    #: Replicas each partition should have (placed up to the number of live nodes).
    replication_factor: int = 1

    def encode(self) -> bytes:
        data: dict[str, Any] = {"id": str(self.topic_id), "partitions": self.partitions, "configs": self.configs}
        if self.replication_factor != 1:
            data["replication_factor"] = self.replication_factor
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def decode(cls, name: str, raw: bytes) -> TopicInfo:
        data = json.loads(raw)
        return cls(name, uuid.UUID(data["id"]), int(data["partitions"]), dict(data.get("configs", {})),
                   int(data.get("replication_factor", 1)))


@dataclass(frozen=True, slots=True)
class Assignment:
    """A partition's replicas, as Kafka's PartitionRegistration keeps them (KIP-455).

    While it moves, ``replicas`` holds the old and the new replicas together; ``adding`` are
    the new ones still copying, ``removing`` the old ones that go once the move completes.

    A move from one replica to one other is a **copy and handover** (``single_move``): the
    new replica copies the log aside and takes over from a frozen leader. Any other move is
    Kafka's reassignment of a replicated partition: the adding replicas follow the leader
    like any follower, join the ISR once caught up, and the controller then completes the
    move (the replicas become the target, the ISR loses the removed ones, and a leader that
    is removed gives its place to an in-sync target replica).
    """

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def moving(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """The replicas from before any move."""
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def single_move(self) -> bool:
        """A single-replica partition moving to one other node: copied, then handed over."""
        return self.moving and len(self.target) == 1 and len(self.original) == 1

    @property
    def target(self) -> tuple[int, ...]:
        """The replicas once any move completes."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def preferred_leader(self) -> int:
        """The first replica holding the whole log: the one that may lead."""
        for replica in self.replicas:
            if replica not in self.adding:
                return replica
        return -1

    def encode(self) -> bytes:
        data: dict[str, Any] = {"replicas": list(self.replicas)}
        if self.adding:
            data["adding"] = list(self.adding)
        if self.removing:
            data["removing"] = list(self.removing)
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Assignment:
        data = json.loads(raw)
        return cls(tuple(data["replicas"]), tuple(data.get("adding", ())), tuple(data.get("removing", ())))


@dataclass(frozen=True, slots=True)
class Leadership:
    """The partition's leader and its epoch: the mod revision of its ``leaders/`` key."""

    leader: int
    epoch: int

    @staticmethod
    def encode(leader: int) -> bytes:
        return json.dumps({"leader": leader}).encode()


def encode_isr(isr: Iterable[int]) -> bytes:
    return json.dumps({"isr": sorted(isr)}).encode()


class Keys:
    """The key of every piece of cluster state, under one cluster's prefix."""

    def __init__(self, cluster_name: str) -> None:
        self.prefix = f"/kcoord/{cluster_name}/"
        self.meta = self.prefix + "meta"
        self.controller = self.prefix + "controller"

    def node(self, node_id: int) -> str:
        return f"{self.prefix}nodes/{node_id}"

    def topic(self, name: str) -> str:
        return f"{self.prefix}topics/{name}"

    def assignment(self, topic: str, partition: int) -> str:
        return f"{self.prefix}assignments/{topic}/{partition}"

    def leader(self, topic: str, partition: int) -> str:
        return f"{self.prefix}leaders/{topic}/{partition}"

    def isr(self, topic: str, partition: int) -> str:
        return f"{self.prefix}isr/{topic}/{partition}"

    def parse(self, key: str) -> tuple[str, tuple[str, ...]]:
        """(kind, the rest of the path) of a key under the prefix; ("", ()) for others."""
        if not key.startswith(self.prefix):
            return "", ()
        parts = key[len(self.prefix):].split("/")
        return parts[0], tuple(parts[1:])


@dataclass
class ClusterImage:
    """What a node knows of etcd's state, as of ``revision``: applied from a read, then a watch.

    ``revisions`` keeps every key's mod revision, for compare-and-set writes.
    """

    keys: Keys
    revision: int = 0
    cluster_id: str | None = None
    nodes: dict[int, NodeInfo] = field(default_factory=dict)
    node_leases: dict[int, int] = field(default_factory=dict)
    controller: int | None = None
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    assignments: dict[TopicPartition, Assignment] = field(default_factory=dict)
    leaders: dict[TopicPartition, Leadership] = field(default_factory=dict)
    isrs: dict[TopicPartition, tuple[int, ...]] = field(default_factory=dict)
    revisions: dict[str, int] = field(default_factory=dict)
    #: The revision each deleted key was deleted at, so an older change to it is not applied.
    deleted: dict[str, int] = field(default_factory=dict)
    #: Grows on every change applied: what a listener compares to know something moved.
    version: int = 0
    #: Each present key's value and lease as applied, so a full read can keep newer changes.
    values: dict[str, tuple[bytes, int]] = field(default_factory=dict)

    def clear(self) -> None:
        self.cluster_id = None
        self.controller = None
        for table in (self.nodes, self.node_leases, self.topics, self.assignments, self.leaders, self.isrs,
                      self.revisions, self.deleted, self.values):
            table.clear()

    def load(self, revision: int, items: Iterable[tuple[str, bytes, int, int]]) -> None:
        """Replace everything with a full read, as of ``revision``: ``(key, value, mod revision,
        lease)`` items.

        Changes the image already holds from after ``revision`` are kept: a read that was under
        way while this node wrote (its own claim of a leadership, applied when etcd answered)
        or while its watch ran ahead does not show them, and dropping them would leave the
        image behind etcd until that key changes again.
        """
        newer: list[tuple[str, bytes | None, int, int]] = []  # (key, value or None, mod revision, lease)
        for key, mod_revision in self.revisions.items():
            if mod_revision > revision and key in self.values:
                value, lease = self.values[key]
                newer.append((key, value, mod_revision, lease))
        newer += [(key, None, mod_revision, 0) for key, mod_revision in self.deleted.items() if mod_revision > revision]
        self.clear()
        for key, value, mod_revision, lease in items:
            self.apply(key, value, mod_revision, lease)
        for key, maybe_value, mod_revision, lease in newer:
            self.apply(key, maybe_value, mod_revision, lease)
        self.revision = max(revision, self.revision)
        self.version += 1

    def apply(self, key: str, value: bytes | None, mod_revision: int, lease: int = 0) -> None:
        """One put (``value``) or delete (None), unless the image already holds a newer change
        of the key: a node applies its own write when etcd answers it, and its watch may have
        brought a later change of the same key first (a new leader's claim after a handover)."""
        kind, rest = self.keys.parse(key)
        if mod_revision < self.revisions.get(key, self.deleted.get(key, 0)):
            return
        if value is None:
            self.revisions.pop(key, None)
            self.values.pop(key, None)
            self.deleted[key] = mod_revision
        else:
            self.revisions[key] = mod_revision
            self.values[key] = (value, lease)
            self.deleted.pop(key, None)
        self.revision = max(self.revision, mod_revision)
        self.version += 1
        try:
            self._apply(kind, rest, value, mod_revision, lease)
        except (ValueError, KeyError, TypeError):
            pass  # a value this version cannot read is ignored, never fatal

    def _apply(self, kind: str, rest: tuple[str, ...], value: bytes | None, mod_revision: int, lease: int) -> None:
        if kind == "meta":
            self.cluster_id = None if value is None else json.loads(value)["cluster_id"]
        elif kind == "controller":
            self.controller = None if value is None else int(json.loads(value)["id"])
        elif kind == "nodes" and len(rest) == 1:
            node_id = int(rest[0])
            if value is None:
                self.nodes.pop(node_id, None)
                self.node_leases.pop(node_id, None)
            else:
                self.nodes[node_id] = NodeInfo.decode(value)
                self.node_leases[node_id] = lease
        elif kind == "topics" and len(rest) == 1:
            if value is None:
                self.topics.pop(rest[0], None)
            else:
                self.topics[rest[0]] = TopicInfo.decode(rest[0], value)
        elif kind == "assignments" and len(rest) == 2:
            tp = (rest[0], int(rest[1]))
            if value is None:
                self.assignments.pop(tp, None)
            else:
                self.assignments[tp] = Assignment.decode(value)
        elif kind == "leaders" and len(rest) == 2:
            tp = (rest[0], int(rest[1]))
            if value is None:
                self.leaders.pop(tp, None)
            else:
                self.leaders[tp] = Leadership(int(json.loads(value)["leader"]), mod_revision)
        elif kind == "isr" and len(rest) == 2:
            tp = (rest[0], int(rest[1]))
            if value is None:
                self.isrs.pop(tp, None)
            else:
                self.isrs[tp] = tuple(int(r) for r in json.loads(value)["isr"])

    # ---------------------------------------------------------------- questions

    def live(self, node_id: int) -> bool:
        return node_id in self.nodes

    def leader_of(self, tp: TopicPartition) -> Leadership | None:
        """The partition's leader if it has one and that node is alive."""
        leadership = self.leaders.get(tp)
        if leadership is None or leadership.leader not in self.nodes:
            return None
        return leadership

    def isr_of(self, tp: TopicPartition) -> tuple[int, ...]:
        """The partition's in-sync replicas; without an ISR key (a partition placed before
        replication existed), its preferred leader alone."""
        isr = self.isrs.get(tp)
        if isr is not None:
            return isr
        assignment = self.assignments.get(tp)
        return () if assignment is None or assignment.preferred_leader < 0 else (assignment.preferred_leader,)

    def partitions(self) -> Iterator[TopicPartition]:
        for name, topic in self.topics.items():
            for index in range(topic.partitions):
                yield name, index

    def revision_of(self, key: str) -> int:
        """A key's mod revision; 0 when it does not exist (etcd's "absent")."""
        return self.revisions.get(key, 0)
