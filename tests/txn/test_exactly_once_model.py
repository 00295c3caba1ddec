"""A Hypothesis state machine over transactions, sans-IO: what read_committed consumers and
OffsetFetch see equals the committed transactions, replayed.

Two transactional producers begin, produce to one data partition, commit an input offset
for a group (TxnOffsetCommit), commit or abort, let a transaction time out, or restart
(a new instance fences the old one); markers are written whenever the machine chooses, so
they interleave with everything else; and the broker crashes (the coordinator is rebuilt
from its ``__transaction_state`` records, the partition's producer state from the log,
the pending offsets from the offsets log; marker jobs not written are lost, and the load
hands out those of decided transactions again).

The pieces are the real ones: ``TransactionCoordinator`` (through ``TxnHarness``), a
partition's ``ProducerState`` and the group coordinator's ``PendingTransactionalOffsets``.
The model beside them only remembers which values and offsets each producer wrote in its
open transaction, and moves them to committed or aborted when that producer's marker
reaches the partition.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from broker.coordinator.txn_offsets import Key, PendingTransactionalOffsets
from broker.txn.markers import MarkerRequest
from protocol.consumer_offsets import OffsetValue, partition_for
from protocol.errors import ErrorCode
from protocol.records import EndTransactionMarker
from storage.layout import COORDINATOR_TOPIC
from storage.producer_state import ProducerState
from tests.txn.harness import TxnHarness, same_state

E = ErrorCode
DATA = ("t0", 0)
GROUP = "g"
OFFSET_KEY: Key = (GROUP, "in", 0)
IDS = ("a", "b")
TIMEOUT = 60_000


@dataclass
class Entry:
    """One batch of the data partition: a record (value) or a marker (commit)."""

    offset: int
    producer_id: int
    epoch: int
    value: int | None = None
    commit: bool | None = None
    sequence: int = -1


@dataclass
class App:
    """What one producer instance knows: its id and epoch, its next sequence."""

    producer: tuple[int, int] | None = None
    sequence: int = 0


@dataclass
class Model:
    #: producer id -> values / (input offset, its place in the offsets log) written in its open transaction.
    open_values: dict[int, list[int]] = field(default_factory=dict)
    open_offset: dict[int, tuple[int, int]] = field(default_factory=dict)
    committed_values: set[int] = field(default_factory=set)
    aborted_values: set[int] = field(default_factory=set)
    committed_offset: int | None = None
    #: Where in the offsets log the committed offset was written.
    committed_at: int = -1


class ExactlyOnceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = TxnHarness()
        # Producer ids outlive crashes, as the broker's persisted id blocks make them.
        self.producer_ids = itertools.count()
        self.h.coord.allocate_producer_id = self._allocate
        self.apps = {txn_id: App() for txn_id in IDS}
        self.log: list[Entry] = []
        self.state = ProducerState()
        #: The group's offsets log: ("txn", producer id, offset) and ("marker", producer id, commit).
        self.offsets_log: list[tuple[str, int, int | bool]] = []
        self.pending = PendingTransactionalOffsets()
        self.store: dict[Key, OffsetValue] = {}
        self.model = Model()
        self.next_value = 0
        self.offsets_partition = partition_for(GROUP, self.h.config.offsets_partitions)

    def _allocate(self) -> int:
        return next(self.producer_ids)

    # ------------------------------------------------------------------ producers

    @rule(txn_id=st.sampled_from(IDS))
    def start_instance(self, txn_id: str) -> None:
        """InitProducerId, retried while the previous transaction is being aborted (fencing it)."""
        for _ in range(3):
            reply = self.h.init(txn_id, timeout=TIMEOUT)
            if reply["error_code"] == E.CONCURRENT_TRANSACTIONS:
                self.write_markers()
                continue
            assert reply["error_code"] == E.NONE, reply
            self.apps[txn_id] = App((reply["producer_id"], reply["producer_epoch"]))
            return
        raise AssertionError("InitProducerId kept answering CONCURRENT_TRANSACTIONS")

    @rule(txn_id=st.sampled_from(IDS))
    def produce(self, txn_id: str) -> None:
        app = self.apps[txn_id]
        if app.producer is None:
            return
        if self.h.add(txn_id, app.producer, {DATA[0]: [DATA[1]]})[DATA] is not E.NONE:
            return
        pid, epoch = app.producer
        if self.h.coord.verify(txn_id, pid, epoch, DATA) is not E.NONE:
            return
        error, duplicate = self.state.check_batch(pid, epoch, app.sequence, 1, True)
        if error is not E.NONE:
            return
        assert duplicate is None
        value = self.next_value
        self.next_value += 1
        offset = len(self.log)
        self.log.append(Entry(offset, pid, epoch, value=value, sequence=app.sequence))
        self.state.apply_batch(pid, epoch, app.sequence, 1, offset, 0, True)
        app.sequence += 1
        self.model.open_values.setdefault(pid, []).append(value)

    @rule(txn_id=st.sampled_from(IDS), offset=st.integers(0, 1000))
    def commit_input_offset(self, txn_id: str, offset: int) -> None:
        app = self.apps[txn_id]
        if app.producer is None or self.h.add_offsets(txn_id, app.producer, GROUP) is not E.NONE:
            return
        pid, epoch = app.producer
        if self.h.coord.verify(txn_id, pid, epoch, (COORDINATOR_TOPIC, self.offsets_partition)) is not E.NONE:
            return
        self.offsets_log.append(("txn", pid, offset))
        self.pending.put(pid, OFFSET_KEY, OffsetValue(offset, -1, "", 0, -1))
        self.model.open_offset[pid] = (offset, len(self.offsets_log))

    @rule(txn_id=st.sampled_from(IDS), commit=st.booleans())
    def end(self, txn_id: str, commit: bool) -> None:
        app = self.apps[txn_id]
        if app.producer is not None:
            self.h.end(txn_id, app.producer, commit)

    @rule()
    def time_passes(self) -> None:
        self.h.advance(TIMEOUT + 1)

    @rule()
    def write_markers(self) -> None:
        """The shell writes every decided transaction's markers, then completes it."""
        while self.h.markers:
            job = self.h.markers.pop(0)
            for topic, partition in job.partitions:
                if (topic, partition) == DATA:
                    self._data_marker(job)
                elif topic == COORDINATOR_TOPIC and partition == self.offsets_partition:
                    self._offsets_marker(job)
            self.h.written.append(job)
            self.h.apply(self.h.coord.complete(self.h.now, job))

    def _data_marker(self, job: MarkerRequest) -> None:
        if self.state.check_marker(job.producer_id, job.producer_epoch, job.coordinator_epoch) is not E.NONE:
            return
        offset = len(self.log)
        self.log.append(Entry(offset, job.producer_id, job.producer_epoch, commit=job.commit))
        self.state.apply_marker(job.producer_id, job.producer_epoch, job.marker, offset, 0)
        values = self.model.open_values.pop(job.producer_id, [])
        (self.model.committed_values if job.commit else self.model.aborted_values).update(values)

    def _offsets_marker(self, job: MarkerRequest) -> None:
        self.offsets_log.append(("marker", job.producer_id, job.commit))
        self._settle(job.producer_id, job.commit)
        pending = self.model.open_offset.pop(job.producer_id, None)
        # Kafka's OffsetMetadataManager.replayEndTransactionMarker: a committed transaction's offset
        # replaces the stored one only if it was written later in the log; two transactions
        # committing the same partition end with the one appended last, whatever the markers' order.
        if job.commit and pending is not None and pending[1] > self.model.committed_at:
            self.model.committed_offset, self.model.committed_at = pending

    def _settle(self, producer_id: int, commit: bool) -> None:
        for key, value in self.pending.complete(producer_id, commit, lambda group: True, self.store.get):
            self.store[key] = value

    # ------------------------------------------------------------------ crash

    @rule()
    def crash(self) -> None:
        """kill -9: everything is rebuilt from what was written; unwritten marker jobs are gone."""
        fresh = self.h.replayed()
        fresh.allocate_producer_id = self._allocate
        self.h.coord = fresh
        self.h.markers = list(fresh.loaded.markers)  # type: ignore[attr-defined]
        self.state = ProducerState()
        for entry in self.log:
            if entry.commit is None:
                self.state.apply_batch(entry.producer_id, entry.epoch, entry.sequence, 1, entry.offset, 0, True)
            else:
                self.state.apply_marker(entry.producer_id, entry.epoch, EndTransactionMarker(entry.commit, 0),
                                        entry.offset, 0)
        self.pending = PendingTransactionalOffsets()
        self.store = {}
        for kind, producer_id, what in self.offsets_log:
            if kind == "txn":
                self.pending.put(producer_id, OFFSET_KEY, OffsetValue(int(what), -1, "", 0, -1))
            else:
                self._settle(producer_id, bool(what))

    # ------------------------------------------------------------------ what readers see

    def _read_committed(self) -> list[int]:
        stable = self.state.last_stable_offset(len(self.log))
        aborted = self.state.aborted_between(0, stable)
        return [e.value for e in self.log[:stable] if e.value is not None and not any(
            a.producer_id == e.producer_id and a.first_offset <= e.offset <= a.last_offset for a in aborted)]

    @invariant()
    def read_committed_sees_committed_transactions_only(self) -> None:
        visible = self._read_committed()
        assert len(visible) == len(set(visible))
        assert not set(visible) & self.model.aborted_values
        stable = self.state.last_stable_offset(len(self.log))
        below = {e.value for e in self.log[:stable] if e.value is not None}
        assert set(visible) == self.model.committed_values & below
        if self.state.first_unstable_offset() is None:
            assert set(visible) == self.model.committed_values

    @invariant()
    def offset_fetch_sees_the_last_committed_transaction(self) -> None:
        stored = self.store.get(OFFSET_KEY)
        assert (stored.offset if stored is not None else None) == self.model.committed_offset
        assert self.pending.has_pending(*OFFSET_KEY) == bool(self.model.open_offset)

    @invariant()
    def the_coordinator_is_what_its_records_replay_to(self) -> None:
        assert same_state(self.h.coord, self.h.replayed())


TestExactlyOnceMachine = ExactlyOnceMachine.TestCase
TestExactlyOnceMachine.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
