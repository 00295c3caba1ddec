"""Produce, Fetch and ListOffsets over the topic partitions.

Produce validates every batch (magic 2, CRC) before appending any, assigns offsets, and
answers acks=1 after the write and acks=-1 after an fsync shared with other requests
(``storage.group_commit``). A failed write or fsync stops the broker
(``on_storage_failure``). Fetch reads whole batches from the requested offsets and
long-polls (max_wait_ms, min_bytes) until data arrives. Fetch sessions are answered as
"no session" (session id 0), which every client accepts by sending full fetch requests.
Retention and compaction of topics are maintenance jobs (``maintenance_jobs``).

Each partition's producers (``storage.producer_state``) check idempotent and transactional
batches (epochs, sequences, an open transaction), know the partition's last stable offset
and its aborted transactions: a read_committed Fetch stops at the last stable offset and
gets the aborted transactions it needs to skip, a read_committed ListOffsets sees the last
stable offset as the end. The first transactional batch of a transaction in a partition is
checked with the transaction coordinator (``transactions``, Kafka's verification of
KIP-890): the partition must be in the producer's open transaction. The coordinator's
COMMIT and ABORT markers come in through ``write_marker``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Protocol

import trio

from broker.metrics import REQUEST_BUCKETS, Family, Histogram, counter, gauge
from broker.producers import ProducerIds
from broker.record_validation import Refused, TopicRules, validate
from broker.replication import AllSettled, Replication
from broker.slots import Slot, set_all
from broker.topics import TopicCatalog
from protocol.api_keys import ApiKey
from protocol.codec import Request, encode_response
from protocol.errors import ErrorCode
from protocol.records import MAGIC, EndTransactionMarker, encode_marker_batch, scan_batches
from storage.cleaner import CleanResult
from storage.group_commit import GroupCommit
from storage.journal import Journal
from storage.layout import producer_state_file
from storage.maintenance import Job
from storage.partition import PartitionLog
from storage.producer_state import PartitionProducerState

log = logging.getLogger("kcoord.data")

EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3
#: One broker: every partition has exactly one in-sync replica, its leader.
IN_SYNC_REPLICAS = 1
READ_COMMITTED = 1
E = ErrorCode


class TransactionVerifier(Protocol):
    """The transaction coordinator, as Produce asks it (``broker.txn_service``)."""

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
               partition: int) -> ErrorCode: ...


def produce_error_of_verification(error: ErrorCode) -> ErrorCode:
    """What a failed verification means to a producer (Kafka's AddPartitionsToTxnManager).

    PRODUCER_FENCED is INVALID_PRODUCER_EPOCH on Produce; a partition not in the
    transaction is INVALID_TXN_STATE; CONCURRENT_TRANSACTIONS (the coordinator is ending
    the transaction) becomes NOT_ENOUGH_REPLICAS, which every client retries.
    """
    if error is E.PRODUCER_FENCED:
        return E.INVALID_PRODUCER_EPOCH
    if error is E.TRANSACTION_ABORTABLE:
        return E.INVALID_TXN_STATE
    if error in (E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS):
        return E.NOT_ENOUGH_REPLICAS
    return error


@dataclass
class PartitionResult:
    """One partition's Produce answer."""

    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    message: str | None = None
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)
    log_start: int = -1
    #: The log end after the append (-1: nothing appended).
    end: int = -1


def _raise(what: str, error: OSError) -> None:
    log.error("%s failed: %s", what, error)
    raise error


class LogStartGuard(Protocol):
    """Told before retention or DeleteRecords moves a log start, and waited for.

    The broker's is ``broker.offset_policies.LogStartGuard``: the group coordinator's
    ``nearest`` commits are durable before the new start can be seen. Raises
    ``RuntimeError`` when the start must not move.
    """

    async def before_log_start_moves(self, topic: str, partition: int, new_start: int) -> None: ...

    def before_log_start_moves_blocking(self, topic: str, partition: int, new_start: int) -> None: ...


#: One partition of a DeleteRecords request as planned: (index, error or None, its log, target offset).
PlannedDeletion = tuple[int, ErrorCode | None, PartitionLog | None, int]


