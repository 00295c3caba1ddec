"""A fake-clock driver for the sans-IO transaction coordinator.

Requests go through the version adapter (``broker.txn.api``) after a round trip through
the request schema, and replies are checked to encode at the version asked, as the broker
would send them. The harness plays the shell's part in the marker protocol: it keeps the
marker jobs the coordinator hands out and ``write_markers`` completes them, so a test
reads as: state, request, what got written, reply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker.txn import TransactionConfig, TransactionCoordinator, TxnEffects
from broker.txn.api import BINDINGS
from broker.txn.markers import MarkerRequest
from broker.txn.records import TransactionRecord
from broker.txn.records import decode as decode_record
from broker.txn.records import encode as encode_record
from protocol.api_keys import ApiKey
from protocol.codec import decode_body, encode_body
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS, RESPONSES

E = ErrorCode
START = 1_000_000_000


class Topics:
    """Topics ``t0``..``t9`` with 3 partitions each, and ``__consumer_offsets``."""

    def partition_exists(self, topic: str, partition: int) -> bool:
        return (topic.startswith("t") and topic[1:].isdigit() and 0 <= partition < 3) or topic == "__consumer_offsets"


@dataclass
class TxnHarness:
    config: TransactionConfig = field(default_factory=lambda: TransactionConfig(offsets_partitions=4))
    now: int = START

    def __post_init__(self) -> None:
        self.coord = TransactionCoordinator(self.config, topics=Topics())
        self.records: list[tuple[bytes, bytes | None]] = []
        self.replies: dict[int, dict[str, Any]] = {}
        self.markers: list[MarkerRequest] = []
        self.written: list[MarkerRequest] = []  # marker jobs completed, in order
        self._sent: dict[int, tuple[int, int]] = {}
        self._ticket = 0

    def apply(self, fx: TxnEffects) -> TxnEffects:
        self.records.extend(encode_record(r) for r in fx.records)
        for ticket, result in fx.replies:
            api_key, version = self._sent[ticket]
            body = BINDINGS[api_key].encode(version, result)
            assert ticket not in self.replies, f"ticket {ticket} answered twice"
            message = RESPONSES[api_key]
            decode_body(message, version, encode_body(message, version, body))
            self.replies[ticket] = body
        self.markers.extend(fx.markers)
        return fx

    def request(self, api_key: int, version: int, fields: dict[str, Any]) -> int:
        message = REQUESTS[api_key]
        body = decode_body(message, version, encode_body(message, version, fields))
        binding = BINDINGS[api_key]
        self._ticket += 1
        self._sent[self._ticket] = (api_key, version)
        self.apply(binding.handle(self.coord, self._ticket, self.now, binding.decode(version, body)))
        return self._ticket

    def reply(self, ticket: int) -> dict[str, Any]:
        return self.replies[ticket]

    # ------------------------------------------------------------ requests

    def init(self, txn_id: str, *, timeout: int = 60_000, producer: tuple[int, int] | None = None,
             version: int = 4) -> dict[str, Any]:
        pid, epoch = producer if producer is not None else (-1, -1)
        return self.reply(self.request(ApiKey.INIT_PRODUCER_ID, version, {
            "transactional_id": txn_id, "transaction_timeout_ms": timeout, "producer_id": pid,
            "producer_epoch": epoch}))

    def producer(self, txn_id: str, **kw: Any) -> tuple[int, int]:
        reply = self.init(txn_id, **kw)
        assert reply["error_code"] == 0, reply
        return reply["producer_id"], reply["producer_epoch"]

    def add(self, txn_id: str, producer: tuple[int, int], partitions: dict[str, list[int]], *,
            version: int = 3) -> dict[tuple[str, int], ErrorCode]:
        reply = self.reply(self.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, {
            "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": producer[0],
            "v3_and_below_producer_epoch": producer[1],
            "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in partitions.items()]}))
        return {(t["name"], p["partition_index"]): ErrorCode(p["partition_error_code"])
                for t in reply["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}

    def add_offsets(self, txn_id: str, producer: tuple[int, int], group: str, *, version: int = 3) -> ErrorCode:
        reply = self.reply(self.request(ApiKey.ADD_OFFSETS_TO_TXN, version, {
            "transactional_id": txn_id, "producer_id": producer[0], "producer_epoch": producer[1],
            "group_id": group}))
        return ErrorCode(reply["error_code"])

    def end(self, txn_id: str, producer: tuple[int, int], commit: bool, *, version: int = 3) -> int:
        """EndTxn; returns its ticket (a decided transaction is answered once complete)."""
        return self.request(ApiKey.END_TXN, version, {
            "transactional_id": txn_id, "producer_id": producer[0], "producer_epoch": producer[1],
            "committed": commit})

    def end_error(self, ticket: int) -> ErrorCode | None:
        reply = self.replies.get(ticket)
        return None if reply is None else ErrorCode(reply["error_code"])

    def write_markers(self) -> list[MarkerRequest]:
        """Play the shell: every marker job is written and the transaction completed."""
        done = []
        while self.markers:
            job = self.markers.pop(0)
            self.written.append(job)
            done.append(job)
            self.apply(self.coord.complete(self.now, job))
        return done

    def describe(self, *txn_ids: str) -> list[dict[str, Any]]:
        reply = self.reply(self.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": list(txn_ids)}))
        return list(reply["transaction_states"])

    def list(self, states: list[str] | None = None, producers: list[int] | None = None,
             duration: int = -1) -> dict[str, Any]:
        return self.reply(self.request(ApiKey.LIST_TRANSACTIONS, 1, {
            "state_filters": states or [], "producer_id_filters": producers or [], "duration_filter": duration}))

    def state(self, txn_id: str) -> str:
        return self.coord.transactions[txn_id].state.wire_name

    # ------------------------------------------------------------ clock and replay

    def advance(self, ms: int) -> None:
        target = self.now + ms
        while True:
            deadline = self.coord.next_deadline()
            if deadline is None or deadline > target:
                break
            self.now = max(self.now, deadline)
            self.apply(self.coord.on_time(self.now))
        self.now = target

    def replayed(self) -> TransactionCoordinator:
        """A fresh coordinator that replayed every record written (its load's markers in ``.loaded``)."""
        fresh = TransactionCoordinator(self.config, topics=Topics())
        latest: dict[str, TransactionRecord] = {}
        for key, value in self.records:
            record = decode_record(key, value)
            assert record is not None
            fresh.replay(record)
            latest[record.transactional_id] = record
        fresh.loaded = fresh.finish_load(self.now)  # type: ignore[attr-defined]
        return fresh


def same_state(a: TransactionCoordinator, b: TransactionCoordinator) -> bool:
    return {k: v.persisted() for k, v in a.transactions.items()} == {
        k: v.persisted() for k, v in b.transactions.items()}
