"""Committed offsets: validation, records, and the store that replay builds (Kafka's OffsetMetadataManager).

Handlers here validate and emit OffsetCommit records; they never touch the store. ``replay``
is the one path that changes it, for records written live and for records read at load.
Which group may commit, fetch or delete is the group's own question (``Group``); this
module asks it and applies the answer to each partition.

Offsets committed inside a transaction (TxnOffsetCommit) wait in ``pending``
(``txn_offsets``) until the producer's marker settles them (``replay_marker``). While
they wait, OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for their
partitions, expiry leaves those partitions alone, and deletions drop them too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Mapping
from typing import Protocol

from broker.coordinator.config import CoordinatorConfig
from broker.coordinator.effects import Effects
from broker.coordinator.offset_store import MAX_PARTITION, OffsetStore
from broker.coordinator.records import OffsetCommitRecord, OffsetValue
from broker.coordinator.requests import (
    FetchedGroup,
    FetchedPartition,
    FetchGroup,
    OffsetCommitRequest,
    OffsetCommitResult,
    OffsetDeleteRequest,
    OffsetDeleteResult,
    OffsetFetchRequest,
    OffsetFetchResult,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResult,
)
from broker.coordinator.txn_offsets import PendingTransactionalOffsets
from protocol.errors import ErrorCode

log = logging.getLogger("kcoord.coordinator")

E = ErrorCode

# Enum members the request paths test, bound once: their lookup on the class is slow (docs/architecture.md).
_NONE, _UNKNOWN_TOPIC_OR_PARTITION = E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION


class TopicsView(Protocol):
    """What the coordinator may know about topics: Kafka's metadata image, reduced to a question."""

    def partitions_of(self, topic: str) -> Container[int]:
        """The topic's partition indexes (none if the topic is unknown)."""
        ...


