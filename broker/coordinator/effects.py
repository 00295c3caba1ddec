"""What one call into the coordinator produced: records to append and replies to release."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from broker.coordinator.records import CoordinatorRecord, OffsetCommitRecord
from broker.coordinator.requests import Result


@dataclass(init=False)
class Effects:
    """One batch of records per group, and replies by ticket.

    ``write`` is the only way rules change durable state: it adds the record to these
    effects and replays it into the coordinator at once, through the same ``replay`` that
    loads the log at start-up. So what the coordinator holds is, by construction, what
    replaying the records it wrote gives. The shell appends each group's records as one
    batch and releases the replies once those records are durable.
    """

    replay: Callable[[CoordinatorRecord], None] | None = None
    #: Replays offset records in one call (``write_offsets``); without it, ``replay`` each.
    replay_offsets: Callable[[list[OffsetCommitRecord]], None] | None = None
    records: dict[str, list[CoordinatorRecord]] = field(default_factory=dict)
    replies: list[tuple[int, Result]] = field(default_factory=list)
    #: How a record of a transactional batch replays (pending until its marker).
    replay_transactional: Callable[[CoordinatorRecord, int], None] | None = None
    #: Records of transactional batches: one batch per (group, producer id, producer epoch).
    transactional: dict[tuple[str, int, int], list[CoordinatorRecord]] = field(default_factory=dict)

    def __init__(self, replay: Callable[[CoordinatorRecord], None] | None = None,
                 replay_offsets: Callable[[list[OffsetCommitRecord]], None] | None = None,
                 replay_transactional: Callable[[CoordinatorRecord, int], None] | None = None) -> None:
        # Written out: every request the coordinator handles opens one, and the generated
        # constructor calls a factory for each empty collection.
        self.replay = replay
        self.replay_offsets = replay_offsets
        self.records = {}
        self.replies = []
        self.replay_transactional = replay_transactional
        self.transactional = {}

    def write(self, group_id: str, record: CoordinatorRecord) -> None:
        if self.replay is None:
            raise RuntimeError("these effects were not opened by the coordinator and cannot take records")
        records = self.records.get(group_id)
        if records is None:
            self.records[group_id] = [record]
        else:
            records.append(record)
        self.replay(record)

    def write_offsets(self, group_id: str, records: list[OffsetCommitRecord]) -> None:
        """``write`` of each record in turn, in one call: a commit writes up to thousands of them."""
        if self.replay is None:
            raise RuntimeError("these effects were not opened by the coordinator and cannot take records")
        existing = self.records.get(group_id)
        if existing is None:
            self.records[group_id] = list(records)
        else:
            existing.extend(records)
        if self.replay_offsets is not None:
            self.replay_offsets(records)
        else:
            for record in records:
                self.replay(record)

    def write_transactional(self, group_id: str, producer_id: int, producer_epoch: int,
                            record: CoordinatorRecord) -> None:
        """A record of the producer's transaction (TxnOffsetCommit): written in a transactional batch."""
        if self.replay_transactional is None:
            raise RuntimeError("these effects were not opened by the coordinator and cannot take records")
        self.transactional.setdefault((group_id, producer_id, producer_epoch), []).append(record)
        self.replay_transactional(record, producer_id)

    def reply(self, ticket: int | None, result: Result) -> None:
        if ticket is not None:
            self.replies.append((ticket, result))

    def merge(self, other: Effects) -> None:
        """Take over another call's records (already replayed) and replies."""
        for group_id, records in other.records.items():
            self.records.setdefault(group_id, []).extend(records)
        for batch, records in other.transactional.items():
            self.transactional.setdefault(batch, []).extend(records)
        self.replies.extend(other.replies)

    def reply_for(self, ticket: int) -> Result | None:
        for t, result in self.replies:
            if t == ticket:
                return result
        return None
