"""Transactions in storage: producer state, the last stable offset, aborted transactions and
their index across restarts, markers in the coordinator log, and the cleaner's rules."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import ErrorCode
from protocol.records import (
    EndTransactionMarker,
    build_records,
    encode_batch,
    encode_marker_batch,
    peek_batch_header,
)
from storage.coordinator_log import CoordinatorLog
from storage.layout import aborted_index_file, producer_state_file
from storage.partition import PartitionLog
from storage.producer_state import AbortedTxn, PartitionProducerState, ProducerState

E = ErrorCode
COMMIT = EndTransactionMarker(True, 0)
ABORT = EndTransactionMarker(False, 0)


def txn_batch(pid: int, epoch: int, seq: int, values: list[bytes], *, transactional: bool = True,
              ts: int = 1000) -> bytes:
    records = build_records([(b"k" + v, v) for v in values])
    return encode_batch(records, base_timestamp=ts, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        attributes=0x10 if transactional else 0)


class Partition:
    """A partition log and its producer state, appended to the way the data service does."""

    def __init__(self, directory: Path, segment_bytes: int = 1 << 20) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.log = PartitionLog.open(directory, segment_bytes)
        self.producers = PartitionProducerState.open(self.log)

    def produce(self, raw: bytes) -> tuple[ErrorCode, int]:
        header = peek_batch_header(raw)
        error, duplicate = (E.NONE, None) if header.producer_id < 0 else self.producers.check_batch(header.producer_id, header.producer_epoch,
                                                      header.base_sequence, header.last_offset_delta + 1,
                                                      header.is_transactional)
        if error is not E.NONE:
            return error, -1
        if duplicate is not None:
            return E.NONE, duplicate
        base, _ = self.log.append_batch(raw)
        self.producers.on_batch(header, base)
        return E.NONE, base

    def mark(self, pid: int, epoch: int, marker: EndTransactionMarker) -> int:
        assert self.producers.check_marker(pid, epoch, marker.coordinator_epoch) is E.NONE
        base, _ = self.log.append_batch(encode_marker_batch(pid, epoch, marker, 2000))
        self.producers.on_marker(pid, epoch, marker, base, 2000)
        return base

    def reopen(self, *, flush: bool = True) -> Partition:
        if flush:
            self.log.flush()
        self.producers.close()
        self.log.close()
        return Partition(self.directory, self.segment_bytes)

    @property
    def lso(self) -> int:
        return self.producers.last_stable_offset(self.log.next_offset)


def test_the_last_stable_offset_stops_at_the_oldest_open_transaction(tmp_path: Path) -> None:
    p = Partition(tmp_path / "t-0")
    p.produce(txn_batch(-1, -1, -1, [b"plain"], transactional=False))
    assert p.lso == 1
    _, first = p.produce(txn_batch(7, 0, 0, [b"a", b"b"]))
    p.produce(txn_batch(8, 0, 0, [b"c"]))
    assert first == 1 and p.lso == 1
    p.mark(7, 0, COMMIT)
    assert p.lso == 3  # producer 8's transaction is still open
    p.mark(8, 0, ABORT)
    assert p.lso == p.log.next_offset
    assert p.producers.aborted_between(0, 100) == [AbortedTxn(8, 3, 5, 6)]


def test_aborted_transactions_are_found_by_the_range_they_cover(tmp_path: Path) -> None:
    p = Partition(tmp_path / "t-0")
    p.produce(txn_batch(1, 0, 0, [b"x"]))        # 0
    p.mark(1, 0, ABORT)                          # 1
    p.produce(txn_batch(1, 0, 1, [b"y", b"z"]))  # 2-3
    p.mark(1, 0, COMMIT)                         # 4
    p.produce(txn_batch(2, 0, 0, [b"w"]))        # 5
    p.mark(2, 0, ABORT)                          # 6
    assert [a.producer_id for a in p.producers.aborted_between(0, 7)] == [1, 2]
    assert [a.producer_id for a in p.producers.aborted_between(2, 5)] == []
    assert [a.producer_id for a in p.producers.aborted_between(1, 2)] == [1]  # its marker is in range
    assert [a.producer_id for a in p.producers.aborted_between(5, 6)] == [2]


def test_sequences_epochs_and_plain_writes_inside_a_transaction(tmp_path: Path) -> None:
    p = Partition(tmp_path / "t-0")
    assert p.produce(txn_batch(3, 1, 0, [b"a"])) == (E.NONE, 0)
    assert p.produce(txn_batch(3, 1, 0, [b"a"])) == (E.NONE, 0)  # a retry: the original offset
    assert p.produce(txn_batch(3, 1, 5, [b"b"]))[0] is E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.produce(txn_batch(3, 0, 1, [b"b"]))[0] is E.INVALID_PRODUCER_EPOCH
    assert p.produce(txn_batch(3, 1, 1, [b"b"], transactional=False))[0] is E.INVALID_TXN_STATE
    p.mark(3, 2, ABORT)  # the coordinator fenced epoch 1
    assert p.produce(txn_batch(3, 1, 1, [b"b"]))[0] is E.INVALID_PRODUCER_EPOCH
    assert p.producers.check_marker(3, 1, 0) is E.INVALID_PRODUCER_EPOCH
    assert p.produce(txn_batch(3, 3, 0, [b"c"]))[0] is E.NONE


def test_state_and_index_survive_a_restart_with_and_without_a_checkpoint(tmp_path: Path) -> None:
    p = Partition(tmp_path / "t-0")
    p.produce(txn_batch(1, 0, 0, [b"a"]))
    p.mark(1, 0, ABORT)
    p.produce(txn_batch(2, 0, 0, [b"b"]))  # left open
    assert p.producers.checkpoint() == 3
    p.produce(txn_batch(3, 0, 0, [b"c"]))
    p.mark(3, 0, ABORT)                    # after the checkpoint: rebuilt from the log
    before = (p.lso, p.producers.aborted_between(0, 10))
    p = p.reopen()
    assert (p.lso, p.producers.aborted_between(0, 10)) == before == (2, [AbortedTxn(1, 0, 1, 2),
                                                                          AbortedTxn(3, 3, 4, 2)])
    assert p.produce(txn_batch(2, 0, 0, [b"b"])) == (E.NONE, 2)  # the open transaction's retry
    # No checkpoint at all: the whole log is replayed, the index rebuilt.
    producer_state_file(p.directory).unlink()
    p = p.reopen()
    assert p.producers.aborted_between(0, 10) == before[1]
    assert aborted_index_file(p.directory).stat().st_size == 2 * 34


def test_an_index_entry_past_a_torn_tail_is_cut(tmp_path: Path) -> None:
    p = Partition(tmp_path / "t-0")
    p.produce(txn_batch(1, 0, 0, [b"a"]))
    p.producers.checkpoint()
    p.mark(1, 0, ABORT)  # index entry written, marker to be torn off
    p.log.flush()
    segment = p.log.segments[-1]
    size = segment.stat().st_size
    p.producers.close()
    p.log.close()
    with segment.open("r+b") as f:
        f.truncate(size - 3)
    p = Partition(tmp_path / "t-0")
    assert p.log.next_offset == 1
    assert p.producers.aborted_between(0, 10) == []
    assert p.lso == 0  # the transaction is open again: its marker never made it
    assert aborted_index_file(p.directory).stat().st_size == 0


def test_a_checkpoint_past_the_log_end_is_not_trusted(tmp_path: Path) -> None:
    p = Partition(tmp_path / "t-0")
    p.produce(txn_batch(1, 0, 0, [b"a", b"b"]))
    p.producers.checkpoint()
    path = producer_state_file(p.directory)
    path.write_bytes(path.read_bytes().replace(b'"offset":2', b'"offset":9'))
    p = p.reopen()
    assert p.lso == 0 and p.producers.state.end_offset == 2


def test_expired_producers_without_open_transactions_are_forgotten() -> None:
    state = ProducerState()
    state.apply_batch(1, 0, 0, 1, 0, 1_000, False)
    state.apply_batch(2, 0, 0, 1, 1, 1_000, True)
    assert state.expire(now_ms=10_000, expiration_ms=5_000) == [1]
    assert set(state.producers) == {2}


def test_read_raw_stops_below_an_offset(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", 1 << 20)
    for i in range(4):
        log.append([(b"k", b"v%d" % i)] * 2, 1000)  # batches at 0, 2, 4, 6
    data = log.read_raw(0, 1 << 20, upto=4)
    assert len(data) == 2 * len(log.read_raw(0, 1))
    assert log.read_raw(4, 1 << 20, upto=4) == b""
    assert log.read_raw(2, 1 << 20, upto=3) == log.read_raw(2, 1)


# ------------------------------------------------------------------ the coordinator log


class Collected:
    def __init__(self) -> None:
        self.events: list[tuple[str, object, object]] = []

    def record(self, key: bytes, value: bytes | None, producer_id: int) -> None:
        self.events.append(("record", key, producer_id))

    def marker(self, partition: int, producer_id: int, marker: EndTransactionMarker) -> None:
        self.events.append(("marker", partition, (producer_id, marker.commit)))


def test_coordinator_log_replays_transactional_records_and_markers_in_order(tmp_path: Path) -> None:
    clog = CoordinatorLog(tmp_path, 1, 1 << 20)
    clog.append("g", [(b"plain", b"1")], 10)
    clog.append("g", [(b"pending", b"2")], 11, producer_id=5, producer_epoch=0)
    clog.append_marker(0, 5, 0, COMMIT, 12)
    clog.sync()
    clog.close()
    clog = CoordinatorLog(tmp_path, 1, 1 << 20)
    sink = Collected()
    plain = [(k, v) for k, v, _ in clog.replay(transactions=sink)]
    assert plain == [(b"plain", b"1")]
    assert sink.events == [("record", b"pending", 5), ("marker", 0, (5, True))]
    # Without a sink, markers are skipped and transactional records read like the others.
    assert [k for k, _, _ in clog.replay()] == [b"plain", b"pending"]
    clog.close()


def test_the_transaction_log_is_a_coordinator_log_of_its_own(tmp_path: Path) -> None:
    clog = CoordinatorLog(tmp_path, 3, 1 << 20, topic="__transaction_state")
    clog.append("app", [(b"k", b"v")], 1)
    clog.sync()
    clog.close()
    assert (tmp_path / "__transaction_state.meta.json").exists()
    assert any(p.name.startswith("__transaction_state-") for p in tmp_path.iterdir())
    assert not (tmp_path / "__consumer_offsets.meta.json").exists()


# ------------------------------------------------------------------ the cleaner


def _compact_view(p: Partition) -> dict[bytes, bytes | None]:
    """key -> value as a read_committed reader sees the log: records in offset order, those of
    aborted or still open transactions skipped (a transaction's fate is known by its marker)."""
    from protocol.records import marker_of

    batches = [b for _, b in p.log.read_batches()]
    fate: dict[tuple[int, int], bool] = {}  # (producer, batch base) -> committed
    waiting: dict[int, list[int]] = {}
    for batch in batches:
        if batch.is_control:
            marker = marker_of(batch)
            for base in waiting.pop(batch.producer_id, []):
                fate[(batch.producer_id, base)] = marker is not None and marker.commit
        elif batch.is_transactional:
            waiting.setdefault(batch.producer_id, []).append(batch.base_offset)
    seen: dict[bytes, bytes | None] = {}
    for batch in batches:
        if batch.is_control or (batch.is_transactional and not fate.get((batch.producer_id, batch.base_offset))):
            continue
        seen.update((r.key, r.value) for r in batch.records or [] if r.key is not None)
    return seen


def test_the_cleaner_drops_aborted_records_and_keeps_what_committed(tmp_path: Path) -> None:
    p = Partition(tmp_path / "t-0", segment_bytes=300)
    p.produce(txn_batch(-1, -1, -1, [b"1"], transactional=False))      # k1 = 1 (plain)
    p.produce(txn_batch(9, 0, 0, [b"1"]))                              # k1 again, aborted below
    p.mark(9, 0, ABORT)
    p.produce(txn_batch(8, 0, 0, [b"2"]))                              # k2, committed
    p.mark(8, 0, COMMIT)
    for i in range(6):
        p.produce(txn_batch(-1, -1, -1, [b"x%d" % i], transactional=False))
    before = _compact_view(p)
    result = p.log.compact(now_ms=10_000, delete_retention_ms=1_000_000)
    assert result.records_after < result.records_before
    assert _compact_view(p) == before
    survivors = [(b.producer_id, r.key) for _, b in p.log.read_batches() if not b.is_control
                 for r in (b.records or [])]
    assert (9, b"k1") not in survivors and (-1, b"k1") in survivors and (8, b"k2") in survivors


def test_the_cleaner_leaves_everything_from_an_open_transaction_on(tmp_path: Path) -> None:
    p = Partition(tmp_path / "t-0", segment_bytes=300)
    p.produce(txn_batch(-1, -1, -1, [b"a"], transactional=False))
    p.produce(txn_batch(-1, -1, -1, [b"a"], transactional=False))  # supersedes the first
    segments_before = len(p.log.segments)
    p.produce(txn_batch(4, 0, 0, [b"a"]))  # open: may still abort
    for i in range(8):
        p.produce(txn_batch(-1, -1, -1, [b"f%d" % i], transactional=False))
    assert len(p.log.segments) > segments_before
    result = p.log.compact(now_ms=10_000, delete_retention_ms=1_000_000)
    assert result.cleaned_up_to <= 2
    offsets = [o for _, b in p.log.read_batches() for o in range(b.base_offset, b.next_offset)
               if not b.is_control]
    assert 2 in offsets  # the open transaction's record is untouched
    p.mark(4, 0, ABORT)
    assert _compact_view(p)[b"ka"] == b"a"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["plain", "txn", "commit", "abort"]), st.integers(0, 2),
                          st.integers(0, 3)), min_size=1, max_size=40))
