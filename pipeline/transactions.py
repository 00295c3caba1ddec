"""Which records of the coordinator log count: transactional offset commits wait for their marker.

TxnOffsetCommit writes ordinary offset records, but in a transactional batch carrying the
producer id; the transaction ends with a control batch holding a COMMIT or ABORT marker
for that producer in the same ``__consumer_offsets`` partition (docs/transactions.md). The
broker's replay keeps such offsets pending until that marker
(``broker.coordinator.txn_offsets``, Kafka's OffsetMetadataManager.replayEndTransactionMarker),
and the pipeline counts them the same way:

- a record of a transactional batch belongs to the first marker of its producer after it
  in its partition; with none yet, its transaction is still open;
- a commit takes effect at its COMMIT marker's time; an aborted or open one never does;
- a tombstone takes effect at once, whatever batch it is in (Kafka replays a null value
  so), and other record kinds in a transactional batch never do (the broker skips them);
- where a committed transaction and plain commits of the same partition meet, the record
  later in the log wins, by the record's own position, not the marker's: that is
  Kafka's rule (a committed offset becomes current only if it is newer in the log than
  the current one), and the jobs' "last in log order" applied to the records that took
  effect by a given time gives exactly it.

Every row carries the outcome in four columns (``OUTCOME_COLUMNS``): ``producer_id`` and
``transaction`` (``committed``, ``aborted``, ``open``; null for a plain record),
``marker_offset`` (the log offset of the marker that ended it) and ``visible_timestamp``
(when the record took effect: its record timestamp for a plain record; null if never).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from protocol.records import BatchHeader, iter_records, read_marker

__all__ = [
    "ABORTED",
    "COMMITTED",
    "OPEN",
    "OUTCOME_COLUMNS",
    "Marker",
    "MarkerLookup",
    "markers_of_batch",
    "outcome",
]

COMMITTED, ABORTED, OPEN = "committed", "aborted", "open"
#: The columns ``outcome`` fills, in order, after ``record_timestamp``.
OUTCOME_COLUMNS = ("producer_id", "transaction", "marker_offset", "visible_timestamp")


@dataclass(frozen=True, slots=True, order=True)
class Marker:
    """A COMMIT or ABORT marker: where it is, whose transaction it ends, and when it was written."""

    offset: int
    producer_id: int
    commit: bool
    timestamp: int


def markers_of_batch(header: BatchHeader, raw: bytes | memoryview) -> Iterator[Marker]:
    """The end-transaction markers of a control batch (other control records are not markers).

    Raises ``RecordBatchError`` for a control batch that cannot be read.
    """
    for offset, timestamp, key, value in iter_records(raw, verify_crc=False):
        marker = read_marker(key, value)
        if marker is not None:
            yield Marker(offset, header.producer_id, marker.commit, timestamp)


class MarkerLookup:
    """The first marker of a producer after an offset, among the markers of one partition."""

    __slots__ = ("_by_producer",)

    def __init__(self, markers: Iterable[Marker]) -> None:
        by_producer: dict[int, tuple[list[int], list[Marker]]] = {}
        for marker in sorted(set(markers)):
            offsets, found = by_producer.setdefault(marker.producer_id, ([], []))
            offsets.append(marker.offset)
            found.append(marker)
        self._by_producer = by_producer

    def after(self, producer_id: int, offset: int) -> Marker | None:
        """The marker that ends the transaction of ``producer_id`` holding ``offset``; None: still open."""
        entry = self._by_producer.get(producer_id)
        if entry is None:
            return None
        offsets, found = entry
        i = bisect.bisect_right(offsets, offset)
        return found[i] if i < len(found) else None


def outcome(kind: str, record_timestamp: int, producer_id: int | None, marker: Marker | None
            ) -> tuple[Any, ...]:
    """``OUTCOME_COLUMNS`` of a record: ``producer_id`` None for a plain batch's record."""
    if producer_id is None:
        return None, None, None, record_timestamp
    if marker is None:
        transaction, marker_offset = OPEN, None
    else:
        transaction, marker_offset = (COMMITTED if marker.commit else ABORTED), marker.offset
    if kind == "tombstone":
        visible = record_timestamp
    elif kind == "commit" and marker is not None and marker.commit:
        visible = marker.timestamp
    else:
        visible = None
    return producer_id, transaction, marker_offset, visible

