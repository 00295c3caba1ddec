"""Start-up from the coordinator snapshot: the same state as replaying the whole log, always.

A coordinator with classic groups, a KIP-848 consumer group and offsets writes its records
to a real ``CoordinatorLog`` (tiny segments, so compaction has work) and its snapshot
through ``broker.coordinator_load``, as the group service does. Loading then takes the
snapshot plus the log after it, or, when the snapshot is missing, old, damaged or not of
this log, deletes it and replays the whole log; the state must equal the full replay
either way.
"""

from __future__ import annotations

import errno
import logging
import tempfile
from pathlib import Path
from typing import Any

import crc32c
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker import coordinator_load, heap
from broker.config import Config
from broker.coordinator import CoordinatorConfig, GroupCoordinatorShard
from broker.coordinator.api import BINDINGS
from broker.coordinator.modern.consumer.group import ConsumerGroup
from broker.coordinator.modern.topics import StaticImage
from broker.coordinator.records import encode_all
from broker.coordinator.requests import ClientInfo
from broker.coordinator.snapshot import payload
from broker.group_service import GroupService
from protocol.codec import decode_body, encode_body
from protocol.consumer_offsets import partition_for
from protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from protocol.records import EndTransactionMarker
from storage.coordinator_log import CoordinatorLog
from storage.coordinator_snapshot import FORMAT
from storage.faultfs import FaultyFileSystem
from storage.layout import coordinator_snapshot_file

START = 1_700_000_000_000
DAY = 86_400_000
GROUPS = ["g0", "g1", "g2"]
TOPICS = {"a": 3, "b": 2}
CLIENT = ClientInfo("client", "/127.0.0.1")


def _config() -> CoordinatorConfig:
    return CoordinatorConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=1, offsets_retention_ms=3000,
                             consumer_assignment_interval_ms=0)


def _shard() -> GroupCoordinatorShard:
    counter = iter(range(10**9))
    return GroupCoordinatorShard(_config(), new_id=lambda: f"m{next(counter)}", topics=StaticImage.of(TOPICS))


class Driver:
    """A coordinator and its log, written as the group service writes them."""

    def __init__(self, directory: Path, partitions: int = 2) -> None:
        self.log = CoordinatorLog(directory, partitions, 700)
        self.shard = _shard()
        self.group_records: dict[bytes, bytes] = {}
        self.now = START
        self.ticket = 0
        self.members: dict[str, str] = {}
        self.consumer_epoch = 0

    def apply(self, fx: Any) -> dict[int, Any]:
        for group, records in fx.records.items():
            self.log.append(group, encode_all(records, self.group_records), self.now)
        return dict(fx.replies)

    def call(self, message: Any, version: int, fields: dict[str, Any]) -> dict[str, Any]:
        self.ticket += 1
        binding = BINDINGS[message.api_key]
        body = decode_body(message, version, encode_body(message, version, fields))
        result = self.apply(binding.handle(self.shard, self.ticket, self.now, binding.decode(version, body, CLIENT)))
        return {} if self.ticket not in result else binding.encode(version, result[self.ticket])

    def step(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "commit":
            _, group, topic, partition, offset, retention = op
            self.call(OffsetCommitRequest, 2, {
                "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "retention_time_ms": retention, "topics": [{"name": topic, "partitions": [
                    {"partition_index": partition, "committed_offset": offset, "committed_metadata": f"m{offset}"}]}]})
        elif kind == "offset_delete":
            _, group, topic, partition = op
            self.call(OffsetDeleteRequest, 0, {"group_id": group, "topics": [
                {"name": topic, "partitions": [{"partition_index": partition}]}]})
        elif kind == "join" and op[1] not in self.members:
            group = op[1]
            reply = self.call(JoinGroupRequest, 3, {
                "group_id": group, "session_timeout_ms": 60000, "rebalance_timeout_ms": 60000, "member_id": "",
                "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00"}]})
            if not reply:
                self.apply(self.shard.on_time(self.now))
            elif reply.get("error_code") == 0:
                member = reply["member_id"]
                synced = self.call(SyncGroupRequest, 3, {
                    "group_id": group, "generation_id": reply["generation_id"], "member_id": member,
                    "assignments": [{"member_id": member, "assignment": b"x"}]})
                if synced.get("error_code") == 0:
                    self.members[group] = member
        elif kind == "leave" and op[1] in self.members:
            self.call(LeaveGroupRequest, 1, {"group_id": op[1], "member_id": self.members.pop(op[1])})
        elif kind == "delete_group":
            self.members.pop(op[1], None)
            self.call(DeleteGroupsRequest, 1, {"groups_names": [op[1]]})
        elif kind == "consumer":
            reply = self.call(ConsumerGroupHeartbeatRequest, 1, {
                "group_id": "cg", "member_id": "c1", "member_epoch": self.consumer_epoch, "instance_id": None,
                "rack_id": None, "rebalance_timeout_ms": 30000 if self.consumer_epoch == 0 else -1,
                "subscribed_topic_names": ["a"] if self.consumer_epoch == 0 else None,
                "subscribed_topic_regex": None, "server_assignor": None,
                "topic_partitions": [] if self.consumer_epoch == 0 else None})
            self.consumer_epoch = reply.get("member_epoch", 0) if reply.get("error_code") == 0 else 0
        elif kind == "advance":  # time passes: timers, and offset expiry
            self.now += op[1]
            self.apply(self.shard.on_time(self.now))
            self.apply(self.shard.expire_offsets(self.now))
            self.consumer_epoch = 0 if "cg" not in self.shard.groups else self.consumer_epoch
        elif kind == "compact":
            self.log.compact_all(self.now, op[1])

    def snapshot(self, interleaved: list[tuple[Any, ...]] = ()) -> None:  # type: ignore[assignment]
        """Write a snapshot as the group service does; ``interleaved`` steps run between its parts."""
        writer = coordinator_load.begin_snapshot(self.log, self.log.end_offsets(), self.now)
        steps = list(interleaved)
        for part in payload(self.shard, list(self.group_records.items()), groups_per_part=1):
            writer.write(part)
            if steps:
                self.step(steps.pop(0))
        coordinator_load.finish_snapshot(self.log, writer)
        for step in steps:
            self.step(step)