def test_compaction_never_changes_what_read_committed_sees(tmp_path_factory: object, steps: list[
        tuple[str, int, int]]) -> None:
    directory = tmp_path_factory.mktemp("c") / "t-0"  # type: ignore[attr-defined]
    p = Partition(directory, segment_bytes=250)
    seqs: dict[int, int] = {}
    open_: set[int] = set()
    for kind, pid, key in steps:
        value = b"%d" % key
        if kind == "plain":
            p.produce(txn_batch(-1, -1, -1, [value], transactional=False))
        elif kind == "txn":
            assert p.produce(txn_batch(pid, 0, seqs.get(pid, 0), [value]))[0] is E.NONE
            seqs[pid] = seqs.get(pid, 0) + 1
            open_.add(pid)
        elif pid in open_:
            p.mark(pid, 0, EndTransactionMarker(kind == "commit", 0))
            open_.discard(pid)
    for pid in sorted(open_):
        p.mark(pid, 0, COMMIT)
    p.produce(txn_batch(-1, -1, -1, [b"end"], transactional=False))
    before = _compact_view(p)
    p.log.compact(now_ms=10_000, delete_retention_ms=1_000_000)
    assert _compact_view(p) == before
    p = p.reopen()
    assert _compact_view(p) == before
    assert p.lso == p.log.next_offset
