"""The transaction service's view of durability: a partition counts as in a transaction only
once the record that added it is durable (``TransactionService.verify``).

A real broker over real files, with no background tasks running: nothing becomes durable
until the test syncs ``__transaction_state`` itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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
