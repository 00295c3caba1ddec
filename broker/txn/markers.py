"""The markers a transaction's outcome needs written, and the seam to a cluster's WriteTxnMarkers.

When a transaction is decided (its PrepareCommit or PrepareAbort is durable) every
partition in it gets a COMMIT or ABORT marker: data partitions so read_committed
consumers can pass it, ``__consumer_offsets`` partitions so the group coordinator settles
the pending offsets. Only once every marker is durable may the transaction complete.
A ``MarkerRequest`` says what to write; on one broker the shell writes it locally
(``broker.txn_service``). A cluster sends the same thing to each partition leader as a
WriteTxnMarkers request: ``write_txn_markers_body`` builds it, and the leader's answer
(``broker.txn_service.TransactionService.write_txn_markers``) writes locally the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.txn.state import TopicPartition
from protocol.records import EndTransactionMarker


@dataclass(frozen=True, slots=True)
class MarkerRequest:
    """Write ``commit``'s marker for ``producer_id`` at ``producer_epoch`` to every partition."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]
    #: The EndTxn waiting for this transaction to complete, if any.
    ticket: int | None = None

    @property
    def marker(self) -> EndTransactionMarker:
        return EndTransactionMarker(self.commit, self.coordinator_epoch)


def write_txn_markers_body(requests: list[MarkerRequest]) -> dict[str, Any]:
    """The WriteTxnMarkers request body a coordinator sends a partition leader (Kafka's wire shape)."""
    markers = []
    for request in requests:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in request.partitions:
            by_topic.setdefault(topic, []).append(partition)
        markers.append({
            "producer_id": request.producer_id,
            "producer_epoch": request.producer_epoch,
            "transaction_result": request.commit,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in sorted(by_topic.items())],
            "coordinator_epoch": request.coordinator_epoch,
        })
    return {"markers": markers}


def marker_requests_of(body: Any) -> list[MarkerRequest]:
    """The markers a WriteTxnMarkers request asks a partition leader to write."""
    return [
        MarkerRequest("", m.producer_id, m.producer_epoch, bool(m.transaction_result), m.coordinator_epoch,
                      tuple((t.name, p) for t in m.topics for p in t.partition_indexes))
        for m in body.markers
    ]