class DataService:
    def __init__(self, catalog: TopicCatalog, clock_ms: Any, durable: bool = True,
                 retention_check_ms: int = 300_000, cleaner: dict[str, Any] | None = None,
                 producer_expiration_ms: int = 86_400_000, checkpoint_interval_ms: int = 60_000) -> None:
        self.retention_check_ms = retention_check_ms
        self.cleaner = cleaner  # None: compacted topics are not cleaned
        self.catalog = catalog
        self.clock_ms = clock_ms
        self.durable = durable
        self.on_storage_failure: Callable[[str, OSError], None] = _raise
        self.stopped = False  # a write or fsync failed: nothing more is answered
        #: Asked before any log start moves (None: the start moves unannounced).
        self.log_start_guard: LogStartGuard | None = None
        self._arrived = trio.Event()
        self._journal = Journal()
        self.commit = GroupCommit(self._journal, durable=durable, on_failure=self._sync_failed,
                                  name="topic partitions", release=set_all)
        self._nursery: trio.Nursery | None = None
        self._producers: dict[PartitionLog, PartitionProducerState] = {}
        #: A cluster node's partition replication (None: one node, one replica).
        self.replication: Replication | None = None
        self.producer_ids = ProducerIds(catalog.data_dir, catalog.fs)
        #: The transaction coordinator, asked about a transaction's first write to a partition.
        self.transactions: TransactionVerifier | None = None
        self.producer_expiration_ms = producer_expiration_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.markers_written = 0
        # Metrics (read by broker.metrics at scrape time).
        self.produced_records = 0
        self.produced_bytes = 0
        self.fetched_bytes = 0
        # Fetch time split as Kafka splits LocalTimeMs from RemoteTimeMs: serving (reading
        # the log, every try of a long poll summed) and the long-poll wait itself.
        self.fetch_serve_seconds = Histogram(REQUEST_BUCKETS)
        self.fetch_wait_seconds = Histogram(REQUEST_BUCKETS)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.commit.run)
            task_status.started()
            # Stay open for long polls and guarded DeleteRecords: with log.flush.policy=os the
            # group commit starts no task, and an empty nursery would close.
            await trio.sleep_forever()

    def _failed(self, what: str, exc: OSError) -> None:
        self.stopped = True
        self.on_storage_failure(what, exc)

    def _sync_failed(self, exc: OSError) -> None:
        self._failed("fsync of a topic partition", exc)

    # ---------------------------------------------------------------- maintenance

    def metrics(self) -> list[Family]:
        """Topics, partitions, and what Produce and Fetch moved."""
        topics = list(self.catalog.topics.values())
        return [
            gauge("kcoord_topics", "Topics.", len(topics)),
            gauge("kcoord_partitions", "Topic partitions.", sum(len(t.partitions) for t in topics)),
            counter("kcoord_produced_records_total", "Records appended by Produce requests.", self.produced_records),
            counter("kcoord_produced_bytes_total", "Record batch bytes appended by Produce requests.",
                    self.produced_bytes),
            counter("kcoord_fetched_bytes_total", "Record batch bytes returned by Fetch requests.",
                    self.fetched_bytes),
            Family("kcoord_fetch_serve_duration_seconds", "histogram",
                   "Time a Fetch spent reading the log (all tries of a long poll), the wait excluded."
                   ).add_histogram(self.fetch_serve_seconds),
            Family("kcoord_fetch_wait_duration_seconds", "histogram",
                   "Time a long-polled Fetch waited for data (min.bytes) or for max.wait.ms."
                   ).add_histogram(self.fetch_wait_seconds),
        ]

    def maintenance_jobs(self) -> list[Job]:
        """Topic retention and compaction, every ``log.retention.check.interval.ms``; producer state
        checkpoints every ``producer.state.checkpoint.interval.ms``."""
        interval = self.retention_check_ms / 1000
        jobs = [Job("retention of topics", interval, lambda: self.enforce_retention(self.clock_ms())),
                Job("producer state checkpoints", self.checkpoint_interval_ms / 1000,
                    lambda: self.checkpoint_producer_states(self.clock_ms()))]
        if self.cleaner is not None:
            jobs.append(Job("compaction of topics", interval, lambda: self.compact_topics(self.clock_ms())))
        return jobs

    def checkpoint_producer_states(self, now_ms: int | None = None) -> int:
        """Checkpoint every partition's producer state (a worker thread); returns how many.

        Producers idle past ``producer.id.expiration.ms`` without an open transaction are
        forgotten on the way.
        """
        done = 0
        for state in list(self._producers.values()):
            if state.plog.closed:
                continue
            try:
                state.checkpoint(now_ms, self.producer_expiration_ms if now_ms is not None else None)
            except ValueError:
                continue  # its topic was deleted meanwhile
            done += 1
        return done

    # ---------------------------------------------------------------- topic changes (TopicListener)

    def on_partitions_added(self, topic: str, start_offsets: dict[int, int]) -> None:
        pass

    def on_topic_deleted(self, topic: str) -> None:
        """The deleted topic's partitions are closed: forget their producer state."""
        for plog in [p for p in self._producers if p.closed]:
            self._producers.pop(plog).close()

    def _partitions_with(self, policy: str) -> list[tuple[Any, PartitionLog]]:
        return [
            (topic, partition)
            for topic in list(self.catalog.topics.values())
            if policy in topic.config("cleanup.policy").split(",")
            for partition in topic.logs()
        ]

    def enforce_retention(self, now_ms: int) -> int:
        """cleanup.policy=delete: drop segments past retention.ms / retention.bytes; returns how many."""
        deleted = 0
        guard = self.log_start_guard
        for topic, partition in self._partitions_with("delete"):
            retention_ms, retention_bytes = int(topic.config("retention.ms")), int(topic.config("retention.bytes"))
            if guard is None:
                deleted += partition.enforce_retention(now_ms, retention_ms, retention_bytes)
                continue
            # Where retention moves the start, announced first; then exactly those segments go.
            start = partition.retention_start(now_ms, retention_ms, retention_bytes)
            if start is None or start <= partition.log_start_offset:
                continue
            guard.before_log_start_moves_blocking(topic.name, topic.partitions.index(partition), start)
            segments = len(partition.segments)
            partition.advance_log_start(start)
            deleted += segments - len(partition.segments)
        return deleted

    def compact_topics(self, now_ms: int) -> dict[str, CleanResult]:
        """cleanup.policy=compact: the coordinator log's cleaner, per partition worth cleaning."""
        if self.cleaner is None:
            return {}
        results: dict[str, CleanResult] = {}
        for topic, partition in self._partitions_with("compact"):
            if partition.dirty_ratio() < float(topic.config("min.cleanable.dirty.ratio")):
                continue
            result = partition.compact(now_ms, int(topic.config("delete.retention.ms")))
            results[partition.directory.name] = result
            if result.bytes_after != result.bytes_before:
                log.info("compacted %s: %s", partition.directory.name, result)
        return results

    # ---------------------------------------------------------------- Produce

    def produce(self, request: Request) -> Slot | dict[str, Any] | None:
        body = request.body
        header = request.header
        transactional_id = body.get("transactional_id")
        results: dict[tuple[str, int], PartitionResult] = {}
        now = self.clock_ms()
        for topic in body.topic_data:
            for part in topic.partition_data:
                results[(topic.name, part.index)] = self._append(topic.name, part.index, part.records, now,
                                                                 body.acks, transactional_id)
                if self.stopped:
                    return None
        if self.replication is not None:
            return self._replicated(request, results)
        if body.acks == 0:
            return None
        reply = self._produce_reply(body, lambda t, p: results[(t, p)])
        if body.acks == -1 and self.durable and any(r.base_offset >= 0 for r in results.values()):
            slot = Slot(header.api_key, header.api_version, header.correlation_id)
            slot.frame = encode_response(header.api_key, header.api_version, header.correlation_id, reply)
            self.commit.reply_when_durable(self._journal.written_seq, slot)
            return slot
        return reply

    def readable_moved(self) -> None:
        """A partition's high watermark moved: parked fetches look again."""
        self._arrived.set()
        self._arrived = trio.Event()

    def forget_producers(self, partition: PartitionLog) -> None:
        """The log changed under the producer states (this node followed, or cut its log):
        they are rebuilt from the log when next needed, so a new leader knows every
        idempotent producer's last sequence and refuses duplicates. The checkpoint goes too:
        it may describe a tail this node no longer has."""
        states = self._producers.pop(partition, None)
        if states is not None:
            states.close()
        self.catalog.fs.unlink(producer_state_file(partition.directory), missing_ok=True)

    def _replicated(self, request: Request, results: dict[tuple[str, int], PartitionResult]
                    ) -> Slot | dict[str, Any] | None:
        """Produce on a cluster node: followers hear of the appends; acks=all waits for the ISR
        (then for the fsync), and a partition the ISR did not take gets the error why."""
        body = request.body
        header = request.header
        replication = self.replication
        assert replication is not None
        appended = [(tp, r) for tp, r in results.items() if r.end >= 0]
        if body.acks != -1 or not appended:
            for (topic, index), result in appended:
                replication.appended(topic, index, result.end, None)
            if body.acks == 0:
                return None
            return self._produce_reply(body, lambda t, p: results[(t, p)])
        slot = Slot(header.api_key, header.api_version, header.correlation_id)
        seq = self._journal.written_seq

        def answer(failures: dict[tuple[str, int], ErrorCode]) -> None:
            for tp, error in failures.items():
                results[tp] = PartitionResult(error, message="the in-sync replicas did not take the write")
            slot.frame = encode_response(header.api_key, header.api_version, header.correlation_id,
                                         self._produce_reply(body, lambda t, p: results[(t, p)]))
            if failures or not self.durable:
                slot.event.set()
            else:
                self.commit.reply_when_durable(seq, slot)

        gate = AllSettled(len(appended), answer)
        for (topic, index), result in appended:
            replication.appended(topic, index, result.end, gate.one(topic, index))
        return slot

    def _append(self, topic_name: str, index: int, records: bytes | None, now: int,
                acks: int, transactional_id: str | None = None) -> PartitionResult:
        partition = self.catalog.partition(topic_name, index)
        if partition is None:
            return PartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if not records:
            return PartitionResult(ErrorCode.INVALID_RECORD, message="no record batch")
        if len(records) >= 17 and records[16] != MAGIC:
            return PartitionResult(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                                   message="only record batch v2 (magic 2) is accepted")
        batches, valid = scan_batches(records)
        if valid != len(records) or not batches:
            return PartitionResult(ErrorCode.CORRUPT_MESSAGE, message="record batch failed its CRC or size check")
        topic = self.catalog.get(topic_name)
        assert topic is not None
        min_isr = int(topic.config("min.insync.replicas"))
        in_sync = IN_SYNC_REPLICAS if self.replication is None else self.replication.in_sync(topic_name, index)
        if acks == -1 and min_isr > in_sync:
            # As Partition.appendRecordsToLeader: too few in-sync replicas cannot satisfy acks=all.
            return PartitionResult(ErrorCode.NOT_ENOUGH_REPLICAS, message=(
                f"The size of the current ISR {in_sync} is insufficient to satisfy the min.isr "
                f"requirement of {min_isr} for partition {topic_name}-{index}"))
        states = self._producer_states(partition) if any(h.producer_id >= 0 for _, h in batches) else None
        for _, header in batches:
            if header.is_transactional and transactional_id is None:
                # As KafkaApis: transactional records need an authorized transactional id.
                return PartitionResult(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                       message="transactional batches need the producer's transactional id")
            if states is not None and header.producer_id >= 0:
                if header.is_transactional and not states.state.has_open_transaction(header.producer_id):
                    verified = self._verify(transactional_id or "", header.producer_id, header.producer_epoch,
                                            topic_name, index)
                    if verified is not E.NONE:
                        return PartitionResult(verified, message=f"transaction check failed: {verified.name}")
                error, duplicate_of = states.check_batch(header.producer_id, header.producer_epoch,
                                                         header.base_sequence, header.last_offset_delta + 1,
                                                         header.is_transactional)
                if error is not ErrorCode.NONE:
                    return PartitionResult(error)
                if duplicate_of is not None and len(batches) == 1:
                    return PartitionResult(ErrorCode.NONE, duplicate_of, log_start=partition.log_start_offset)
        rules = TopicRules.of(topic)
        accepted = validate(records, batches, rules, index, now)
        if isinstance(accepted, Refused):
            return PartitionResult(accepted.error, message=accepted.message, record_errors=accepted.record_errors)
        first = -1
        for (_, header), raw in zip(batches, accepted, strict=True):
            try:
                base, _ = partition.append_batch(raw)
            except OSError as exc:
                self._failed(f"appending to {partition.directory}", exc)
                return PartitionResult(ErrorCode.KAFKA_STORAGE_ERROR)
            self.produced_records += header.records_count
            self.produced_bytes += len(raw)
            if states is not None:
                states.on_batch(header, base)
            if first < 0:
                first = base
        self._journal.mark(partition)
        self.commit.appended()
        self._arrived.set()
        self._arrived = trio.Event()
        return PartitionResult(ErrorCode.NONE, first, now if rules.log_append_time else -1,
                               log_start=partition.log_start_offset, end=partition.next_offset)

    @staticmethod
    def _produce_reply(body: Any, result: Callable[[str, int], PartitionResult]) -> dict[str, Any]:
        responses = []
        for topic in body.topic_data:
            partitions = []
            for part in topic.partition_data:
                outcome = result(topic.name, part.index)
                partitions.append({
                    "index": part.index, "error_code": int(outcome.error), "base_offset": outcome.base_offset,
                    "log_append_time_ms": outcome.log_append_time, "log_start_offset": outcome.log_start,
                    "record_errors": [{"batch_index": i, "batch_index_error_message": m}
                                      for i, m in outcome.record_errors],
                    "error_message": outcome.message,
                })
            responses.append({"name": topic.name, "partition_responses": partitions})
        return {"responses": responses, "throttle_time_ms": 0}

    def _verify(self, transactional_id: str, producer_id: int, epoch: int, topic: str, index: int) -> ErrorCode:
        if self.transactions is None:
            return E.INVALID_TXN_STATE
        return produce_error_of_verification(self.transactions.verify(transactional_id, producer_id, epoch, topic,
                                                                      index))

    def _producer_states(self, partition: PartitionLog) -> PartitionProducerState:
        """The partition's producer state, loaded (checkpoint, then the log after it) on first use."""
        states = self._producers.get(partition)
        if states is None:
            states = self._producers[partition] = PartitionProducerState.open(partition, self.catalog.fs)
        return states

    def producer_state(self, topic: str, index: int) -> PartitionProducerState | None:
        partition = self.catalog.partition(topic, index)
        return None if partition is None else self._producer_states(partition)

    # ---------------------------------------------------------------- transaction markers

    def write_marker(self, topic: str, index: int, producer_id: int, producer_epoch: int,
                     marker: EndTransactionMarker) -> tuple[ErrorCode, int]:
        """Append a transaction's COMMIT or ABORT marker: ``(error, journal seq to wait for)``.

        A partition that no longer exists is UNKNOWN_TOPIC_OR_PARTITION (its topic was
        deleted: nothing to mark). Read_committed long polls wake, their stable offset may
        have moved.
        """
        partition = self.catalog.partition(topic, index)
        if partition is None:
            return E.UNKNOWN_TOPIC_OR_PARTITION, 0
        if self.stopped:
            return E.KAFKA_STORAGE_ERROR, 0
        states = self._producer_states(partition)
        error = states.check_marker(producer_id, producer_epoch, marker.coordinator_epoch)
        if error is not E.NONE:
            log.warning("marker of producer %d epoch %d refused by %s-%d: %s", producer_id, producer_epoch, topic,
                        index, error.name)
            return error, 0
        now = self.clock_ms()
        try:
            base, _ = partition.append_batch(encode_marker_batch(producer_id, producer_epoch, marker, now))
            states.on_marker(producer_id, producer_epoch, marker, base, now)
        except OSError as exc:
            self._failed(f"appending to {partition.directory}", exc)
            return E.KAFKA_STORAGE_ERROR, 0
        self.markers_written += 1
        seq = self._journal.mark(partition)
        self.commit.appended()
        self._arrived.set()
        self._arrived = trio.Event()
        return E.NONE, seq

    # ---------------------------------------------------------------- InitProducerId, DescribeProducers

    def init_producer_id(self, request: Request) -> dict[str, Any] | None:
        """An idempotent producer's id (transactional ones go to the transaction coordinator)."""
        body = request.body
        producer_id = body.get("producer_id", -1)
        epoch = body.get("producer_epoch", -1)
        if producer_id >= 0 and epoch >= 0 and epoch < 32767:
            # KIP-360: an idempotent producer bumps its own epoch to reset sequences.
            return {"throttle_time_ms": 0, "error_code": 0, "producer_id": producer_id,
                    "producer_epoch": epoch + 1}
        try:
            producer_id = self.producer_ids.allocate()
        except OSError as exc:
            self._failed(f"writing {self.producer_ids.path}", exc)
            return None
        return {"throttle_time_ms": 0, "error_code": 0, "producer_id": producer_id, "producer_epoch": 0}

    def describe_producers(self, request: Request) -> dict[str, Any]:
        """DescribeProducers (KIP-664): each partition's producers and their open transactions."""
        topics = []
        for wanted in request.body.topics:
            partitions = []
            for index in wanted.partition_indexes:
                states = self.producer_state(wanted.name, index)
                entry: dict[str, Any] = {"partition_index": index, "error_code": 0, "error_message": None,
                                         "active_producers": []}
                if states is None:
                    entry["error_code"] = int(E.UNKNOWN_TOPIC_OR_PARTITION)
                else:
                    entry["active_producers"] = [
                        {"producer_id": p.producer_id, "producer_epoch": p.epoch, "last_sequence": p.last_sequence,
                         "last_timestamp": p.last_timestamp, "coordinator_epoch": p.coordinator_epoch,
                         "current_txn_start_offset": p.txn_first_offset}
                        for p in sorted(states.state.producers.values(), key=lambda p: p.producer_id)
                    ]
                partitions.append(entry)
            topics.append({"name": wanted.name, "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}

    # ---------------------------------------------------------------- Fetch

    def fetch(self, request: Request) -> Slot | dict[str, Any]:
        body = request.body
        header = request.header
        if body.get("session_id", 0) != 0:
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
                    "session_id": 0, "responses": []}
        started = perf_counter()
        reply, size, settled = self._fetch_once(body)
        serving = perf_counter() - started
        if settled or size >= body.min_bytes or body.max_wait_ms <= 0 or self._nursery is None:
            self.fetched_bytes += size
            self.fetch_serve_seconds.observe(serving)
            return reply
        slot = Slot(header.api_key, header.api_version, header.correlation_id)
        deadline = trio.current_time() + body.max_wait_ms / 1000
        self._nursery.start_soon(self._long_poll, body, slot, deadline, serving)
        return slot

    async def _long_poll(self, body: Any, slot: Slot, deadline: float, serving: float) -> None:
        parked = perf_counter()
        polled = 0.0  # time spent reading while parked, taken out of the wait
        while True:
            # Take the event before looking at the data: a produce that lands in between
            # sets this very event, so no wake-up is lost.
            arrived = self._arrived
            started = perf_counter()
            reply, size, settled = self._fetch_once(body)
            polled += perf_counter() - started
            if settled or size >= body.min_bytes or trio.current_time() >= deadline:
                self.fetched_bytes += size
                self.fetch_serve_seconds.observe(serving + polled)
                self.fetch_wait_seconds.observe(max(0.0, perf_counter() - parked - polled))
                slot.fill(encode_response(slot.api_key, slot.version, slot.correlation_id, reply))
                return
            with trio.move_on_at(deadline):
                await arrived.wait()

    def _fetch_once(self, body: Any) -> tuple[dict[str, Any], int, bool]:
        """One read of every requested partition: ``(reply, bytes read, settled)``.

        ``settled`` means waiting cannot change the answer, so it goes out at once as Kafka
        sends it: no partition was asked for, or a partition has an error (an unknown
        partition, an offset out of range) the client must act on.
        """
        budget = body.get("max_bytes", 0x7FFFFFFF)
        read_committed = body.get("isolation_level", 0) == READ_COMMITTED
        total = 0
        settled = not any(topic.partitions for topic in body.topics)
        responses = []
        for topic in body.topics:
            partitions = []
            for part in topic.partitions:
                partition = self.catalog.partition(topic.topic, part.partition)
                entry: dict[str, Any] = {
                    "partition_index": part.partition, "error_code": 0, "high_watermark": -1,
                    "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                    "preferred_read_replica": -1, "records": b"",
                }
                if partition is None:
                    entry["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    settled = True
                else:
                    # Consumers read up to the high watermark (what the ISR has); an offset
                    # between it and the log end is valid and waits, as in Kafka.
                    end = partition.high_watermark
                    start = partition.log_start_offset
                    states = self._producer_states(partition)
                    stable = states.last_stable_offset(end)
                    entry.update(high_watermark=end, last_stable_offset=stable, log_start_offset=start)
                    offset = part.fetch_offset
                    readable = stable if read_committed else end
                    if offset < start or offset > partition.next_offset:
                        entry["error_code"] = int(ErrorCode.OFFSET_OUT_OF_RANGE)
                        settled = True
                    elif offset < readable and (budget > 0 or total == 0):
                        limit = min(part.partition_max_bytes, budget) if total else part.partition_max_bytes
                        data = partition.read_raw(offset, max(limit, 1), upto=readable)
                        entry["records"] = data
                        total += len(data)
                        budget -= len(data)
                    if read_committed:
                        # Kafka's collectAbortedTransactions: those with data in what may be read.
                        entry["aborted_transactions"] = [
                            {"producer_id": a.producer_id, "first_offset": a.first_offset}
                            for a in states.aborted_between(offset, stable)
                        ] if entry["records"] else []  # Kafka: the list, empty when nothing was read
                partitions.append(entry)
            responses.append({"topic": topic.topic, "topic_id": topic.get("topic_id"), "partitions": partitions})
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}, total, settled

    # ---------------------------------------------------------------- DeleteRecords

    def delete_records(self, request: Request, peer: str) -> Slot | dict[str, Any]:
        """Move log start offsets forward, as ReplicaManager.deleteRecords does.

        Offset -1 means the high watermark; an offset past it, or negative, is
        OFFSET_OUT_OF_RANGE; a topic whose cleanup.policy lacks ``delete`` refuses with
        POLICY_VIOLATION. The answer's low watermark is the new log start offset, durable
        before the reply. With a ``log_start_guard``, each move is announced and waited for
        before it is made.
        """
        plan = self._plan_deletions(request)
        guard = self.log_start_guard
        if guard is None or self._nursery is None:
            return self._delete_records(request, peer, plan)
        header = request.header
        slot = Slot(header.api_key, header.api_version, header.correlation_id)
        self._nursery.start_soon(self._guarded_delete_records, guard, request, peer, plan, slot)
        return slot

    async def _guarded_delete_records(self, guard: LogStartGuard, request: Request, peer: str,
                                      plan: list[tuple[str, list[PlannedDeletion]]], slot: Slot) -> None:
        checked: list[tuple[str, list[PlannedDeletion]]] = []
        for name, parts in plan:
            out = []
            for index, error, partition, offset in parts:
                if error is None and partition is not None and offset > partition.log_start_offset:
                    try:
                        await guard.before_log_start_moves(name, index, offset)
                    except RuntimeError as exc:
                        log.error("DeleteRecords of %s-%d: %s", name, index, exc)
                        error = ErrorCode.KAFKA_STORAGE_ERROR
                out.append((index, error, partition, offset))
            checked.append((name, out))
        body = self._delete_records(request, peer, checked)
        slot.fill(encode_response(slot.api_key, slot.version, slot.correlation_id, body))

    def _plan_deletions(self, request: Request) -> list[tuple[str, list[PlannedDeletion]]]:
        """Each requested partition's refusal, or its log and the offset its start moves to."""
        plan = []
        for wanted in request.body.topics:
            topic = self.catalog.get(wanted.name)
            parts: list[PlannedDeletion] = []
            for part in wanted.partitions:
                partition = self.catalog.partition(wanted.name, part.partition_index)
                error: ErrorCode | None = None
                offset = -1
                if topic is None or partition is None:
                    error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif "delete" not in topic.policies:
                    error = ErrorCode.POLICY_VIOLATION
                else:
                    end = partition.high_watermark
                    offset = end if part.offset == -1 else part.offset
                    if not 0 <= offset <= end:
                        error = ErrorCode.OFFSET_OUT_OF_RANGE
                parts.append((part.partition_index, error, partition, offset))
            plan.append((wanted.name, parts))
        return plan

    def _delete_records(self, request: Request, peer: str,
                        plan: list[tuple[str, list[PlannedDeletion]]]) -> dict[str, Any]:
        topics = []
        who = request.header.client_id or "-"
        for name, parts in plan:
            partitions = []
            for index, error, partition, offset in parts:
                entry = {"partition_index": index, "low_watermark": -1, "error_code": 0}
                if error is not None or partition is None:
                    entry["error_code"] = int(error or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                else:
                    before = partition.log_start_offset
                    try:
                        entry["low_watermark"] = partition.advance_log_start(offset)
                    except OSError as exc:
                        self._failed(f"moving the log start of {partition.directory}", exc)
                        entry["error_code"] = int(ErrorCode.KAFKA_STORAGE_ERROR)
                    except ValueError:  # closed: its topic was deleted meanwhile
                        entry["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    else:
                        if entry["low_watermark"] != before:
                            log.info("admin: %s (client %s) deleted records of %s-%d: log start offset %d -> %d",
                                     peer, who, name, index, before, entry["low_watermark"])
                partitions.append(entry)
            topics.append({"name": name, "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}

    # ---------------------------------------------------------------- ListOffsets

    def list_offsets(self, request: Request) -> dict[str, Any]:
        """Earliest, latest, by timestamp; read_committed (v2+) ends at the last stable offset (Kafka's
        Partition.fetchOffsetForTimestamp: a timestamp's offset at or past it is not found)."""
        read_committed = request.body.get("isolation_level", 0) == READ_COMMITTED
        topics = []
        for topic in request.body.topics:
            partitions = []
            for part in topic.partitions:
                partition = self.catalog.partition(topic.name, part.partition_index)
                entry = {"partition_index": part.partition_index, "error_code": 0, "timestamp": -1,
                         "offset": -1, "leader_epoch": 0}
                if partition is None:
                    entry.update(error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), leader_epoch=-1)
                elif read_committed and part.timestamp != EARLIEST:
                    stable = self._producer_states(partition).last_stable_offset(partition.next_offset)
                    if part.timestamp == LATEST:
                        entry["offset"] = stable
                    else:
                        timestamp, offset = self._offset_for(partition, part.timestamp)
                        if 0 <= offset < stable:
                            entry["timestamp"], entry["offset"] = timestamp, offset
                else:
                    entry["timestamp"], entry["offset"] = self._offset_for(partition, part.timestamp)
                partitions.append(entry)
            topics.append({"name": topic.name, "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}

    # ------------------------------------------------------- OffsetForLeaderEpoch

    def offset_for_leader_epoch(self, request: Request, leader_epoch: Callable[[str, int], int]) -> dict[str, Any]:
        """Where each asked epoch ends in the log (KIP-101, KIP-320): Kafka's
        KafkaApis.handleOffsetForLeaderEpochRequest via Partition.lastOffsetForLeaderEpoch.

        A consumer validates its position against it after a leader change; a follower
        (``replica_id`` >= 0, v3+) gets the same answer. ``leader_epoch`` is the partition's
        current leader epoch, against which a client's ``current_leader_epoch`` (v2+) is
        checked: older is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH. The answer is
        ``(largest epoch <= asked, its end offset)``. An epoch older than any the log still
        holds (retention removed it) answers the asked epoch and where the oldest known
        epoch starts, as Kafka's LeaderEpochFileCache.endOffsetFor does, so a consumer
        resumes from there rather than from its reset policy; -1 asks nothing (-1, -1).
        """
        topics = []
        for topic in request.body.topics:
            partitions = []
            for part in topic.partitions:
                entry = {"error_code": 0, "partition": part.partition, "leader_epoch": -1, "end_offset": -1}
                partition = self.catalog.partition(topic.topic, part.partition)
                asked = part.get("current_leader_epoch", -1)
                if partition is None:
                    entry["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                elif asked >= 0 and asked != (current := leader_epoch(topic.topic, part.partition)):
                    entry["error_code"] = int(ErrorCode.FENCED_LEADER_EPOCH if asked < current
                                              else ErrorCode.UNKNOWN_LEADER_EPOCH)
                else:
                    found = partition.end_offset_for_epoch(part.leader_epoch)
                    first = partition.first_epoch if found == (-1, -1) and part.leader_epoch >= 0 else None
                    if first is not None and part.leader_epoch < first[0]:
                        found = (part.leader_epoch, first[1])
                    entry["leader_epoch"], entry["end_offset"] = found
                partitions.append(entry)
            topics.append({"topic": topic.topic, "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}

    @staticmethod
    def _offset_for(partition: PartitionLog, timestamp: int) -> tuple[int, int]:
        if timestamp == EARLIEST:
            return -1, partition.log_start_offset
        if timestamp == LATEST:
            return -1, partition.high_watermark
        best: tuple[int, int] = (-1, -1)
        start = partition.log_start_offset
        if timestamp != MAX_TIMESTAMP:
            # Skip whole segments whose newest record is older than the timestamp.
            start = next(iter(partition.segments_from_timestamp(timestamp)), start)
        for _, batch in partition.read_batches(start):
            if timestamp == MAX_TIMESTAMP:
                if batch.max_timestamp > best[0]:
                    best = (batch.max_timestamp, DataService._offset_of_max(batch))
                continue
            if batch.max_timestamp < timestamp:
                continue
            if batch.records is None or batch.timestamp_type.value == 1:
                return batch.max_timestamp, max(batch.base_offset, partition.log_start_offset)
            for record in batch.records:
                ts = batch.timestamp_of(record)
                if ts >= timestamp and batch.offset_of(record) >= partition.log_start_offset:
                    return ts, batch.offset_of(record)
        return best

    @staticmethod
    def _offset_of_max(batch: Any) -> int:
        if batch.records:
            top = max(batch.records, key=lambda r: (batch.timestamp_of(r), -r.offset_delta))
            return int(batch.offset_of(top))
        return int(batch.last_offset)


def register(router: Any, service: DataService) -> None:
    router.register(ApiKey.PRODUCE, lambda request, peer: service.produce(request))
    router.register(ApiKey.FETCH, lambda request, peer: service.fetch(request))
    router.register(ApiKey.LIST_OFFSETS, lambda request, peer: service.list_offsets(request))
    ctx = router.ctx

    def leader_epoch(topic: str, index: int) -> int:
        return int(ctx.placement.partition(topic, index, ctx.me).leader_epoch)

    router.register(ApiKey.OFFSET_FOR_LEADER_EPOCH,
                    lambda request, peer: service.offset_for_leader_epoch(request, leader_epoch))
    router.register(ApiKey.DELETE_RECORDS, service.delete_records)
    router.register(ApiKey.DESCRIBE_PRODUCERS, lambda request, peer: service.describe_producers(request))
    # InitProducerId is the transaction service's (broker.txn_service): it hands idempotent
    # producers (no transactional id) back to init_producer_id here.


