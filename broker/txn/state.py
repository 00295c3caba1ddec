"""A transactional id's state (Kafka's TransactionMetadata and TransactionState).

A transactional id maps to one producer id and epoch and at most one transaction at a
time. Its life, as Kafka's coordinator moves it:

    Empty --AddPartitions/AddOffsets--> Ongoing --EndTxn--> PrepareCommit | PrepareAbort
    PrepareCommit --markers written--> CompleteCommit;  PrepareAbort --> CompleteAbort
    Empty | Complete* --InitProducerId--> Empty (epoch bumped); Complete* --AddPartitions--> Ongoing

Every state but Dead and PrepareEpochFence is persisted as a TransactionLogValue; Dead is a
tombstone, and PrepareEpochFence is only ever a step on the way to PrepareAbort.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from protocol.transaction_log import TransactionLogEntry

#: The largest epoch a producer may use: MAX_SHORT stays free so a coordinator can always fence.
MAX_EPOCH = 32767

TopicPartition = tuple[str, int]


class TransactionState(enum.IntEnum):
    """Kafka's TransactionState ids (the TransactionStatus of the log) and names (DescribeTransactions)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def wire_name(self) -> str:
        return "".join(part.title() for part in self.name.split("_"))

    @classmethod
    def from_wire_name(cls, name: str) -> TransactionState | None:
        for state in cls:
            if state.wire_name == name:
                return state
        return None

    @property
    def is_prepared(self) -> bool:
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)

    @property
    def may_expire(self) -> bool:
        """Kafka's isExpirationAllowed: no transaction in flight."""
        return self is TransactionState.EMPTY or self.is_complete


S = TransactionState


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's TransactionMetadata.isEpochExhausted: at MAX_SHORT - 1 the producer id rotates."""
    return epoch >= MAX_EPOCH - 1


@dataclass(slots=True)
class TransactionMetadata:
    """What the coordinator knows of one transactional id.

    Everything but ``previous_producer_id`` and ``last_producer_epoch`` is the id's last
    TransactionLogValue (replay rebuilds it); those two are working state that Kafka's
    version-0 records do not carry either (they only help a retried InitProducerId).
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    start_ms: int = -1
    last_update_ms: int = -1
    previous_producer_id: int = -1
    last_producer_epoch: int = -1

    @property
    def has_open_transaction(self) -> bool:
        return self.state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT)

    def entry(self) -> TransactionLogEntry:
        """The TransactionLogValue this state is written as (Kafka writes null partitions for Empty)."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return TransactionLogEntry(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.timeout_ms,
            status=int(self.state),
            partitions=None if self.state is S.EMPTY else tuple((t, tuple(ps)) for t, ps in by_topic.items()),
            last_update_timestamp_ms=self.last_update_ms,
            start_timestamp_ms=self.start_ms,
        )

    @classmethod
    def from_entry(cls, transactional_id: str, entry: TransactionLogEntry) -> TransactionMetadata:
        state = TransactionState(entry.status)
        partitions = frozenset(
            (topic, p) for topic, ids in (entry.partitions or ()) for p in ids) if state is not S.EMPTY else frozenset()
        return cls(transactional_id, entry.producer_id, entry.producer_epoch, entry.transaction_timeout_ms, state,
                   partitions, entry.start_timestamp_ms, entry.last_update_timestamp_ms,
                   previous_producer_id=entry.previous_producer_id)

    def persisted(self) -> tuple[object, ...]:
        """The fields a record carries, for comparing live state with a replay."""
        return (self.producer_id, self.producer_epoch, self.timeout_ms, self.state, self.partitions, self.start_ms,
                self.last_update_ms)
