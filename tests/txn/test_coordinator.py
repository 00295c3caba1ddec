"""The transaction coordinator's rules, one by one (docs/transactions.md; Kafka's TransactionCoordinator)."""

from __future__ import annotations

from broker.txn import TransactionConfig
from broker.txn.markers import MarkerRequest, marker_requests_of, write_txn_markers_body
from broker.txn.state import MAX_EPOCH
from protocol.api_keys import ApiKey
from protocol.codec import decode_body, encode_body
from protocol.consumer_offsets import partition_for
from protocol.errors import ErrorCode
from protocol.messages.write_txn_markers import WriteTxnMarkersRequest
from tests.txn.harness import START, TxnHarness, same_state

E = ErrorCode


# ------------------------------------------------------------------ InitProducerId


def test_a_new_transactional_id_gets_a_producer_id_at_epoch_zero_then_bumps() -> None:
    h = TxnHarness()
    pid, epoch = h.producer("app")
    assert epoch == 0 and h.state("app") == "Empty"
    assert h.producer("app") == (pid, 1)
    assert h.producer("other")[0] != pid
    assert same_state(h.coord, h.replayed())


def test_init_is_refused_for_an_empty_id_and_an_excessive_timeout() -> None:
    h = TxnHarness(TransactionConfig(max_timeout_ms=10_000))
    assert h.init("")["error_code"] == E.INVALID_REQUEST
    assert h.init("app", timeout=10_001)["error_code"] == E.INVALID_TRANSACTION_TIMEOUT
    assert h.init("app", timeout=0)["error_code"] == E.INVALID_TRANSACTION_TIMEOUT
    assert h.init("app", timeout=10_000)["error_code"] == E.NONE


def test_kip360_a_producer_resumes_with_its_own_epoch_and_a_retry_gets_the_same_answer() -> None:
    h = TxnHarness()
    pid, epoch = h.producer("app")
    bumped = h.producer("app", producer=(pid, epoch))
    assert bumped == (pid, epoch + 1)
    assert h.producer("app", producer=(pid, epoch)) == bumped  # a retry whose answer was lost
    assert h.init("app", producer=(pid, epoch + 5))["error_code"] == E.PRODUCER_FENCED
    assert h.init("app", producer=(pid + 100, 0))["error_code"] == E.PRODUCER_FENCED
    assert h.init("app", producer=(pid + 100, 0), version=3)["error_code"] == E.INVALID_PRODUCER_EPOCH


def test_an_exhausted_epoch_rotates_the_producer_id() -> None:
    h = TxnHarness()
    pid, _ = h.producer("app")
    h.coord.transactions["app"].producer_epoch = MAX_EPOCH - 1
    new_pid, epoch = h.producer("app")
    assert new_pid != pid and epoch == 0


def test_a_second_producer_fences_the_first_and_aborts_its_transaction() -> None:
    h = TxnHarness()
    first = h.producer("app")
    assert h.add("app", first, {"t0": [0, 1]}) == {("t0", 0): E.NONE, ("t0", 1): E.NONE}
    assert h.init("app")["error_code"] == E.CONCURRENT_TRANSACTIONS
    assert h.state("app") == "PrepareAbort"
    (job,) = h.markers
    assert (job.commit, job.producer_epoch, job.partitions) == (False, first[1] + 1, (("t0", 0), ("t0", 1)))
    assert h.init("app")["error_code"] == E.CONCURRENT_TRANSACTIONS  # markers not written yet
    h.write_markers()
    second = h.producer("app")
    assert second == (first[0], first[1] + 2)
    assert h.add("app", first, {"t0": [2]}) == {("t0", 2): E.PRODUCER_FENCED}
    assert h.end_error(h.end("app", first, True)) == E.PRODUCER_FENCED
    assert h.end_error(h.end("app", first, True, version=1)) == E.INVALID_PRODUCER_EPOCH
    assert h.coord.fenced == 1 and h.coord.aborts == 1


# ------------------------------------------------------------------ AddPartitionsToTxn, AddOffsetsToTxn


def test_partitions_join_the_transaction_which_starts_with_the_first() -> None:
    h = TxnHarness()
    p = h.producer("app")
    h.now += 5
    h.add("app", p, {"t0": [0]})
    start = h.coord.transactions["app"].start_ms
    h.now += 5
    records = len(h.records)
    assert h.add("app", p, {"t0": [0]}) == {("t0", 0): E.NONE}
    assert len(h.records) == records  # already in: nothing written
    h.add("app", p, {"t1": [2]})
    assert h.coord.transactions["app"].start_ms == start == START + 5
    assert h.describe("app")[0]["topics"] == [{"topic": "t0", "partitions": [0]}, {"topic": "t1", "partitions": [2]}]


