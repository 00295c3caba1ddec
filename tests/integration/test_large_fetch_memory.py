"""Large Fetch replies reuse the broker's heap instead of faulting in fresh pages each time.

Page faults are counted, not time, so the test holds on a busy machine: with the C
library's default thresholds each 8 MB reply maps (or re-grows the heap by) about 16 MB
of new pages, some four thousand faults per reply; with ``broker.heap`` it reuses them.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest

from broker.heap import keep_large_buffers
from protocol.records import build_records, encode_batch
from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="reads /proc and glibc's heap")]

PARTITIONS = 4
#: Records per partition: 2,000 of 1 KiB, so one Fetch of every partition is about 8 MB.
RECORDS, RECORD_BYTES = 2000, 1024
FETCHES = 12


def minor_faults(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[7])  # minflt: the tenth field of stat, the eighth after the command name


def fetch_all(client: WireClient) -> int:
    body = client.request(1, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 16 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": "big", "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
             "partition_max_bytes": 4 << 20} for p in range(PARTITIONS)]}]})
    parts = body.responses[0].partitions
    assert [p.error_code for p in parts] == [0] * PARTITIONS
    return sum(len(p.records or b"") for p in parts)


def test_repeated_large_fetches_do_not_fault_in_new_memory(broker: BrokerProcess) -> None:
    assert broker.proc is not None
    with WireClient(broker.host, broker.port) as client:
        created = client.request(19, 7, {"topics": [{
            "name": "big", "num_partitions": PARTITIONS, "replication_factor": 1, "assignments": [],
            "configs": []}], "timeout_ms": 5000, "validate_only": False})
        assert created.topics[0].error_code == 0
        for partition in range(PARTITIONS):
            for _ in range(RECORDS // 100):
                batch = encode_batch(build_records([(None, os.urandom(RECORD_BYTES)) for _ in range(100)]),
                                     base_timestamp=1)
                reply = client.request(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
                                              "topic_data": [{"name": "big", "partition_data": [
                                                  {"index": partition, "records": batch}]}]})
                assert reply.responses[0].partition_responses[0].error_code == 0
        size = fetch_all(client)  # the first reply may grow the heap once
        assert size > PARTITIONS * RECORDS * RECORD_BYTES
        before = minor_faults(broker.proc.pid)
        for _ in range(FETCHES):
            assert fetch_all(client) == size
        faults = minor_faults(broker.proc.pid) - before
    pages_per_reply = size // 4096
    # Reusing the heap, the replies fault in almost nothing; fresh memory would be about
    # two pages per page of reply (the records read, then the encoded frame).
    assert faults < FETCHES * pages_per_reply // 4, (faults, pages_per_reply)


def test_the_thresholds_are_set_unless_the_operator_set_malloc_tunables() -> None:
    assert keep_large_buffers({}) is True
    assert keep_large_buffers({"MALLOC_ARENA_MAX": "2"}) is False
