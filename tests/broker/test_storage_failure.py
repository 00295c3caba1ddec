"""A failed write or fsync stops the broker cleanly, and nothing it acknowledged is lost.

The real ``Server`` runs in-process on a loopback port over a fault-injecting filesystem
that also models a crash. Raw-protocol clients in threads commit offsets and produce with
acks=-1 as fast as they are answered, remembering every success. Mid-run one write or
fsync fails: the broker must log one ERROR line naming the file, answer nothing more and
stop. Then the filesystem "crashes" (everything not fsynced is forgotten), a fresh broker
opens the same directory with the real filesystem, and every acknowledged commit and
produced batch must be there.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.config import Config
from broker.server import Server, StorageFailure
from protocol.records import build_records, encode_batch, iter_batches
from storage.faultfs import FaultyFileSystem
from storage.fs import REAL_FS, FileSystem
from tests.support.wire import WireClient

GROUPS = [f"group-{i}" for i in range(4)]
PARTITIONS = (0, 1)
CONFIG = {
    "offsets.topic.num.partitions": 3,
    "offsets.topic.segment.bytes": 4096,  # rolls: sealed segments are fsynced on the way
    "log.segment.bytes": 4096,
    "log.cleaner.enable": False,  # a cleaner's write failing is not what this test is about
    "group.initial.rebalance.delay.ms": 0,
    "shutdown.grace.ms": 1000,
}


class Committer(threading.Thread):
    """Commits ever larger offsets for one group until the connection drops."""

    def __init__(self, address: tuple[str, int], group: str) -> None:
        super().__init__(daemon=True, name=f"commit-{group}")
        self.address, self.group = address, group
        self.acked: dict[int, int] = {}
        self.sent_max = 0
        self.errors: list[Any] = []

    def run(self) -> None:
        try:
            client = WireClient(*self.address, timeout=30)
        except OSError:
            return
        offset = 0
        try:
            while True:
                offset += 1
                self.sent_max = offset
                reply = client.request(8, 8, {
                    "group_id": self.group, "generation_id_or_member_epoch": -1, "member_id": "",
                    "group_instance_id": None, "topics": [{"name": "t", "partitions": [
                        {"partition_index": p, "committed_offset": offset * 10 + p, "committed_leader_epoch": -1,
                         "committed_metadata": f"{self.group}/{offset}"} for p in PARTITIONS]}]})
                codes = {p.partition_index: p.error_code for t in reply.topics for p in t.partitions}
                if set(codes.values()) != {0}:
                    self.errors.append(codes)
                    return
                for p in PARTITIONS:
                    self.acked[p] = offset * 10 + p
        except (OSError, ConnectionError):
            return  # the broker stopped
        finally:
            client.close()


class Producer(threading.Thread):
    """Produces one record per request with acks=-1; remembers each acknowledged offset."""

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(daemon=True, name="produce")
        self.address = address
        self.acked: dict[int, bytes] = {}
        self.errors: list[Any] = []

    def run(self) -> None:
        try:
            client = WireClient(*self.address, timeout=30)
        except OSError:
            return
        n = 0
        try:
            while True:
                n += 1
                value = b"value-%d" % n
                batch = encode_batch(build_records([(b"k", value)]), base_timestamp=int(time.time() * 1000))
                reply = client.request(0, 8, {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
                                              "topic_data": [{"name": "data", "partition_data": [
                                                  {"index": 0, "records": batch}]}]})
                part = reply.responses[0].partition_responses[0]
                if part.error_code != 0:
                    self.errors.append(part.error_code)
                    return
                self.acked[part.base_offset] = value
        except (OSError, ConnectionError):
            return
        finally:
            client.close()


async def start(data_dir: Path, fs: FileSystem, nursery: trio.Nursery) -> tuple[Server, dict[str, Any]]:
    server = Server(Config(CONFIG), "127.0.0.1", 0, data_dir, fs=fs)
    outcome: dict[str, Any] = {}

    async def serve(*, task_status: trio.TaskStatus[tuple[str, int]]) -> None:
        try:
            await server.serve(task_status=task_status)
        except StorageFailure as exc:
            outcome["failure"] = exc
        outcome["ended"] = True

    await nursery.start(serve)
    return server, outcome


async def wait_for(condition: Any, what: str, seconds: float = 30.0) -> None:
    with trio.fail_after(seconds):
        while not condition():
            await trio.sleep(0.01)


def create_topics(address: tuple[str, int]) -> None:
    with WireClient(*address) as client:
        for name, partitions in (("t", len(PARTITIONS)), ("data", 1)):
            body = client.request(19, 4, {"topics": [{"name": name, "num_partitions": partitions,
                                                      "replication_factor": 1, "assignments": [], "configs": []}],
                                          "timeout_ms": 5000, "validate_only": False})
            assert body.topics[0].error_code == 0


def read_back(address: tuple[str, int]) -> tuple[dict[str, dict[int, int]], dict[int, bytes]]:
    """Committed offsets per group and partition, and every record of data-0 by offset."""
    committed: dict[str, dict[int, int]] = {}
    with WireClient(*address) as client:
        for group in GROUPS:
            body = client.request(9, 7, {"group_id": group, "topics": [
                {"name": "t", "partition_indexes": list(PARTITIONS)}], "require_stable": False})
            committed[group] = {p.partition_index: p.committed_offset for t in body.topics for p in t.partitions}
        records: dict[int, bytes] = {}
        offset = 0
        while True:
            fetch = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                     "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                     "topics": [{"topic": "data", "partitions": [
                         {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                          "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
            part = client.request(1, 11, fetch).responses[0].partitions[0]
            batches = list(iter_batches(part.records or b""))
            if not batches:
                return committed, records
            for _, batch in batches:
                for record in batch.records or []:
                    records[batch.offset_of(record)] = record.value or b""
            offset = batches[-1][1].next_offset


@pytest.mark.parametrize(("op", "path"), [
    ("write", "__consumer_offsets-"),
    ("fsync", "__consumer_offsets-"),
    ("write", "__consumer_offsets.journal"),
    ("fsync", "__consumer_offsets.journal"),
    ("write", "data-0"),
    ("fsync", "data-0"),
])
async def test_a_failed_write_or_fsync_stops_the_broker_and_loses_nothing_acknowledged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, op: str, path: str
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    fs = FaultyFileSystem(data_dir)
    caplog.set_level(logging.INFO)
    async with trio.open_nursery() as nursery:
        server, outcome = await start(data_dir, fs, nursery)
        assert server.bound is not None
        address = server.bound
        await trio.to_thread.run_sync(create_topics, address)
        committers = [Committer(address, group) for group in GROUPS]
        producer = Producer(address)
        for thread in [*committers, producer]:
            thread.start()
        # Enough traffic that every partition log has rolled segments before the fault.
        await wait_for(lambda: len(producer.acked) >= 60 and min(c.sent_max for c in committers) >= 60,
                       "traffic")
        fault = fs.fail(op, path=path, errno=errno.EIO)
        await wait_for(lambda: "ended" in outcome, "the broker to stop")
    assert fault.fired == 1
    assert isinstance(outcome.get("failure"), StorageFailure)
    assert server.failure is not None and server.failure[1].errno == errno.EIO

    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    line = errors[0].getMessage()
    assert line.startswith("storage failure, stopping the broker:") and path in line and "Input/output" in line
    assert "kcoord stopped" not in caplog.text, "no graceful shutdown after a storage failure"

    for thread in [*committers, producer]:
        await trio.to_thread.run_sync(thread.join, 30)
        assert not thread.is_alive()
    assert all(c.errors == [] for c in committers) and producer.errors == []

    fs.crash()  # forget whatever was not fsynced, as a power cut would
    async with trio.open_nursery() as nursery:
        again, _ = await start(data_dir, REAL_FS, nursery)
        assert again.bound is not None
        committed, records = await trio.to_thread.run_sync(read_back, again.bound)
        again.shutdown()
    for committer in committers:
        for partition, acked in committer.acked.items():
            assert acked <= committed[committer.group][partition] <= committer.sent_max * 10 + partition, (
                f"{committer.group}/{partition}: acknowledged {acked}, recovered "
                f"{committed[committer.group][partition]}")
    for offset, value in producer.acked.items():
        assert records.get(offset) == value, f"acknowledged record at offset {offset} is gone"
