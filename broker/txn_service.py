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
sends a partition leader (``broker.txn.markers``).

On a cluster node (``cluster.node`` sets ``replication`` and ``channel``) the service
loads and unloads ``__transaction_state`` partitions as the node comes to lead them
(``load_partition``, ``unload_partition``), every reply and every marker waits until the
partition's in-sync replicas have the records it depends on, and a decided transaction's
markers go through the channel: written here for partitions this node leads, sent as
WriteTxnMarkers to the leaders of the others.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import trio

from broker.coordinator.api import BINDINGS as GROUP_BINDINGS
from broker.coordinator.api import error_result as group_error_result
from broker.data_service import DataService
from broker.deadlines import DeadlineTask
from broker.group_service import GroupService
from broker.handlers.groups import client_info
from broker.metrics import Family, counter, gauge
from broker.replication import AllSettled, Replication
from broker.slots import Slot, set_all
from broker.txn import TransactionConfig, TransactionCoordinator, TxnEffects
from broker.txn.api import BINDINGS, Binding, TypedRequest, error_result
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


class MarkerChannel(Protocol):
    """How a cluster node gets a decided transaction's markers written (``cluster.txn_markers``)."""

    async def write_markers(self, job: MarkerRequest) -> bool:
        """Write every marker of ``job`` and wait until each is on its partition's ISR, retrying
        through leader changes; False once the job is no longer this coordinator's to finish."""


