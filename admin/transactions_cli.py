"""``kcoord transactions``: what transactional producers are doing, over the Kafka protocol.

Modelled on ``kafka-transactions.sh``: ``list`` asks every broker (ListTransactions, each
coordinator lists its own transactional ids), ``describe`` asks a transactional id's
coordinator (FindCoordinator with key type 1, then DescribeTransactions), and
``describe-producers`` asks a partition's leader (DescribeProducers, KIP-664) which
producers write to it and where their open transactions start. Works against kcoord and
Apache Kafka alike; exit codes as the other admin commands (docs/cli.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from admin.cli import EXIT_CODES, _command, _emit, _Formatter, connection_options
from admin.client import AdminClient
from admin.errors import EXIT_OK, BrokerError, UsageError
from admin.render import table
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

E = ErrorCode
KEY_TYPE_TRANSACTION = 1
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
          "PrepareEpochFence")


def _state(text: str) -> str:
    for state in STATES:
        if state.lower() == text.lower():
            return state
    raise argparse.ArgumentTypeError(f"unknown transaction state {text!r}; one of {', '.join(STATES)}")


def register(sub: Any) -> None:
    """Add ``transactions`` to the ``kcoord`` parser."""
    common = connection_options()
    parser = sub.add_parser("transactions", help="list and describe transactions and producers",
                            description="Transactional producers on any Kafka-compatible broker.")
    tsub = parser.add_subparsers(dest="transactions_command", required=True, metavar="COMMAND")

    p = tsub.add_parser("list", parents=[common], epilog=EXIT_CODES, formatter_class=_Formatter,
                        help="list transactional ids and their state",
                        description="Every transactional id of every broker, with its producer and state.")
    p.add_argument("--state", action="append", type=_state, default=[], dest="states", metavar="STATE",
                   help=f"only transactions in this state (repeatable): {', '.join(STATES[:6])}")
    p.add_argument("--producer-id", action="append", type=int, default=[], dest="producer_ids", metavar="ID",
                   help="only this producer id (repeatable)")
    p.add_argument("--duration-ms", type=int, default=-1, metavar="MS",
                   help="only transactions open longer than this (brokers with ListTransactions v1)")
    p.set_defaults(func=_command(transactions_list))

    p = tsub.add_parser("describe", parents=[common], epilog=EXIT_CODES, formatter_class=_Formatter,
                        help="a transactional id's producer, state and partitions",
                        description="A transactional id as its coordinator knows it.")
    p.add_argument("--transactional-id", required=True, metavar="ID")
    p.set_defaults(func=_command(transactions_describe))

    p = tsub.add_parser("describe-producers", parents=[common], epilog=EXIT_CODES, formatter_class=_Formatter,
                        help="the producers writing to a partition and their open transactions",
                        description="A partition's active producers, as its leader knows them.")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", required=True, type=int)
    p.set_defaults(func=_command(transactions_describe_producers))


# ---------------------------------------------------------------------- requests


def list_transactions(client: AdminClient, states: list[str], producer_ids: list[int],
                      duration_ms: int = -1) -> list[dict[str, Any]]:
    """ListTransactions on every broker, merged and sorted by transactional id."""
    found: list[dict[str, Any]] = []
    for node in client.metadata([]).brokers.values():
        conn = client.node(node)
        version = conn.version(ApiKey.LIST_TRANSACTIONS)
        if duration_ms >= 0 and version < 1:
            raise UsageError(f"broker {node.node_id} does not filter by duration (ListTransactions v1)")
        _, reply = conn.request(ApiKey.LIST_TRANSACTIONS, {"state_filters": states, "producer_id_filters": producer_ids,
                                                           "duration_filter": duration_ms}, version)
        if reply.error_code != E.NONE:
            raise BrokerError(f"ListTransactions on broker {node.node_id} failed", int(reply.error_code))
        found.extend({"transactional_id": s.transactional_id, "producer_id": int(s.producer_id),
                      "state": s.transaction_state, "coordinator": node.node_id} for s in reply.transaction_states)
    return sorted(found, key=lambda t: t["transactional_id"])


def describe_transaction(client: AdminClient, transactional_id: str) -> dict[str, Any]:
    """DescribeTransactions on the transactional id's coordinator."""
    conn = client.any_broker()
    version = conn.version(ApiKey.FIND_COORDINATOR)
    _, found = conn.request(ApiKey.FIND_COORDINATOR, {"key": transactional_id, "key_type": KEY_TYPE_TRANSACTION,
                                                      "coordinator_keys": [transactional_id]}, version)
    if version >= 4:
        (found,) = found.coordinators
    if found.error_code != E.NONE:
        raise BrokerError(f"FindCoordinator for transactional id {transactional_id!r} failed", int(found.error_code))
    brokers = client.metadata([]).brokers
    coordinator = brokers.get(int(found.node_id))
    if coordinator is None:
        raise BrokerError(f"the coordinator of {transactional_id!r} is not in the metadata",
                          int(E.COORDINATOR_NOT_AVAILABLE))
    _, reply = client.node(coordinator).request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]})
    (state,) = reply.transaction_states
    if state.error_code != E.NONE:
        raise BrokerError(f"DescribeTransactions for {transactional_id!r} failed", int(state.error_code))
    return {
        "transactional_id": state.transactional_id, "coordinator": int(found.node_id),
        "producer_id": int(state.producer_id), "producer_epoch": int(state.producer_epoch),
        "state": state.transaction_state, "timeout_ms": int(state.transaction_timeout_ms),
        "start_time_ms": int(state.transaction_start_time_ms),
        "partitions": [f"{t.topic}-{p}" for t in state.topics for p in t.partitions],
    }


