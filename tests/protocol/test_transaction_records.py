"""Markers (control batches) and __transaction_state records, byte for byte as Kafka writes them."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import ProtocolError
from protocol.records import (
    ControlRecordType,
    EndTransactionMarker,
    RecordBatchError,
    decode_batch,
    encode_marker_batch,
    marker_of,
    read_marker,
)
from protocol.transaction_log import TransactionLogEntry, decode_key, decode_value, encode_key, encode_value


def test_a_commit_marker_is_one_transactional_control_batch() -> None:
    raw = encode_marker_batch(42, 3, EndTransactionMarker(commit=True, coordinator_epoch=7), 1_700_000_000_000,
                              base_offset=100)
    batch = decode_batch(raw)
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, -1)
    assert batch.base_offset == 100 and batch.records_count == 1
    record = batch.records[0]  # type: ignore[index]
    # EndTransactionMarker: key = version 0, type 1 (COMMIT); value = version 0, coordinator epoch.
    assert record.key == struct.pack(">hh", 0, 1)
    assert record.value == struct.pack(">hi", 0, 7)
    assert marker_of(batch) == EndTransactionMarker(True, 7)


def test_an_abort_marker_has_type_zero() -> None:
    batch = decode_batch(encode_marker_batch(1, 0, EndTransactionMarker(False, 0), 0))
    assert batch.records[0].key == struct.pack(">hh", 0, int(ControlRecordType.ABORT))  # type: ignore[index]
    assert marker_of(batch) == EndTransactionMarker(False, 0)


def test_other_control_records_are_not_markers() -> None:
    assert read_marker(struct.pack(">hh", 0, 2), b"") is None  # a Raft LEADER_CHANGE record


def test_a_control_record_without_its_header_is_refused() -> None:
    with pytest.raises(RecordBatchError):
        read_marker(b"\x00", None)
    with pytest.raises(RecordBatchError):
        read_marker(struct.pack(">hh", 0, 1), b"\x00\x00")


def test_transaction_log_value_v0_layout() -> None:
    entry = TransactionLogEntry(producer_id=1, producer_epoch=2, transaction_timeout_ms=60_000, status=1,
                                partitions=(("t", (0, 1)),), last_update_timestamp_ms=5, start_timestamp_ms=4)
    expected = (struct.pack(">hqhib", 0, 1, 2, 60_000, 1) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
                + struct.pack(">iii", 2, 0, 1) + struct.pack(">qq", 5, 4))
    assert encode_value(entry) == expected
    assert decode_value(expected) == entry


def test_an_empty_transaction_writes_null_partitions() -> None:
    entry = TransactionLogEntry(7, 0, 1000, 0, None, 1, -1)
    assert decode_value(encode_value(entry)).partitions is None


def test_transaction_log_key() -> None:
    assert encode_key("app-1") == struct.pack(">hh", 0, 5) + b"app-1"
    assert decode_key(encode_key("app-1")) == "app-1"
    assert decode_key(struct.pack(">h", 9) + b"whatever") is None  # a newer key version: skipped
    with pytest.raises(ProtocolError):
        decode_key(b"\x00")


def test_value_version_1_tagged_fields_are_read() -> None:
    from protocol.compiler import compiled_for
    from protocol.messages.transaction_records import TransactionLogValue

    out = bytearray(struct.pack(">h", 1))
    compiled_for(TransactionLogValue, 1).encode({
        "producer_id": 9, "previous_producer_id": 8, "next_producer_id": -1, "producer_epoch": 0,
        "transaction_timeout_ms": 100, "transaction_status": 4, "transaction_partitions": [],
        "transaction_last_update_timestamp_ms": 3, "transaction_start_timestamp_ms": 2,
        "client_transaction_version": 2}, out)
    entry = decode_value(bytes(out))
    assert (entry.producer_id, entry.previous_producer_id, entry.status) == (9, 8, 4)


@given(st.integers(0, 2**63 - 1), st.integers(0, 32767), st.integers(0, 2**31 - 1), st.integers(0, 7),
       st.none() | st.lists(st.tuples(st.text(min_size=1, max_size=20),
                                      st.lists(st.integers(0, 2**31 - 1), max_size=5).map(tuple)), max_size=4
                            ).map(tuple),
       st.integers(-1, 2**62), st.integers(-1, 2**62))
def test_values_round_trip(pid: int, epoch: int, timeout: int, status: int, partitions: object, updated: int,
                           started: int) -> None:
    entry = TransactionLogEntry(pid, epoch, timeout, status, partitions, updated, started)  # type: ignore[arg-type]
    assert decode_value(encode_value(entry)) == entry