class _Replicated:
    """Whether the ISR took some appends: set once, with the partitions it did not take."""

    __slots__ = ("event", "failures")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.failures: dict[tuple[str, int], ErrorCode] = {}

    def settle(self, failures: dict[tuple[str, int], ErrorCode]) -> None:
        self.failures = dict(failures)
        self.event.set()


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
        self.commit = GroupCommit(txn_log, durable=durable, on_failure=self._sync_failed, name=TRANSACTION_TOPIC,
                                  release=set_all)
        self._tickets: dict[int, tuple[Slot, Binding, TypedRequest]] = {}
        self._next_ticket = 0
        self.timers = DeadlineTask(lambda: self.coordinator.next_deadline(),
                                   lambda now: self.apply(self.coordinator.on_time(now)), lambda: self.clock(),
                                   lambda: self.coordinator.take_earliest_new())
        self._nursery: trio.Nursery | None = None
        self._pending_markers: list[MarkerRequest] = []
        #: (transactional id, partition) -> the append that added the partition to its open
        #: transaction: Produce and TxnOffsetCommit checks see only durable additions.
        self._added_at: dict[tuple[str, TopicPartition], int] = {}
        #: The partitions of each transactional id's open transaction, as last appended.
        self._appended_partitions: dict[str, frozenset[TopicPartition]] = {}
        #: A cluster node's replication of ``__transaction_state`` and of the partitions it
        #: writes markers to (None: one node).
        self.replication: Replication | None = None
        #: A cluster node's way to every partition leader's markers (None: all written here).
        self.channel: MarkerChannel | None = None
        #: Called with a ``__transaction_state`` partition whose write the ISR did not take
        #: while this node still leads it: the node reloads it from its log.
        self.on_lost_write: Callable[[int], None] = lambda partition: None
        #: A cluster node's answer to "does this node lead that partition now?" (None: it leads all).
        self.leads: Callable[[str, int], bool] | None = None
        #: Marker jobs under way, by id(job): their EndTxn is answered NOT_COORDINATOR on unload.
        self._jobs: dict[int, MarkerRequest] = {}
        # Metrics.
        self.records_appended = 0
        self.markers_in_flight = 0

    @classmethod
    def open(cls, config: Any, data_dir: Path, groups: GroupService, data: DataService,
             fs: FileSystem = REAL_FS, *, load: bool = True) -> TransactionService:
        """Open ``__transaction_state``, replay it into a fresh coordinator, and finish what was decided.

        ``load=False`` (a cluster node) opens the log without replaying it: partitions are
        loaded as the node comes to lead them (``load_partition``)."""
        txn_log = CoordinatorLog(data_dir, config["transaction.state.log.num.partitions"],
                                 config["transaction.state.log.segment.bytes"], fs=fs, topic=TRANSACTION_TOPIC,
                                 journal=config["log.flush.policy"] == "durable")
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
        for key, value, _timestamp in (txn_log.replay() if load else ()):
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
        self._tickets[ticket] = (slot, binding, typed)
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
        if self.channel is not None and self.coordinator.partition_of(transactional_id) not in self.coordinator.epochs:
            # A cluster node that does not coordinate this transactional id: Kafka's behaviour
            # before KIP-890 (transaction.partition.verification.enable=false): the partition's
            # producer state alone checks the batch (epochs, sequences); docs/cluster.md.
            return E.NONE
        added = self._added_at.get((transactional_id, (topic, partition)))
        if added is not None and added > self.log.durable_seq and self.durable:
            return E.CONCURRENT_TRANSACTIONS
        return self.coordinator.verify(transactional_id, producer_id, producer_epoch, (topic, partition))

    def txn_offset_commit(self, request: Request, peer: str) -> Slot | bytes | dict[str, Any]:
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
        """WriteTxnMarkers: a coordinator's markers for partitions this broker leads, written locally.

        Answered once every marker written is durable (and, on a cluster node, on its
        partition's ISR), as Kafka's ReplicaManager answers the coordinator's append. A
        marker from a coordinator epoch older than one the partition has seen is refused
        with TRANSACTION_COORDINATOR_FENCED (the producer state's check).
        """
        header = request.header
        slot = Slot(header.api_key, header.api_version, header.correlation_id)
        jobs = marker_requests_of(request.body)
        if self._nursery is None:
            results = [{tp: self._write_marker(job, *tp)[0] for tp in job.partitions} for job in jobs]
            slot.fill(self._markers_reply(request, jobs, results))
        else:
            self._nursery.start_soon(self._answer_markers, request, jobs, slot)
        return slot

    async def _answer_markers(self, request: Request, jobs: list[MarkerRequest], slot: Slot) -> None:
        results = [await self.write_local_markers(job, job.partitions) for job in jobs]
        slot.fill(self._markers_reply(request, jobs, results))

    @staticmethod
    def _markers_reply(request: Request, jobs: list[MarkerRequest],
                       results: list[dict[TopicPartition, ErrorCode]]) -> bytes:
        markers = []
        for job, errors in zip(jobs, results, strict=True):
            by_topic: dict[str, list[dict[str, int]]] = {}
            for (topic, partition), error in errors.items():
                by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": int(error)})
            markers.append({"producer_id": job.producer_id,
                            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
        header = request.header
        return encode_response(header.api_key, header.api_version, header.correlation_id, {"markers": markers})

    async def write_local_markers(self, job: MarkerRequest, partitions: tuple[TopicPartition, ...]
                                  ) -> dict[TopicPartition, ErrorCode]:
        """Write ``job``'s markers to ``partitions`` (led here); each partition's error once
        its marker is durable and on the ISR, or why it is not."""
        errors: dict[TopicPartition, ErrorCode] = {}
        data_seq = group_seq = 0
        written: dict[TopicPartition, int] = {}
        for topic, partition in partitions:
            if self.leads is not None and not self.leads(topic, partition):
                errors[(topic, partition)] = E.NOT_LEADER_OR_FOLLOWER  # the coordinator looks the leader up again
                continue
            error, d, g = self._write_marker(job, topic, partition)
            errors[(topic, partition)] = error
            data_seq, group_seq = max(data_seq, d), max(group_seq, g)
            if error is E.NONE and (d or g):
                end = self._log_end(topic, partition)
                if end is not None:
                    written[(topic, partition)] = end
        replication = self.replication
        if replication is not None and written:
            replicated = _Replicated()
            gate = AllSettled(len(written), replicated.settle)
            for (topic, partition), end in written.items():
                replication.appended(topic, partition, end, gate.one(topic, partition))
            await replicated.event.wait()
            for tp, error in replicated.failures.items():
                errors[tp] = E.NOT_LEADER_OR_FOLLOWER if error is E.NOT_LEADER_OR_FOLLOWER else E.NOT_ENOUGH_REPLICAS
        await self._durable(self.data.commit, data_seq)
        await self._durable(self.groups.commit, group_seq)
        return errors

    def _log_end(self, topic: str, partition: int) -> int | None:
        if topic == COORDINATOR_TOPIC:
            plog = self.groups.log.partition_log(partition)
        else:
            plog = self.data.catalog.partition(topic, partition)
        return None if plog is None else int(plog.next_offset)

    # ---------------------------------------------------------------- effects

    def apply(self, fx: TxnEffects) -> None:
        """Append the records, queue the replies, and start the markers once the records are durable."""
        if self.stopped:
            return
        written: dict[int, int] = {}
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
                    if self.replication is not None:
                        partition = self.log.partition_of(txn_id)
                        plog = self.log.partition_log(partition)
                        if plog is not None:
                            written[partition] = plog.next_offset
            except OSError as exc:
                self._failed(f"appending to {TRANSACTION_TOPIC}", exc)
                return
            self.commit.appended()
        needed = self.log.written_seq
        replicated = self._replicate(written)
        for ticket, result in fx.replies:
            entry = self._tickets.pop(ticket, None)
            if entry is None:
                continue
            slot, binding, typed = entry
            slot.frame = encode_response(slot.api_key, slot.version, slot.correlation_id,
                                         binding.encode(slot.version, result))
            if replicated is None or self._nursery is None:
                self.commit.reply_when_durable(needed, slot)
            else:
                self._nursery.start_soon(self._reply_when_replicated, replicated, needed, slot, binding, typed)
        for job in fx.markers:
            self._start_markers(job, needed, replicated)
        if len(self._added_at) > 64 + 4 * len(self.coordinator.transactions):
            durable = self.log.durable_seq
            self._added_at = {k: s for k, s in self._added_at.items() if s > durable}
        self.timers.moved()

    def _replicate(self, written: dict[int, int]) -> _Replicated | None:
        """On a cluster node, the appends go to the followers: what tells when the ISR has them."""
        replication = self.replication
        if replication is None or not written:
            return None
        replicated = _Replicated()
        gate = AllSettled(len(written), replicated.settle)
        for partition, end in written.items():
            replication.appended(TRANSACTION_TOPIC, partition, end, gate.one(TRANSACTION_TOPIC, partition))
        return replicated

    async def _reply_when_replicated(self, replicated: _Replicated, needed: int, slot: Slot, binding: Binding,
                                     typed: TypedRequest) -> None:
        """A reply goes once the ISR has the records (then once they are durable here); if
        the ISR did not take them, NOT_COORDINATOR, as Kafka's coordinator answers a failed
        append: the client finds the coordinator again."""
        await replicated.event.wait()
        if replicated.failures:
            self._lost(replicated)
            failed = binding.encode(slot.version, error_result(typed, E.NOT_COORDINATOR))
            slot.fill(encode_response(slot.api_key, slot.version, slot.correlation_id, failed))
            return
        self.commit.reply_when_durable(needed, slot)

    def _lost(self, replicated: _Replicated) -> None:
        """The ISR did not take a write: the coordinator's memory may be ahead of what the
        cluster keeps, so the partition is loaded again from its log (or by its new leader)."""
        for topic, partition in replicated.failures:
            if topic == TRANSACTION_TOPIC and partition in self.coordinator.epochs:
                self.on_lost_write(partition)

    # ---------------------------------------------------------------- partitions (a cluster node)

    def load_partition(self, partition: int, epoch: int, records: list[tuple[bytes, bytes | None]]) -> int:
        """Coordinate a ``__transaction_state`` partition this node now leads at ``epoch``:
        its transactional ids, and the markers of its decided transactions (at the new
        epoch). Returns how many transactional ids it holds."""
        decoded = []
        for key, value in records:
            record = decode_record(key, value)
            if record is not None:
                decoded.append(record)
        self._drop_partition_state(partition)
        fx = self.coordinator.load_partition(partition, epoch, decoded, self.clock())
        self.apply(fx)
        return sum(1 for t in self.coordinator.transactions if self.coordinator.partition_of(t) == partition)

    def unload_partition(self, partition: int) -> None:
        """Another node coordinates the partition now: its ids leave memory, and the EndTxn
        requests waiting on its transactions get NOT_COORDINATOR (the producer looks the
        coordinator up again and retries; the new coordinator finishes the transaction)."""
        self.coordinator.unload_partition(partition)
        self._drop_partition_state(partition)

    def _drop_partition_state(self, partition: int) -> None:
        coordinator = self.coordinator
        for key in [k for k in self._added_at if coordinator.partition_of(k[0]) == partition]:
            del self._added_at[key]
        for txn_id in [t for t in self._appended_partitions if coordinator.partition_of(t) == partition]:
            del self._appended_partitions[txn_id]
        for job_id, job in list(self._jobs.items()):
            if coordinator.partition_of(job.transactional_id) == partition and not coordinator.is_current(job):
                self._answer_ticket(job, E.NOT_COORDINATOR)
                del self._jobs[job_id]

    def _answer_ticket(self, job: MarkerRequest, error: ErrorCode) -> None:
        if job.ticket is None:
            return
        entry = self._tickets.pop(job.ticket, None)
        if entry is None:
            return
        slot, binding, typed = entry
        slot.fill(encode_response(slot.api_key, slot.version, slot.correlation_id,
                                  binding.encode(slot.version, error_result(typed, error))))

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

    def _start_markers(self, job: MarkerRequest, needed: int, replicated: _Replicated | None = None) -> None:
        if self._nursery is None:
            self._pending_markers.append(job)
            return
        self.markers_in_flight += 1
        waiter = _Waiter()
        self.commit.reply_when_durable(needed, waiter)
        self._jobs[id(job)] = job
        self._nursery.start_soon(self._finish_transaction, job, waiter, replicated)

    async def _finish_transaction(self, job: MarkerRequest, decided: _Waiter,
                                  replicated: _Replicated | None = None) -> None:
        """Write the markers once the decision is durable (and on the ISR); complete once they are."""
        try:
            await decided.event.wait()
            if replicated is not None:
                await replicated.event.wait()
                if replicated.failures:
                    self._lost(replicated)
                    return
            if self.stopped:
                return
            if self.channel is not None:
                if await self.channel.write_markers(job) and self.coordinator.is_current(job):
                    self.apply(self.coordinator.complete(self.clock(), job))
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
            self._jobs.pop(id(job), None)

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
        if self.durable and not self.stopped and await self.commit.sync_now():
            # The segments alone hold everything after a clean stop (storage.wal).
            await trio.to_thread.run_sync(self.log.checkpoint)
        self.log.close()


def register(router: Any, service: TransactionService) -> None:
    router.register(ApiKey.INIT_PRODUCER_ID, lambda request, peer: service.init_producer_id(request))
    for api_key in BINDINGS:
        if api_key != ApiKey.INIT_PRODUCER_ID:
            router.register(api_key, lambda request, peer: service.submit(request))
    router.register(ApiKey.TXN_OFFSET_COMMIT, service.txn_offset_commit)
    router.register(ApiKey.WRITE_TXN_MARKERS, lambda request, peer: service.write_txn_markers(request))