def state_of(shard: GroupCoordinatorShard) -> tuple[Any, ...]:
    """Everything loading builds: offsets, every group's persisted state, the timers."""
    groups: dict[str, Any] = {}
    for group_id, group in shard.groups.items():
        if isinstance(group, ConsumerGroup):
            groups[group_id] = ("consumer", group.group_epoch, group.assignment_epoch, dict(group.members),
                                {m: dict(a) for m, a in group.target_assignment.items()},
                                dict(group.subscription_metadata), dict(group.partition_epochs),
                                dict(group.static_members))
        else:
            groups[group_id] = ("classic", group.state, group.metadata(), group.state_timestamp)
    return shard.offsets.snapshot(), groups, shard.next_deadline()


def replayed(log: CoordinatorLog, now: int) -> tuple[Any, ...]:
    shard = _shard()
    for key, value, _ in log.replay():
        shard.replay_bytes(key, value)
    shard.finish_load(now)
    return state_of(shard)


def loaded(log: CoordinatorLog, now: int, retention: int = DAY) -> tuple[coordinator_load.Loaded, tuple[Any, ...]]:
    result = coordinator_load.load(log, _shard, retention, now)
    result.shard.finish_load(now)
    return result, state_of(result.shard)


def scenario(driver: Driver) -> None:
    """Offsets of three groups, a classic group with a member, a KIP-848 group, and deletes."""
    for step in [("commit", "g0", "a", 0, 10, -1), ("commit", "g1", "b", 1, 20, 1000), ("join", "g2"),
                 ("consumer",), ("consumer",), ("commit", "g0", "a", 2, 30, -1), ("offset_delete", "g0", "a", 0),
                 ("commit", "g2", "a", 1, 5, -1)]:
        driver.step(step)


# ---------------------------------------------------------------------- the snapshot is used


def test_a_snapshot_and_the_log_after_it_load_the_state_of_the_whole_log(tmp_path: Path) -> None:
    driver = Driver(tmp_path)
    scenario(driver)
    driver.snapshot()
    for step in [("commit", "g0", "a", 1, 40, -1), ("delete_group", "g1"), ("leave", "g2"), ("consumer",)]:
        driver.step(step)
    result, state = loaded(driver.log, driver.now)
    assert result.snapshot is not None, "the snapshot fits: it is used"
    assert result.replayed < sum(driver.log.end_offsets()), "only the log after it is replayed"
    assert state == replayed(driver.log, driver.now)
    assert result.group_records == driver.group_records


