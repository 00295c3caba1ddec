"""The broker's questions about the cluster, answered from this node's image of etcd.

``ClusterPlacement`` is ``broker.placement.Placement`` for Metadata, FindCoordinator and
DescribeCluster; ``ListenerDirectory`` is what ``cluster.routing`` asks for one listener's
requests. Both read the image and the node's ``Serving`` state; neither awaits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.placement import BrokerEndpoint, Coordinator, PartitionPlacement
from cluster.fencing import LeaseClock
from cluster.model import COORDINATOR_TOPIC, TRANSACTION_TOPIC, ClusterImage, TopicPartition
from protocol.consumer_offsets import partition_for
from protocol.errors import ErrorCode


@dataclass
class Serving:
    """What this node serves right now: partitions it leads and has loaded, minus the frozen."""

    lease: LeaseClock
    #: Partitions led and loaded here, with the epoch they are led at.
    led: dict[TopicPartition, int] = field(default_factory=dict)
    #: Partitions being handed over: led, but not taking requests.
    frozen: set[TopicPartition] = field(default_factory=set)
    clock: Callable[[], float] = time.monotonic

    def serves(self, tp: TopicPartition) -> bool:
        return tp in self.led and tp not in self.frozen and self.lease.valid(self.clock())


class ClusterPlacement:
    """Live nodes, the controller and partition leaders, from the image."""

    def __init__(self, image: ClusterImage, offsets_partitions: int, transaction_partitions: int = 50,
                 create_transaction_topic: Callable[[], None] = lambda: None) -> None:
        self.image = image
        self.offsets_partitions = offsets_partitions
        self.transaction_partitions = transaction_partitions
        #: Asked for when a transactional id is first looked up and ``__transaction_state`` does
        #: not exist yet: Kafka creates the topic then (KafkaApis' getOrCreateInternalTopic).
        self.create_transaction_topic = create_transaction_topic

    def brokers(self, listener: str, me: BrokerEndpoint) -> list[BrokerEndpoint]:
        out = []
        for node_id, node in sorted(self.image.nodes.items()):
            endpoint = node.endpoint(listener)
            if endpoint is not None:
                out.append(BrokerEndpoint(node_id, endpoint[0], endpoint[1], node.rack))
        return out

    def controller_id(self, me: BrokerEndpoint) -> int:
        controller = self.image.controller
        return -1 if controller is None else controller

    def partition(self, topic: str, index: int, me: BrokerEndpoint) -> PartitionPlacement:
        tp = (topic, index)
        assignment = self.image.assignments.get(tp)
        replicas = assignment.replicas if assignment is not None else ()
        offline = tuple(r for r in replicas if not self.image.live(r))
        leadership = self.image.leader_of(tp)
        if leadership is None:
            return PartitionPlacement(-1, -1, replicas, (), offline, ErrorCode.LEADER_NOT_AVAILABLE)
        return PartitionPlacement(leadership.leader, leadership.epoch, replicas, (leadership.leader,), offline)

    def group_coordinator(self, group_id: str, listener: str, me: BrokerEndpoint) -> Coordinator:
        return self._leader_of((COORDINATOR_TOPIC, partition_for(group_id, self.offsets_partitions)), listener)

    def transaction_coordinator(self, transactional_id: str, listener: str, me: BrokerEndpoint) -> Coordinator:
        if TRANSACTION_TOPIC not in self.image.topics:
            self.create_transaction_topic()
            return Coordinator(None, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return self._leader_of((TRANSACTION_TOPIC, partition_for(transactional_id, self.transaction_partitions)),
                               listener)

    def _leader_of(self, tp: TopicPartition, listener: str) -> Coordinator:
        leadership = self.image.leader_of(tp)
        node = None if leadership is None else self.image.nodes.get(leadership.leader)
        endpoint = None if node is None else node.endpoint(listener)
        if node is None or endpoint is None:
            return Coordinator(None, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return Coordinator(BrokerEndpoint(node.node_id, endpoint[0], endpoint[1], node.rack))


class ListenerDirectory:
    """``cluster.routing.Directory`` for the requests of one listener."""

    def __init__(self, image: ClusterImage, serving: Serving, offsets_partitions: int, listener: str,
                 transaction_partitions: int = 50) -> None:
        self.image = image
        self.serving_state = serving
        self.offsets_partitions = offsets_partitions
        self.transaction_partitions = transaction_partitions
        self.listener = listener

    def known(self, topic: str, partition: int) -> bool:
        info = self.image.topics.get(topic)
        return info is not None and 0 <= partition < info.partitions

    def serving(self, topic: str, partition: int) -> bool:
        return self.serving_state.serves((topic, partition))

    def current_leader(self, topic: str, partition: int) -> tuple[int, int]:
        leadership = self.image.leader_of((topic, partition))
        return (-1, -1) if leadership is None else (leadership.leader, leadership.epoch)

    def coordinates(self, group_id: str) -> bool:
        return self.serving_state.serves((COORDINATOR_TOPIC, partition_for(group_id, self.offsets_partitions)))

    def coordinates_transaction(self, transactional_id: str) -> bool:
        return self.serving_state.serves(
            (TRANSACTION_TOPIC, partition_for(transactional_id, self.transaction_partitions)))

    def endpoint(self, node_id: int) -> tuple[str, int, str | None] | None:
        node = self.image.nodes.get(node_id)
        found = None if node is None else node.endpoint(self.listener)
        return None if found is None or node is None else (found[0], found[1], node.rack)
