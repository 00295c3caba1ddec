"""The coordinator log is compacted in the background and still loads the same state."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.consumer_offsets import OffsetKey, decode_key, decode_offset_value
from protocol.records import iter_batches
from tests.support.broker_process import BrokerProcess
from tests.support.clients import create_topic, wait_until
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

CLEANER = {
    "offsets.topic.segment.bytes": 4096,  # small segments: plenty to clean
    "log.cleaner.backoff.ms": 100,
    "log.cleaner.min.cleanable.ratio": 0.0,
    "offsets.topic.num.partitions": 1,
}


def _commit(client: WireClient, offset: int) -> None:
    body = {"group_id": "compacted", "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "topics": [{"name": "c", "partitions": [
                {"partition_index": p, "committed_offset": offset + p, "committed_leader_epoch": -1,
                 "committed_metadata": f"m{offset}"} for p in range(4)]}]}
    assert all(p.error_code == 0 for t in client.request(8, 8, body).topics for p in t.partitions)


def _fetch(client: WireClient) -> list[tuple[int, int, str]]:
    topics = client.request(9, 7, {"group_id": "compacted", "topics": None, "require_stable": False}).topics
    return sorted((p.partition_index, p.committed_offset, p.metadata) for t in topics for p in t.partitions)


def _log_bytes(broker: BrokerProcess) -> int:
    return sum(f.stat().st_size for f in (broker.data_dir / "__consumer_offsets-0").glob("*.log"))


def test_background_compaction_shrinks_the_log_and_keeps_the_state(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory(CLEANER)  # type: ignore[operator]
    create_topic(broker.bootstrap, "c", 4)
    with WireClient(broker.host, broker.port) as client:
        _commit(client, 0)
        one_batch = _log_bytes(broker)
        for offset in range(10, 4000, 10):
            _commit(client, offset)
        expected = _fetch(client)
        # 400 commits of the same 4 keys, one batch each: uncompacted that is 400 batches;
        # the cleaner keeps only the latest record of each key.
        broker.wait_for_log(r"cleaned __consumer_offsets-0: .*records_after", timeout=30)
        wait_until(lambda: _log_bytes(broker) < 400 * one_batch / 4, 30, "the log to shrink")
        assert _fetch(client) == expected
    broker.restart()
    with WireClient(broker.host, broker.port) as client:
        assert _fetch(client) == expected == [(p, 3990 + p, "m3990") for p in range(4)]


def test_compaction_can_be_turned_off(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory(dict(CLEANER, **{"log.cleaner.enable": "false"}))  # type: ignore[operator]
    create_topic(broker.bootstrap, "c", 4)
    with WireClient(broker.host, broker.port) as client:
        for offset in range(0, 1000, 10):
            _commit(client, offset)
        written = _log_bytes(broker)
        # A later commit is durable once answered; by then the (disabled) cleaner has had
        # many backoff periods in which it would have run.
        for offset in range(1000, 3000, 10):
            _commit(client, offset)
    assert _log_bytes(broker) > written
    assert "cleaned __consumer_offsets" not in broker.log()


def _commits_in(paths: list[Path]) -> dict[int, int]:
    """log offset -> committed offset of partition 0, over the given segment files."""
    found: dict[int, int] = {}
    for path in paths:
        for _, batch in iter_batches(path.read_bytes()):
            for record in batch.records or []:
                if record.value is None or record.key is None:
                    continue
                key = decode_key(record.key)
                if isinstance(key, OffsetKey) and key.partition == 0:
                    found[batch.offset_of(record)] = decode_offset_value(record.value).offset
    return found


def _live_then_history(live: Path, history: Path) -> tuple[dict[int, int], dict[int, int]]:
    """Read the live segments, then the history ones, while the cleaner keeps running.

    The cleaner copies a segment to history before it replaces the live one, so reading
    live first and history second sees every commit at least once. A segment the cleaner
    swaps out between the listing and the read is gone; the whole read is then repeated.
    """
    for _ in range(50):
        try:
            live_commits = _commits_in(sorted(live.glob("*.log")))
            return live_commits, _commits_in(sorted(history.glob("*.log")))
        except FileNotFoundError:
            continue
    raise AssertionError("the cleaner replaced segments during each of 50 reads")


def test_history_retention_keeps_every_commit_the_cleaner_removed(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory(  # type: ignore[operator]
        dict(CLEANER, **{"log.history.retention.ms": 86_400_000}))
    create_topic(broker.bootstrap, "c", 4)
    history = broker.data_dir / "history" / "__consumer_offsets-0"
    with WireClient(broker.host, broker.port) as client:
        for offset in range(0, 4000, 10):
            _commit(client, offset)
        broker.wait_for_log(r"cleaned __consumer_offsets-0: .*records_after", timeout=30)
        wait_until(lambda: history.is_dir() and any(history.glob("*.log")), 30, "history segments")
        live_commits, history_commits = _live_then_history(broker.data_dir / "__consumer_offsets-0", history)
        assert len(live_commits) < 400, "the live log was compacted"
        union = history_commits | live_commits
        # Every commit ever made is in history + live, each at one log offset.
        assert sorted(union.values()) == list(range(0, 4000, 10))
    broker.restart()  # the history folder does not confuse start-up
    with WireClient(broker.host, broker.port) as client:
        assert _fetch(client) == [(p, 3990 + p, "m3990") for p in range(4)]


def test_history_segments_age_out_after_the_retention(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory(  # type: ignore[operator]
        dict(CLEANER, **{"log.history.retention.ms": 1500}))
    create_topic(broker.bootstrap, "c", 4)
    history = broker.data_dir / "history" / "__consumer_offsets-0"
    with WireClient(broker.host, broker.port) as client:
        for offset in range(0, 2000, 10):
            _commit(client, offset)
        broker.wait_for_log(r"history: removed \d+ segments", timeout=30)
        # Nothing new is written, so every retired segment ages out within the retention
        # plus a cleaner pass or two.
        wait_until(lambda: not any(history.glob("*.log")), 30, "history to empty")
        assert _fetch(client) == [(p, 1990 + p, "m1990") for p in range(4)]
