"""The producers of one partition: idempotence, transactions, the last stable offset, aborted transactions.

Kafka keeps this per partition in ``ProducerStateManager`` and the ``TransactionIndex``;
here it is two layers:

- ``ProducerState``: the rules, sans-IO. Per producer id: its epoch, the sequence ranges
  of its last five batches (duplicates of those are answered with the original offset),
  the first offset of its open transaction in this partition, and the coordinator epoch
  of the last marker. A COMMIT or ABORT marker closes the producer's open transaction;
  an aborted one becomes an ``AbortedTxn`` entry. The last stable offset is the first
  offset of the oldest open transaction, or the high watermark when none is open:
  read_committed consumers never read past it.
- ``PartitionProducerState``: the same state kept with the partition's files, so it
  survives a restart without replaying the whole log. Aborted transactions are appended
  to ``aborted.txnindex`` (Kafka's AbortedTxn entries, 34 bytes each) as their markers are
  appended; ``producer-state.checkpoint`` holds the producers as of a log offset whose
  batches (and the index entries below it) were fsynced first. Opening a partition loads
  the checkpoint and replays only the batches after it, cutting index entries the
  checkpoint does not vouch for: a torn tail, a lost index write or a missing checkpoint
  all end in the state the log itself describes.

Thread safety: appends run on the event loop; ``checkpoint`` runs in a worker thread. The
state is changed and copied under one lock.
"""

from __future__ import annotations

import bisect
import json
import logging
import struct
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

from protocol.errors import ErrorCode
from protocol.records import BatchHeader, EndTransactionMarker, RecordBatchError, decode_batch, marker_of
from storage.fs import REAL_FS, File, FileSystem
from storage.layout import aborted_index_file, producer_state_file
from storage.segment import CorruptLogError
from storage.walker import walk_bytes

__all__ = [
    "AbortedTxn",
    "PartitionProducerState",
    "ProducerEntry",
    "ProducerState",
    "ReadableLog",
]

log = logging.getLogger("kcoord.storage")

INT32_MAX = 2147483647
#: As Kafka: a producer has at most five batches in flight, so five are enough to spot a retry.
RETAINED_BATCHES = 5
_SCAN_CHUNK = 4 << 20
_CHECKPOINT_VERSION = 1
#: Kafka's AbortedTxn: version int16, producer id int64, first, last and last stable offsets int64.
_ENTRY = struct.Struct(">hqqqq")
E = ErrorCode


class AbortedTxn(NamedTuple):
    """A transaction aborted in this partition: Fetch hands these to read_committed consumers."""

    producer_id: int
    first_offset: int
    last_offset: int  # the offset of its ABORT marker
    last_stable_offset: int


@dataclass(slots=True)
class ProducerEntry:
    """What the partition remembers of one producer id."""

    producer_id: int
    epoch: int
    #: (first sequence, last sequence, base offset, last offset) of its latest batches.
    batches: deque[tuple[int, int, int, int]] = field(default_factory=lambda: deque(maxlen=RETAINED_BATCHES))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    #: First offset of its open transaction in this partition, or -1.
    txn_first_offset: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1


def _next_sequence(sequence: int) -> int:
    return 0 if sequence == INT32_MAX else sequence + 1