def describe_producers(client: AdminClient, topic: str, partition: int) -> list[dict[str, Any]]:
    """DescribeProducers on the partition's leader."""
    _, reply = client.leader_of(topic, partition).request(ApiKey.DESCRIBE_PRODUCERS, {"topics": [
        {"name": topic, "partition_indexes": [partition]}]})
    (answer,) = [p for t in reply.topics for p in t.partitions]
    if answer.error_code != E.NONE:
        raise BrokerError(f"DescribeProducers for {topic}-{partition} failed", int(answer.error_code))
    return [{"producer_id": int(p.producer_id), "producer_epoch": int(p.producer_epoch),
             "last_sequence": int(p.last_sequence), "last_timestamp": int(p.last_timestamp),
             "coordinator_epoch": int(p.coordinator_epoch), "current_txn_start_offset": int(p.current_txn_start_offset)}
            for p in answer.active_producers]


# ---------------------------------------------------------------------- commands


def transactions_list(client: AdminClient, args: argparse.Namespace) -> int:
    listed = list_transactions(client, args.states, args.producer_ids, args.duration_ms)
    text = table(["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE", "COORDINATOR"],
                 [[t["transactional_id"], str(t["producer_id"]), t["state"], str(t["coordinator"])]
                  for t in listed]) if listed else "No transactions."
    _emit(args, {"transactions": listed}, text)
    return EXIT_OK


def transactions_describe(client: AdminClient, args: argparse.Namespace) -> int:
    described = describe_transaction(client, args.transactional_id)
    text = table(["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "EPOCH", "STATE", "TIMEOUT-MS", "START-MS",
                  "PARTITIONS"],
                 [[described["transactional_id"], str(described["coordinator"]), str(described["producer_id"]),
                   str(described["producer_epoch"]), described["state"], str(described["timeout_ms"]),
                   str(described["start_time_ms"]), ",".join(described["partitions"]) or "-"]])
    _emit(args, described, text)
    return EXIT_OK


def transactions_describe_producers(client: AdminClient, args: argparse.Namespace) -> int:
    producers = describe_producers(client, args.topic, args.partition)
    text = table(["PRODUCER-ID", "EPOCH", "LAST-SEQUENCE", "LAST-TIMESTAMP", "COORDINATOR-EPOCH",
                  "TXN-START-OFFSET"],
                 [[str(p["producer_id"]), str(p["producer_epoch"]), str(p["last_sequence"]), str(p["last_timestamp"]),
                   str(p["coordinator_epoch"]), str(p["current_txn_start_offset"])] for p in producers]
                 ) if producers else f"No active producers on {args.topic}-{args.partition}."
    _emit(args, {"topic": args.topic, "partition": args.partition, "producers": producers}, text)
    return EXIT_OK
