"""The transaction service's view of durability: a partition counts as in a transaction only
once the record that added it is durable (``TransactionService.verify``).

A real broker over real files, with no background tasks running: nothing becomes durable
until the test syncs ``__transaction_state`` itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from broker.app import Broker
from broker.config import Config
from broker.txn.requests import AddOffsetsRequest, AddPartitionsRequest, InitProducerIdRequest
from broker.txn_service import TransactionService
from protocol.consumer_offsets import partition_for
from protocol.errors import ErrorCode
from storage.layout import COORDINATOR_TOPIC

E = ErrorCode
NOW = 1_700_000_000_000


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TransactionService]:
    broker = Broker.open(Config({"offsets.topic.num.partitions": 4}), tmp_path)
    assert broker.catalog.create("t", 2, 1, {})[0] is E.NONE
    try:
        yield broker.transactions
    finally:
        broker.transactions.log.close()
        broker.groups.log.close()
        broker.catalog.close()


def test_a_partition_counts_once_its_addition_is_durable_and_other_additions_do_not_hold_it_back(
        service: TransactionService) -> None:
    coordinator = service.coordinator
    service.apply(coordinator.init_producer_id(1, NOW, InitProducerIdRequest("app", 60000)))
    producer_id = coordinator.transactions["app"].producer_id
    offsets_partition = partition_for("g", 4)

    service.apply(coordinator.add_offsets(2, NOW, AddOffsetsRequest("app", producer_id, 0, "g")))
    assert service.verify("app", producer_id, 0, COORDINATOR_TOPIC, offsets_partition) is E.CONCURRENT_TRANSACTIONS
    service.log.sync()
    assert service.verify("app", producer_id, 0, COORDINATOR_TOPIC, offsets_partition) is E.NONE

    # AddPartitionsToTxn in flight: its partition waits, the group's partition added before does not.
    service.apply(coordinator.add_partitions(3, NOW, AddPartitionsRequest("app", producer_id, 0, (("t", (1,)),))))
    assert service.verify("app", producer_id, 0, "t", 1) is E.CONCURRENT_TRANSACTIONS
    assert service.verify("app", producer_id, 0, COORDINATOR_TOPIC, offsets_partition) is E.NONE
    assert service.verify("app", producer_id, 0, "t", 0) is E.TRANSACTION_ABORTABLE
    service.log.sync()
    assert service.verify("app", producer_id, 0, "t", 1) is E.NONE


class _Channel:
    """A cluster's marker channel that records the jobs it is given."""

    def __init__(self) -> None:
        self.jobs: list[object] = []

    async def write_markers(self, job: object) -> bool:
        self.jobs.append(job)
        return True


async def test_a_cluster_leader_refuses_markers_for_partitions_it_does_not_lead(service: TransactionService) -> None:
    from broker.txn.markers import MarkerRequest

    service.leads = lambda topic, partition: (topic, partition) == ("t", 0)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.data.commit.run)  # markers are answered once durable
        job = MarkerRequest("app", 5, 0, True, 3, (("t", 0), ("t", 1)))
        with trio.fail_after(10):
            errors = await service.write_local_markers(job, job.partitions)
        assert errors == {("t", 0): E.NONE, ("t", 1): E.NOT_LEADER_OR_FOLLOWER}
        # A marker from an older coordinator epoch than the partition has seen is fenced.
        stale = MarkerRequest("app", 5, 0, False, 2, (("t", 0),))
        with trio.fail_after(10):
            refused = await service.write_local_markers(stale, stale.partitions)
        assert refused == {("t", 0): E.TRANSACTION_COORDINATOR_FENCED}
        nursery.cancel_scope.cancel()


def test_a_cluster_node_loads_and_unloads_transactional_ids_by_partition(service: TransactionService) -> None:
    coordinator = service.coordinator
    service.apply(coordinator.init_producer_id(1, NOW, InitProducerIdRequest("app", 60000)))
    service.log.sync()
    partition = coordinator.partition_of("app")
    records = [(key, value) for key, value, _ in service.log.replay_partition(partition)]
    service.unload_partition(partition)
    assert "app" not in coordinator.transactions
    assert service.load_partition(partition, 42, records) == 1
    assert coordinator.coordinator_epoch("app") == 42


def test_without_the_coordinator_a_cluster_leader_checks_transactional_writes_by_producer_state_alone(
        service: TransactionService) -> None:
    """Kafka before 3.6 (transaction.partition.verification.enable=false): a transactional id
    coordinated on another node is not asked about."""
    service.channel = _Channel()
    assert service.verify("elsewhere", 9, 0, "t", 0) is E.NONE
    coordinator = service.coordinator
    coordinator.epochs[coordinator.partition_of("here")] = 7  # loaded here: asked as on one node
    assert service.verify("here", 9, 0, "t", 0) is E.INVALID_PRODUCER_ID_MAPPING
