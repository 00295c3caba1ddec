"""PartitionLog: appends, segment rolls, reads and reopening (no damage involved)."""

from __future__ import annotations

import itertools
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.records import (
    RECORD_VARINTS,
    EncodedRecords,
    RecordBatchError,
    build_records,
    decode_batch,
    encode_batch,
    iter_batches,
    peek_batch_header,
)
from storage.layout import parse_segment_name, segment_name
from storage.partition import OffsetOutOfRangeError, PartitionLog
from tests.storage.util import all_records, check_contents, fill, payload


def test_segment_names_are_kafkas() -> None:
    assert segment_name(0) == "00000000000000000000.log"
    assert segment_name(1234) == "00000000000000001234.log"
    assert parse_segment_name("00000000000000001234.log") == 1234
    assert parse_segment_name("00000000000000001234.index") is None
    assert parse_segment_name("1234.log") is None


def test_new_log_is_empty(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p0", 1024)
    assert (log.log_start_offset, log.next_offset, log.size_bytes) == (0, 0, 0)
    assert [p.name for p in log.segments] == [segment_name(0)]
    assert list(log.read_batches()) == []
    assert log.read_raw(0, 100) == b""
    assert log.recovery.batches == 0 and log.recovery.truncated_bytes == 0
    log.close()


def test_round_trip_across_rolls_and_reopen(tmp_path: Path) -> None:
    directory = tmp_path / "p0"
    log = PartitionLog.open(directory, 400)
    spans = fill(log, [1, 3, 2, 5, 1, 4, 2, 2, 3, 1, 6, 1] * 2)
    log.flush()
    # Offsets are contiguous, batch by batch.
    assert spans[0][0] == 0
    assert all(prev[1] == cur[0] for prev, cur in itertools.pairwise(spans))
    assert log.next_offset == spans[-1][1] == 62
    assert log.log_start_offset == 0
    assert len(log.segments) > 3, "small segment_bytes must have rolled several times"
    # Segment names are the base offset of their first batch; no segment overflows.
    for path in log.segments:
        first = peek_batch_header(path.read_bytes())
        assert first.base_offset == parse_segment_name(path.name)
        assert path.stat().st_size <= 400
    assert log.size_bytes == sum(p.stat().st_size for p in log.segments)
    check_contents(log)
    timestamps = [batch.base_timestamp for _, batch in log.read_batches()]
    assert timestamps == [1000 + base for base, _ in spans]
    log.close()

    again = PartitionLog.open(directory, 400)
    assert again.recovery.batches == len(spans)
    assert again.recovery.segments == len(again.segments)
    assert again.recovery.truncated_bytes == 0
    assert again.next_offset == 62
    check_contents(again)
    assert fill(again, [2]) == [(62, 64)]
    again.close()
    third = PartitionLog.open(directory, 400)
    check_contents(third)
    assert third.next_offset == 64
    third.close()


def test_one_append_is_one_batch(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, 1 << 20)
    assert log.append([(b"a", b"1"), (b"b", None), (None, b"3")], 77) == (0, 3)
    batches = list(log.read_batches())
    assert len(batches) == 1
    offset, batch = batches[0]
    assert offset == 0 and batch.records_count == 3 and batch.base_timestamp == 77
    assert all_records(log) == [(0, b"a", b"1"), (1, b"b", None), (2, None, b"3")]
    with pytest.raises(ValueError):
        log.append([], 0)
    log.close()


def _encoded(pairs: list[tuple[bytes, bytes]]) -> EncodedRecords:
    """``pairs`` as a records section encoded ahead (attributes, timestamp delta, offset delta,
    key, value, no headers), as the coordinator writes its plain offsets."""
    parts: list[bytes | bytearray] = [b""]
    for i, (key, value) in enumerate(pairs):
        record = b"\x00\x00" + RECORD_VARINTS[i] + RECORD_VARINTS[len(key)] + key + RECORD_VARINTS[len(value)] + value + b"\x00"
        parts += (RECORD_VARINTS[len(record)], record)
    return EncodedRecords(parts, len(pairs))


def test_records_encoded_ahead_are_appended_as_the_pairs_would_be(tmp_path: Path) -> None:
    pairs = [(b"key%d" % i, b"value" * i) for i in range(70)]
    log = PartitionLog.open(tmp_path / "encoded", 1 << 20)
    log.append(pairs[:3], 5)
    assert log.append(_encoded(pairs), 77) == (3, 73)
    with pytest.raises(ValueError, match="pairs"):  # a transactional batch is built from its records
        log.append(_encoded(pairs), 78, producer_id=4, producer_epoch=0, transactional=True)
    reference = PartitionLog.open(tmp_path / "pairs", 1 << 20)
    reference.append(pairs[:3], 5)
    reference.append(pairs, 77)
    assert [batch for _, batch in log.read_batches()] == [batch for _, batch in reference.read_batches()]
    assert log.next_offset == reference.next_offset == 73
    log.close()
    reference.close()


def test_oversized_batch_gets_its_own_segment(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, 100)
    fill(log, [1])
    fill(log, [10], value_size=200)  # alone bigger than segment_bytes
    fill(log, [1])
    assert [parse_segment_name(p.name) for p in log.segments] == [0, 1, 11]
    assert [(o, k) for o, k, _ in all_records(log)] == [(o, payload(o)[0]) for o in range(12)]
    log.close()


def test_read_batches_from_an_offset(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, 300)
    spans = fill(log, [3] * 10)
    for base, nxt in spans:
        for offset in range(base, nxt):
            got = [o for o, _ in log.read_batches(offset)]
            assert got == [b for b, _ in spans if b >= base]
    assert list(log.read_batches(log.next_offset)) == []
    assert list(log.read_batches(10_000)) == []
    log.close()


def test_read_raw_fetch_semantics(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, 10_000)
    spans = fill(log, [2] * 6)
    # At least one whole batch even when max_bytes is smaller than it.
    raw = log.read_raw(0, 1)
    assert [b.base_offset for _, b in iter_batches(raw)] == [0]
    one = len(raw)
    # An offset inside a batch returns that batch.
    assert [b.base_offset for _, b in iter_batches(log.read_raw(3, 1))] == [2]
    # Whole batches only, as many as fit.
    raw = log.read_raw(2, 3 * one + one // 2)
    assert [b.base_offset for _, b in iter_batches(raw)] == [2, 4, 6]
    assert len(raw) == 3 * one
    assert log.read_raw(log.next_offset, 1000) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read_raw(log.next_offset + 1, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read_raw(-1, 1000)
    assert spans[-1][1] == 12
    log.close()


def test_read_raw_stops_at_segment_end(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, 250)
    fill(log, [2] * 8)
    assert len(log.segments) > 1
    first_segment = log.segments[0].read_bytes()
    assert log.read_raw(0, 1 << 20) == first_segment
    second_base = parse_segment_name(log.segments[1].name)
    assert second_base is not None
    assert log.read_raw(second_base, 1 << 20) == log.segments[1].read_bytes()
    log.close()


def test_append_batch_assigns_offsets(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, 1 << 20)
    fill(log, [2])
    produced = encode_batch(build_records([(b"x", b"1"), (b"y", b"2"), (b"z", b"3")]),
                            base_offset=0, base_timestamp=5)
    assert log.append_batch(produced) == (2, 5)
    assert log.append_batch(produced) == (5, 8)
    batches = [b for _, b in log.read_batches(2)]
    assert [b.base_offset for b in batches] == [2, 5]
    assert all(b.base_timestamp == 5 for b in batches)
    assert decode_batch(log.read_raw(5, 1)).records == decode_batch(produced).records
    with pytest.raises(RecordBatchError):
        log.append_batch(produced[:-1])
    with pytest.raises(RecordBatchError):
        log.append_batch(encode_batch([]))
    assert log.next_offset == 8
    log.close()
    again = PartitionLog.open(tmp_path, 1 << 20)
    assert again.next_offset == 8 and again.recovery.truncated_bytes == 0
    again.close()


def test_flush_from_a_thread_while_appending(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, 500)
    stop = threading.Event()
    flushes = []
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                log.flush()
                flushes.append(1)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        fill(log, [1, 2, 3] * 40)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive() and errors == []
    assert flushes
    log.flush()
    log.close()
    again = PartitionLog.open(tmp_path, 500)
    assert again.next_offset == 240
    check_contents(again)
    again.close()


def test_closed_log_refuses_work(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, 500)
    fill(log, [1])
    log.close()
    log.close()  # idempotent
    with pytest.raises(ValueError):
        log.append([payload(1)], 0)
    with pytest.raises(ValueError):
        log.flush()
    with pytest.raises(ValueError):
        list(log.read_batches())


@settings(max_examples=40, deadline=None)
@given(
    segment_bytes=st.integers(min_value=80, max_value=2000),
    batches=st.lists(
        st.tuples(st.integers(min_value=1, max_value=6), st.integers(min_value=0, max_value=120),
                  st.booleans()),
        max_size=25,
    ),
)
def test_model(segment_bytes: int, batches: list[tuple[int, int, bool]]) -> None:
    """Random appends (own and producer batches): reads and a reopen agree with a model."""
    with tempfile.TemporaryDirectory() as tmp:
        log = PartitionLog.open(Path(tmp), segment_bytes)
        model: list[tuple[int, bytes | None, bytes | None]] = []
        for count, size, produced in batches:
            base = log.next_offset
            pairs = [payload(base + i, size) for i in range(count)]
            if produced:
                span = log.append_batch(encode_batch(build_records(pairs), base_offset=999))
            else:
                span = log.append(pairs, 1)
            assert span == (base, base + count)
            model.extend((base + i, k, v) for i, (k, v) in enumerate(pairs))
        assert all_records(log) == model
        if model:
            raw = log.read_raw(0, 1 << 30)
            assert raw == log.segments[0].read_bytes()
        log.close()
        again = PartitionLog.open(Path(tmp), segment_bytes)
        assert all_records(again) == model
        assert again.next_offset == len(model)
        assert again.recovery.truncated_bytes == 0
        again.close()
