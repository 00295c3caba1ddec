"""The ``__consumer_offsets`` log: one ``PartitionLog`` per partition, with numbered appends.

The transaction coordinator's ``__transaction_state`` is the same kind of log (``topic``).
Offsets committed inside a transaction go in transactional batches carrying the producer
id, and the transaction's COMMIT or ABORT marker follows as a control batch
(``append_marker``); ``replay`` hands both to a ``TransactionalReplay`` when given one.

Groups map to partitions the way Kafka maps them (Java ``String.hashCode``), so one
partition stays the unit of ownership if the coordinator is ever split across nodes.
``append`` is cheap and never waits for the disk; ``sync`` makes everything written so
far durable in one go and reports the sequence number that is now durable (a
``storage.journal.Journal``), which is what lets many requests share one fsync
(ARCHITECTURE.md invariant 2). Every appended batch also goes to the log's journal file
(``storage.wal``), and ``sync`` fsyncs only that file, however many partitions were
written; the partitions' segments are fsynced at a ``checkpoint`` (when the journal has
grown past ``journal_bytes``, and before any partition is cut back or dropped), which then
empties the journal. Opening the log lays the journal's entries back onto partitions that
lost them. ``compact_all`` (also for a worker thread) runs the log
cleaner over every partition.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

from protocol.consumer_offsets import partition_for
from protocol.records import (
    CONTROL_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    EncodedRecords,
    EndTransactionMarker,
    RecordBatchError,
    encode_marker_batch,
    iter_records,
    peek_batch_header,
    read_marker,
)
from storage.cleaner import CleanResult
from storage.fs import REAL_FS, FileSystem
from storage.journal import Journal, PendingSync
from storage.layout import (
    COORDINATOR_TOPIC,
    journal_file,
    parse_partition_dir,
    partition_count_file,
    partition_dir,
)
from storage.partition import CorruptLogError, PartitionLog
from storage.wal import WriteAheadJournal
from storage.walker import walk_bytes

REPLAY_CHUNK = 8 << 20  # bytes of whole batches read per step at start-up
JOURNAL_BYTES = 64 << 20  # a checkpoint once the journal file holds this much

__all__ = ["TOPIC", "CoordinatorLog", "PartitionCountError", "TransactionalReplay"]

log = logging.getLogger("kcoord.storage")

TOPIC = COORDINATOR_TOPIC


class PartitionCountError(Exception):
    """The data directory was written with another partition count.

    Changing it would move groups to other partitions and hide their committed offsets,
    so (as in Kafka) the count is fixed once the log exists.
    """


class TransactionalReplay(Protocol):
    """Where ``CoordinatorLog.replay`` sends what transactions wrote (Kafka's replay with a producer id)."""

    def record(self, key: bytes, value: bytes | None, producer_id: int) -> None:
        """A record of a transactional batch: pending until its producer's marker."""

    def marker(self, partition: int, producer_id: int, marker: EndTransactionMarker) -> None:
        """A COMMIT or ABORT marker of ``producer_id`` in ``partition``."""


_TXN_OR_CONTROL = TRANSACTIONAL_BIT | CONTROL_BIT


class CoordinatorLog:
    """``data_dir/__consumer_offsets-{p}`` partition logs, opened (and recovered) at start-up.

    A partition's directory is created on its first append. Thread safety: ``append`` from
    the event loop and ``sync`` or ``compact_all`` from worker threads may overlap; syncs
    serialise. ``history_dir`` is handed to every partition log (see ``storage.cleaner``),
    and so is ``fs``.
    """

    def __init__(
        self,
        data_dir: Path,
        partitions: int,
        segment_bytes: int,
        *,
        history_dir: Path | None = None,
        fs: FileSystem = REAL_FS,
        topic: str = TOPIC,
        journal_bytes: int = JOURNAL_BYTES,
        journal: bool = True,
    ) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be positive, got {partitions}")
        self.fs = fs
        self.topic = topic
        self.data_dir = Path(data_dir)
        self.partitions = partitions
        self.segment_bytes = segment_bytes
        self.history_dir = Path(history_dir) if history_dir is not None else None
        self._lock = threading.Lock()
        self._journal = Journal()
        self._logs: dict[int, PartitionLog] = {}
        self._closed = False
        self.journal_bytes = journal_bytes
        #: Appends go through the journal file (``log.flush.policy=durable``). Without it
        #: (``os``: nothing is synced per request) a sync fsyncs the partitions written, as
        #: before; the journal is still read at open, so one left by a durable run is kept.
        self.journaling = journal
        fs.make_dirs(self.data_dir)
        self._check_partition_count()
        self._wal = WriteAheadJournal(fs, journal_file(self.data_dir, topic))
        self._recovering = True  # partitions opened now may lean on the journal (PartitionLog.journaled)
        try:
            for p in sorted(self._existing_partitions()):
                self._logs[p] = self._open_partition(p)
            self._recover_journal()
            self._recovering = False
        except BaseException:
            self.close()
            raise

    # --- layout -----------------------------------------------------------------------

    def _open_partition(self, partition: int) -> PartitionLog:
        plog = PartitionLog.open(
            partition_dir(self.data_dir, self.topic, partition), self.segment_bytes,
            history_dir=self.history_dir, fs=self.fs, journaled=self._recovering,
        )
        if self.journaling:
            wal = self._wal

            def journal(batch: bytes) -> None:
                wal.add(partition, batch)

            plog.on_write = journal
            plog.before_cut = self.checkpoint  # a cut must not be undone by the journal's older entries
        return plog

    def _recover_journal(self) -> None:
        """Lay the journal's entries back onto partitions whose logs end before them, then checkpoint.

        An entry the partition already holds is skipped. One that would leave a gap, or that
        overlaps the log's end, means the segments lost what a checkpoint had made durable:
        refuse to start rather than serve a log with a hole in it.
        """
        restored = 0
        laid_back: set[int] = set()

        def lay_back(partition: int, batch: memoryview) -> None:
            nonlocal restored
            if not 0 <= partition < self.partitions:
                raise CorruptLogError(f"{self._wal.path}: entry for partition {partition}, but the log has "
                                      f"{self.partitions}")
            try:
                header = peek_batch_header(batch)
            except RecordBatchError as exc:
                raise CorruptLogError(f"{self._wal.path}: entry for partition {partition}: {exc}") from None
            plog = self._writable(partition)
            end = plog.next_offset
            if header.next_offset <= end:
                return
            if header.base_offset != end:
                raise CorruptLogError(
                    f"{plog.directory}: log ends at offset {end} but the journal's next batch for it "
                    f"starts at {header.base_offset}"
                )
            plog.append_replicated(bytes(batch))
            restored += 1
            laid_back.add(partition)

        entries = self._wal.read(lay_back)
        for partition, plog in self._logs.items():
            if plog.cut_before_valid is not None and partition not in laid_back:
                raise CorruptLogError(
                    f"{plog.directory}: the last segment had corrupt data before a valid batch, cut at offset "
                    f"{plog.cut_before_valid}, and the journal does not hold the batches from there on: "
                    "this is not a torn tail"
                )
        if restored:
            log.warning("%s: %d batches the segments had lost were restored from %s", self.topic, restored,
                        self._wal.path.name)
        if entries:
            self.checkpoint()
        else:
            # Never write on after entries found at open: a crash may have left an entry of this
            # generation further on that the first write here would make readable again.
            self._wal.reset()

    def _existing_partitions(self) -> set[int]:
        found = set()
        for name in self.fs.listdir(self.data_dir):
            parsed = parse_partition_dir(name)
            if parsed is not None and parsed[0] == self.topic and self.fs.is_dir(self.data_dir / name):
                found.add(parsed[1])
        return found

    def _check_partition_count(self) -> None:
        """Refuse a changed count; record the count on first use (atomically, durably)."""
        meta = partition_count_file(self.data_dir, self.topic)
        if self.fs.exists(meta):
            try:
                stored = json.loads(self.fs.read_bytes(meta))["partitions"]
            except (ValueError, KeyError, TypeError) as exc:
                raise CorruptLogError(f"{meta}: unreadable metadata: {exc}") from exc
            if stored != self.partitions:
                setting = "offsets.topic.num.partitions" if self.topic == TOPIC else "transaction.state.log.num.partitions"
                raise PartitionCountError(
                    f"{self.data_dir} holds {self.topic} with {stored} partitions but "
                    f"{self.partitions} are configured; the partition count cannot change "
                    f"once the log exists (set {setting}={stored})"
                )
            return
        stray = sorted(p for p in self._existing_partitions() if p >= self.partitions)
        if stray:
            raise PartitionCountError(
                f"{self.data_dir} has {self.topic} partition directories {stray} but only "
                f"{self.partitions} partitions are configured and {meta.name} is missing"
            )
        self.fs.write_atomically(meta, json.dumps({"partitions": self.partitions}).encode())

    # --- writing ----------------------------------------------------------------------

    @property
    def written_seq(self) -> int:
        """Number of appends so far; ``sync`` makes a prefix of them durable."""
        return self._journal.written_seq

    @property
    def durable_seq(self) -> int:
        """Every append numbered up to this one is fsynced."""
        return self._journal.durable_seq

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions)

    def partition_log(self, partition: int) -> PartitionLog | None:
        """The open log of a partition, or None before its first append."""
        return self._logs.get(partition)

    def append(
        self, group_id: str, records: Sequence[tuple[bytes, bytes | None]] | EncodedRecords, timestamp_ms: int, *,
        producer_id: int = -1, producer_epoch: int = -1,
    ) -> int:
        """Write ``records`` as one batch to the group's partition; returns its seq.

        With a ``producer_id`` the batch is transactional: its records count only once the
        producer's COMMIT marker follows. Not durable until a ``sync`` returns a seq at
        least this large. An ``OSError`` means the write failed (the partition's file is
        cut back to before it).
        """
        partition = partition_for(group_id, self.partitions)
        with self._lock:
            plog = self._writable(partition)
            plog.append(records, timestamp_ms, producer_id=producer_id, producer_epoch=producer_epoch,
                        transactional=producer_id >= 0)
            return self._journal.mark(self._wal if self.journaling else plog)

    def append_marker(self, partition: int, producer_id: int, producer_epoch: int, marker: EndTransactionMarker,
                      timestamp_ms: int) -> int:
        """Write a transaction's COMMIT or ABORT marker to one partition; returns its seq."""
        with self._lock:
            plog = self._writable(partition)
            plog.append_batch(encode_marker_batch(producer_id, producer_epoch, marker, timestamp_ms))
            return self._journal.mark(self._wal if self.journaling else plog)

    def _writable(self, partition: int) -> PartitionLog:
        """The partition's log, opened on first use. Holds _lock."""
        if self._closed:
            raise ValueError(f"{self.data_dir}: {self.topic} log is closed")
        plog = self._logs.get(partition)
        if plog is None:
            plog = self._open_partition(partition)
            self._logs[partition] = plog
        return plog

    def sync(self) -> int:
        """fsync the journal (one file, however many partitions were written); returns the durable seq.

        Blocking. Once the journal holds ``journal_bytes``, also checkpoints.
        """
        durable = self._journal.sync()
        if self.checkpoint_due:
            self.checkpoint()
        return durable

    @property
    def splits_sync(self) -> bool:
        """Whether ``sync_start`` can hand the journal's fdatasync to the kernel
        (``storage.aio``): a journaling log on a file system with real descriptors."""
        return self.journaling and self._wal.fileno() is not None

    def sync_start(self) -> PendingSync | None:
        """The non-blocking half of ``sync``: write the journal's buffer (one ``pwrite``) and
        return what must be fdatasynced for it, holding other syncs off until
        ``sync_finish``. None if a blocking ``sync`` is running (a worker thread's).

        ``OSError`` if the write fails (the sync is over; the broker stops on it).
        """
        started = self._journal.start_sync()
        if started is None:
            return None
        target, dirty = started
        pending = PendingSync(target, dirty, [], [])
        if dirty:  # while journaling, the journal file is the one log ever marked
            try:
                fd = self._wal.write_out()
            except ValueError:
                if not self._wal.closed:
                    self._journal.finish_sync(target, dirty, False)
                    raise
                fd = None  # closed since (the log is closing): nothing to sync
            except BaseException:
                self._journal.finish_sync(target, dirty, False)
                raise
            if fd is not None:
                pending.fds.append(fd)
                pending.paths.append(self._wal.path)
        return pending

    def sync_finish(self, pending: PendingSync, synced: bool) -> int:
        """The second half: each of ``pending.fds`` was fdatasynced (``synced``), or not (it
        will be at the next sync); returns the durable seq. Check ``checkpoint_due`` after."""
        return self._journal.finish_sync(pending.target, pending.dirty, synced)

    @property
    def checkpoint_due(self) -> bool:
        """The journal holds ``journal_bytes``: time for ``checkpoint`` (blocking)."""
        return self.journaling and self._wal.size >= self.journal_bytes

    def checkpoint(self) -> None:
        """fsync every partition's segments, then empty the journal (blocking).

        The segments are fsynced once while appends carry on, then again, with appends
        held, for what was appended meanwhile; only then does the journal start over.

        After it the segments alone hold everything appended, durably. Run when the journal
        has grown, at start-up after recovery, and before a partition is cut back or dropped
        (its older entries must not come back at the next start).
        """
        with self._lock:
            if self._closed or self._wal.size == 0:
                return
            logs = list(self._logs.values())
        for plog in logs:  # the bulk of the fsyncs, while appends carry on
            try:
                plog.flush()
            except ValueError:
                if not plog.closed:
                    raise
        with self._lock:  # then only what was appended meanwhile, with appends held
            self._checkpoint_held()

    def _checkpoint_held(self) -> None:
        """The checkpoint's last step, with ``_lock`` held: nothing can be appended meanwhile."""
        if self._closed or self._wal.size == 0:
            return
        for plog in self._logs.values():
            plog.flush()
        self._wal.reset()

    # --- compaction -------------------------------------------------------------------

    def dirty_ratio(self) -> float:
        """The highest dirty ratio over the partitions: whether a clean is worth running."""
        with self._lock:
            logs = list(self._logs.values())
        return max((plog.dirty_ratio() for plog in logs), default=0.0)

    def compact_all(
        self, now_ms: int, delete_retention_ms: int, *, min_dirty_ratio: float = 0.0
    ) -> dict[int, CleanResult]:
        """Clean every partition whose dirty ratio is at least ``min_dirty_ratio``.

        Blocking file I/O for a worker thread; appends and syncs carry on meanwhile.
        Returns the result per cleaned partition; if any partition failed, the others are
        still cleaned and the first error is raised at the end. Replay afterwards gives the same state
        (tombstones older than ``delete_retention_ms`` are gone, as are their keys).
        """
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.data_dir}: {self.topic} log is closed")
            logs = sorted(self._logs.items())
        results: dict[int, CleanResult] = {}
        failure: BaseException | None = None
        for partition, plog in logs:
            if min_dirty_ratio > 0 and plog.dirty_ratio() < min_dirty_ratio:
                continue
            try:
                results[partition] = plog.compact(now_ms, delete_retention_ms)
            except Exception as exc:  # one bad partition must not stop the others being cleaned
                log.error("%s: clean failed: %s", plog.directory, exc)
                failure = failure or exc
        if failure is not None:
            raise failure
        return results

    # --- reading ----------------------------------------------------------------------

    def end_offsets(self) -> list[int]:
        """Each partition's log end offset (0 for one never written)."""
        return [plog.next_offset if (plog := self._logs.get(p)) is not None else 0 for p in range(self.partitions)]

    def start_offsets(self) -> list[int]:
        """Each partition's log start offset (0 for one never written)."""
        return [plog.log_start_offset if (plog := self._logs.get(p)) is not None else 0
                for p in range(self.partitions)]

    def batch_before(self, partition: int, offset: int) -> tuple[int, int] | None:
        """``(base offset, CRC)`` of the batch holding ``offset - 1``; None if the partition has no such
        offset (below its start or past its end). What a snapshot names the log by."""
        plog = self._logs.get(partition)
        if plog is None or not plog.log_start_offset < offset <= plog.next_offset:
            return None
        raw = plog.read_raw(offset - 1, 1)
        if not raw:
            return None
        header = peek_batch_header(raw)
        if not header.base_offset <= offset - 1 <= header.base_offset + header.last_offset_delta:
            return None  # offset - 1 fell in a gap the cleaner left
        return header.base_offset, header.crc

    def replay(self, start: Sequence[int] | None = None, transactions: TransactionalReplay | None = None
               ) -> Iterator[tuple[bytes, bytes | None, int]]:
        """Yield ``(key, value, timestamp)`` for every record, partition by partition.

        Within a partition records come in offset order, which is all replay needs: a
        group's records all live in one partition. A None value is a tombstone. Recovery
        checked every batch's framing and CRC when the log was opened; ``iter_records``
        checks each CRC again as it decodes. With ``start`` (an offset per partition, at
        or above its log start), only the records from there on: the tail after a snapshot.
        Records of transactional batches and transaction markers go to ``transactions``
        instead, in the same order; without one, markers are skipped and transactional
        records are yielded like the others.
        """
        for partition in sorted(self._logs):
            plog = self._logs[partition]
            yield from self._replay_log(partition, plog, plog.log_start_offset if start is None else start[partition],
                                        transactions)

    def replay_partition(self, partition: int, transactions: TransactionalReplay | None = None
                         ) -> Iterator[tuple[bytes, bytes | None, int]]:
        """``replay`` of one partition (a cluster node loading a partition it now leads)."""
        plog = self._logs.get(partition)
        if plog is not None:
            yield from self._replay_log(partition, plog, plog.log_start_offset, transactions)

    def _replay_log(self, partition: int, plog: PartitionLog, first: int, transactions: TransactionalReplay | None
                    ) -> Iterator[tuple[bytes, bytes | None, int]]:
        offset = first
        end = plog.next_offset
        while offset < end:
            chunk = plog.read_raw(offset, REPLAY_CHUNK)
            if not chunk:
                break
            for pos, header in walk_bytes(chunk, verify_crc=False):
                raw = memoryview(chunk)[pos : pos + header.size]
                try:
                    records = iter_records(raw)
                    if header.attributes & _TXN_OR_CONTROL:
                        self._replay_transactional(partition, plog, header, records, transactions)
                        if transactions is not None or header.is_control:
                            offset = header.base_offset + header.last_offset_delta + 1
                            continue
                        records = iter_records(raw)
                    for record_offset, timestamp, key, value in records:
                        if record_offset < first:
                            continue  # a batch that began before the start
                        if key is None:
                            raise CorruptLogError(
                                f"{plog.directory}: record at offset {record_offset} has no key"
                            )
                        yield key, value, timestamp
                except RecordBatchError as exc:
                    raise CorruptLogError(
                        f"{plog.directory}: batch at offset {header.base_offset} cannot be replayed: {exc}"
                    ) from None
                offset = header.base_offset + header.last_offset_delta + 1

    # --- partitions that come and go (a cluster node) ---------------------------------

    def open_partition(self, partition: int) -> PartitionLog:
        """Open (and recover) a partition's directory, e.g. one just copied from another node."""
        with self._lock:
            plog = self._logs.get(partition)
            if plog is None:
                plog = self._logs[partition] = self._open_partition(partition)
            return plog

    def drop_partition(self, partition: int) -> None:
        """Close a partition and delete its directory: another node holds it now.

        Checkpoints first, the last step together with taking the partition away, so no
        entry for it is left in the journal to be laid back at the next start."""
        self.checkpoint()
        with self._lock:
            self._checkpoint_held()
            plog = self._logs.pop(partition, None)
        if plog is not None:
            plog.close()
        directory = partition_dir(self.data_dir, self.topic, partition)
        if self.fs.exists(directory):
            self.fs.remove_tree(directory)
            self.fs.fsync_directory(self.data_dir)

    @staticmethod
    def _replay_transactional(partition: int, plog: PartitionLog, header: BatchHeader, records: Iterator[
            tuple[int, int, bytes | None, bytes | None]], transactions: TransactionalReplay | None) -> None:
        """A transactional batch's records, or a marker, to ``transactions``."""
        if transactions is None:
            return
        producer_id = header.producer_id
        if header.is_control:
            for _, _, key, value in records:
                marker = read_marker(key, value)
                if marker is not None:
                    transactions.marker(partition, producer_id, marker)
            return
        for record_offset, _, key, value in records:
            if key is None:
                raise CorruptLogError(f"{plog.directory}: record at offset {record_offset} has no key")
            transactions.record(key, value, producer_id)

    def close(self) -> None:
        """Close every partition log (without fsync: ``sync`` first to keep writes)."""
        with self._lock:
            self._closed = True
            for plog in self._logs.values():
                plog.close()
            self._wal.close()
