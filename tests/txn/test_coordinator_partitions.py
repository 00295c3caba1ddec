"""A cluster node's transaction coordinator: ``__transaction_state`` partitions loaded at their
leader epoch and unloaded when another node leads them (Kafka's
loadTransactionsForTxnTopicPartition and removeTransactionsForTxnTopicPartition)."""

from __future__ import annotations

from broker.txn import TransactionConfig, TransactionCoordinator
from broker.txn.records import decode as decode_record
from broker.txn.state import TransactionState
from tests.txn.harness import Topics, TxnHarness

PARTITIONS = 4


def _harness() -> TxnHarness:
    return TxnHarness(TransactionConfig(offsets_partitions=4, state_partitions=PARTITIONS))


def _ids_in_two_partitions(coordinator: TransactionCoordinator) -> tuple[str, str]:
    """Two transactional ids that live in different ``__transaction_state`` partitions."""
    first = "txn-0"
    other = next(f"txn-{i}" for i in range(1, 100)
                 if coordinator.partition_of(f"txn-{i}") != coordinator.partition_of(first))
    return first, other


def _records(h: TxnHarness) -> list:  # type: ignore[type-arg]
    return [r for r in (decode_record(k, v) for k, v in h.records) if r is not None]


def test_a_partition_loads_only_its_own_ids_and_finishes_them_at_its_leader_epoch() -> None:
    h = _harness()
    a, b = _ids_in_two_partitions(h.coord)
    pa = h.producer(a)
    pb = h.producer(b)
    h.add(a, pa, {"t0": [0]})
    h.add(b, pb, {"t1": [0]})
    h.end(a, pa, True)  # decided, markers not yet written: the node dies here
    node = TransactionCoordinator(h.config, topics=Topics())
    partition = node.partition_of(a)
    fx = node.load_partition(partition, 17, _records(h), h.now)
    assert set(node.transactions) == {a}
    (job,) = fx.markers
    assert (job.transactional_id, job.commit, job.coordinator_epoch) == (a, True, 17)
    assert node.coordinator_epoch(a) == 17
    assert node.coordinator_epoch(b) == h.config.coordinator_epoch  # not loaded here


def test_unloading_drops_the_partitions_ids_and_stops_their_marker_jobs() -> None:
    h = _harness()
    a, b = _ids_in_two_partitions(h.coord)
    pa = h.producer(a)
    h.producer(b)
    h.add(a, pa, {"t0": [0]})
    h.end(a, pa, False)
    node = TransactionCoordinator(h.config, topics=Topics())
    for partition in {node.partition_of(a), node.partition_of(b)}:
        node.load_partition(partition, 5, _records(h), h.now)
    (job,) = [m for m in node.finish_load(h.now).markers if m.transactional_id == a]
    assert node.is_current(job)
    dropped = node.unload_partition(node.partition_of(a))
    assert dropped == [a] and set(node.transactions) == {b}
    assert not node.is_current(job)
    assert node.complete(h.now, job).records == []  # a job that outlived its coordinator's term


def test_a_job_of_an_older_coordinator_epoch_is_not_current_after_a_reload() -> None:
    h = _harness()
    a, _ = _ids_in_two_partitions(h.coord)
    pa = h.producer(a)
    h.add(a, pa, {"t0": [0]})
    h.end(a, pa, True)
    node = TransactionCoordinator(h.config, topics=Topics())
    partition = node.partition_of(a)
    (old,) = node.load_partition(partition, 5, _records(h), h.now).markers
    (new,) = node.load_partition(partition, 9, _records(h), h.now).markers  # led again, at a newer epoch
    assert (old.coordinator_epoch, new.coordinator_epoch) == (5, 9)
    assert not node.is_current(old) and node.is_current(new)
    assert node.complete(h.now, old).records == []
    completed = node.complete(h.now, new)
    assert [r.entry.status for r in completed.records if r.entry is not None] == [
        TransactionState.COMPLETE_COMMIT]


def test_one_broker_keeps_epoch_zero_for_every_id() -> None:
    h = _harness()
    pa = h.producer("a")
    h.add("a", pa, {"t0": [0]})
    h.end("a", pa, True)
    (job,) = h.markers
    assert job.coordinator_epoch == 0 and h.coord.epochs == {}
