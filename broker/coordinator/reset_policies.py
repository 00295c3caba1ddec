"""Offset reset policies the broker applies for every client (docs/coordinator-rules.md#offset-reset-policies).

Kafka leaves two decisions to each client's ``auto.offset.reset``: where a group starts on a
partition it has no offset for, and what to do when its committed offset has fallen out of
the log. With a group config (or the broker default of the same name) kcoord makes them on
the broker, once for the whole group, as ordinary offset commit records whose metadata
names the policy:

- ``kcoord.offset.out.of.range=nearest``: a committed offset below the log start moves to the
  log start (``kcoord:nearest``) before retention or DeleteRecords moves the start past it,
  and one beyond the log end moves to the log end (a truncated or recreated topic);
- ``kcoord.initial.offset=earliest|latest``: a partition assigned to the group with no offset
  gets the log start or the log end committed (``kcoord:earliest_on_start`` or
  ``kcoord:latest_on_start``) before the assignment is answered;
- the partition-expansion guard's commits are marked ``kcoord:new_partitions``.

This module decides; the shard writes what it returns through ``Effects.write``. The log's
bounds come through ``LogBounds``, a seam the broker's topic catalogue implements, so the
coordinator never reads storage.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from broker.coordinator.group_configs import GroupConfigs
from broker.coordinator.offset_store import OffsetStore
from broker.coordinator.records import (
    ConsumerGroupTargetMemberRecord,
    CoordinatorRecord,
    GroupMetadataRecord,
    OffsetCommitRecord,
    OffsetValue,
)
from protocol.consumer_protocol import decode_assignment
from protocol.errors import ProtocolError
from protocol.policy_marker import POLICY_PREFIX, marker, policy_of

log = logging.getLogger("kcoord.coordinator")

__all__ = [
    "EARLIEST_ON_START",
    "LATEST_ON_START",
    "NEAREST",
    "NEW_PARTITIONS",
    "POLICY_PREFIX",
    "LogBounds",
    "ResetPolicies",
    "policy_of",
]

NEAREST = marker("nearest")
EARLIEST_ON_START = marker("earliest_on_start")
LATEST_ON_START = marker("latest_on_start")
NEW_PARTITIONS = marker("new_partitions")

TopicPartition = tuple[str, int]


class LogBounds(Protocol):
    """What the coordinator may know of a partition's log: ``(log start, log end)``, or None if unknown."""

    def log_bounds(self, topic: str, partition: int) -> tuple[int, int] | None: ...


def nearest(offset: int, start: int, end: int) -> int | None:
    """The offset ``nearest`` commits for a committed ``offset``, or None when it is in the log."""
    if offset < start:
        return start
    if offset > end:
        return end
    return None


