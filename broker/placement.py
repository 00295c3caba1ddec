"""Who leads which partition, at which epoch, and who is alive: the placement service.

One interface, two implementations. ``SingleNodePlacement`` is kcoord as one process: it
is the only broker, the controller, the leader of every partition at epoch 0 and every
group's coordinator. The clustered one (``cluster/``) answers from etcd: live nodes,
elected controller, partition leaders with their epochs. Metadata, FindCoordinator and
DescribeCluster ask it; nothing else needs to know which one runs.

Answers are for the listener a request came in on: in a cluster, each node's address on
that listener.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionPlacement:
    """One partition as Metadata describes it."""

    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...] = ()
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class Coordinator:
    """FindCoordinator's answer for one group: a node, or an error."""

    endpoint: BrokerEndpoint | None
    error: ErrorCode = ErrorCode.NONE


class Placement(Protocol):
    """``me`` is this node's own address on the request's ``listener``."""

    def brokers(self, listener: str, me: BrokerEndpoint) -> list[BrokerEndpoint]: ...

    def controller_id(self, me: BrokerEndpoint) -> int: ...

    def partition(self, topic: str, index: int, me: BrokerEndpoint) -> PartitionPlacement: ...

    def group_coordinator(self, group_id: str, listener: str, me: BrokerEndpoint) -> Coordinator: ...

    def transaction_coordinator(self, transactional_id: str, listener: str, me: BrokerEndpoint) -> Coordinator:
        """The leader of the transactional id's ``__transaction_state`` partition."""


class SingleNodePlacement:
    """This process is the whole cluster."""

    def brokers(self, listener: str, me: BrokerEndpoint) -> list[BrokerEndpoint]:
        return [me]

    def controller_id(self, me: BrokerEndpoint) -> int:
        return me.node_id

    def partition(self, topic: str, index: int, me: BrokerEndpoint) -> PartitionPlacement:
        return PartitionPlacement(me.node_id, 0, (me.node_id,), (me.node_id,))

    def group_coordinator(self, group_id: str, listener: str, me: BrokerEndpoint) -> Coordinator:
        return Coordinator(me)

    def transaction_coordinator(self, transactional_id: str, listener: str, me: BrokerEndpoint) -> Coordinator:
        return Coordinator(me)


SINGLE_NODE = SingleNodePlacement()
