"""The transaction coordinator's rules (Kafka's TransactionCoordinator), sans-IO.

Every handler takes a ticket (when it answers a request), ``now`` in epoch milliseconds and
a typed request, and returns ``TxnEffects``. Nothing here awaits, reads a clock or touches
a file; the producer id allocator is injected (``allocate_producer_id``), and so is what
the coordinator may know about topics (``topics``).

State changes as Kafka's new coordinator runtime makes them: a handler writes the record
of the new state, which is replayed at once, and its reply waits until that record is
durable. So a second request sees the first one's state, and no reply reveals state a
crash could lose. Two things differ from a request/response: the markers of a decided
transaction are written by the shell once its Prepare record is durable, and the
transaction completes (``complete``) only when every marker is durable too; the EndTxn
that decided it is answered then.

The rules themselves, with Kafka's references, are in docs/transactions.md.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Protocol

from broker.txn.config import TransactionConfig
from broker.txn.effects import TxnEffects
from broker.txn.markers import MarkerRequest
from broker.txn.records import TransactionRecord
from broker.txn.requests import (
    AddOffsetsRequest,
    AddPartitionsRequest,
    AddPartitionsResult,
    DescribedTransaction,
    DescribeTransactionsRequest,
    DescribeTransactionsResult,
    EndTxnRequest,
    ErrorResult,
    InitProducerIdRequest,
    InitProducerIdResult,
    ListedTransaction,
    ListTransactionsRequest,
    ListTransactionsResult,
)
from broker.txn.state import (
    MAX_EPOCH,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
)
from protocol.consumer_offsets import partition_for
from protocol.errors import ErrorCode
from storage.layout import COORDINATOR_TOPIC

log = logging.getLogger("kcoord.transactions")

E = ErrorCode
S = TransactionState


class TopicsView(Protocol):
    """Whether a partition exists (AddPartitionsToTxn refuses unknown ones, as KafkaApis does)."""

    def partition_exists(self, topic: str, partition: int) -> bool: ...


class TransactionCoordinator:
    """Every transactional id of this broker, and the rules that move them."""

    def __init__(self, config: TransactionConfig | None = None,
                 allocate_producer_id: Callable[[], int] | None = None,
                 topics: TopicsView | None = None) -> None:
        self.config = config or TransactionConfig()
        self._next_id = 0
        self.allocate_producer_id = allocate_producer_id or self._count_ids
        self.topics = topics
        self.transactions: dict[str, TransactionMetadata] = {}
        #: ``__transaction_state`` partition -> the epoch this coordinator loaded it at (a
        #: cluster node: that partition's leader epoch, Kafka's coordinatorEpoch). Empty on one
        #: broker, which coordinates every partition at ``config.coordinator_epoch``.
        self.epochs: dict[int, int] = {}
        #: (deadline, transactional id, producer id, epoch, start): open transactions' timeouts, checked lazily.
        self._deadlines: list[tuple[int, str, int, int, int]] = []
        self._earliest_new: int | None = None  # the earliest timeout scheduled since last asked
        # Counters since start-up (read by the metrics collector).
        self.commits = 0
        self.aborts = 0
        self.timed_out = 0
        self.fenced = 0

    def _count_ids(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def effects(self) -> TxnEffects:
        return TxnEffects(self.replay)

    # ------------------------------------------------------------------ replay and load

    def replay(self, record: TransactionRecord) -> None:
        """Apply one record, written live or read at load; the last per transactional id wins."""
        if record.entry is None:
            self.transactions.pop(record.transactional_id, None)
            return
        metadata = TransactionMetadata.from_entry(record.transactional_id, record.entry)
        old = self.transactions.get(record.transactional_id)
        if old is not None:
            # Working state Kafka's records do not carry either (InitProducerId retries, rotation).
            metadata.last_producer_epoch = old.last_producer_epoch
            if old.producer_id != metadata.producer_id:
                metadata.previous_producer_id = old.producer_id
            else:
                metadata.previous_producer_id = old.previous_producer_id
        self.transactions[record.transactional_id] = metadata

    def finish_load(self, now: int, only: frozenset[str] | None = None) -> TxnEffects:
        """After replay (Kafka's loadTransactionsForTxnTopicPartition): finish what was decided.

        A transaction found in PrepareCommit or PrepareAbort gets its markers written again
        (a partition that already has one gets a second, which closes nothing); an Ongoing
        one gets its timeout back. ``only``: the transactional ids just loaded.
        """
        fx = self.effects()
        for metadata in self.transactions.values():
            if only is not None and metadata.transactional_id not in only:
                continue
            if metadata.state.is_prepared:
                fx.markers.append(self._markers_of(metadata, None))
            elif metadata.state is S.ONGOING:
                self._schedule_timeout(metadata)
        return fx

    # ------------------------------------------------------------------ partitions (a cluster node)

    def partition_of(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition of a transactional id (Kafka's partitionFor)."""
        return partition_for(transactional_id, self.config.state_partitions)

    def coordinator_epoch(self, transactional_id: str) -> int:
        """The epoch this coordinator's markers for ``transactional_id`` carry."""
        return self.epochs.get(self.partition_of(transactional_id), self.config.coordinator_epoch)

    def load_partition(self, partition: int, epoch: int, records: Iterable[TransactionRecord],
                       now: int) -> TxnEffects:
        """Take over a ``__transaction_state`` partition this node now leads at ``epoch``
        (Kafka's loadTransactionsForTxnTopicPartition): replay its records, then finish its
        decided transactions, whose markers carry the new epoch."""
        self.unload_partition(partition)
        self.epochs[partition] = epoch
        loaded: set[str] = set()
        for record in records:
            if self.partition_of(record.transactional_id) != partition:
                continue
            self.replay(record)
            loaded.add(record.transactional_id)
        return self.finish_load(now, frozenset(loaded))

    def unload_partition(self, partition: int) -> list[str]:
        """Give up a partition another node coordinates now (Kafka's
        removeTransactionsForTxnTopicPartition): its transactional ids leave memory, nothing
        is written. Returns the ids dropped."""
        self.epochs.pop(partition, None)
        dropped = [t for t in self.transactions if self.partition_of(t) == partition]
        for txn_id in dropped:
            del self.transactions[txn_id]
        return dropped

    def is_current(self, job: MarkerRequest) -> bool:
        """Is ``job`` still this coordinator's to finish: its transactional id loaded here at
        the epoch the markers carry, and still in the Prepare state they settle?"""
        metadata = self.transactions.get(job.transactional_id)
        expected = S.PREPARE_COMMIT if job.commit else S.PREPARE_ABORT
        return (metadata is not None and metadata.state is expected and metadata.producer_id == job.producer_id
                and metadata.producer_epoch == job.producer_epoch
                and self.coordinator_epoch(job.transactional_id) == job.coordinator_epoch)

    # ------------------------------------------------------------------ InitProducerId

    def init_producer_id(self, ticket: int, now: int, request: InitProducerIdRequest) -> TxnEffects:
        """Kafka's handleInitProducerId for a transactional id: a (new) producer id and epoch."""
        fx = self.effects()
        fx.reply(ticket, self._init_producer_id(ticket, now, request, fx))
        return fx

    def _init_producer_id(self, ticket: int, now: int, request: InitProducerIdRequest,
                          fx: TxnEffects) -> InitProducerIdResult:
        txn_id = request.transactional_id
        if not txn_id:
            return InitProducerIdResult(E.INVALID_REQUEST)
        if not 0 < request.timeout_ms <= self.config.max_timeout_ms:
            return InitProducerIdResult(E.INVALID_TRANSACTION_TIMEOUT)
        metadata = self.transactions.get(txn_id)
        if metadata is None:
            metadata = TransactionMetadata(txn_id, self.allocate_producer_id(), -1, request.timeout_ms, S.EMPTY,
                                           last_update_ms=now)
        expected = (request.producer_id, request.producer_epoch) if request.producer_id >= 0 else None
        if expected is not None and not (
            metadata.producer_epoch == -1
            or expected[0] == metadata.producer_id
            or (expected[0] == metadata.previous_producer_id and is_epoch_exhausted(expected[1]))
        ):
            return InitProducerIdResult(E.PRODUCER_FENCED)
        if metadata.state.is_prepared:
            return InitProducerIdResult(E.CONCURRENT_TRANSACTIONS)
        if metadata.state is S.ONGOING:
            # Fence the producer and abort its transaction; the client retries and then gets
            # the next epoch (a second bump), or a new producer id if that exhausts them.
            self.fenced += 1
            log.info("transactional id %s: a new producer fences producer %d epoch %d; its transaction is aborted",
                     txn_id, metadata.producer_id, metadata.producer_epoch)
            self._abort_fenced(metadata, now, fx)
            return InitProducerIdResult(E.CONCURRENT_TRANSACTIONS)
        if is_epoch_exhausted(metadata.producer_epoch) and (expected is None or expected[1] == metadata.producer_epoch):
            new = replace(metadata, producer_id=self.allocate_producer_id(), producer_epoch=0,
                          previous_producer_id=metadata.producer_id)
            last_epoch = metadata.producer_epoch if expected is not None else -1
        else:
            bumped = metadata.producer_epoch + 1
            if expected is None:
                epoch, last_epoch = bumped, -1
            elif metadata.producer_epoch == -1 or expected[1] == metadata.producer_epoch:
                epoch, last_epoch = bumped, metadata.producer_epoch
            elif expected[1] == metadata.last_producer_epoch:
                epoch, last_epoch = metadata.producer_epoch, metadata.last_producer_epoch  # a retry
            else:
                return InitProducerIdResult(E.PRODUCER_FENCED)
            new = replace(metadata, producer_epoch=epoch)
        new = replace(new, state=S.EMPTY, timeout_ms=request.timeout_ms, partitions=frozenset(), start_ms=-1,
                      last_update_ms=now)
        fx.write(TransactionRecord.of(new))
        self.transactions[txn_id].last_producer_epoch = last_epoch
        self.transactions[txn_id].previous_producer_id = new.previous_producer_id
        log.info("initialized transactional id %s with producer id %d epoch %d", txn_id, new.producer_id,
                 new.producer_epoch)
        return InitProducerIdResult(E.NONE, new.producer_id, new.producer_epoch)

    # ------------------------------------------------------------------ AddPartitionsToTxn, AddOffsetsToTxn

    def add_partitions(self, ticket: int, now: int, request: AddPartitionsRequest) -> TxnEffects:
        """Kafka's handleAddPartitionsToTransaction, after KafkaApis' check that the partitions exist."""
        fx = self.effects()
        wanted = [(topic, p) for topic, ps in request.partitions for p in ps]
        unknown = {tp for tp in wanted if self.topics is not None and not self.topics.partition_exists(*tp)}
        error = E.OPERATION_NOT_ATTEMPTED if unknown else self._add(
            request.transactional_id, request.producer_id, request.producer_epoch, frozenset(wanted), now, fx)
        fx.reply(ticket, AddPartitionsResult(tuple(
            (topic, tuple((p, E.UNKNOWN_TOPIC_OR_PARTITION if (topic, p) in unknown else error) for p in ps))
            for topic, ps in request.partitions)))
        return fx

    def add_offsets(self, ticket: int, now: int, request: AddOffsetsRequest) -> TxnEffects:
        """Kafka's AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        fx = self.effects()
        partition = (COORDINATOR_TOPIC, partition_for(request.group_id, self.config.offsets_partitions))
        error = self._add(request.transactional_id, request.producer_id, request.producer_epoch,
                          frozenset((partition,)), now, fx)
        fx.reply(ticket, ErrorResult(error))
        return fx

    def _add(self, txn_id: str, producer_id: int, epoch: int, partitions: frozenset[TopicPartition], now: int,
             fx: TxnEffects) -> ErrorCode:
        if not txn_id:
            return E.INVALID_REQUEST
        metadata = self.transactions.get(txn_id)
        error = self._check_producer(metadata, producer_id, epoch)
        if error is not None:
            return error
        assert metadata is not None
        if metadata.state.is_prepared:
            return E.CONCURRENT_TRANSACTIONS
        if metadata.state is S.ONGOING and partitions <= metadata.partitions:
            return E.NONE
        starting = metadata.state is not S.ONGOING
        new = replace(metadata, state=S.ONGOING, partitions=metadata.partitions | partitions,
                      start_ms=now if starting else metadata.start_ms, last_update_ms=now)
        fx.write(TransactionRecord.of(new))
        if starting:
            self._schedule_timeout(new)
        return E.NONE

    @staticmethod
    def _check_producer(metadata: TransactionMetadata | None, producer_id: int, epoch: int) -> ErrorCode | None:
        if metadata is None or metadata.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if metadata.producer_epoch != epoch:
            return E.PRODUCER_FENCED
        return None

    def verify(self, transactional_id: str, producer_id: int, epoch: int, partition: TopicPartition) -> ErrorCode:
        """Is ``partition`` in the producer's open transaction? (Kafka's verification, KIP-890 part 1.)

        Asked before the first transactional write of a transaction to a partition (a
        Produce, a TxnOffsetCommit). TRANSACTION_ABORTABLE: the partition was not added.
        """
        metadata = self.transactions.get(transactional_id) if transactional_id else None
        error = self._check_producer(metadata, producer_id, epoch)
        if error is not None:
            return error
        assert metadata is not None
        if metadata.state.is_prepared:
            return E.CONCURRENT_TRANSACTIONS
        if metadata.state is not S.ONGOING or partition not in metadata.partitions:
            return E.TRANSACTION_ABORTABLE
        return E.NONE

    # ------------------------------------------------------------------ EndTxn

    def end_txn(self, ticket: int, now: int, request: EndTxnRequest) -> TxnEffects:
        """Kafka's handleEndTransaction (transaction version 1: the epoch stays).

        A decided transaction is answered once it is complete: its markers written and
        its CompleteCommit or CompleteAbort durable, so the producer's next transaction
        does not meet CONCURRENT_TRANSACTIONS.
        """
        fx = self.effects()
        error = self._end(ticket, now, request, fx)
        if error is not None:
            fx.reply(ticket, ErrorResult(error))
        return fx

    def _end(self, ticket: int, now: int, request: EndTxnRequest, fx: TxnEffects) -> ErrorCode | None:
        if not request.transactional_id:
            return E.INVALID_REQUEST
        metadata = self.transactions.get(request.transactional_id)
        if metadata is None or metadata.producer_id != request.producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if request.producer_epoch != metadata.producer_epoch:
            return E.PRODUCER_FENCED
        state, commit = metadata.state, request.commit
        if state is S.ONGOING:
            self._decide(metadata, commit, now, fx, ticket)
            return None
        if state is S.COMPLETE_COMMIT:
            return E.NONE if commit else E.INVALID_TXN_STATE
        if state is S.COMPLETE_ABORT:
            return E.INVALID_TXN_STATE if commit else E.NONE
        if state is S.PREPARE_COMMIT:
            return E.CONCURRENT_TRANSACTIONS if commit else E.INVALID_TXN_STATE
        if state is S.PREPARE_ABORT:
            return E.INVALID_TXN_STATE if commit else E.CONCURRENT_TRANSACTIONS
        return E.INVALID_TXN_STATE  # Empty: no transaction to end

    def _decide(self, metadata: TransactionMetadata, commit: bool, now: int, fx: TxnEffects,
                ticket: int | None) -> None:
        """Write PrepareCommit or PrepareAbort; the shell writes the markers once it is durable."""
        new = replace(metadata, state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, last_update_ms=now)
        fx.write(TransactionRecord.of(new))
        fx.markers.append(self._markers_of(self.transactions[new.transactional_id], ticket))

    def _abort_fenced(self, metadata: TransactionMetadata, now: int, fx: TxnEffects) -> None:
        """Kafka's prepareFenceProducerEpoch then abort: the epoch goes up by one, the transaction aborts."""
        bumped = min(metadata.producer_epoch + 1, MAX_EPOCH)
        self._decide(replace(metadata, producer_epoch=bumped), False, now, fx, None)
        self.transactions[metadata.transactional_id].last_producer_epoch = -1

    def _markers_of(self, metadata: TransactionMetadata, ticket: int | None) -> MarkerRequest:
        return MarkerRequest(metadata.transactional_id, metadata.producer_id, metadata.producer_epoch,
                             metadata.state is S.PREPARE_COMMIT, self.coordinator_epoch(metadata.transactional_id),
                             tuple(sorted(metadata.partitions)), ticket)

    def complete(self, now: int, markers: MarkerRequest) -> TxnEffects:
        """Every marker of a decided transaction is durable: CompleteCommit or CompleteAbort.

        Ignored unless the transactional id is still in that very Prepare state, loaded at
        the epoch the markers carry: a marker job that outlived its transaction (written
        twice) or its coordinator's term changes nothing and answers nothing. The EndTxn that decided it, if any, is answered now.
        """
        fx = self.effects()
        if not self.is_current(markers):
            return fx
        metadata = self.transactions[markers.transactional_id]
        new = replace(metadata, state=S.COMPLETE_COMMIT if markers.commit else S.COMPLETE_ABORT,
                      partitions=frozenset(), last_update_ms=now)
        fx.write(TransactionRecord.of(new))
        if markers.commit:
            self.commits += 1
        else:
            self.aborts += 1
        fx.reply(markers.ticket, ErrorResult(E.NONE))
        return fx

    # ------------------------------------------------------------------ timers

    def _schedule_timeout(self, metadata: TransactionMetadata) -> None:
        deadline = metadata.start_ms + metadata.timeout_ms
        heapq.heappush(self._deadlines, (deadline, metadata.transactional_id,
                                         metadata.producer_id, metadata.producer_epoch, metadata.start_ms))
        if self._earliest_new is None or deadline < self._earliest_new:
            self._earliest_new = deadline

    def take_earliest_new(self) -> int | None:
        """As ``next_deadline`` would report the earliest timeout scheduled since the last
        call (None: none); forgets it. Only a new timeout makes ``next_deadline`` earlier."""
        earliest, self._earliest_new = self._earliest_new, None
        return None if earliest is None else earliest + 1

    def _is_current(self, entry: tuple[int, str, int, int, int]) -> bool:
        _, txn_id, producer_id, epoch, start = entry
        metadata = self.transactions.get(txn_id)
        return (metadata is not None and metadata.state is S.ONGOING and metadata.producer_id == producer_id
                and metadata.producer_epoch == epoch and metadata.start_ms == start)

    def next_deadline(self) -> int | None:
        """When the oldest open transaction times out, or None."""
        deadlines = self._deadlines
        while deadlines:
            if self._is_current(deadlines[0]):
                return deadlines[0][0] + 1  # Kafka aborts once start + timeout < now
            heapq.heappop(deadlines)
        return None

    def on_time(self, now: int) -> TxnEffects:
        """Abort every transaction open past its timeout (Kafka's abortTimedOutTransactions).

        As Kafka does, the producer's epoch is bumped first, so the producer that let it
        time out is fenced: its next request gets PRODUCER_FENCED.
        """
        fx = self.effects()
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] < now:
            entry = heapq.heappop(deadlines)
            if not self._is_current(entry):
                continue
            metadata = self.transactions[entry[1]]
            self.timed_out += 1
            log.info("transactional id %s: transaction of producer %d epoch %d open for %d ms, past its timeout "
                     "of %d ms: aborting it", metadata.transactional_id, metadata.producer_id,
                     metadata.producer_epoch, now - metadata.start_ms, metadata.timeout_ms)
            self._abort_fenced(metadata, now, fx)
        return fx

    def expire_transactional_ids(self, now: int) -> TxnEffects:
        """Kafka's removeExpiredTransactionalIds: ids idle past transactional.id.expiration.ms go."""
        fx = self.effects()
        horizon = now - self.config.transactional_id_expiration_ms
        for metadata in list(self.transactions.values()):
            if metadata.state.may_expire and metadata.last_update_ms <= horizon:
                log.info("transactional id %s expired (idle since %d)", metadata.transactional_id,
                         metadata.last_update_ms)
                fx.write(TransactionRecord(metadata.transactional_id, None))
        return fx

    # ------------------------------------------------------------------ admin

    def describe(self, ticket: int, now: int, request: DescribeTransactionsRequest) -> TxnEffects:
        fx = self.effects()
        out = []
        for txn_id in request.transactional_ids:
            metadata = self.transactions.get(txn_id)
            if not txn_id:
                out.append(DescribedTransaction(txn_id, E.INVALID_REQUEST))
            elif metadata is None or metadata.state is S.DEAD:
                out.append(DescribedTransaction(txn_id, E.TRANSACTIONAL_ID_NOT_FOUND))
            else:
                out.append(DescribedTransaction(
                    txn_id, E.NONE, metadata.state.wire_name, metadata.timeout_ms, metadata.start_ms,
                    metadata.producer_id, metadata.producer_epoch, tuple(sorted(metadata.partitions))))
        fx.reply(ticket, DescribeTransactionsResult(tuple(out)))
        return fx

    def list_transactions(self, ticket: int, now: int, request: ListTransactionsRequest) -> TxnEffects:
        fx = self.effects()
        states = {s for s in (S.from_wire_name(n) for n in request.states) if s is not None}
        unknown = tuple(n for n in request.states if S.from_wire_name(n) is None)
        producers = set(request.producer_ids)
        listed = []
        for metadata in self.transactions.values():
            if metadata.state is S.DEAD:
                continue
            if producers and metadata.producer_id not in producers:
                continue
            if request.states and metadata.state not in states:
                continue
            if request.duration_ms >= 0 and now - metadata.start_ms <= request.duration_ms:
                continue
            listed.append(ListedTransaction(metadata.transactional_id, metadata.producer_id,
                                            metadata.state.wire_name))
        fx.reply(ticket, ListTransactionsResult(E.NONE, unknown, tuple(listed)))
        return fx

    # ------------------------------------------------------------------ metrics

    def open_transactions(self) -> list[TransactionMetadata]:
        return [m for m in self.transactions.values() if m.has_open_transaction]