def test_state_changed_while_the_snapshot_is_written_is_replayed_from_the_log(tmp_path: Path) -> None:
    driver = Driver(tmp_path)
    scenario(driver)
    driver.snapshot(interleaved=[("commit", "g0", "a", 2, 99, -1), ("delete_group", "g1"), ("offset_delete", "g0", "a", 2),
                                 ("commit", "g1", "b", 0, 7, -1), ("join", "g0")])
    result, state = loaded(driver.log, driver.now)
    assert result.snapshot is not None
    assert state == replayed(driver.log, driver.now)


# ---------------------------------------------------------------------- ...or it is not, and nothing differs


@pytest.fixture
def with_snapshot(tmp_path: Path) -> tuple[Driver, bytes, tuple[Any, ...]]:
    driver = Driver(tmp_path, partitions=1)
    scenario(driver)
    driver.snapshot()
    driver.step(("commit", "g0", "b", 0, 50, -1))
    return driver, coordinator_snapshot_file(tmp_path).read_bytes(), replayed(driver.log, driver.now)


def _falls_back(driver: Driver, expected: tuple[Any, ...], retention: int = DAY) -> None:
    result, state = loaded(driver.log, driver.now, retention)
    assert result.snapshot is None, "an unusable snapshot is not loaded"
    assert state == expected
    assert not coordinator_snapshot_file(driver.log.data_dir).exists(), "and it is deleted"


def test_a_snapshot_cut_at_any_byte_falls_back_to_replay(with_snapshot: tuple[Driver, bytes, Any]) -> None:
    driver, whole, expected = with_snapshot
    path = coordinator_snapshot_file(driver.log.data_dir)
    for size in range(len(whole)):
        path.write_bytes(whole[:size])
        _falls_back(driver, expected)


def test_a_snapshot_with_a_bit_flipped_anywhere_falls_back_to_replay(with_snapshot: tuple[Driver, bytes, Any]) -> None:
    driver, whole, expected = with_snapshot
    path = coordinator_snapshot_file(driver.log.data_dir)
    for position in range(len(whole)):
        damaged = bytearray(whole)
        damaged[position] ^= 1 << (position % 8)
        path.write_bytes(bytes(damaged))
        _falls_back(driver, expected)


def test_a_snapshot_of_an_older_format_falls_back_to_replay_with_a_log_line(
        with_snapshot: tuple[Driver, bytes, Any], caplog: pytest.LogCaptureFixture) -> None:
    """Whole and checksum-correct, but written by a kcoord of another snapshot format."""
    driver, whole, expected = with_snapshot
    older = bytearray(whole)
    older[7] = FORMAT - 1
    body = bytes(older[:-4])
    coordinator_snapshot_file(driver.log.data_dir).write_bytes(body + crc32c.crc32c(body).to_bytes(4, "little"))
    with caplog.at_level(logging.WARNING, logger="kcoord.groups"):
        _falls_back(driver, expected)
    assert f"format {FORMAT - 1}, this kcoord reads format {FORMAT}" in caplog.text
    assert "replaying the whole" in caplog.text


def test_groups_loaded_from_a_snapshot_serve_and_change_as_replayed_ones(tmp_path: Path) -> None:
    """Groups stay in the snapshot's columns until used; used or not, the state is the replay's,
    and the next snapshot (written with some groups still in the columns) loads the same."""
    driver = Driver(tmp_path)
    for group in GROUPS:
        for topic, partitions in TOPICS.items():
            for partition in range(partitions):
                driver.step(("commit", group, topic, partition, 100 + partition, -1))
    driver.snapshot()
    result, _ = loaded(driver.log, driver.now)
    assert result.snapshot is not None
    driver.shard = result.shard  # the loaded coordinator goes on from here
    driver.step(("commit", "g1", "a", 2, 7, -1))
    driver.step(("offset_delete", "g2", "b", 0))
    assert driver.shard.offsets.get("g0", "b", 1) is not None
    assert state_of(driver.shard) == replayed(driver.log, driver.now)
    driver.snapshot()
    result, state = loaded(driver.log, driver.now)
    assert result.snapshot is not None and result.replayed == 0
    assert state == replayed(driver.log, driver.now)


def test_an_old_snapshot_falls_back_to_replay(with_snapshot: tuple[Driver, bytes, Any]) -> None:
    """Older than delete.retention.ms with records after it: compaction may have dropped their tombstones."""
    driver, _, expected = with_snapshot
    driver.now += 1001
    expected = replayed(driver.log, driver.now)
    _falls_back(driver, expected, retention=1000)


