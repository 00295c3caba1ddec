"""Transactions with a real client (confluent-kafka) against the real broker process.

What a read_committed consumer, a read_uncommitted one and OffsetFetch see of committed,
aborted, fenced, timed-out and crash-interrupted transactions; the raw Fetch of a
read_committed consumer (stops at the last stable offset, lists the aborted transactions).
The rules are in docs/transactions.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import iter_batches
from tests.support.broker_process import BrokerProcess
from tests.support.clients import wait_until
from tests.support.eos import FAST_RECONNECT, create_topics
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

E = ErrorCode
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("txn") / "data",
                            {"group.initial.rebalance.delay.ms": 0}).start()
    yield process
    process.stop()


def _producer(bootstrap: str, transactional_id: str, **config: Any) -> Any:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 1,
                         "compression.type": "none", **FAST_RECONNECT, **config})
    producer.init_transactions(30)
    return producer


def _group_metadata(bootstrap: str, group: str) -> Any:
    """A consumer's group metadata (generation -1: a group with no members, as a standalone app commits)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


def _values(bootstrap: str, topic: str, partitions: int, isolation: str, expected: int,
            timeout: float = 20) -> list[bytes]:
    """Every value a consumer with ``isolation`` reads from the start (``expected`` of them, then a
    quiet half second, so more than expected shows up too)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                         "isolation.level": isolation, "enable.auto.commit": False, **FAST_RECONNECT})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet_until: float | None = None
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                values.append(message.value())
                quiet_until = None
            if len(values) >= expected:
                quiet_until = quiet_until or time.monotonic() + 0.5
                if time.monotonic() >= quiet_until:
                    break
    finally:
        consumer.close()
    return values


def _wire(broker: BrokerProcess) -> WireClient:
    return WireClient(broker.host, broker.port)


def _fetch(client: WireClient, topic: str, partition: int, offset: int, isolation: int) -> Any:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": isolation,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""}
    reply = client.request(ApiKey.FETCH, 11, body)
    return reply.responses[0].partitions[0]


def _data_values(records: bytes | None) -> list[bytes]:
    """The values of the data (not control) records in a Fetch answer."""
    return [r.value for _, batch in iter_batches(records or b"") if not batch.is_control for r in batch.records or ()]


def _offset_fetch(client: WireClient, group: str, topic: str, partitions: int, require_stable: bool) -> dict[int, tuple[int, int]]:
    """partition -> (committed offset, error) from OffsetFetch v7."""
    reply = client.request(ApiKey.OFFSET_FETCH, 7, {"group_id": group, "require_stable": require_stable, "topics": [
        {"name": topic, "partition_indexes": list(range(partitions))}]})
    return {p.partition_index: (p.committed_offset, p.error_code) for t in reply.topics for p in t.partitions}


def _describe(client: WireClient, transactional_id: str) -> Any:
    reply = client.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]})
    return reply.transaction_states[0]


def test_committed_records_reach_read_committed_consumers_and_aborted_ones_only_read_uncommitted(
        broker: BrokerProcess) -> None:
    from confluent_kafka import TopicPartition

    create_topics(broker.bootstrap, {"ab": 2})
    producer = _producer(broker.bootstrap, "abort-me")
    metadata = _group_metadata(broker.bootstrap, "ab-group")

    producer.begin_transaction()
    for i in range(4):
        producer.produce("ab", value=b"aborted-%d" % i, partition=i % 2)
    assert producer.flush(30) == 0  # in the log before the abort (abort_transaction drops what is unsent)
    producer.send_offsets_to_transaction([TopicPartition("ab", 0, 40)], metadata, 30)
    producer.abort_transaction(30)

    producer.begin_transaction()
    for i in range(4):
        producer.produce("ab", value=b"committed-%d" % i, partition=i % 2)
    producer.send_offsets_to_transaction([TopicPartition("ab", 1, 7)], metadata, 30)
    producer.commit_transaction(30)

    committed = _values(broker.bootstrap, "ab", 2, "read_committed", 4)
    assert sorted(committed) == [b"committed-%d" % i for i in range(4)]
    everything = _values(broker.bootstrap, "ab", 2, "read_uncommitted", 8)
    assert sorted(everything) == sorted([b"aborted-%d" % i for i in range(4)] + [b"committed-%d" % i for i in range(4)])
    with _wire(broker) as client:
        # The aborted transaction's offset never became visible; the committed one did.
        assert _offset_fetch(client, "ab-group", "ab", 2, require_stable=True) == {
            0: (-1, ErrorCode.NONE), 1: (7, ErrorCode.NONE)}


def test_read_committed_fetch_stops_at_the_last_stable_offset_and_lists_aborted_transactions(
        broker: BrokerProcess) -> None:
    create_topics(broker.bootstrap, {"lso": 1})
    aborter = _producer(broker.bootstrap, "lso-aborter")
    aborter.begin_transaction()
    aborter.produce("lso", value=b"a1", partition=0)
    aborter.produce("lso", value=b"a2", partition=0)
    assert aborter.flush(30) == 0
    aborter.abort_transaction(30)  # offsets 0-1, its ABORT marker at 2

    open_ = _producer(broker.bootstrap, "lso-open")
    open_.begin_transaction()
    open_.produce("lso", value=b"open", partition=0)
    assert open_.flush(30) == 0  # offset 3, its transaction open
    other = _producer(broker.bootstrap, "lso-other")
    other.begin_transaction()
    other.produce("lso", value=b"later", partition=0)
    assert other.flush(30) == 0
    other.commit_transaction(30)  # offset 4, its COMMIT marker at 5

    with _wire(broker) as client:
        committed = _fetch(client, "lso", 0, 0, READ_COMMITTED)
        assert (committed.high_watermark, committed.last_stable_offset) == (6, 3)
        assert _data_values(committed.records) == [b"a1", b"a2"]  # a consumer skips them as aborted
        assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [
            (_describe(client, "lso-aborter").producer_id, 0)]
        assert _data_values(_fetch(client, "lso", 0, 3, READ_COMMITTED).records) == []
        uncommitted = _fetch(client, "lso", 0, 0, READ_UNCOMMITTED)
        assert _data_values(uncommitted.records) == [b"a1", b"a2", b"open", b"later"]

        open_.commit_transaction(30)
        after = _fetch(client, "lso", 0, 3, READ_COMMITTED)
        assert after.last_stable_offset == after.high_watermark == 7
        assert _data_values(after.records) == [b"open", b"later"]
    assert sorted(_values(broker.bootstrap, "lso", 1, "read_committed", 2)) == [b"later", b"open"]


def test_a_new_producer_with_the_same_transactional_id_fences_the_old_one_and_aborts_its_transaction(
        broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaException

    create_topics(broker.bootstrap, {"fence": 1})
    old = _producer(broker.bootstrap, "fenced")
    old.begin_transaction()
    old.produce("fence", value=b"from-the-old-producer", partition=0)
    assert old.flush(30) == 0

    new = _producer(broker.bootstrap, "fenced")  # its init_transactions aborts the old transaction
    new.begin_transaction()
    new.produce("fence", value=b"from-the-new-producer", partition=0)
    new.commit_transaction(30)

    with pytest.raises(KafkaException) as failure:
        old.produce("fence", value=b"too-late", partition=0)
        old.commit_transaction(30)
    error = failure.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert _values(broker.bootstrap, "fence", 1, "read_committed", 1) == [b"from-the-new-producer"]
    assert sorted(_values(broker.bootstrap, "fence", 1, "read_uncommitted", 2)) == [
        b"from-the-new-producer", b"from-the-old-producer"]


def test_a_transaction_left_open_past_its_timeout_is_aborted_by_the_broker(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaException

    create_topics(broker.bootstrap, {"slow": 1})
    producer = _producer(broker.bootstrap, "slow", **{"transaction.timeout.ms": 2000, "message.timeout.ms": 2000})
    producer.begin_transaction()
    producer.produce("slow", value=b"never-committed", partition=0)
    assert producer.flush(30) == 0
    with _wire(broker) as client:
        wait_until(lambda: _describe(client, "slow").transaction_state == "CompleteAbort", 30,
                   "the broker to abort the timed-out transaction")
        stable = _fetch(client, "slow", 0, 0, READ_COMMITTED)
        assert stable.last_stable_offset == stable.high_watermark == 2  # the record and its ABORT marker
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)
    assert _values(broker.bootstrap, "slow", 1, "read_committed", 0, timeout=3) == []


def test_offset_fetch_with_require_stable_answers_unstable_offset_commit_while_offsets_are_pending(
        broker: BrokerProcess) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    create_topics(broker.bootstrap, {"pending": 3})
    producer = _producer(broker.bootstrap, "pending")
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition("pending", 0, 5), TopicPartition("pending", 2, 9)],
                                         _group_metadata(broker.bootstrap, "pending-group"), 30)
    with _wire(broker) as client:
        unstable = int(ErrorCode.UNSTABLE_OFFSET_COMMIT)
        assert _offset_fetch(client, "pending-group", "pending", 3, require_stable=True) == {
            0: (-1, unstable), 1: (-1, ErrorCode.NONE), 2: (-1, unstable)}
        assert _offset_fetch(client, "pending-group", "pending", 3, require_stable=False) == {
            p: (-1, ErrorCode.NONE) for p in range(3)}

        # confluent-kafka's committed() (require_stable) waits until the transaction ends.
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "pending-group"})
        try:
            with pytest.raises(KafkaException):
                consumer.committed([TopicPartition("pending", 0)], timeout=1.5)
            producer.commit_transaction(30)
            committed = consumer.committed([TopicPartition("pending", p) for p in range(3)], timeout=30)
        finally:
            consumer.close()
        assert [tp.offset for tp in committed] == [5, -1001, 9]
        assert _offset_fetch(client, "pending-group", "pending", 3, require_stable=True) == {
            0: (5, ErrorCode.NONE), 1: (-1, ErrorCode.NONE), 2: (9, ErrorCode.NONE)}


def test_transactions_survive_kill_9_committed_stay_committed_and_the_open_one_is_aborted(tmp_path: Path) -> None:
    from confluent_kafka import TopicPartition

    broker = BrokerProcess(tmp_path / "data", {"group.initial.rebalance.delay.ms": 0}).start()
    try:
        create_topics(broker.bootstrap, {"crash": 2})
        metadata = _group_metadata(broker.bootstrap, "crash-group")
        producer = _producer(broker.bootstrap, "crash")
        producer.begin_transaction()
        producer.produce("crash", value=b"committed", partition=0)
        producer.send_offsets_to_transaction([TopicPartition("crash", 0, 3)], metadata, 30)
        producer.commit_transaction(30)
        producer.begin_transaction()
        producer.produce("crash", value=b"open", partition=1)
        producer.send_offsets_to_transaction([TopicPartition("crash", 1, 4)], metadata, 30)
        assert producer.flush(30) == 0
        with _wire(broker) as client:
            first = _describe(client, "crash")
            assert first.transaction_state == "Ongoing"

        broker.kill()
        broker.restart()

        with _wire(broker) as client:
            again = _describe(client, "crash")
            assert (again.transaction_state, again.producer_id, again.producer_epoch) == (
                "Ongoing", first.producer_id, first.producer_epoch)
            assert _offset_fetch(client, "crash-group", "crash", 2, require_stable=True) == {
                0: (3, ErrorCode.NONE), 1: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)}
            assert _fetch(client, "crash", 1, 0, READ_COMMITTED).last_stable_offset == 0
        assert _values(broker.bootstrap, "crash", 2, "read_committed", 1) == [b"committed"]

        # The application's next instance fences the crashed one: its transaction is aborted.
        _producer(broker.bootstrap, "crash")
        with _wire(broker) as client:
            wait_until(lambda: _describe(client, "crash").transaction_state in ("Empty", "CompleteAbort"), 30,
                       "the interrupted transaction to be aborted")
            assert _describe(client, "crash").producer_epoch > first.producer_epoch
            assert _offset_fetch(client, "crash-group", "crash", 2, require_stable=True) == {
                0: (3, ErrorCode.NONE), 1: (-1, ErrorCode.NONE)}
            after = _fetch(client, "crash", 1, 0, READ_COMMITTED)
            assert after.last_stable_offset == after.high_watermark == 2
        assert _values(broker.bootstrap, "crash", 2, "read_committed", 1) == [b"committed"]
        assert sorted(_values(broker.bootstrap, "crash", 2, "read_uncommitted", 2)) == [b"committed", b"open"]
    finally:
        broker.stop()


def test_kcoord_transactions_lists_and_describes_transactions_and_producers(
        broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    from kcoord.cli import main

    def kcoord_json(*args: str) -> Any:
        assert main([*args, "--bootstrap-server", broker.bootstrap, "--output", "json"]) == 0
        return json.loads(capsys.readouterr().out)

    create_topics(broker.bootstrap, {"tool": 1})
    producer = _producer(broker.bootstrap, "tool-txn")
    producer.begin_transaction()
    producer.produce("tool", value=b"x", partition=0)
    assert producer.flush(30) == 0

    listed = kcoord_json("transactions", "list", "--state", "ongoing")["transactions"]
    assert [(t["transactional_id"], t["state"]) for t in listed] == [("tool-txn", "Ongoing")]
    described = kcoord_json("transactions", "describe", "--transactional-id", "tool-txn")
    assert (described["state"], described["partitions"]) == ("Ongoing", ["tool-0"])
    producers = kcoord_json("transactions", "describe-producers", "--topic", "tool", "--partition", "0")["producers"]
    assert [(p["producer_id"], p["current_txn_start_offset"]) for p in producers] == [(described["producer_id"], 0)]

    producer.commit_transaction(30)
    assert kcoord_json("transactions", "describe", "--transactional-id", "tool-txn")["state"] == "CompleteCommit"
    assert kcoord_json("transactions", "list", "--state", "Ongoing")["transactions"] == []
    producers = kcoord_json("transactions", "describe-producers", "--topic", "tool", "--partition", "0")["producers"]
    assert [p["current_txn_start_offset"] for p in producers] == [-1]
    assert main(["transactions", "describe", "--transactional-id", "nobody-knows-me",
                 "--bootstrap-server", broker.bootstrap]) == 1
    assert "TRANSACTIONAL_ID_NOT_FOUND" in capsys.readouterr().err


def test_raw_protocol_error_paths_of_the_transaction_apis(broker: BrokerProcess) -> None:
    """What a client that gets a step wrong hears, request by request (Kafka's codes)."""
    from protocol.records import build_records, encode_batch

    create_topics(broker.bootstrap, {"raw": 1})
    with _wire(broker) as client:
        def init(producer_id: int = -1, epoch: int = -1) -> Any:
            return client.request(ApiKey.INIT_PRODUCER_ID, 4, {
                "transactional_id": "raw", "transaction_timeout_ms": 60000, "producer_id": producer_id,
                "producer_epoch": epoch})

        def add(producer_id: int, epoch: int) -> int:
            reply = client.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
                "v3_and_below_transactional_id": "raw", "v3_and_below_producer_id": producer_id,
                "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": "raw", "partitions": [0]}]})
            return int(reply.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)

        def end(producer_id: int, epoch: int, commit: bool) -> int:
            return int(client.request(ApiKey.END_TXN, 3, {"transactional_id": "raw", "producer_id": producer_id,
                                                          "producer_epoch": epoch, "committed": commit}).error_code)

        def produce(producer_id: int, epoch: int, sequence: int) -> int:
            batch = encode_batch(build_records([(None, b"raw")]), base_timestamp=0, producer_id=producer_id,
                                 producer_epoch=epoch, base_sequence=sequence, attributes=0x10)
            reply = client.request(ApiKey.PRODUCE, 9, {"transactional_id": "raw", "acks": -1, "timeout_ms": 5000,
                                                       "topic_data": [{"name": "raw", "partition_data": [
                                                           {"index": 0, "records": batch}]}]})
            return int(reply.responses[0].partition_responses[0].error_code)

        first = init()
        pid, epoch = first.producer_id, first.producer_epoch
        assert end(pid, epoch, True) == E.INVALID_TXN_STATE  # no transaction to end
        assert produce(pid, epoch, 0) == E.INVALID_TXN_STATE  # the partition is not in a transaction
        assert add(pid + 1000, epoch) == E.INVALID_PRODUCER_ID_MAPPING
        assert add(pid, epoch) == E.NONE
        assert produce(pid, epoch, 0) == E.NONE

        second = init(pid, epoch)  # the same producer, again: fences its own open transaction
        assert second.error_code == E.CONCURRENT_TRANSACTIONS
        wait_until(lambda: _describe(client, "raw").transaction_state == "CompleteAbort", 30,
                   "the fenced transaction to be aborted")
        # The fence bumped the epoch: the old one is refused everywhere, even by InitProducerId.
        assert init(pid, epoch).error_code == E.PRODUCER_FENCED
        assert add(pid, epoch) == E.PRODUCER_FENCED
        assert end(pid, epoch, False) == E.PRODUCER_FENCED
        assert produce(pid, epoch, 1) == E.INVALID_PRODUCER_EPOCH
        assert init(pid + 1000, 0).error_code == E.PRODUCER_FENCED  # neither the current nor the previous id
        third = init()  # a new instance
        assert (third.error_code, third.producer_id) == (E.NONE, pid) and third.producer_epoch > epoch + 1

        assert client.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["nobody-knows"]}
                              ).transaction_states[0].error_code == E.TRANSACTIONAL_ID_NOT_FOUND
        timeout = client.request(ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": "raw-long", "transaction_timeout_ms": 10**9, "producer_id": -1, "producer_epoch": -1})
        assert timeout.error_code == E.INVALID_TRANSACTION_TIMEOUT