class ResetPolicies:
    """The decisions; every method returns the records to write, already marked."""

    def __init__(self, configs: GroupConfigs, store: OffsetStore,
                 topic_name: Callable[[uuid.UUID], str | None]) -> None:
        self.configs = configs
        self.store = store
        self.topic_name = topic_name
        self.bounds: LogBounds | None = None
        #: Commits made by each policy since start-up (the metrics collector reads them).
        self.commits: dict[str, int] = {}

    def counted(self, marker: str, count: int = 1) -> None:
        key = marker[len(POLICY_PREFIX):]
        self.commits[key] = self.commits.get(key, 0) + count

    def _commit(self, group_id: str, topic: str, partition: int, offset: int, marker: str,
                now: int) -> OffsetCommitRecord:
        self.counted(marker)
        return OffsetCommitRecord(group_id, topic, partition, OffsetValue(
            offset=offset, leader_epoch=-1, metadata=marker, commit_timestamp=now, expire_timestamp=-1))

    # ------------------------------------------------------------------ nearest

    def before_log_start_moves(self, topic: str, partition: int, new_start: int,
                               now: int) -> list[OffsetCommitRecord]:
        """Retention or DeleteRecords is about to move the log start to ``new_start``.

        Every group with ``nearest`` whose committed offset lies below it gets ``new_start``
        committed; the caller makes these durable before the new start is visible.
        """
        out = []
        for group_id in self.configs.nearest_groups(self.store.group_ids()):
            value = self.store.get(group_id, topic, partition)
            if value is not None and value.offset < new_start:
                out.append(self._commit(group_id, topic, partition, new_start, NEAREST, now))
        return out

    def out_of_range(self, group_id: str, partitions: Iterable[TopicPartition],
                     now: int) -> list[OffsetCommitRecord]:
        """For a group with ``nearest``: each committed offset outside its log moved to the nearest bound."""
        if self.bounds is None or self.configs.out_of_range(group_id) != "nearest":
            return []
        out = []
        for topic, partition in partitions:
            value = self.store.get(group_id, topic, partition)
            bounds = self.bounds.log_bounds(topic, partition)
            if value is None or bounds is None:
                continue
            moved = nearest(value.offset, *bounds)
            if moved is not None:
                out.append(self._commit(group_id, topic, partition, moved, NEAREST, now))
        return out

    def sweep(self, now: int, group_ids: Iterable[str] | None = None) -> dict[str, list[OffsetCommitRecord]]:
        """``out_of_range`` over every committed offset of the groups (all groups when None).

        At start-up this catches a log truncated by recovery, and a crash between a log start
        moving and its commits becoming durable; after a group's policy changes, it applies
        the new policy at once.
        """
        found: dict[str, list[OffsetCommitRecord]] = {}
        if self.bounds is None:
            return found
        # Only groups with ``nearest`` are looked into: listing every partition of every group
        # would cost a Python step per stored offset at every start-up.
        for group_id in self.configs.nearest_groups(list(self.store.group_ids() if group_ids is None else group_ids)):
            records = self.out_of_range(group_id, self.store.partitions_of(group_id), now)
            if records:
                found[group_id] = records
        return found

    # ------------------------------------------------------------------ initial offsets

    def initial(self, group_id: str, partitions: Iterable[TopicPartition], now: int) -> list[OffsetCommitRecord]:
        """For a group with an initial offset policy: its start or end for each partition with no offset."""
        policy = self.configs.initial_offset(group_id)
        if policy == "none" or self.bounds is None:
            return []
        marker = EARLIEST_ON_START if policy == "earliest" else LATEST_ON_START
        out = []
        for topic, partition in sorted(set(partitions)):
            if self.store.get(group_id, topic, partition) is not None:
                continue
            bounds = self.bounds.log_bounds(topic, partition)
            if bounds is None:
                continue
            offset = bounds[0] if policy == "earliest" else bounds[1]
            out.append(self._commit(group_id, topic, partition, offset, marker, now))
        return out

    def assigned_partitions(self, records: Iterable[CoordinatorRecord]) -> dict[str, set[TopicPartition]]:
        """The partitions that ``records`` assign, by group: a classic group's SyncGroup
        assignments (protocol type consumer) and a consumer group's target members."""
        found: dict[str, set[TopicPartition]] = {}
        for record in records:
            if isinstance(record, ConsumerGroupTargetMemberRecord):
                if record.assignment and self.configs.initial_offset(record.group_id) != "none":
                    found.setdefault(record.group_id, set()).update(self._by_name(record.assignment))
            elif isinstance(record, GroupMetadataRecord):
                value = record.value
                if value is None or value.protocol_type != "consumer" \
                        or self.configs.initial_offset(record.group_id) == "none":
                    continue
                for member in value.members:
                    if member.assignment:
                        found.setdefault(record.group_id, set()).update(_classic_assignment(member.assignment))
        return found

    def _by_name(self, assignment: Mapping[uuid.UUID, Iterable[int]]) -> Iterable[TopicPartition]:
        for topic_id, partitions in assignment.items():
            name = self.topic_name(topic_id)
            if name is not None:
                yield from ((name, p) for p in partitions)


def _classic_assignment(blob: bytes) -> list[TopicPartition]:
    """The partitions of a ConsumerProtocolAssignment; none when it cannot be read."""
    try:
        body = decode_assignment(blob)
    except ProtocolError:
        return []
    return [(t.topic, int(p)) for t in body.assigned_partitions for p in t.partitions]
