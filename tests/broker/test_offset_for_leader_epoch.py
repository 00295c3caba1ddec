"""OffsetForLeaderEpoch: where each leader epoch ends in a partition's log (KIP-101, KIP-320).

The log below holds epoch 2 at offsets 0-2, epoch 5 at 3-4 and epoch 7 at 5 (log end 6):
an epoch's end offset is where the next epoch starts, the latest one's the log end, and
an epoch between two known ones answers with the older (Kafka's
LeaderEpochFileCache.endOffsetFor).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.config import Config
from broker.data_service import DataService
from broker.topics import TopicCatalog
from protocol.api_keys import ApiKey
from protocol.codec import decode_request, encode_request
from protocol.errors import ErrorCode

LEADER_EPOCH = 9  # the partition's current leader epoch, as the placement service says


@pytest.fixture
def data(tmp_path: Path) -> Any:
    catalog = TopicCatalog(tmp_path, Config({}))
    assert catalog.create("t", 1, 1, {})[0] is ErrorCode.NONE
    log = catalog.partition("t", 0)
    assert log is not None
    for epoch, count in ((2, 3), (5, 2), (7, 1)):
        log.leader_epoch = epoch
        for _ in range(count):
            log.append([(b"k", b"v")], 1000)
    yield DataService(catalog, lambda: 1000, durable=False)
    catalog.close()


def ask(data: DataService, *partitions: tuple[str, int, int, int], version: int = 4) -> list[tuple[int, int, int]]:
    """(error, leader epoch, end offset) for each (topic, partition, current epoch, epoch)."""
    body = {"replica_id": -1, "topics": [
        {"topic": topic, "partitions": [{"partition": p, "current_leader_epoch": current, "leader_epoch": epoch}]}
        for topic, p, current, epoch in partitions]}
    request = decode_request(encode_request(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, 1, body)[4:])
    answer = data.offset_for_leader_epoch(request, lambda topic, index: LEADER_EPOCH)
    return [(p["error_code"], p["leader_epoch"], p["end_offset"]) for t in answer["topics"] for p in t["partitions"]]


def test_a_known_epoch_ends_where_the_next_one_starts(data: DataService) -> None:
    assert ask(data, ("t", 0, LEADER_EPOCH, 2)) == [(0, 2, 3)]
    assert ask(data, ("t", 0, LEADER_EPOCH, 5)) == [(0, 5, 5)]


def test_an_epoch_between_two_known_ones_answers_with_the_older(data: DataService) -> None:
    assert ask(data, ("t", 0, LEADER_EPOCH, 4)) == [(0, 2, 3)]


def test_the_latest_epoch_and_any_newer_one_end_at_the_log_end(data: DataService) -> None:
    assert ask(data, ("t", 0, LEADER_EPOCH, 7)) == [(0, 7, 6)]
    assert ask(data, ("t", 0, LEADER_EPOCH, 8)) == [(0, 7, 6)]


def test_an_epoch_older_than_the_log_knows_ends_where_its_oldest_epoch_starts(data: DataService) -> None:
    # Kafka's LeaderEpochFileCache.endOffsetFor: (the asked epoch, the oldest known epoch's start).
    assert ask(data, ("t", 0, LEADER_EPOCH, 1)) == [(0, 1, 0)]


def test_no_epoch_asked_or_none_known_is_undefined(data: DataService, tmp_path: Path) -> None:
    assert ask(data, ("t", 0, LEADER_EPOCH, -1)) == [(0, -1, -1)]
    catalog = TopicCatalog(tmp_path / "empty", Config({}))
    try:
        assert catalog.create("e", 1, 1, {})[0] is ErrorCode.NONE
        empty = DataService(catalog, lambda: 1000, durable=False)
        assert ask(empty, ("e", 0, LEADER_EPOCH, 3)) == [(0, -1, -1)]
    finally:
        catalog.close()


def test_an_unknown_topic_or_partition_is_refused_per_partition(data: DataService) -> None:
    unknown = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert ask(data, ("t", 3, -1, 2), ("nope", 0, -1, 2), ("t", 0, -1, 2)) == [
        (unknown, -1, -1), (unknown, -1, -1), (0, 2, 3)]


def test_a_stale_current_leader_epoch_is_fenced_and_a_newer_one_unknown(data: DataService) -> None:
    assert ask(data, ("t", 0, LEADER_EPOCH - 1, 2)) == [(int(ErrorCode.FENCED_LEADER_EPOCH), -1, -1)]
    assert ask(data, ("t", 0, LEADER_EPOCH + 1, 2)) == [(int(ErrorCode.UNKNOWN_LEADER_EPOCH), -1, -1)]


def test_no_current_leader_epoch_is_not_checked(data: DataService) -> None:
    """-1 (or v0-v1, which cannot say) means the client does not know: no fencing."""
    assert ask(data, ("t", 0, -1, 5)) == [(0, 5, 5)]
    assert ask(data, ("t", 0, LEADER_EPOCH - 1, 5), version=1) == [(0, 5, 5)]


def test_a_follower_gets_the_same_answer(data: DataService) -> None:
    body = {"replica_id": 2, "topics": [
        {"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": LEADER_EPOCH, "leader_epoch": 5}]}]}
    request = decode_request(encode_request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, 1, body)[4:])
    answer = data.offset_for_leader_epoch(request, lambda topic, index: LEADER_EPOCH)
    assert answer["topics"][0]["partitions"][0]["end_offset"] == 5