def test_unknown_partitions_fail_the_whole_add() -> None:
    h = TxnHarness()
    p = h.producer("app")
    assert h.add("app", p, {"t0": [0, 7], "nope": [0]}) == {
        ("t0", 0): E.OPERATION_NOT_ATTEMPTED, ("t0", 7): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert h.state("app") == "Empty"


def test_add_partitions_errors() -> None:
    h = TxnHarness()
    assert h.add("nobody", (1, 0), {"t0": [0]}) == {("t0", 0): E.INVALID_PRODUCER_ID_MAPPING}
    p = h.producer("app")
    assert h.add("app", (p[0] + 1, p[1]), {"t0": [0]}) == {("t0", 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert h.add("app", (p[0], p[1] + 1), {"t0": [0]}) == {("t0", 0): E.PRODUCER_FENCED}
    assert h.add("app", (p[0], p[1] + 1), {"t0": [0]}, version=1) == {("t0", 0): E.INVALID_PRODUCER_EPOCH}
    h.add("app", p, {"t0": [0]})
    h.end("app", p, True)
    assert h.add("app", p, {"t0": [1]}) == {("t0", 1): E.CONCURRENT_TRANSACTIONS}
    h.write_markers()
    assert h.add("app", p, {"t0": [1]}) == {("t0", 1): E.NONE}


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    h = TxnHarness()
    p = h.producer("app")
    assert h.add_offsets("app", p, "group-1") == E.NONE
    expected = ("__consumer_offsets", partition_for("group-1", 4))
    assert h.coord.transactions["app"].partitions == frozenset({expected})
    assert h.add_offsets("app", (p[0], p[1] + 1), "group-1", version=1) == E.INVALID_PRODUCER_EPOCH
    assert h.add_offsets("app", (p[0], p[1] + 1), "group-1", version=2) == E.PRODUCER_FENCED


# ------------------------------------------------------------------ EndTxn


def test_commit_writes_prepare_then_markers_then_complete_and_answers_last() -> None:
    h = TxnHarness()
    p = h.producer("app")
    h.add("app", p, {"t0": [0], "t1": [1]})
    h.add_offsets("app", p, "g")
    ticket = h.end("app", p, True)
    assert h.state("app") == "PrepareCommit"
    assert h.end_error(ticket) is None  # answered once complete
    (job,) = h.markers
    assert job.commit and job.ticket == ticket and len(job.partitions) == 3
    h.write_markers()
    assert h.end_error(ticket) == E.NONE
    assert h.state("app") == "CompleteCommit" and h.coord.transactions["app"].partitions == frozenset()
    assert h.end_error(h.end("app", p, True)) == E.NONE  # a retry of a finished commit
    assert h.end_error(h.end("app", p, False)) == E.INVALID_TXN_STATE
    assert h.coord.commits == 1


def test_end_txn_errors_by_state() -> None:
    h = TxnHarness()
    assert h.end_error(h.end("nobody", (1, 0), True)) == E.INVALID_PRODUCER_ID_MAPPING
    p = h.producer("app")
    assert h.end_error(h.end("app", p, True)) == E.INVALID_TXN_STATE  # Empty: nothing to end
    h.add("app", p, {"t0": [0]})
    h.end("app", p, False)
    assert h.end_error(h.end("app", p, False)) == E.CONCURRENT_TRANSACTIONS
    assert h.end_error(h.end("app", p, True)) == E.INVALID_TXN_STATE
    h.write_markers()
    assert h.end_error(h.end("app", p, False)) == E.NONE
    assert h.end_error(h.end("app", p, True)) == E.INVALID_TXN_STATE


def test_a_stale_marker_job_changes_nothing() -> None:
    h = TxnHarness()
    p = h.producer("app")
    h.add("app", p, {"t0": [0]})
    h.end("app", p, True)
    (job,) = h.markers
    h.write_markers()
    records = len(h.records)
    h.apply(h.coord.complete(h.now, job))  # written twice
    assert len(h.records) == records


# ------------------------------------------------------------------ timeouts and expiry


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() -> None:
    h = TxnHarness()
    p = h.producer("app", timeout=1_000)
    h.add("app", p, {"t0": [0]})
    h.advance(1_000)
    assert h.state("app") == "Ongoing"  # Kafka: start + timeout < now
    h.advance(1)
    assert h.state("app") == "PrepareAbort"
    (job,) = h.markers
    assert not job.commit and job.producer_epoch == p[1] + 1
    h.write_markers()
    assert h.state("app") == "CompleteAbort"
    assert h.end_error(h.end("app", p, True)) == E.PRODUCER_FENCED
    assert h.coord.timed_out == 1


def test_a_new_timeout_is_reported_once_as_next_deadline_would_report_it() -> None:
    """What the timer task compares after each request (``take_earliest_new``): only a
    transaction that starts schedules a timeout, and it is reported once."""
    h = TxnHarness()
    h.coord.take_earliest_new()
    p = h.producer("app", timeout=1_000)
    assert h.coord.take_earliest_new() is None, "no transaction open yet"
    h.add("app", p, {"t0": [0]})
    assert h.coord.take_earliest_new() == h.coord.next_deadline() is not None
    assert h.coord.take_earliest_new() is None, "taken: forgotten"
    h.add("app", p, {"t0": [1]})
    assert h.coord.take_earliest_new() is None, "an add does not restart the timeout"


def test_the_timeout_restarts_with_each_transaction_and_not_with_each_add() -> None:
    h = TxnHarness()
    p = h.producer("app", timeout=1_000)
    h.add("app", p, {"t0": [0]})
    h.advance(600)
    h.add("app", p, {"t0": [1]})
    h.advance(600)
    assert h.state("app") == "PrepareAbort"


def test_idle_transactional_ids_expire() -> None:
    h = TxnHarness(TransactionConfig(transactional_id_expiration_ms=10_000))
    h.producer("idle")
    p = h.producer("busy", timeout=900_000)
    h.add("busy", p, {"t0": [0]})
    h.now += 20_000
    h.apply(h.coord.expire_transactional_ids(h.now))
    assert set(h.coord.transactions) == {"busy"}
    assert h.records[-1][1] is None  # a tombstone
    assert h.describe("idle")[0]["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND
    assert same_state(h.coord, h.replayed())


# ------------------------------------------------------------------ verification, describe, list


def test_verify_asks_whether_a_partition_is_in_the_open_transaction() -> None:
    h = TxnHarness()
    p = h.producer("app")
    assert h.coord.verify("app", *p, ("t0", 0)) == E.TRANSACTION_ABORTABLE
    h.add("app", p, {"t0": [0]})
    assert h.coord.verify("app", *p, ("t0", 0)) == E.NONE
    assert h.coord.verify("app", *p, ("t0", 1)) == E.TRANSACTION_ABORTABLE
    assert h.coord.verify("app", p[0], p[1] - 1, ("t0", 0)) == E.PRODUCER_FENCED
    assert h.coord.verify("app", p[0] + 1, p[1], ("t0", 0)) == E.INVALID_PRODUCER_ID_MAPPING
    assert h.coord.verify("nobody", *p, ("t0", 0)) == E.INVALID_PRODUCER_ID_MAPPING
    h.end("app", p, True)
    assert h.coord.verify("app", *p, ("t0", 0)) == E.CONCURRENT_TRANSACTIONS


def test_describe_and_list() -> None:
    h = TxnHarness()
    a = h.producer("a")
    b = h.producer("b")
    h.add("a", a, {"t0": [0]})
    h.now += 5_000
    (described, missing) = h.describe("a", "missing")
    assert (described["transaction_state"], described["producer_id"], described["transaction_start_time_ms"]) == (
        "Ongoing", a[0], START)
    assert missing["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND
    everything = h.list()
    assert {t["transactional_id"]: t["transaction_state"] for t in everything["transaction_states"]} == {
        "a": "Ongoing", "b": "Empty"}
    assert [t["transactional_id"] for t in h.list(states=["Ongoing"])["transaction_states"]] == ["a"]
    assert h.list(states=["Ongoing", "Sleeping"])["unknown_state_filters"] == ["Sleeping"]
    assert [t["transactional_id"] for t in h.list(producers=[b[0]])["transaction_states"]] == ["b"]
    assert [t["transactional_id"] for t in h.list(states=["Ongoing"], duration=4_000)["transaction_states"]] == ["a"]
    assert h.list(states=["Ongoing"], duration=6_000)["transaction_states"] == []


# ------------------------------------------------------------------ load


def test_the_load_finishes_decided_transactions_and_restarts_timeouts() -> None:
    h = TxnHarness()
    a = h.producer("a")
    b = h.producer("b", timeout=1_000)
    h.add("a", a, {"t0": [0]})
    h.end("a", a, True)  # decided, markers never written: a crash now
    h.add("b", b, {"t1": [0]})
    fresh = h.replayed()
    assert same_state(h.coord, fresh)
    (job,) = fresh.loaded.markers  # type: ignore[attr-defined]
    assert (job.transactional_id, job.commit, job.ticket) == ("a", True, None)
    assert fresh.next_deadline() == START + 1_001


def test_write_txn_markers_body_round_trips_through_the_wire_schema() -> None:
    jobs = [MarkerRequest("a", 5, 2, True, 0, (("t0", 0), ("t0", 1), ("__consumer_offsets", 3)))]
    body = write_txn_markers_body(jobs)
    decoded = decode_body(WriteTxnMarkersRequest, 1, encode_body(WriteTxnMarkersRequest, 1, body))
    (back,) = marker_requests_of(decoded)
    assert (back.producer_id, back.producer_epoch, back.commit, sorted(back.partitions)) == (
        5, 2, True, sorted(jobs[0].partitions))
    assert ApiKey.WRITE_TXN_MARKERS == WriteTxnMarkersRequest.api_key