def test_why_an_old_snapshot_is_not_trusted(tmp_path: Path) -> None:
    """A delete after the snapshot, then compaction past delete.retention.ms drops its tombstone:
    the log after the snapshot no longer deletes what the snapshot holds."""
    driver = Driver(tmp_path, partitions=1)
    driver.step(("commit", "g0", "a", 0, 1, -1))
    driver.step(("commit", "g1", "b", 0, 2, -1))  # the batch the snapshot names: never superseded
    driver.snapshot()
    driver.step(("offset_delete", "g0", "a", 0))
    for offset in range(40):  # roll segments, so the tombstone's is sealed and cleanable
        driver.step(("commit", "g2", "a", offset % 2, offset, -1))
    driver.step(("advance", 10))
    driver.step(("compact", 0))
    expected = replayed(driver.log, driver.now)
    assert ("a", 0) not in expected[0].get("g0", {})
    _falls_back(driver, expected, retention=0)


def test_a_snapshot_of_another_log_falls_back_to_replay(tmp_path: Path) -> None:
    driver = Driver(tmp_path / "one", partitions=1)
    scenario(driver)
    driver.snapshot()
    other = Driver(tmp_path / "two", partitions=1)
    other.now += 1  # the same steps a millisecond later: records of the same shape, not the same bytes
    scenario(other)
    other.step(("commit", "g0", "a", 0, 11, -1))
    coordinator_snapshot_file(other.log.data_dir).write_bytes(coordinator_snapshot_file(driver.log.data_dir).read_bytes())
    _falls_back(other, replayed(other.log, other.now))


def test_a_snapshot_beyond_the_end_of_the_log_falls_back_to_replay(tmp_path: Path) -> None:
    driver = Driver(tmp_path / "long", partitions=1)
    scenario(driver)
    driver.step(("commit", "g0", "a", 0, 11, -1))
    driver.snapshot()
    short = Driver(tmp_path / "short", partitions=1)
    scenario(short)
    coordinator_snapshot_file(short.log.data_dir).write_bytes(coordinator_snapshot_file(driver.log.data_dir).read_bytes())
    _falls_back(short, replayed(short.log, short.now))


# ---------------------------------------------------------------------- any schedule, any cut point


GROUP = st.sampled_from(GROUPS)
TOPIC = st.sampled_from(sorted(TOPICS))
OPERATION = st.one_of(
    st.tuples(st.just("commit"), GROUP, TOPIC, st.integers(0, 1), st.integers(0, 10**6), st.sampled_from([-1, 500])),
    st.tuples(st.just("commit"), GROUP, TOPIC, st.integers(0, 1), st.integers(0, 10**6), st.just(-1)),
    st.tuples(st.just("offset_delete"), GROUP, TOPIC, st.integers(0, 1)),
    st.tuples(st.just("delete_group"), GROUP),
    st.tuples(st.just("join"), GROUP),
    st.tuples(st.just("leave"), GROUP),
    st.tuples(st.just("consumer")),
    st.tuples(st.just("advance"), st.integers(1, 4000)),
    st.tuples(st.just("compact"), st.sampled_from([0, 1000, DAY])),
    st.tuples(st.just("snapshot"), st.integers(0, 3)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=st.lists(OPERATION, max_size=45), retention=st.sampled_from([0, 2000, DAY]))
def test_snapshot_plus_tail_equals_full_replay(operations: list[tuple[Any, ...]], retention: int) -> None:
    """Commits, deletes, expiries and compactions, with snapshots taken at random points (some
    with steps running while they are written): loading always gives the full replay's state."""
    with tempfile.TemporaryDirectory() as directory:
        driver = Driver(Path(directory))
        compacted_since_snapshot = False
        snapshots = 0
        pending = list(operations)
        while pending:
            op = pending.pop(0)
            if op[0] == "snapshot":
                interleaved, pending = pending[: op[1]], pending[op[1]:]
                interleaved = [step for step in interleaved if step[0] != "snapshot"]
                driver.snapshot(interleaved)
                snapshots += 1
                compacted_since_snapshot = any(step[0] == "compact" for step in interleaved)
            else:
                driver.step(op)
                compacted_since_snapshot = compacted_since_snapshot or op[0] == "compact"
        result, state = loaded(driver.log, driver.now, retention)
        assert state == replayed(driver.log, driver.now)
        if snapshots and retention == DAY and not compacted_since_snapshot:
            assert result.snapshot is not None, "a snapshot that fits is used"
        driver.log.close()


# ---------------------------------------------------------------------- as the broker runs it


def commit(service: GroupService, group: str, offset: int) -> None:
    """An OffsetCommit of partitions 0 and 1 of topic t, through the service as the router hands it."""
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "retention_time_ms": -1, "topics": [{"name": "t", "partitions": [
                {"partition_index": p, "committed_offset": offset, "committed_metadata": ""} for p in (0, 1)]}]}
    binding = BINDINGS[OffsetCommitRequest.api_key]
    typed = binding.decode(2, decode_body(OffsetCommitRequest, 2, encode_body(OffsetCommitRequest, 2, body)),
                           CLIENT)
    service.apply(binding.handle(service.coordinator, 0, service.clock(), typed))