def _utf16_length(text: str) -> int:
    """Java's String.length(): UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


class OffsetMetadataManager:
    def __init__(self, config: CoordinatorConfig, topics: TopicsView | None = None) -> None:
        self.config = config
        self.store = OffsetStore()
        self.pending = PendingTransactionalOffsets()
        self.topics = topics
        # Counters since start-up (replay does not count), read by the metrics collector.
        self.offsets_committed = 0
        self.offsets_expired = 0

    def _partition_known(self, topic: str, partition: int) -> bool:
        if not self.config.require_known_topic or self.topics is None:
            return True
        return partition in self.topics.partitions_of(topic)

    # ------------------------------------------------------------------ replay

    def replay(self, record: OffsetCommitRecord) -> None:
        if record.value is None:
            self.store.delete(record.group_id, record.topic, record.partition)
            self.pending.tombstoned((record.group_id, record.topic, record.partition))
        else:
            self.store.put(record.group_id, record.topic, record.partition, record.value)
            self.pending.committed(record.group_id, record.topic, record.partition)

    def replay_transactional(self, record: OffsetCommitRecord, producer_id: int) -> None:
        """An offset record of a transactional batch: pending until the producer's marker."""
        if record.value is None:
            self.replay(record)  # Kafka applies a tombstone whatever batch it is in
        else:
            self.pending.put(producer_id, (record.group_id, record.topic, record.partition), record.value)

    def replay_marker(self, producer_id: int, commit: bool, in_partition: Callable[[str], bool]) -> int:
        """The producer's COMMIT or ABORT reached a partition; returns how many offsets became visible."""
        store = self.store
        visible = self.pending.complete(producer_id, commit, in_partition, lambda key: store.get(*key))
        for (group, topic, partition), value in visible:
            store.put(group, topic, partition, value)
        return len(visible)

    def replay_all(self, records: list[OffsetCommitRecord]) -> None:
        """``replay`` of each record in turn (``OffsetStore.put_records``); like ``replay``, a
        plain value is newer than any pending transactional offset of its partition and a
        tombstone drops them."""
        self.store.put_records(records)
        pending = self.pending
        if not pending.any_open():
            return
        for record in records:
            if pending.has_open_transactions(record.group_id):
                if record.value is None:
                    pending.tombstoned((record.group_id, record.topic, record.partition))
                else:
                    pending.committed(record.group_id, record.topic, record.partition)

    def _tombstone(self, group_id: str, topic: str, partition: int, fx: Effects) -> None:
        fx.write(group_id, OffsetCommitRecord(group_id, topic, partition, None))

    # ------------------------------------------------------------------ OffsetCommit

    def commit(self, request: OffsetCommitRequest, group_error: ErrorCode | None, now: int,
               fx: Effects) -> OffsetCommitResult:
        """Store each partition's offset unless the group refused the commit (``group_error``).

        Unknown partitions are answered first, before the group is considered, as KafkaApis
        does. One loop per request (no call per partition): this runs for every offset of
        every commit.
        """
        group_id = request.group_id
        retention = request.retention_ms
        expire_ts = now + retention if retention != -1 else -1
        partitions_of = self.topics.partitions_of if self.config.require_known_topic and self.topics is not None \
            else None
        max_metadata = self.config.offset_metadata_max_bytes
        # Records are built with tuple.__new__ and positional arguments: a named tuple's own
        # constructor is a Python call, and these are built once per offset.
        new_tuple = tuple.__new__
        new_object = object.__new__
        record_type = OffsetCommitRecord
        value_type = OffsetValue
        records: list[OffsetCommitRecord] = []
        record = records.append
        ok = _NONE
        unknown = _UNKNOWN_TOPIC_OR_PARTITION
        topics = []
        for topic in request.topics:
            name = topic.name
            partitions: list[tuple[int, ErrorCode]] = []
            answer = partitions.append
            known = partitions_of(name) if partitions_of is not None else None  # asked once per topic
            for index, offset, leader_epoch, metadata, commit_ts in topic.partitions:
                if known is not None and index not in known:
                    answer((index, unknown))
                elif group_error is not None:
                    answer((index, group_error))
                elif not 0 <= index < MAX_PARTITION:
                    answer((index, unknown))
                # UTF-16 length is between len() and 2 * len(): only measure when it matters.
                elif len(metadata) * 2 > max_metadata and _utf16_length(metadata) > max_metadata:
                    answer((index, E.OFFSET_METADATA_TOO_LARGE))
                else:
                    # Built without the dataclass's __init__ (a Python call per offset through
                    # the type): the same five fields, stored straight into its slots.
                    value = new_object(value_type)
                    value.offset = offset
                    value.leader_epoch = leader_epoch
                    value.metadata = metadata
                    value.commit_timestamp = commit_ts if commit_ts != -1 else now
                    value.expire_timestamp = expire_ts
                    record(new_tuple(record_type, (group_id, name, index, value)))
                    answer((index, ok))
            topics.append((name, tuple(partitions)))
        if records:
            fx.write_offsets(group_id, records)
            self.offsets_committed += len(records)
        return OffsetCommitResult(tuple(topics))

    # ------------------------------------------------------------------ TxnOffsetCommit

    def commit_transactional(self, request: TxnOffsetCommitRequest, group_error: ErrorCode | None, now: int,
                             fx: Effects) -> TxnOffsetCommitResult:
        """Kafka's commitTransactionalOffset: the offsets go in one transactional batch, pending."""
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                if not self._partition_known(topic.name, p.partition):
                    code = E.UNKNOWN_TOPIC_OR_PARTITION
                elif group_error is not None:
                    code = group_error
                elif not 0 <= p.partition < MAX_PARTITION:
                    code = E.UNKNOWN_TOPIC_OR_PARTITION
                elif _utf16_length(p.metadata) > self.config.offset_metadata_max_bytes:
                    code = E.OFFSET_METADATA_TOO_LARGE
                else:
                    value = OffsetValue(offset=p.offset, leader_epoch=p.leader_epoch, metadata=p.metadata,
                                        commit_timestamp=now, expire_timestamp=-1)
                    fx.write_transactional(request.group_id, request.producer_id, request.producer_epoch,
                                           OffsetCommitRecord(request.group_id, topic.name, p.partition, value))
                    self.offsets_committed += 1
                    code = E.NONE
                partitions.append((p.partition, code))
            topics.append((topic.name, tuple(partitions)))
        return TxnOffsetCommitResult(tuple(topics))

    # ------------------------------------------------------------------ OffsetFetch

    def fetch(self, request: OffsetFetchRequest) -> OffsetFetchResult:
        return OffsetFetchResult(tuple(self.fetch_group(g, request.require_stable) for g in request.groups))

    def fetch_group(self, group: FetchGroup, require_stable: bool = False) -> FetchedGroup:
        """Committed offsets; with ``require_stable``, UNSTABLE_OFFSET_COMMIT where a transaction has one pending."""
        group_id = group.group_id
        store = self.store
        unstable = self.pending.has_pending if require_stable and self.pending.has_open_transactions(group_id) \
            else None
        if group.topics is None:
            by_topic: dict[str, list[FetchedPartition]] = {}
            for (topic, partition), value in store.items_of(group_id):
                by_topic.setdefault(topic, []).append(
                    _UNSTABLE(partition) if unstable and unstable(group_id, topic, partition)
                    else _fetched(partition, value))
            return FetchedGroup(group_id, tuple((t, tuple(ps)) for t, ps in by_topic.items()))
        if unstable is None:
            fetched = store.fetched
            return tuple.__new__(FetchedGroup, (group_id, tuple([(name, fetched(group_id, name, partitions))
                                                                 for name, partitions in group.topics]), _NONE))
        return FetchedGroup(group_id, tuple(
            (name, tuple(_UNSTABLE(i) if unstable(group_id, name, i)
                         else _fetched(i, store.get(group_id, name, i)) for i in partitions))
            for name, partitions in group.topics
        ))

    # ------------------------------------------------------------------ OffsetDelete (KIP-496)

    def delete(self, request: OffsetDeleteRequest, subscribed: Callable[[str], bool],
               fx: Effects) -> OffsetDeleteResult:
        """Delete the named offsets of a group that allows it; subscribed topics are refused."""
        group_id = request.group_id
        topics = []
        for name, partitions in request.topics:
            out = []
            for index in partitions:
                if not self._partition_known(name, index):
                    code = E.UNKNOWN_TOPIC_OR_PARTITION
                elif subscribed(name):
                    code = E.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    # Kafka writes the tombstone for a pending transactional offset too.
                    if self.store.get(group_id, name, index) is not None \
                            or self.pending.has_pending(group_id, name, index):
                        self._tombstone(group_id, name, index, fx)
                    code = E.NONE
                out.append((index, code))
            topics.append((name, tuple(out)))
        return OffsetDeleteResult(E.NONE, tuple(topics))

    def delete_all(self, group_id: str, fx: Effects) -> None:
        """Tombstone every offset of a group (DeleteGroups), pending transactional ones included."""
        done = set()
        for topic, partition in self.store.partitions_of(group_id):
            self._tombstone(group_id, topic, partition, fx)
            done.add((topic, partition))
        for _, (_, topic, partition), _ in list(self.pending.pending_of(group_id)):
            if (topic, partition) not in done:
                self._tombstone(group_id, topic, partition, fx)
                done.add((topic, partition))

    # ------------------------------------------------------------------ topic changes

    def on_topic_deleted(self, topic: str, fx: Effects) -> None:
        """Kafka's onPartitionsDeleted: every group's offsets for the topic go."""
        for group_id in self.store.group_ids():
            for t, partition in self.store.partitions_of(group_id):
                if t == topic:
                    self._tombstone(group_id, t, partition, fx)
        for group_id in self.pending.group_ids():
            for _, (_, t, partition), _ in list(self.pending.pending_of(group_id)):
                if t == topic and self.pending.has_pending(group_id, t, partition):
                    self._tombstone(group_id, t, partition, fx)

    def commit_start_offsets(self, group_id: str, topic: str, starts: Mapping[int, int], now: int,
                             fx: Effects, metadata: str = "") -> list[int]:
        """Commit each partition's start offset unless the group already has one; returns those committed.

        ``metadata`` marks the commits as the broker's (docs/coordinator-rules.md#policy-commits).
        """
        committed = []
        for partition, start in sorted(starts.items()):
            if self.store.get(group_id, topic, partition) is not None:
                continue
            value = OffsetValue(offset=start, leader_epoch=-1, metadata=metadata, commit_timestamp=now,
                                expire_timestamp=-1)
            fx.write(group_id, OffsetCommitRecord(group_id, topic, partition, value))
            committed.append(partition)
        return committed

    # ------------------------------------------------------------------ expiry (KIP-211)

    def expire(self, group_id: str, base_of: Callable[[OffsetValue], int], considered: Callable[[str], bool],
               now: int, fx: Effects) -> int:
        """Tombstone the group's expired offsets (Kafka's cleanupExpiredOffsets); returns how many.

        An explicit expire timestamp (OffsetCommit v2-v4 retention) always wins over the
        group's base time.
        """
        retention = self.config.offsets_retention_ms
        expired = 0
        pending = self.pending.has_pending if self.pending.has_open_transactions(group_id) else None
        for (topic, partition), value in list(self.store.items_of(group_id)):
            if not considered(topic):
                continue
            if pending is not None and pending(group_id, topic, partition):
                continue  # a transaction may still commit an offset here
            if value.expire_timestamp >= 0:
                gone = now >= value.expire_timestamp
            else:
                gone = now - base_of(value) >= retention
            if gone:
                self._tombstone(group_id, topic, partition, fx)
                expired += 1
        self.offsets_expired += expired
        return expired


def _UNSTABLE(partition: int) -> FetchedPartition:
    return FetchedPartition(partition, error=E.UNSTABLE_OFFSET_COMMIT)


def _fetched(partition: int, value: OffsetValue | None) -> FetchedPartition:
    if value is None:
        return FetchedPartition(partition)
    return FetchedPartition(partition, value.offset, value.leader_epoch, value.metadata)
