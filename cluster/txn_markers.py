"""A decided transaction's markers, written on every partition leader of the cluster.

Kafka's TransactionMarkerChannelManager: the transaction coordinator groups a
transaction's partitions by their current leader, writes the markers of the partitions
this node leads itself, and sends the others' as one WriteTxnMarkers request per leader
(over the inter-broker listener, as a replica's fetches go). A partition whose leader is
unknown or changing (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION while the topic
still exists, NOT_ENOUGH_REPLICAS, a lost connection) is tried again, with backoff, at
its leader of the moment, until every marker is durable on its partition's ISR. Only then
may the transaction complete.

It stops (and the transaction is left to whoever coordinates it now) as soon as the job
is no longer this coordinator's: its ``__transaction_state`` partition was unloaded or
loaded again at a newer epoch, or a partition answered TRANSACTION_COORDINATOR_FENCED
(a newer coordinator already wrote there). A partition of a deleted topic needs no marker;
one that answers INVALID_PRODUCER_EPOCH has seen a newer epoch of the producer, whose
own markers settle it, as a single node treats it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import trio

from broker.txn.markers import MarkerRequest, write_txn_markers_body
from broker.txn.state import TopicPartition
from cluster.model import COORDINATOR_TOPIC, ClusterImage
from cluster.replica import ReplicaClient
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import REQUESTS

log = logging.getLogger("kcoord.transactions")

E = ErrorCode
#: WriteTxnMarkers as every kcoord node speaks it.
WRITE_TXN_MARKERS_VERSION = REQUESTS[ApiKey.WRITE_TXN_MARKERS].max_version
#: How long one WriteTxnMarkers may take before it is sent again (the leader answers once its ISR has them).
REQUEST_TIMEOUT_S = 15.0
BACKOFF_S = (0.05, 1.0)


class Coordinator(Protocol):
    def is_current(self, job: MarkerRequest) -> bool: ...


class LocalMarkers(Protocol):
    coordinator: Coordinator

    async def write_local_markers(self, job: MarkerRequest, partitions: tuple[TopicPartition, ...]
                                  ) -> dict[TopicPartition, ErrorCode]: ...


class MarkerSender:
    """``broker.txn_service.MarkerChannel`` for a cluster node."""

    def __init__(self, node_id: int, image: ClusterImage, service: Callable[[], LocalMarkers],
                 endpoint: Callable[[int], tuple[str, int] | None]) -> None:
        self.node_id = node_id
        self.image = image
        self.service = service
        self.endpoint = endpoint
        self._clients: dict[int, tuple[ReplicaClient, trio.Lock]] = {}
        self.sent = 0
        self.retries = 0

    async def write_markers(self, job: MarkerRequest) -> bool:
        left = set(job.partitions)
        backoff = BACKOFF_S[0]
        while True:
            service = self.service()
            if not service.coordinator.is_current(job):
                return False
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(left):
                if self._gone(tp):
                    left.discard(tp)
                    continue
                leadership = self.image.leader_of(tp)
                if leadership is not None:
                    by_leader.setdefault(leadership.leader, []).append(tp)
            if not left:
                return True
            results: dict[TopicPartition, ErrorCode] = {}
            async with trio.open_nursery() as nursery:
                for leader, partitions in by_leader.items():
                    nursery.start_soon(self._write_at, leader, job, tuple(partitions), results)
            for tp, error in results.items():
                if error in (E.NONE, E.INVALID_PRODUCER_EPOCH):
                    left.discard(tp)
                elif error is E.TRANSACTION_COORDINATOR_FENCED:
                    log.warning("transactional id %s: %s-%d fenced this coordinator's markers (epoch %d)",
                                job.transactional_id, *tp, job.coordinator_epoch)
                    return False
                elif error is E.UNKNOWN_TOPIC_OR_PARTITION and self._gone(tp):
                    left.discard(tp)
            if not left:
                return True
            self.retries += 1
            log.debug("transactional id %s: markers of %s wait for their leaders (%s)", job.transactional_id,
                      sorted(left), {tp: results.get(tp) for tp in left})
            await trio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_S[1])

    def _gone(self, tp: TopicPartition) -> bool:
        """The partition's topic no longer exists: nothing to mark."""
        if tp[0] == COORDINATOR_TOPIC:
            return False
        info = self.image.topics.get(tp[0])
        return info is None or tp[1] >= info.partitions

    async def _write_at(self, leader: int, job: MarkerRequest, partitions: tuple[TopicPartition, ...],
                        results: dict[TopicPartition, ErrorCode]) -> None:
        if leader == self.node_id:
            results.update(await self.service().write_local_markers(job, partitions))
            return
        endpoint = self.endpoint(leader)
        if endpoint is None:
            return
        client, lock = self._client(leader, endpoint)
        body = write_txn_markers_body([MarkerRequest(job.transactional_id, job.producer_id, job.producer_epoch,
                                                     job.commit, job.coordinator_epoch, partitions)])
        async with lock:
            try:
                with trio.fail_after(REQUEST_TIMEOUT_S):
                    reply = await client.request(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                    ProtocolError) as exc:
                log.debug("WriteTxnMarkers to node %d: %r", leader, exc)
                await client.aclose()
                return
        self.sent += 1
        results.update(_errors_of(reply))

    def _client(self, leader: int, endpoint: tuple[str, int]) -> tuple[ReplicaClient, trio.Lock]:
        found = self._clients.get(leader)
        if found is not None and (found[0].host, found[0].port) == endpoint:
            return found
        made = (ReplicaClient(endpoint[0], endpoint[1], self.node_id), trio.Lock())
        self._clients[leader] = made
        return made

    async def aclose(self) -> None:
        for client, _ in self._clients.values():
            await client.aclose()
        self._clients.clear()


def _errors_of(reply: Any) -> dict[TopicPartition, ErrorCode]:
    out: dict[TopicPartition, ErrorCode] = {}
    for marker in reply.markers:
        for topic in marker.topics:
            for part in topic.partitions:
                try:
                    error = ErrorCode(int(part.error_code))
                except ValueError:
                    error = E.UNKNOWN_SERVER_ERROR
                out[(topic.name, int(part.partition_index))] = error
    return out
