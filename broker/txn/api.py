"""The version adapter of the transaction APIs: wire bodies in, typed requests out, and back.

The one place that knows their versions: PRODUCER_FENCED exists from InitProducerId v4,
AddPartitionsToTxn v2, AddOffsetsToTxn v2 and EndTxn v2 (KIP-588); older clients get
INVALID_PRODUCER_EPOCH, which they treat the same way. AddPartitionsToTxn v0-3 carry one
transaction; ListTransactions v1 adds the duration filter (KIP-994).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.txn.coordinator import TransactionCoordinator
from broker.txn.effects import TxnEffects
from broker.txn.requests import (
    AddOffsetsRequest,
    AddPartitionsRequest,
    AddPartitionsResult,
    DescribeTransactionsRequest,
    DescribeTransactionsResult,
    EndTxnRequest,
    ErrorResult,
    InitProducerIdRequest,
    InitProducerIdResult,
    ListTransactionsRequest,
    ListTransactionsResult,
    Result,
)
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

E = ErrorCode
Body = Any
TypedRequest = Any

#: The first version of each API that knows PRODUCER_FENCED (KIP-588).
_FENCED_FROM: dict[int, int] = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
}


def fenced_error(api_key: int, version: int, error: ErrorCode) -> ErrorCode:
    """PRODUCER_FENCED as the version asked knows it."""
    if error is E.PRODUCER_FENCED and version < _FENCED_FROM.get(api_key, 0):
        return E.INVALID_PRODUCER_EPOCH
    return error


@dataclass(frozen=True, slots=True)
class Binding:
    name: str
    decode: Callable[[int, Body], TypedRequest]
    handle: Callable[[TransactionCoordinator, int, int, TypedRequest], TxnEffects]
    encode: Callable[[int, Result], dict[str, Any]]


def decode_init_producer_id(version: int, body: Body) -> InitProducerIdRequest:
    return InitProducerIdRequest(body.transactional_id, body.transaction_timeout_ms,
                                 body.get("producer_id", -1) if version >= 3 else -1,
                                 body.get("producer_epoch", -1) if version >= 3 else -1)


def encode_init_producer_id(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, InitProducerIdResult)
    return {"throttle_time_ms": 0, "error_code": int(fenced_error(ApiKey.INIT_PRODUCER_ID, version, r.error)),
            "producer_id": r.producer_id, "producer_epoch": r.producer_epoch}


def decode_add_partitions(version: int, body: Body) -> AddPartitionsRequest:
    return AddPartitionsRequest(
        body.v3_and_below_transactional_id, body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
        tuple((t.name, tuple(t.partitions)) for t in body.v3_and_below_topics))


def encode_add_partitions(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, AddPartitionsResult)
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": topic, "results_by_partition": [
            {"partition_index": p, "partition_error_code": int(fenced_error(ApiKey.ADD_PARTITIONS_TO_TXN, version, e))}
            for p, e in partitions]}
        for topic, partitions in r.partitions]}


def decode_add_offsets(version: int, body: Body) -> AddOffsetsRequest:
    return AddOffsetsRequest(body.transactional_id, body.producer_id, body.producer_epoch, body.group_id)


def encode_add_offsets(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, ErrorResult)
    return {"throttle_time_ms": 0, "error_code": int(fenced_error(ApiKey.ADD_OFFSETS_TO_TXN, version, r.error))}


def decode_end_txn(version: int, body: Body) -> EndTxnRequest:
    return EndTxnRequest(body.transactional_id, body.producer_id, body.producer_epoch, bool(body.committed))


def encode_end_txn(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, ErrorResult)
    return {"throttle_time_ms": 0, "error_code": int(fenced_error(ApiKey.END_TXN, version, r.error))}


def decode_describe_transactions(version: int, body: Body) -> DescribeTransactionsRequest:
    return DescribeTransactionsRequest(tuple(body.transactional_ids))


def encode_describe_transactions(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, DescribeTransactionsResult)
    states = []
    for t in r.transactions:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in t.partitions:
            by_topic.setdefault(topic, []).append(partition)
        states.append({
            "error_code": int(t.error), "transactional_id": t.transactional_id, "transaction_state": t.state,
            "transaction_timeout_ms": t.timeout_ms, "transaction_start_time_ms": t.start_ms,
            "producer_id": t.producer_id, "producer_epoch": t.producer_epoch,
            "topics": [{"topic": topic, "partitions": ps} for topic, ps in by_topic.items()],
        })
    return {"throttle_time_ms": 0, "transaction_states": states}


def decode_list_transactions(version: int, body: Body) -> ListTransactionsRequest:
    return ListTransactionsRequest(tuple(body.state_filters), tuple(body.producer_id_filters),
                                   body.get("duration_filter", -1) if version >= 1 else -1)


def encode_list_transactions(version: int, r: Result) -> dict[str, Any]:
    assert isinstance(r, ListTransactionsResult)
    return {"throttle_time_ms": 0, "error_code": int(r.error), "unknown_state_filters": list(r.unknown_state_filters),
            "transaction_states": [{"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                                    "transaction_state": t.state} for t in r.transactions]}


def error_result(request: TypedRequest, error: ErrorCode) -> Result:
    """The reply to ``request`` when it fails as a whole with ``error``."""
    if isinstance(request, InitProducerIdRequest):
        return InitProducerIdResult(error)
    if isinstance(request, AddPartitionsRequest):
        return AddPartitionsResult(tuple((t, tuple((p, error) for p in ps)) for t, ps in request.partitions))
    if isinstance(request, DescribeTransactionsRequest):
        return DescribeTransactionsResult(())
    if isinstance(request, ListTransactionsRequest):
        return ListTransactionsResult(error, (), ())
    return ErrorResult(error)


#: API -> how it reaches the transaction coordinator.
BINDINGS: dict[int, Binding] = {
    ApiKey.INIT_PRODUCER_ID: Binding("InitProducerId", decode_init_producer_id, TransactionCoordinator.init_producer_id,
                                     encode_init_producer_id),
    ApiKey.ADD_PARTITIONS_TO_TXN: Binding("AddPartitionsToTxn", decode_add_partitions,
                                          TransactionCoordinator.add_partitions, encode_add_partitions),
    ApiKey.ADD_OFFSETS_TO_TXN: Binding("AddOffsetsToTxn", decode_add_offsets, TransactionCoordinator.add_offsets,
                                       encode_add_offsets),
    ApiKey.END_TXN: Binding("EndTxn", decode_end_txn, TransactionCoordinator.end_txn, encode_end_txn),
    ApiKey.DESCRIBE_TRANSACTIONS: Binding("DescribeTransactions", decode_describe_transactions,
                                          TransactionCoordinator.describe, encode_describe_transactions),
    ApiKey.LIST_TRANSACTIONS: Binding("ListTransactions", decode_list_transactions,
                                      TransactionCoordinator.list_transactions, encode_list_transactions),
}
