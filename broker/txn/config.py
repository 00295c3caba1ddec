"""The transaction coordinator's settings, by their Kafka names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    #: transaction.max.timeout.ms: the longest transaction.timeout.ms a producer may ask for.
    max_timeout_ms: int = 900_000
    #: transactional.id.expiration.ms: an idle transactional id (no open transaction) is forgotten.
    transactional_id_expiration_ms: int = 604_800_000
    #: offsets.topic.num.partitions: where AddOffsetsToTxn finds a group's offsets partition.
    offsets_partitions: int = 50
    #: transaction.state.log.num.partitions: where a transactional id's state lives.
    state_partitions: int = 50
    #: The coordinator epoch markers carry where no partition was loaded at an epoch of its
    #: own. One broker is always epoch 0; a cluster node loads each partition at its leader
    #: epoch (``TransactionCoordinator.load_partition``).
    coordinator_epoch: int = 0

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> TransactionConfig:
        return cls(
            max_timeout_ms=config["transaction.max.timeout.ms"],
            transactional_id_expiration_ms=config["transactional.id.expiration.ms"],
            offsets_partitions=config["offsets.topic.num.partitions"],
            state_partitions=config["transaction.state.log.num.partitions"],
        )