async def test_the_group_service_writes_the_snapshot_and_starts_from_it(tmp_path: Path) -> None:
    config = Config({"offsets.topic.num.partitions": 3})
    first = GroupService.open(config, tmp_path)
    assert not coordinator_snapshot_file(tmp_path).exists()
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        for offset in range(5):
            commit(first, f"g{offset}", offset)
        assert await first.write_snapshot()
        commit(first, "g0", 100)  # after the snapshot: replayed at start-up
        commit(first, "late", 7)
        nursery.cancel_scope.cancel()
    await first.close()  # writes one more snapshot, covering everything
    expected = first.coordinator.offsets.snapshot()

    coordinator_snapshot_file(tmp_path).unlink()
    replayed_service = GroupService.open(config, tmp_path)
    assert replayed_service.coordinator.offsets.snapshot() == expected
    await replayed_service.close()
    assert coordinator_snapshot_file(tmp_path).exists(), "a clean shutdown leaves a snapshot"

    second = GroupService.open(config, tmp_path)
    assert second.coordinator.offsets.snapshot() == expected
    assert second._records_since_snapshot == 0, "it started from the snapshot, with nothing after it"
    await second.close()


@pytest.mark.parametrize("threaded", [True, False])
async def test_a_snapshot_that_cannot_be_read_at_start_up_falls_back_to_replay(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, threaded: bool) -> None:
    """Start-up reads a large snapshot on a thread while the log opens, a small one in line
    after it: an error either way is an unusable snapshot (a log line, then the whole log)."""
    monkeypatch.setattr(heap, "MMAP_THRESHOLD", 0 if threaded else 1 << 30)
    config = Config({"offsets.topic.num.partitions": 3})
    first = GroupService.open(config, tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        for offset in range(3):
            commit(first, f"g{offset}", offset)
        nursery.cancel_scope.cancel()
    await first.close()
    expected = first.coordinator.offsets.snapshot()
    assert coordinator_snapshot_file(tmp_path).exists()

    fs = FaultyFileSystem()
    fs.fail("read", path=coordinator_snapshot_file(tmp_path).name, errno=errno.EIO)
    with caplog.at_level(logging.WARNING, logger="kcoord.groups"):
        second = GroupService.open(config, tmp_path, fs=fs)
    assert second.coordinator.offsets.snapshot() == expected
    assert second._records_since_snapshot > 0, "the whole log was replayed"
    assert "is unusable" in caplog.text and "replaying the whole" in caplog.text
    await second.close()


async def test_no_snapshot_is_taken_while_a_transaction_with_offsets_is_open(tmp_path: Path) -> None:
    """Its pending offsets sit before the covered offsets and its marker would come after
    them: a snapshot then would lose the offsets its COMMIT makes visible."""
    config = Config({"offsets.topic.num.partitions": 3})
    producer_id, epoch = 4000, 0
    body = {"transactional_id": "tx", "group_id": "g", "producer_id": producer_id, "producer_epoch": epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]}
    binding = BINDINGS[TxnOffsetCommitRequest.api_key]
    service = GroupService.open(config, tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        typed = binding.decode(3, decode_body(TxnOffsetCommitRequest, 3, encode_body(TxnOffsetCommitRequest, 3, body)),
                               CLIENT)
        service.apply(binding.handle(service.coordinator, 0, service.clock(), typed))
        assert not await service.write_snapshot(), "a snapshot was taken with a transaction open"
        service.write_marker(partition_for("g", 3), producer_id, epoch, EndTransactionMarker(True, 0))
        assert await service.write_snapshot()
        nursery.cancel_scope.cancel()
    await service.close()

    reopened = GroupService.open(config, tmp_path)
    value = reopened.coordinator.offsets.get("g", "t", 0)
    assert value is not None and value.offset == 42
    assert reopened._records_since_snapshot == 0, "it started from the snapshot"
    await reopened.close()
