"""What one call into the transaction coordinator produced."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from broker.txn.markers import MarkerRequest
from broker.txn.records import TransactionRecord
from broker.txn.requests import Result


@dataclass
class TxnEffects:
    """Records to append (replayed as written), replies by ticket, and markers to write.

    As in the group coordinator, ``write`` is the only way durable state changes: it
    replays the record at once. The shell appends the records, releases the replies once
    they are durable, and writes ``markers`` only then: a transaction's markers never go
    out before its PrepareCommit or PrepareAbort is on disk.
    """

    replay: Callable[[TransactionRecord], None]
    records: list[TransactionRecord] = field(default_factory=list)
    replies: list[tuple[int, Result]] = field(default_factory=list)
    markers: list[MarkerRequest] = field(default_factory=list)

    def write(self, record: TransactionRecord) -> None:
        self.records.append(record)
        self.replay(record)

    def reply(self, ticket: int | None, result: Result) -> None:
        if ticket is not None:
            self.replies.append((ticket, result))

    def reply_for(self, ticket: int) -> Result | None:
        for t, result in self.replies:
            if t == ticket:
                return result
        return None
