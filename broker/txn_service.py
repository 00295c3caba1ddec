"""Runs the sans-IO transaction coordinator inside the trio shell.

As ``group_service`` does for groups: every request gets a ticket, goes to the coordinator
(``broker.txn``) with the wall clock, the records it returns go to ``__transaction_state``
(a coordinator log of its own), and each reply waits until every record written before it
is durable. On top of that, a decided transaction's markers: once its PrepareCommit or
PrepareAbort is durable, a task writes a marker to each of its partitions (data
partitions through the data service, ``__consumer_offsets`` partitions through the group
service, so the group coordinator settles the pending offsets), waits until all of them
are durable, and only then lets the coordinator complete the transaction. A crash
anywhere in between leaves the Prepare record, and the load finishes the job.

The same local marker writes answer WriteTxnMarkers, the request a clustered coordinator
would send a partition leader (``broker.txn.markers``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from broker.coordinator.api import BINDINGS as GROUP_BINDINGS
from broker.coordinator.api import error_result as group_error_result
from broker.data_service import DataService
from broker.deadlines import DeadlineTask
from broker.group_service import GroupService
from broker.handlers.groups import client_info
from broker.metrics import Family, counter, gauge
from broker.slots import Slot
from broker.txn import TransactionConfig, TransactionCoordinator, TxnEffects
from broker.txn.api import BINDINGS, Binding
from broker.txn.markers import MarkerRequest, marker_requests_of
from broker.txn.records import TransactionRecord
from broker.txn.records import decode as decode_record
from broker.txn.records import encode as encode_record
from broker.txn.state import TopicPartition, TransactionState
from protocol.api_keys import ApiKey
from protocol.codec import Request, encode_response
from protocol.consumer_offsets import partition_for
from protocol.errors import ErrorCode
from storage.coordinator_log import CoordinatorLog
from storage.fs import REAL_FS, FileSystem
from storage.group_commit import GroupCommit
from storage.layout import COORDINATOR_TOPIC, TRANSACTION_TOPIC

log = logging.getLogger("kcoord.transactions")

E = ErrorCode

#: Called when a write or fsync fails: ``(what was being done, error)``.
StorageFailure = Callable[[str, OSError], None]


class _Waiter:
    """A reply-shaped thing for ``GroupCommit``: its event is set once an append is durable."""

    __slots__ = ("event", "frame")

    def __init__(self) -> None:
        self.frame: bytes | None = None
        self.event = trio.Event()


def txn_offset_commit_error(error: ErrorCode) -> ErrorCode:
    """What a failed check of the producer means to TxnOffsetCommit (as to Produce, but it may say
    CONCURRENT_TRANSACTIONS, which clients retry)."""
    if error is E.PRODUCER_FENCED:
        return E.INVALID_PRODUCER_EPOCH
    if error is E.TRANSACTION_ABORTABLE:
        return E.INVALID_TXN_STATE
    return error


class TransactionService:
    def __init__(self, coordinator: TransactionCoordinator, txn_log: CoordinatorLog, groups: GroupService,
                 data: DataService, *, durable: bool = True, clock: Callable[[], int] | None = None,
                 expiration_check_ms: int = 3_600_000) -> None:
        self.coordinator = coordinator
        self.log = txn_log
        self.groups = groups
        self.data = data
        self.durable = durable
        self.clock = clock or groups.clock
        self.expiration_check_ms = expiration_check_ms
        # The server sets the group service's handler (stop the broker); transactions share it.
        self.on_storage_failure: StorageFailure = lambda what, exc: groups.on_storage_failure(what, exc)
        self.stopped = False
        self.commit = GroupCommit(txn_log, durable=durable, on_failure=self._sync_failed, name=TRANSACTION_TOPIC)
        self._tickets: dict[int, tuple[Slot, Binding]] = {}
        self._next_ticket = 0
        self.timers = DeadlineTask(lambda: self.coordinator.next_deadline(),
                                   lambda now: self.apply(self.coordinator.on_time(now)), lambda: self.clock())
        self._nursery: trio.Nursery | None = None
        self._pending_markers: list[MarkerRequest] = []
        #: (transactional id, partition) -> the append that added the partition to its open
        #: transaction: Produce and TxnOffsetCommit checks see only durable additions.
        self._added_at: dict[tuple[str, TopicPartition], int] = {}
        #: The partitions of each transactional id's open transaction, as last appended.
        self._appended_partitions: dict[str, frozenset[TopicPartition]] = {}
        # Metrics.
        self.records_appended = 0
        self.markers_in_flight = 0

    @classmethod
    def open(cls, config: Any, data_dir: Path, groups: GroupService, data: DataService,
             fs: FileSystem = REAL_FS) -> TransactionService:
        """Open ``__transaction_state``, replay it into a fresh coordinator, and finish what was decided."""
        txn_log = CoordinatorLog(data_dir, config["transaction.state.log.num.partitions"],
                                 config["transaction.state.log.segment.bytes"], fs=fs, topic=TRANSACTION_TOPIC)
        service: TransactionService | None = None

        def allocate() -> int:
            try:
                return data.producer_ids.allocate()
            except OSError as exc:
                if service is not None:
                    service._failed(f"writing {data.producer_ids.path}", exc)
                raise

        coordinator = TransactionCoordinator(TransactionConfig.from_config(config), allocate, data.catalog)
        started = time.monotonic()
        count = 0
        for key, value, _timestamp in txn_log.replay():
            record = decode_record(key, value)
            if record is None:
                log.warning("skipping a %s record of a key version this coordinator does not know", TRANSACTION_TOPIC)
                continue
            coordinator.replay(record)
            count += 1
        service = cls(coordinator, txn_log, groups, data, durable=config["log.flush.policy"] == "durable",
                      expiration_check_ms=config["transaction.remove.expired.transaction.cleanup.interval.ms"])
        loaded = coordinator.finish_load(service.clock())
        service._pending_markers.extend(loaded.markers)
        open_ = sum(1 for m in coordinator.transactions.values() if m.has_open_transaction)
        log.info("loaded %d %s records: %d transactional ids, %d transactions open, %d to complete in %.2fs",
                 count, TRANSACTION_TOPIC, len(coordinator.transactions), open_, len(loaded.markers),
                 time.monotonic() - started)
        return service

    # ---------------------------------------------------------------- requests

    def submit(self, request: Request) -> Slot:
        """Run one request through the coordinator; the slot fills when its reply is durable."""
        header = request.header
        binding = BINDINGS[header.api_key]
        slot = Slot(header.api_key, header.api_version, header.correlation_id)
        typed = binding.decode(header.api_version, request.body)
        self._next_ticket += 1
        ticket = self._next_ticket
        self._tickets[ticket] = (slot, binding)
        self.apply(binding.handle(self.coordinator, ticket, self.clock(), typed))
        return slot

    def init_producer_id(self, request: Request) -> Slot | dict[str, Any] | None:
        """Transactional producers here; idempotent ones (no transactional id) to the data service."""
        if request.body.transactional_id is None:
            return self.data.init_producer_id(request)
        return self.submit(request)

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
               partition: int) -> ErrorCode:
        """Is the partition in the producer's open transaction, as far as is durable?

        A partition whose addition to the transaction is not durable yet answers
        CONCURRENT_TRANSACTIONS (retriable): a client only writes after its
        AddPartitionsToTxn or AddOffsetsToTxn was answered, which waits for durability.
        Only that partition's addition counts: an AddPartitionsToTxn in flight for other
        partitions does not hold back a TxnOffsetCommit whose AddOffsetsToTxn was answered.
        """
        added = self._added_at.get((transactional_id, (topic, partition)))
        if added is not None and added > self.log.durable_seq and self.durable:
            return E.CONCURRENT_TRANSACTIONS
        return self.coordinator.verify(transactional_id, producer_id, producer_epoch, (topic, partition))

    def txn_offset_commit(self, request: Request, peer: str) -> Slot | dict[str, Any]:
        """TxnOffsetCommit: the producer is checked here, then the group coordinator stores the offsets pending."""
        body = request.body
        group_partition = partition_for(body.group_id, self.groups.log.partitions)
        error = self.verify(body.transactional_id, body.producer_id, body.producer_epoch, COORDINATOR_TOPIC,
                            group_partition)
        if error is not E.NONE:
            binding = GROUP_BINDINGS[ApiKey.TXN_OFFSET_COMMIT]
            typed = binding.decode(request.header.api_version, body, client_info(request.header.client_id, peer))
            return binding.encode(request.header.api_version,
                                  group_error_result(typed, txn_offset_commit_error(error)))
        return self.groups.submit(request, client_info(request.header.client_id, peer))

    def write_txn_markers(self, request: Request) -> Slot:
        """WriteTxnMarkers: a coordinator's markers for partitions this broker leads, written locally."""
        header = request.header
        slot = Slot(header.api_key, header.api_version, header.correlation_id)
        markers = []
        data_seq = group_seq = 0
        for job in marker_requests_of(request.body):
            results: dict[str, list[dict[str, int]]] = {}
            for topic, partition in job.partitions:
                error, d, g = self._write_marker(job, topic, partition)
                data_seq, group_seq = max(data_seq, d), max(group_seq, g)
                results.setdefault(topic, []).append({"partition_index": partition, "error_code": int(error)})
            markers.append({"producer_id": job.producer_id,
                            "topics": [{"name": t, "partitions": ps} for t, ps in results.items()]})
        slot.frame = encode_response(header.api_key, header.api_version, header.correlation_id, {"markers": markers})
        if self._nursery is None:
            slot.event.set()
        else:
            self._nursery.start_soon(self._release_when_durable, slot, data_seq, group_seq)
        return slot

    async def _release_when_durable(self, slot: Slot, data_seq: int, group_seq: int) -> None:
        await self._durable(self.data.commit, data_seq)
        await self._durable(self.groups.commit, group_seq)
        slot.event.set()

    # ---------------------------------------------------------------- effects

    def apply(self, fx: TxnEffects) -> None:
        """Append the records, queue the replies, and start the markers once the records are durable."""
        if self.stopped:
            return
        if fx.records:
            now = self.clock()
            try:
                by_id: dict[str, list[TransactionRecord]] = {}
                for record in fx.records:
                    by_id.setdefault(record.transactional_id, []).append(record)
                for txn_id, records in by_id.items():
                    seq = self.log.append(txn_id, [encode_record(r) for r in records], now)
                    self.records_appended += len(records)
                    for record in records:
                        self._note_partitions(record, seq)
            except OSError as exc:
                self._failed(f"appending to {TRANSACTION_TOPIC}", exc)
                return
            self.commit.appended()
        needed = self.log.written_seq
        for ticket, result in fx.replies:
            entry = self._tickets.pop(ticket, None)
            if entry is None:
                continue
            slot, binding = entry
            slot.frame = encode_response(slot.api_key, slot.version, slot.correlation_id,
                                         binding.encode(slot.version, result))
            self.commit.reply_when_durable(needed, slot)
        for job in fx.markers:
            self._start_markers(job, needed)
        if len(self._added_at) > 64 + 4 * len(self.coordinator.transactions):
            durable = self.log.durable_seq
            self._added_at = {k: s for k, s in self._added_at.items() if s > durable}
        self.timers.moved()

    def _note_partitions(self, record: TransactionRecord, seq: int) -> None:
        """Remember which append added each partition of an Ongoing transaction."""
        entry = record.entry
        txn_id = record.transactional_id
        if entry is None or entry.status != TransactionState.ONGOING:
            self._appended_partitions.pop(txn_id, None)
            return
        partitions = frozenset((topic, p) for topic, ps in entry.partitions or () for p in ps)
        for added in partitions - self._appended_partitions.get(txn_id, frozenset()):
            self._added_at[(txn_id, added)] = seq
        self._appended_partitions[txn_id] = partitions

    def _start_markers(self, job: MarkerRequest, needed: int) -> None:
        if self._nursery is None:
            self._pending_markers.append(job)
            return
        self.markers_in_flight += 1
        waiter = _Waiter()
        self.commit.reply_when_durable(needed, waiter)
        self._nursery.start_soon(self._finish_transaction, job, waiter)

    async def _finish_transaction(self, job: MarkerRequest, decided: _Waiter) -> None:
        """Write the markers once the decision is durable; complete once they are."""
        try:
            await decided.event.wait()
            if self.stopped:
                return
            data_seq = group_seq = 0
            for topic, partition in job.partitions:
                error, d, g = self._write_marker(job, topic, partition)
                if error is E.KAFKA_STORAGE_ERROR:
                    return  # the broker is stopping: the load will write them again
                data_seq, group_seq = max(data_seq, d), max(group_seq, g)
            await self._durable(self.data.commit, data_seq)
            await self._durable(self.groups.commit, group_seq)
            if self.stopped or self.data.stopped or self.groups.stopped:
                return
            self.apply(self.coordinator.complete(self.clock(), job))
        finally:
            self.markers_in_flight -= 1

    def _write_marker(self, job: MarkerRequest, topic: str, partition: int) -> tuple[ErrorCode, int, int]:
        """One marker: ``(error, data journal seq, coordinator log seq)`` to wait for."""
        if topic == COORDINATOR_TOPIC:
            if not 0 <= partition < self.groups.log.partitions:
                return E.UNKNOWN_TOPIC_OR_PARTITION, 0, 0
            seq = self.groups.write_marker(partition, job.producer_id, job.producer_epoch, job.marker)
            return (E.KAFKA_STORAGE_ERROR, 0, 0) if seq is None else (E.NONE, 0, seq)
        error, seq = self.data.write_marker(topic, partition, job.producer_id, job.producer_epoch, job.marker)
        if error is E.UNKNOWN_TOPIC_OR_PARTITION:
            log.info("transaction of producer %d: %s-%d no longer exists, no marker written", job.producer_id,
                     topic, partition)
        return error, seq, 0

    @staticmethod
    async def _durable(commit: GroupCommit, seq: int) -> None:
        if seq <= 0:
            return
        waiter = _Waiter()
        commit.reply_when_durable(seq, waiter)
        await waiter.event.wait()

    def _failed(self, what: str, exc: OSError) -> None:
        self.stopped = True
        self.on_storage_failure(what, exc)

    def _sync_failed(self, exc: OSError) -> None:
        self._failed(f"fsync of {TRANSACTION_TOPIC}", exc)

    # ---------------------------------------------------------------- metrics

    def metrics(self) -> list[Family]:
        """Transactions by state, commits and aborts, the oldest open transaction, the log."""
        coordinator = self.coordinator
        now = self.clock()
        by_state = gauge("kcoord_transactions", "Transactional ids by the state of their transaction.")
        counts = dict.fromkeys((s.wire_name for s in TransactionState
                                if s not in (TransactionState.DEAD, TransactionState.PREPARE_EPOCH_FENCE)), 0)
        for metadata in coordinator.transactions.values():
            counts[metadata.state.wire_name] = counts.get(metadata.state.wire_name, 0) + 1
        for state, count in counts.items():
            by_state.add(count, state=state)
        open_ = coordinator.open_transactions()
        oldest = max((now - m.start_ms for m in open_ if m.start_ms >= 0), default=0)
        ended = counter("kcoord_transactions_ended_total", "Transactions completed, by outcome.")
        ended.add(coordinator.commits, result="commit")
        ended.add(coordinator.aborts, result="abort")
        return [
            by_state,
            gauge("kcoord_transactions_open", "Transactions open: Ongoing, PrepareCommit or PrepareAbort.",
                  len(open_)),
            gauge("kcoord_transactions_completing", "Decided transactions whose markers are being written.",
                  self.markers_in_flight),
            gauge("kcoord_transaction_oldest_open_age_seconds",
                  "How long the oldest open transaction has been open (0 when none is).", max(0, oldest) / 1000),
            ended,
            counter("kcoord_transactions_timed_out_total",
                    "Transactions aborted by the broker because they outlived their transaction.timeout.ms.",
                    coordinator.timed_out),
            counter("kcoord_transactions_fenced_total",
                    "Open transactions aborted because a new producer with the same transactional id fenced theirs.",
                    coordinator.fenced),
            counter("kcoord_transaction_markers_written_total",
                    "COMMIT and ABORT markers appended to topic partitions.", self.data.markers_written),
            counter("kcoord_transaction_log_records_appended_total",
                    f"Records appended to {TRANSACTION_TOPIC}.", self.records_appended),
        ]

    # ---------------------------------------------------------------- background tasks

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.commit.run)
            self._nursery = nursery
            pending, self._pending_markers = self._pending_markers, []
            needed = self.log.written_seq
            for job in pending:
                self._start_markers(job, needed)
            nursery.start_soon(self.timers.run)
            nursery.start_soon(self._expiry_loop)
            task_status.started()

    async def _expiry_loop(self) -> None:
        while True:
            await trio.sleep(self.expiration_check_ms / 1000)
            self.apply(self.coordinator.expire_transactional_ids(self.clock()))

    async def close(self) -> None:
        """Make everything durable and close the log (after connections have drained)."""
        self.timers.stop()
        if self.durable and not self.stopped:
            await self.commit.sync_now()
        self.log.close()


def register(router: Any, service: TransactionService) -> None:
    router.register(ApiKey.INIT_PRODUCER_ID, lambda request, peer: service.init_producer_id(request))
    for api_key in BINDINGS:
        if api_key != ApiKey.INIT_PRODUCER_ID:
            router.register(api_key, lambda request, peer: service.submit(request))
    router.register(ApiKey.TXN_OFFSET_COMMIT, service.txn_offset_commit)
    router.register(ApiKey.WRITE_TXN_MARKERS, lambda request, peer: service.write_txn_markers(request))