class ProducerState:
    """The rules over one partition's producer batches and markers (sans-IO)."""

    __slots__ = ("_open", "aborted", "end_offset", "producers")

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        #: producer id -> first offset of its open transaction, oldest first (offsets only grow).
        self._open: dict[int, int] = {}
        #: Aborted transactions by marker offset.
        self.aborted: list[AbortedTxn] = []
        #: Every batch below this offset has been applied.
        self.end_offset = 0

    # ------------------------------------------------------------------ checks (before an append)

    def check_batch(self, producer_id: int, epoch: int, first_seq: int, count: int,
                    transactional: bool) -> tuple[ErrorCode, int | None]:
        """Validate a producer's batch: ``(error, base offset of the original when it is a retry)``.

        Kafka's ProducerAppendInfo: an older epoch is INVALID_PRODUCER_EPOCH; a new epoch
        must start at sequence 0; otherwise the batch must continue the last sequence
        (a retry of one of the last five batches is a duplicate, answered with its first
        offset). A plain batch from a producer with an open transaction is INVALID_TXN_STATE.
        """
        entry = self.producers.get(producer_id)
        if entry is None:
            if first_seq != 0:
                return E.OUT_OF_ORDER_SEQUENCE_NUMBER, None
            return E.NONE, None
        if epoch < entry.epoch:
            return E.INVALID_PRODUCER_EPOCH, None
        if epoch > entry.epoch:
            # A new epoch starts its sequences again (KIP-360 bumps, a new transactional session).
            return (E.NONE if first_seq == 0 else E.OUT_OF_ORDER_SEQUENCE_NUMBER), None
        last_seq = (first_seq + count - 1) % (INT32_MAX + 1)
        for seq_first, seq_last, base, _ in entry.batches:
            if seq_first == first_seq and seq_last == last_seq:
                return E.NONE, base
        if first_seq != _next_sequence(entry.last_sequence):
            return E.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        if not transactional and entry.txn_first_offset >= 0:
            return E.INVALID_TXN_STATE, None
        return E.NONE, None

    def has_open_transaction(self, producer_id: int) -> bool:
        entry = self.producers.get(producer_id)
        return entry is not None and entry.txn_first_offset >= 0

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> ErrorCode:
        """Kafka's appendEndTxnMarker checks: not from a fenced producer epoch or an older coordinator."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return E.NONE
        if epoch < entry.epoch:
            return E.INVALID_PRODUCER_EPOCH
        if coordinator_epoch < entry.coordinator_epoch:
            return E.TRANSACTION_COORDINATOR_FENCED
        return E.NONE

    # ------------------------------------------------------------------ appends (and their replay)

    def apply_batch(self, producer_id: int, epoch: int, first_seq: int, count: int, base_offset: int,
                    max_timestamp: int, transactional: bool) -> None:
        """A data batch was appended at ``base_offset``; ``count`` offsets long."""
        last_offset = base_offset + count - 1
        self.end_offset = max(self.end_offset, last_offset + 1)
        if producer_id < 0:
            return
        entry = self.producers.get(producer_id)
        if entry is None or epoch != entry.epoch:
            old = entry
            entry = self.producers[producer_id] = ProducerEntry(producer_id, epoch)
            if old is not None:
                entry.coordinator_epoch = old.coordinator_epoch
                entry.txn_first_offset = old.txn_first_offset
        if first_seq >= 0:
            last_seq = (first_seq + count - 1) % (INT32_MAX + 1)
            entry.batches.append((first_seq, last_seq, base_offset, last_offset))
        entry.last_timestamp = max(entry.last_timestamp, max_timestamp)
        if transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = base_offset
            self._open[producer_id] = base_offset

    def apply_marker(self, producer_id: int, epoch: int, marker: EndTransactionMarker, offset: int,
                     timestamp: int) -> AbortedTxn | None:
        """A COMMIT or ABORT marker was appended at ``offset``; returns the aborted transaction it closed."""
        self.end_offset = max(self.end_offset, offset + 1)
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id, epoch)
        elif epoch != entry.epoch:
            # Kafka's maybeUpdateProducerEpoch: a new epoch forgets the old sequences.
            entry.epoch = epoch
            entry.batches.clear()
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        first = entry.txn_first_offset
        if first < 0:
            return None
        entry.txn_first_offset = -1
        self._open.pop(producer_id, None)
        if marker.commit:
            return None
        aborted = AbortedTxn(producer_id, first, offset, self.last_stable_offset(offset + 1))
        self.aborted.append(aborted)
        return aborted

    # ------------------------------------------------------------------ reads

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction, or None."""
        for first in self._open.values():
            return first
        return None

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)

    def open_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction here."""
        return dict(self._open)

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with data in [start, end): Kafka's collectAbortedTransactions."""
        index = bisect.bisect_left(self.aborted, start, key=lambda a: a.last_offset)
        return [a for a in self.aborted[index:] if a.first_offset < end]

    def forget_below(self, log_start: int) -> None:
        """Entries wholly below the log start offset can no longer be fetched."""
        index = bisect.bisect_left(self.aborted, log_start, key=lambda a: a.last_offset)
        if index:
            del self.aborted[:index]

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Kafka's producer.id.expiration.ms: idle producers without an open transaction are forgotten."""
        gone = [pid for pid, entry in self.producers.items()
                if entry.txn_first_offset < 0 and entry.last_timestamp >= 0
                and now_ms - entry.last_timestamp >= expiration_ms]
        for pid in gone:
            del self.producers[pid]
        return gone

    # ------------------------------------------------------------------ the log as the source of truth

    def replay(self, header: BatchHeader, marker: EndTransactionMarker | None) -> AbortedTxn | None:
        """Apply one batch read back from the log (no checks: the log is what happened)."""
        if header.is_control:
            if marker is None or header.producer_id < 0:
                self.end_offset = max(self.end_offset, header.next_offset)
                return None
            return self.apply_marker(header.producer_id, header.producer_epoch, marker, header.base_offset,
                                     header.max_timestamp)
        self.apply_batch(header.producer_id, header.producer_epoch, header.base_sequence,
                         header.last_offset_delta + 1, header.base_offset, header.max_timestamp,
                         header.is_transactional)
        return None

    def to_json(self) -> dict[str, object]:
        return {
            "version": _CHECKPOINT_VERSION,
            "offset": self.end_offset,
            "producers": [
                [e.producer_id, e.epoch, e.last_timestamp, e.coordinator_epoch, e.txn_first_offset,
                 [list(b) for b in e.batches]]
                for e in self.producers.values()
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ProducerState:
        if data.get("version") != _CHECKPOINT_VERSION:
            raise ValueError(f"unknown producer state checkpoint version {data.get('version')!r}")
        state = cls()
        offset = data["offset"]
        producers = data["producers"]
        if not isinstance(offset, int) or not isinstance(producers, list):
            raise ValueError("malformed producer state checkpoint")
        state.end_offset = offset
        opened: list[tuple[int, int]] = []
        for pid, epoch, last_ts, coordinator_epoch, first, batches in producers:
            entry = ProducerEntry(int(pid), int(epoch), last_timestamp=int(last_ts),
                                  coordinator_epoch=int(coordinator_epoch), txn_first_offset=int(first))
            for batch in batches:
                a, b, c, d = (int(x) for x in batch)
                entry.batches.append((a, b, c, d))
            state.producers[entry.producer_id] = entry
            if entry.txn_first_offset >= 0:
                opened.append((entry.txn_first_offset, entry.producer_id))
        for first, pid in sorted(opened):
            state._open[pid] = first
        return state


class ReadableLog(Protocol):
    """What the producer state reads of its partition log (``storage.partition.PartitionLog``)."""

    directory: Path

    @property
    def log_start_offset(self) -> int: ...

    @property
    def next_offset(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    def read_raw(self, start_offset: int, max_bytes: int) -> bytes: ...

    def flush(self) -> None: ...


class PartitionProducerState:
    """``ProducerState`` kept beside a partition log: the aborted index and a checkpoint."""

    def __init__(self, plog: ReadableLog, fs: FileSystem = REAL_FS) -> None:
        self.plog = plog
        self.fs = fs
        self._lock = threading.Lock()
        self._index_path = aborted_index_file(plog.directory)
        self._checkpoint_path = producer_state_file(plog.directory)
        self._index: File | None = None
        self.index_entries = 0
        self.state = self._load()

    @classmethod
    def open(cls, plog: ReadableLog, fs: FileSystem = REAL_FS) -> PartitionProducerState:
        return cls(plog, fs)

    # ------------------------------------------------------------------ loading

    def _read_checkpoint(self) -> tuple[ProducerState, int] | None:
        path = self._checkpoint_path
        if not self.fs.exists(path):
            return None
        try:
            data = json.loads(self.fs.read_bytes(path))
            state = ProducerState.from_json(data)
            entries = int(data["aborted_entries"])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s: unreadable, rebuilding the producer state from the log: %s", path, exc)
            return None
        if state.end_offset > self.plog.next_offset:
            log.warning("%s: checkpoint at offset %d is past the log end %d; rebuilding from the log",
                        path, state.end_offset, self.plog.next_offset)
            return None
        return state, entries

    def _load(self) -> ProducerState:
        loaded = self._read_checkpoint()
        state, keep = loaded if loaded is not None else (ProducerState(), 0)
        created = not self.fs.exists(self._index_path)
        index = self.fs.open(self._index_path, create=created)
        try:
            if created:
                self.fs.fsync_directory(self.plog.directory)
            size = index.size()
            if keep > size // _ENTRY.size:
                # The checkpoint vouches for entries the index does not hold: trust only the log.
                log.warning("%s: %d aborted transactions expected, %d found; rebuilding from the log",
                            self._index_path, keep, size // _ENTRY.size)
                state, keep = ProducerState(), 0
            raw = index.pread(keep * _ENTRY.size, 0) if keep else b""
            for i in range(len(raw) // _ENTRY.size):
                _, pid, first, last, lso = _ENTRY.unpack_from(raw, i * _ENTRY.size)
                if last < state.end_offset:
                    state.aborted.append(AbortedTxn(pid, first, last, lso))
            if size != keep * _ENTRY.size:
                index.truncate(keep * _ENTRY.size)
        except BaseException:
            index.close()
            raise
        self._index = index
        self.index_entries = keep
        start = max(state.end_offset, self.plog.log_start_offset)
        state.end_offset = start
        for aborted in self._scan(state, start):
            self._write_entry(aborted)
        state.forget_below(self.plog.log_start_offset)
        return state

    def _scan(self, state: ProducerState, start: int) -> Iterator[AbortedTxn]:
        """Replay the batches from ``start`` to the log end into ``state``."""
        plog = self.plog
        offset = start
        end = plog.next_offset
        while offset < end:
            chunk = plog.read_raw(offset, _SCAN_CHUNK)
            if not chunk:
                break
            for pos, header in walk_bytes(chunk, verify_crc=False):
                marker = None
                if header.is_control:
                    try:
                        marker = marker_of(decode_batch(memoryview(chunk)[pos:pos + header.size]))
                    except RecordBatchError as exc:
                        raise CorruptLogError(
                            f"{plog.directory}: control batch at offset {header.base_offset}: {exc}") from None
                aborted = state.replay(header, marker)
                if aborted is not None:
                    yield aborted
                offset = header.next_offset

    # ------------------------------------------------------------------ live appends

    def check_batch(self, producer_id: int, epoch: int, first_seq: int, count: int,
                    transactional: bool) -> tuple[ErrorCode, int | None]:
        return self.state.check_batch(producer_id, epoch, first_seq, count, transactional)

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> ErrorCode:
        return self.state.check_marker(producer_id, epoch, coordinator_epoch)

    def on_batch(self, header: BatchHeader, base_offset: int) -> None:
        """A producer's batch was appended at ``base_offset`` (its header as sent)."""
        with self._lock:
            self.state.apply_batch(header.producer_id, header.producer_epoch, header.base_sequence,
                                   header.last_offset_delta + 1, base_offset, header.max_timestamp,
                                   header.is_transactional)

    def on_marker(self, producer_id: int, epoch: int, marker: EndTransactionMarker, offset: int,
                  timestamp: int) -> AbortedTxn | None:
        """A marker was appended at ``offset``; an aborted transaction goes to the index (not fsynced)."""
        with self._lock:
            aborted = self.state.apply_marker(producer_id, epoch, marker, offset, timestamp)
            if aborted is not None:
                self._write_entry(aborted)
            return aborted

    def _write_entry(self, aborted: AbortedTxn) -> None:
        assert self._index is not None
        data = _ENTRY.pack(0, *aborted)
        written = self._index.write(data)
        if written != len(data):
            raise OSError(f"{self._index_path}: short write of an aborted transaction entry")
        self.index_entries += 1

    # ------------------------------------------------------------------ reads

    def last_stable_offset(self, high_watermark: int) -> int:
        lso = self.state.last_stable_offset(high_watermark)
        return max(lso, min(self.plog.log_start_offset, high_watermark))

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        return self.state.aborted_between(start, end)

    # ------------------------------------------------------------------ durability

    def checkpoint(self, now_ms: int | None = None, expiration_ms: int | None = None) -> int:
        """Make the state as of its last applied batch durable; returns that offset.

        Runs in a worker thread: the state is copied under the lock, then the log and the
        index are fsynced (so everything the copy describes is on disk) before the
        checkpoint replaces the old one atomically.
        """
        with self._lock:
            if now_ms is not None and expiration_ms is not None:
                self.state.expire(now_ms, expiration_ms)
            self.state.forget_below(self.plog.log_start_offset)
            data = self.state.to_json()
            data["aborted_entries"] = self.index_entries
            index = self._index
        self.plog.flush()
        if index is not None and not index.closed:
            index.fsync()
        self.fs.write_atomically(self._checkpoint_path, json.dumps(data, separators=(",", ":")).encode())
        offset = data["offset"]
        assert isinstance(offset, int)
        return offset

    def close(self) -> None:
        with self._lock:
            if self._index is not None:
                self._index.close()
                self._index = None
