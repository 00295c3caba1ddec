"""Coordinator logs written with the storage layer itself, for tests that need no broker.

``LogWriter`` appends records the way the coordinator does (one batch per call, the
append time as the batch timestamp) and remembers every record it wrote, so a test can
compare what the pipeline reads with what was written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.consumer_offsets import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    encode_group_value,
    encode_key,
    encode_offset_value,
    partition_for,
)
from protocol.consumer_protocol import encode_subscription
from protocol.records import EndTransactionMarker
from storage.coordinator_log import CoordinatorLog

T0 = 1_700_000_000_000


@dataclass
class LogWriter:
    data_dir: Path
    partitions: int = 3
    segment_bytes: int = 700
    history: bool = True
    written: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.log = CoordinatorLog(self.data_dir, self.partitions, self.segment_bytes,
                                  history_dir=self.data_dir / "history" if self.history else None)

    def reopen(self, history: bool) -> None:
        self.log.close()
        self.history = history
        self.__post_init__()

    def _append(self, group: str, records: Sequence[tuple[bytes, bytes | None]], ts: int,
                kinds: list[dict[str, Any]], producer_id: int = -1) -> None:
        plog = self.log.partition_log(self.log.partition_of(group))
        base = plog.next_offset if plog is not None else 0
        self.log.append(group, records, ts, producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1)
        for i, kind in enumerate(kinds):
            self.written.append({**kind, "group": group, "record_timestamp": ts,
                                 "coordinator_partition": partition_for(group, self.partitions),
                                 "log_offset": base + i})

    def commit(self, group: str, offsets: dict[tuple[str, int], int], ts: int,
               commit_ts: int | None = None, metadata: str | None = None) -> None:
        records, kinds = [], []
        for (topic, partition), offset in offsets.items():
            value = OffsetValue(offset, 3, f"m{offset}" if metadata is None else metadata,
                                ts if commit_ts is None else commit_ts, -1)
            records.append((encode_key(OffsetKey(group, topic, partition)), encode_offset_value(value)))
            kinds.append({"kind": "commit", "topic": topic, "partition": partition, "offset": offset,
                          "commit_timestamp": value.commit_timestamp})
        self._append(group, records, ts, kinds)

    def txn_commit(self, group: str, producer_id: int, offsets: dict[tuple[str, int], int], ts: int) -> None:
        """What TxnOffsetCommit writes: offset records in a transactional batch of the producer."""
        records, kinds = [], []
        for (topic, partition), offset in offsets.items():
            value = OffsetValue(offset, 3, f"m{offset}", ts, -1)
            records.append((encode_key(OffsetKey(group, topic, partition)), encode_offset_value(value)))
            kinds.append({"kind": "commit", "topic": topic, "partition": partition, "offset": offset,
                          "commit_timestamp": ts, "producer_id": producer_id})
        self._append(group, records, ts, kinds, producer_id)

    def end_txn(self, group: str, producer_id: int, commit: bool, ts: int) -> None:
        """The producer's COMMIT or ABORT marker in the coordinator partition of ``group``."""
        self.log.append_marker(self.log.partition_of(group), producer_id, 0, EndTransactionMarker(commit, 0), ts)

    def delete_offsets(self, group: str, partitions: list[tuple[str, int]], ts: int) -> None:
        records: list[tuple[bytes, bytes | None]] = [
            (encode_key(OffsetKey(group, t, p)), None) for t, p in partitions]
        self._append(group, records, ts, [{"kind": "tombstone", "topic": t, "partition": p} for t, p in partitions])

    def delete_group(self, group: str, partitions: list[tuple[str, int]], ts: int) -> None:
        """What DeleteGroups writes: a tombstone per offset, then the group tombstone."""
        records: list[tuple[bytes, bytes | None]] = [
            (encode_key(OffsetKey(group, t, p)), None) for t, p in partitions]
        records.append((encode_key(GroupKey(group)), None))
        kinds = [{"kind": "tombstone", "topic": t, "partition": p} for t, p in partitions]
        self._append(group, records, ts, [*kinds, {"kind": "group_tombstone"}])

    def group_tombstone(self, group: str, ts: int) -> None:
        """A group tombstone on its own, with no offset tombstones before it."""
        self._append(group, [(encode_key(GroupKey(group)), None)], ts, [{"kind": "group_tombstone"}])

    def group_metadata(self, group: str, generation: int, members: dict[str, list[str]], ts: int) -> None:
        value = {
            "protocol_type": "consumer", "generation": generation,
            "protocol": "range" if members else None,
            "leader": next(iter(members), None), "current_state_timestamp": ts,
            "members": [{
                "member_id": member, "group_instance_id": None, "client_id": "c", "client_host": "/127.0.0.1",
                "rebalance_timeout": 30000, "session_timeout": 10000,
                "subscription": encode_subscription({"topics": topics, "user_data": None}, version=0),
                "assignment": b"",
            } for member, topics in members.items()],
        }
        self._append(group, [(encode_key(GroupKey(group)), encode_group_value(value))], ts,
                     [{"kind": "group_metadata", "generation": generation}])

    def consumer_group(self, group: str, epoch: int, members: dict[str, list[str]], ts: int) -> None:
        """The records of a KIP-848 consumer group at ``epoch`` whose members each own partition 0..n of t."""
        import uuid

        from broker.coordinator.modern.consumer.member import ConsumerGroupMember
        from broker.coordinator.modern.topics import TopicMetadata
        from broker.coordinator.records import (
            ConsumerGroupCurrentAssignmentRecord,
            ConsumerGroupEpochRecord,
            ConsumerGroupMemberMetadataRecord,
            ConsumerGroupSubscriptionMetadataRecord,
            ConsumerGroupTargetAssignmentEpochRecord,
            ConsumerGroupTargetMemberRecord,
            CoordinatorRecord,
            encode,
        )

        topic_id = uuid.UUID(int=7)
        typed: list[CoordinatorRecord] = [ConsumerGroupSubscriptionMetadataRecord(
            group, {"t": TopicMetadata(topic_id, "t", len(members))})]
        kinds: list[dict[str, Any]] = [{"kind": "consumer_group_subscription"}]
        for i, (member, topics) in enumerate(members.items()):
            m = ConsumerGroupMember(member, client_id="c", client_host="/127.0.0.1",
                                    subscribed_topic_names=tuple(topics), rebalance_timeout_ms=30000,
                                    member_epoch=epoch, previous_member_epoch=epoch - 1,
                                    assigned_partitions={topic_id: frozenset({i})})
            typed += [ConsumerGroupMemberMetadataRecord(group, member, m),
                      ConsumerGroupTargetMemberRecord(group, member, m.assigned_partitions),
                      ConsumerGroupCurrentAssignmentRecord(group, member, m)]
            kinds += [{"kind": "consumer_group_member", "member_id": member},
                      {"kind": "consumer_group_target", "member_id": member},
                      {"kind": "consumer_group_assignment", "member_id": member, "generation": epoch}]
        typed += [ConsumerGroupEpochRecord(group, epoch), ConsumerGroupTargetAssignmentEpochRecord(group, epoch)]
        kinds += [{"kind": "consumer_group_epoch", "generation": epoch},
                  {"kind": "consumer_group_target_epoch", "generation": epoch}]
        self._append(group, [encode(r) for r in typed], ts, kinds)

    def consumer_group_gone(self, group: str, members: list[str], ts: int) -> None:
        """What deleting an empty consumer group writes after its members left: the group's tombstones."""
        from broker.coordinator.records import (
            ConsumerGroupEpochRecord,
            ConsumerGroupSubscriptionMetadataRecord,
            ConsumerGroupTargetAssignmentEpochRecord,
            CoordinatorRecord,
            encode,
        )

        typed: list[CoordinatorRecord] = [ConsumerGroupTargetAssignmentEpochRecord(group, None),
                                          ConsumerGroupSubscriptionMetadataRecord(group, None),
                                          ConsumerGroupEpochRecord(group, None)]
        self._append(group, [encode(r) for r in typed], ts, [
            {"kind": "consumer_group_target_epoch_tombstone"}, {"kind": "consumer_group_subscription_tombstone"},
            {"kind": "consumer_group_epoch_tombstone"}])

    def compact(self, now: int) -> None:
        self.log.sync()
        self.log.compact_all(now, 10**12)

    def close(self) -> None:
        self.log.sync()
        self.log.close()
