"""Typed requests and results of the transaction APIs: what the rules read and answer."""

from __future__ import annotations

from dataclasses import dataclass

from broker.txn.state import TopicPartition
from protocol.errors import ErrorCode

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]  # topic -> partitions, as requested


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest:
    transactional_id: str
    timeout_ms: int
    #: KIP-360 (v3+): the producer's current id and epoch when it resumes after an error; -1 otherwise.
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class AddPartitionsRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class AddPartitionsResult:
    partitions: tuple[tuple[str, tuple[tuple[int, ErrorCode], ...]], ...]


@dataclass(frozen=True, slots=True)
class AddOffsetsRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


@dataclass(frozen=True, slots=True)
class EndTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool


@dataclass(frozen=True, slots=True)
class ErrorResult:
    """AddOffsetsToTxn and EndTxn answer with one error."""

    error: ErrorCode


@dataclass(frozen=True, slots=True)
class DescribeTransactionsRequest:
    transactional_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    transactional_id: str
    error: ErrorCode
    state: str = ""
    timeout_ms: int = 0
    start_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeTransactionsResult:
    transactions: tuple[DescribedTransaction, ...]


@dataclass(frozen=True, slots=True)
class ListTransactionsRequest:
    states: tuple[str, ...] = ()
    producer_ids: tuple[int, ...] = ()
    #: ListTransactions v1 (KIP-994): only transactions running longer than this; -1 for all.
    duration_ms: int = -1


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResult:
    error: ErrorCode
    unknown_state_filters: tuple[str, ...]
    transactions: tuple[ListedTransaction, ...]


Result = (InitProducerIdResult | AddPartitionsResult | ErrorResult | DescribeTransactionsResult
          | ListTransactionsResult)
