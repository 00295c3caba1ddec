"""Committed offsets on the real broker process: every wire version, real clients, expiry.

OffsetCommit, OffsetFetch, OffsetDelete (KIP-496) and expiry (KIP-211):
docs/coordinator-rules.md#offset-commit, #offset-fetch, #offset-delete and #offset-expiry.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess
from tests.support.clients import learn_partitions, wait_until
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

E = ErrorCode
TP = tuple[str, int]
UNICODE = "naïve ☃ 😀 \t \u00a0 日本語"


# ---------------------------------------------------------------- raw-protocol helpers


def _create_topic(client: WireClient, name: str, partitions: int) -> None:
    body = client.request(19, 4, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                    "assignments": [], "configs": []}],
        "timeout_ms": 5000, "validate_only": False})
    assert [(t.name, t.error_code) for t in body.topics] == [(name, 0)], body


def _commit(client: WireClient, version: int, group: str,
            offsets: dict[TP, tuple[int, str | None]], *, leader_epoch: int = -1, retention: int = -1,
            commit_timestamp: int = -1, generation: int = -1, member_id: str = "") -> dict[TP, int]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), (offset, metadata) in offsets.items():
        topics.setdefault(topic, []).append({
            "partition_index": partition, "committed_offset": offset, "committed_leader_epoch": leader_epoch,
            "commit_timestamp": commit_timestamp, "committed_metadata": metadata})
    body = client.request(8, version, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "group_instance_id": None, "retention_time_ms": retention,
        "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]})
    return {(t.name, p.partition_index): p.error_code for t in body.topics for p in t.partitions}


def _topics_field(topics: dict[str, list[int]] | None) -> list[dict[str, Any]] | None:
    if topics is None:
        return None
    return [{"name": n, "partition_indexes": ps} for n, ps in topics.items()]


def _parts(topics: Any, version: int) -> dict[TP, tuple[int, int | None, str, int]]:
    """(offset, leader epoch or None below v5, metadata, error) by partition."""
    return {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch if version >= 5 else None,
                                          p.metadata, p.error_code)
            for t in topics for p in t.partitions}


def _fetch(client: WireClient, version: int, group: str,
           topics: dict[str, list[int]] | None) -> dict[TP, tuple[int, int | None, str, int]]:
    if version >= 8:
        body = client.request(9, version, {"groups": [{"group_id": group, "topics": _topics_field(topics)}],
                                           "require_stable": False})
        (result,) = body.groups
        assert (result.group_id, result.error_code) == (group, 0)
        return _parts(result.topics, version)
    body = client.request(9, version, {"group_id": group, "topics": _topics_field(topics),
                                       "require_stable": False})
    if version >= 2:
        assert body.error_code == 0
    return _parts(body.topics, version)


def _offset(client: WireClient, group: str, topic: str, partition: int) -> int:
    return _fetch(client, 8, group, {topic: [partition]})[(topic, partition)][0]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the raw-protocol tests that need no special configuration."""
    broker = BrokerProcess(tmp_path_factory.mktemp("offsets")).start()
    with WireClient(broker.host, broker.port) as client:
        _create_topic(client, "t", 3)
        _create_topic(client, "u", 2)
    yield broker
    assert broker.stop() == 0, broker.log()
    assert "Traceback" not in broker.log()


@pytest.fixture
def wire(shared: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(shared.host, shared.port) as client:
        yield client


# ---------------------------------------------------------------- every version


@pytest.mark.parametrize("commit_version", range(9))
def test_commit_at_every_version_reads_back_at_every_version(wire: WireClient, commit_version: int) -> None:
    group = f"every-{commit_version}"
    v = commit_version
    result = _commit(wire, v, group, {("t", 0): (100 + v, None), ("t", 1): (200 + v, ""),
                                      ("t", 2): (300 + v, UNICODE)},
                     leader_epoch=7, retention=3_600_000 if 2 <= v <= 4 else -1,
                     commit_timestamp=int(time.time() * 1000) if v == 1 else -1)
    assert result == {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    for fetch_version in range(9):
        epoch: int | None = (7 if v >= 6 else -1) if fetch_version >= 5 else None
        got = _fetch(wire, fetch_version, group, {"t": [0, 1, 2]})
        assert got == {
            ("t", 0): (100 + v, epoch, "", 0),  # null metadata reads back as ""
            ("t", 1): (200 + v, epoch, "", 0),
            ("t", 2): (300 + v, epoch, UNICODE, 0),
        }, f"committed at v{v}, fetched at v{fetch_version}"


@pytest.mark.parametrize("fetch_version", range(2, 9))
def test_fetch_all_topics_with_null_topics(wire: WireClient, fetch_version: int) -> None:
    group = f"all-{fetch_version}"
    assert _commit(wire, 8, group, {("t", 0): (1, "a"), ("t", 2): (2, "b"), ("u", 1): (3, None)},
                   leader_epoch=4) == {("t", 0): 0, ("t", 2): 0, ("u", 1): 0}
    epoch = 4 if fetch_version >= 5 else None
    assert _fetch(wire, fetch_version, group, None) == {
        ("t", 0): (1, epoch, "a", 0), ("t", 2): (2, epoch, "b", 0), ("u", 1): (3, epoch, "", 0)}
    # an unknown group with an all-topics request: an empty topic list, no error
    assert _fetch(wire, fetch_version, f"nobody-{fetch_version}", None) == {}


def test_fetch_v8_several_groups(wire: WireClient) -> None:
    _commit(wire, 8, "multi-a", {("t", 0): (10, "ma")})
    _commit(wire, 8, "multi-b", {("t", 1): (20, None), ("u", 0): (21, "mb")})
    body = wire.request(9, 8, {"require_stable": False, "groups": [
        {"group_id": "multi-a", "topics": [{"name": "t", "partition_indexes": [0, 1]}]},
        {"group_id": "multi-b", "topics": None},
        {"group_id": "multi-none", "topics": None},
        {"group_id": "multi-none2", "topics": [{"name": "t", "partition_indexes": [2]}]},
    ]})
    assert [(g.group_id, g.error_code) for g in body.groups] == [
        ("multi-a", 0), ("multi-b", 0), ("multi-none", 0), ("multi-none2", 0)]
    groups = {g.group_id: _parts(g.topics, 8) for g in body.groups}
    assert groups == {
        "multi-a": {("t", 0): (10, -1, "ma", 0), ("t", 1): (-1, -1, "", 0)},
        "multi-b": {("t", 1): (20, -1, "", 0), ("u", 0): (21, -1, "mb", 0)},
        "multi-none": {},
        "multi-none2": {("t", 2): (-1, -1, "", 0)},
    }


@pytest.mark.parametrize("fetch_version", range(9))
def test_uncommitted_partitions_read_minus_one_without_error(wire: WireClient, fetch_version: int) -> None:
    group = f"sparse-{fetch_version}"
    _commit(wire, 8, group, {("t", 1): (5, "x")})
    epoch = -1 if fetch_version >= 5 else None
    assert _fetch(wire, fetch_version, group, {"t": [0, 1, 2], "u": [0], "not-a-topic": [3]}) == {
        ("t", 0): (-1, epoch, "", 0), ("t", 1): (5, epoch, "x", 0), ("t", 2): (-1, epoch, "", 0),
        ("u", 0): (-1, epoch, "", 0), ("not-a-topic", 3): (-1, epoch, "", 0)}
    # an unknown group: every requested partition -1, NONE; no group-level error
    assert _fetch(wire, fetch_version, f"ghost-{fetch_version}", {"t": [0]}) == {("t", 0): (-1, epoch, "", 0)}


def test_commit_overwrites_and_reads_latest(wire: WireClient) -> None:
    for i in range(5):
        assert _commit(wire, 8, "latest", {("t", 0): (i, f"m{i}")}, leader_epoch=i) == {("t", 0): 0}
    assert _fetch(wire, 8, "latest", {"t": [0]}) == {("t", 0): (4, 4, "m4", 0)}
    # offsets may go backwards: the broker stores what it is told
    assert _commit(wire, 8, "latest", {("t", 0): (1, None)}) == {("t", 0): 0}
    assert _fetch(wire, 8, "latest", {"t": [0]}) == {("t", 0): (1, -1, "", 0)}


def test_unknown_topic_or_partition_per_partition(wire: WireClient) -> None:
    result = _commit(wire, 8, "unknown", {("t", 0): (1, "ok"), ("t", 3): (2, None), ("nope", 0): (3, None)})
    assert result == {("t", 0): 0, ("t", 3): E.UNKNOWN_TOPIC_OR_PARTITION,
                      ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert _fetch(wire, 8, "unknown", None) == {("t", 0): (1, -1, "ok", 0)}
    # the same for a group that does not exist yet and only names unknown partitions: no group appears
    assert _commit(wire, 2, "unknown-only", {("nope", 0): (3, None)}) == {("nope", 0): 3}
    listed = wire.request(16, 4, {"states_filter": []})
    assert "unknown-only" not in [g.group_id for g in listed.groups]
    # auto-create through Metadata, then the same commit is accepted
    meta = wire.request(3, 9, {"topics": [{"name": "nope"}], "allow_auto_topic_creation": True})
    assert [(t.name, t.error_code) for t in meta.topics] == [("nope", 0)]
    assert _commit(wire, 8, "unknown", {("nope", 0): (3, None)}) == {("nope", 0): 0}
    assert _offset(wire, "unknown", "nope", 0) == 3


def test_offset_metadata_too_large_per_partition(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory({"offset.metadata.max.bytes": 8})
    with WireClient(broker.host, broker.port) as client:
        _create_topic(client, "t", 6)
        for version in (1, 5, 8):
            group = f"big-{version}"
            result = _commit(client, version, group, {
                ("t", 0): (1, "x" * 8),
                ("t", 1): (2, "x" * 9),
                ("t", 2): (3, "😀" * 4),  # 8 UTF-16 units (16 UTF-8 bytes): fits
                ("t", 3): (4, "😀" * 4 + "a"),
                ("t", 4): (5, "é" * 8),  # 8 units, 16 bytes: fits
                ("t", 5): (6, None),
            })
            assert result == {("t", 0): 0, ("t", 1): E.OFFSET_METADATA_TOO_LARGE, ("t", 2): 0,
                              ("t", 3): E.OFFSET_METADATA_TOO_LARGE, ("t", 4): 0, ("t", 5): 0}, version
            assert _fetch(client, 8, group, {"t": list(range(6))}) == {
                ("t", 0): (1, -1, "x" * 8, 0), ("t", 1): (-1, -1, "", 0), ("t", 2): (3, -1, "😀" * 4, 0),
                ("t", 3): (-1, -1, "", 0), ("t", 4): (5, -1, "é" * 8, 0), ("t", 5): (6, -1, "", 0)}


def test_offset_delete_on_the_wire(wire: WireClient) -> None:
    def delete(group: str, partitions: list[TP]) -> tuple[int, dict[TP, int]]:
        topics: dict[str, list[dict[str, int]]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append({"partition_index": partition})
        body = wire.request(47, 0, {"group_id": group,
                                    "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]})
        return body.error_code, {(t.name, p.partition_index): p.error_code
                                 for t in body.topics for p in t.partitions}

    assert delete("", [("t", 0)]) == (E.INVALID_GROUP_ID, {})
    assert delete("never-existed", [("t", 0)]) == (E.GROUP_ID_NOT_FOUND, {})
    _commit(wire, 8, "del-simple", {("t", 0): (1, None), ("t", 1): (2, None), ("u", 0): (3, None)})
    assert delete("del-simple", [("t", 0), ("t", 2), ("u", 5), ("gone", 0)]) == (0, {
        ("t", 0): 0, ("t", 2): 0, ("u", 5): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("gone", 0): E.UNKNOWN_TOPIC_OR_PARTITION})
    assert _fetch(wire, 8, "del-simple", None) == {("t", 1): (2, -1, "", 0), ("u", 0): (3, -1, "", 0)}


# ---------------------------------------------------------------- real clients


def _kafka_python_commit_and_read(bootstrap: str, group: str, tp: TP, offset: int, metadata: str,
                                  epoch: int) -> tuple[int, str, int]:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        partition = TopicPartition(*tp)
        consumer.commit({partition: OffsetAndMetadata(offset, metadata, epoch)})
        got = consumer.committed(partition, metadata=True)
        return got.offset, got.metadata, got.leader_epoch
    finally:
        consumer.close()


def _kafka_python_read(bootstrap: str, group: str, tp: TP) -> tuple[int, str]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        got = consumer.committed(TopicPartition(*tp), metadata=True)
        return got.offset, got.metadata
    finally:
        consumer.close()


def _confluent_consumer(bootstrap: str, group: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})


def _confluent_commit_and_read(bootstrap: str, group: str, tp: TP, offset: int,
                               metadata: str) -> tuple[int, str | None]:
    from confluent_kafka import TopicPartition

    consumer = _confluent_consumer(bootstrap, group)
    try:
        (committed,) = consumer.commit(offsets=[TopicPartition(tp[0], tp[1], offset, metadata=metadata)],
                                       asynchronous=False)
        assert committed.error is None, committed.error
        (got,) = consumer.committed([TopicPartition(*tp)], timeout=10)
        assert got.error is None, got.error
        return got.offset, _confluent_metadata(got)
    finally:
        consumer.close()


UNREADABLE = "<confluent-kafka could not decode the metadata>"


def _confluent_metadata(partition: Any) -> str | None:
    """The metadata of a confluent-kafka TopicPartition, or UNREADABLE where the client
    fails to decode it (see _confluent_metadata_matches)."""
    try:
        metadata: str | None = partition.metadata
    except UnicodeDecodeError:
        return UNREADABLE
    return metadata


def _confluent_metadata_matches(read: tuple[int, str | None], offset: int, metadata: str) -> bool:
    """confluent-kafka (2.16.1) turns the metadata it reads into a str as a C string, so
    when the bytes another client committed are not followed by a NUL in its buffer it
    reads on past them (a stray byte, or a UnicodeDecodeError). The broker returns the
    bytes exactly (the raw-protocol checks in this file). Accept the exact metadata, or
    the exact metadata followed by what that client bug appends."""
    got_offset, got_metadata = read
    if got_offset != offset or got_metadata is None:
        return False
    return got_metadata == UNREADABLE or got_metadata.startswith(metadata)


def _confluent_read(bootstrap: str, group: str, tp: TP) -> tuple[int, str | None]:
    from confluent_kafka import TopicPartition

    consumer = _confluent_consumer(bootstrap, group)
    try:
        (got,) = consumer.committed([TopicPartition(*tp)], timeout=10)
        assert got.error is None, got.error
        return got.offset, _confluent_metadata(got)
    finally:
        consumer.close()


async def _aiokafka_commit_and_read(bootstrap: str, group: str, tp: TP, offset: int, metadata: str,
                                    read_group: str, read_tp: TP) -> tuple[int | None, int | None]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import OffsetAndMetadata, TopicPartition

    mine, theirs = TopicPartition(*tp), TopicPartition(*read_tp)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    other = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=read_group, enable_auto_commit=False)
    await consumer.start()
    await other.start()
    try:
        consumer.assign([mine])  # a "simple" consumer: manual assignment, generation -1
        await consumer.commit({mine: OffsetAndMetadata(offset, metadata)})
        return await consumer.committed(mine), await other.committed(theirs)
    finally:
        await consumer.stop()
        await other.stop()


async def _aiokafka_admin_offsets(bootstrap: str, groups: list[str]) -> dict[str, dict[TP, tuple[int, str]]]:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        out = {}
        for group in groups:
            listed = await admin.list_consumer_group_offsets(group)
            out[group] = {(tp.topic, tp.partition): (om.offset, om.metadata) for tp, om in listed.items()}
        return out
    finally:
        await admin.close()


def _kafka_python_admin_offsets(bootstrap: str, groups: list[str]) -> dict[str, dict[TP, tuple[int, str]]]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        listed = admin.list_group_offsets({g: None for g in groups})
    finally:
        admin.close()
    return {g: {(tp.topic, tp.partition): (om.offset, om.metadata) for tp, om in offsets.items()}
            for g, offsets in listed.items()}


def _confluent_admin_offsets(bootstrap: str, groups: list[str]) -> dict[str, dict[TP, int]]:
    """Offsets only: confluent-kafka's admin result (2.16.1) reads the metadata as a C string
    that is not NUL-terminated (garbage or a UnicodeDecodeError follows the real bytes; the
    raw-protocol tests show the broker returns them exactly), so its metadata is not checked."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    out = {}
    for group in groups:  # librdkafka: one group per request
        futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=10)
        result = futures[group].result(timeout=15)
        out[group] = {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}
    return out


def _without_confluent_nul(listed: dict[str, dict[TP, tuple[int, str]]], group: str) -> None:
    """confluent-kafka (2.16.1) sends commit metadata with the C string's trailing NUL byte
    (observed on the wire; its own committed() reads it back as a C string and drops it).
    The broker stores the bytes it is given, so other readers see the NUL: accept exactly
    that one byte, nothing else."""
    for tp, (offset, metadata) in listed[group].items():
        if metadata.endswith("\x00"):
            listed[group][tp] = (offset, metadata[:-1])


def test_real_clients_commit_metadata_and_read_each_other(shared: BrokerProcess) -> None:
    bootstrap = shared.bootstrap
    kp_meta, cf_meta, ak_meta = "kafka-python ☃", "confluent 😀", "aiokafka é"

    assert _kafka_python_commit_and_read(bootstrap, "c-kp", ("t", 0), 10, kp_meta, 3) == (10, kp_meta, 3)
    assert _confluent_commit_and_read(bootstrap, "c-cf", ("t", 1), 20, cf_meta) == (20, cf_meta)
    own, read = asyncio.run(_aiokafka_commit_and_read(bootstrap, "c-ak", ("u", 0), 30, ak_meta,
                                                      "c-kp", ("t", 0)))
    assert (own, read) == (30, 10)  # aiokafka's committed() exposes offsets only

    # each consumer library reads another library's group, metadata included where exposed
    assert _kafka_python_read(bootstrap, "c-cf", ("t", 1)) in {(20, cf_meta), (20, cf_meta + "\x00")}
    assert _kafka_python_read(bootstrap, "c-ak", ("u", 0)) == (30, ak_meta)
    assert _confluent_metadata_matches(_confluent_read(bootstrap, "c-kp", ("t", 0)), 10, kp_meta)
    assert _confluent_metadata_matches(_confluent_read(bootstrap, "c-ak", ("u", 0)), 30, ak_meta)
    assert _confluent_read(bootstrap, "c-ak", ("u", 1)) == (-1001, None)  # librdkafka: OFFSET_INVALID
    with WireClient(shared.host, shared.port) as client:
        assert _fetch(client, 8, "c-kp", None) == {("t", 0): (10, 3, kp_meta, 0)}
        assert _fetch(client, 8, "c-ak", None) == {("u", 0): (30, -1, ak_meta, 0)}

    # and the three admin clients list all of it
    expected = {"c-kp": {("t", 0): (10, kp_meta)}, "c-cf": {("t", 1): (20, cf_meta)},
                "c-ak": {("u", 0): (30, ak_meta)}}
    groups = list(expected)
    for listed in (_kafka_python_admin_offsets(bootstrap, groups),
                   asyncio.run(_aiokafka_admin_offsets(bootstrap, groups))):
        _without_confluent_nul(listed, "c-cf")
        assert listed == expected
    assert _confluent_admin_offsets(bootstrap, groups) == {
        g: {tp: offset for tp, (offset, _) in parts.items()} for g, parts in expected.items()}


def _describe_state(broker: BrokerProcess, group: str) -> str:
    with WireClient(broker.host, broker.port) as client:
        return str(client.request(15, 5, {"groups": [group], "include_authorized_operations": False})
                   .groups[0].group_state)


def test_kafka_python_deletes_group_offsets(broker_factory: Any) -> None:
    import kafka.errors as kafka_errors
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    broker: BrokerProcess = broker_factory({"group.initial.rebalance.delay.ms": 1000})
    with WireClient(broker.host, broker.port) as client:
        _create_topic(client, "sub", 2)
        _create_topic(client, "other", 1)
    sub0, sub1, other0 = TopicPartition("sub", 0), TopicPartition("sub", 1), TopicPartition("other", 0)

    consumer = KafkaConsumer("sub", bootstrap_servers=broker.bootstrap, group_id="del",
                             enable_auto_commit=False, session_timeout_ms=10_000, heartbeat_interval_ms=500)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        learn_partitions(consumer, ["sub"])
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, "consumer never got its assignment"
            consumer.poll(timeout_ms=100)
        assert consumer.assignment() == {sub0, sub1}
        assert _describe_state(broker, "del") == "Stable"
        # a generation commit by the member, for its own topic and an unsubscribed one
        consumer.commit({sub0: OffsetAndMetadata(5, "s0", -1), sub1: OffsetAndMetadata(6, "s1", -1),
                         other0: OffsetAndMetadata(7, "o0", -1)})

        result = admin.delete_group_offsets("del", [sub0, sub1, other0])
        assert result == {sub0: kafka_errors.GroupSubscribedToTopicError,
                          sub1: kafka_errors.GroupSubscribedToTopicError,
                          other0: kafka_errors.NoError}
        assert admin.list_group_offsets({"del": None})["del"] == {
            sub0: OffsetAndMetadata(5, "s0", -1), sub1: OffsetAndMetadata(6, "s1", -1)}
        with pytest.raises(kafka_errors.GroupIdNotFoundError):
            admin.delete_group_offsets("no-such-group", [sub0])

        consumer.close()  # leaves the group
        wait_until(lambda: _describe_state(broker, "del") == "Empty", 10, "group del to become Empty")
        assert admin.delete_group_offsets("del", [sub0, sub1]) == {
            sub0: kafka_errors.NoError, sub1: kafka_errors.NoError}
        assert admin.list_group_offsets({"del": None})["del"] == {}
    finally:
        consumer.close()
        admin.close()


# ---------------------------------------------------------------- expiry end to end


def _restart_without_cleanup(broker_factory: Any, broker: BrokerProcess) -> BrokerProcess:
    """SIGKILL, then start on the same data with the default (10 min) cleanup interval.

    The next cleanup is then far away: whatever reads -1 after the restart does so because
    a tombstone made it to disk, not because the new process expired the offset again."""
    broker.kill()
    return broker_factory(None, data_dir=broker.data_dir)  # type: ignore[no-any-return]


def test_explicit_retention_expires_end_to_end(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory({"offsets.retention.check.interval.ms": 100})
    with WireClient(broker.host, broker.port) as client:
        _create_topic(client, "t", 4)
        sent_at = time.time()
        assert _commit(client, 2, "short", {("t", 0): (11, "v2")}, retention=1000) == {("t", 0): 0}
        assert _commit(client, 3, "short", {("t", 1): (12, "v3")}, retention=1000) == {("t", 1): 0}
        assert _commit(client, 4, "short", {("t", 2): (13, "v4")}, retention=1000) == {("t", 2): 0}
        assert _commit(client, 2, "short", {("t", 3): (14, "keep")}, retention=-1) == {("t", 3): 0}
        assert _commit(client, 2, "gone", {("t", 0): (15, None)}, retention=1000) == {("t", 0): 0}
        assert _fetch(client, 8, "short", {"t": [0, 1, 2]}) == {
            ("t", 0): (11, -1, "v2", 0), ("t", 1): (12, -1, "v3", 0), ("t", 2): (13, -1, "v4", 0)}

        def expired() -> bool:
            return all(o == -1 for o, *_ in _fetch(client, 8, "short", {"t": [0, 1, 2]}).values())

        wait_until(expired, 15, "offsets with a 1 s retention to expire")
        assert time.time() - sent_at >= 1.0  # never before the expire timestamp
        wait_until(lambda: _offset(client, "gone", "t", 0) == -1, 5, "group gone's offset to expire")
        assert _fetch(client, 8, "short", None) == {("t", 3): (14, -1, "keep", 0)}
        # the group left with no offsets is dropped
        wait_until(lambda: _describe_state(broker, "gone") == "Dead", 5, "group gone to be removed")
        listed = {g.group_id for g in client.request(16, 4, {"states_filter": []}).groups}
        assert "gone" not in listed and "short" in listed

    restarted = _restart_without_cleanup(broker_factory, broker)
    with WireClient(restarted.host, restarted.port) as client:
        assert _fetch(client, 8, "short", None) == {("t", 3): (14, -1, "keep", 0)}
        assert _fetch(client, 8, "gone", None) == {}
        assert _describe_state(restarted, "gone") == "Dead"


def test_v1_commit_timestamp_is_the_expiry_base_end_to_end(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory({"offsets.retention.check.interval.ms": 100,
                                            "offsets.retention.minutes": 1})
    with WireClient(broker.host, broker.port) as client:
        _create_topic(client, "t", 2)
        long_ago = int(time.time() * 1000) - 120_000
        assert _commit(client, 1, "v1", {("t", 0): (1, "old")}, commit_timestamp=long_ago) == {("t", 0): 0}
        assert _commit(client, 1, "v1", {("t", 1): (2, "now")}, commit_timestamp=-1) == {("t", 1): 0}
        wait_until(lambda: _offset(client, "v1", "t", 0) == -1, 10, "the old v1 commit to expire")
        assert _fetch(client, 8, "v1", None) == {("t", 1): (2, -1, "now", 0)}

    restarted = _restart_without_cleanup(broker_factory, broker)
    with WireClient(restarted.host, restarted.port) as client:
        assert _fetch(client, 8, "v1", None) == {("t", 1): (2, -1, "now", 0)}


def test_an_offset_committed_after_the_snapshot_is_served_after_a_crash(broker_factory: Any) -> None:
    """A clean stop writes the coordinator snapshot; what is committed after the next start
    lives only in the log after it, which start-up replays on top of the snapshot, whose
    groups are served whether or not they are used again (docs/storage.md)."""
    broker: BrokerProcess = broker_factory()
    with WireClient(broker.host, broker.port) as client:
        _create_topic(client, "t", 2)
        assert _commit(client, 8, "moves", {("t", 0): (5, "before")}) == {("t", 0): 0}
        assert _commit(client, 8, UNICODE, {("t", 0): (6, "kept"), ("t", 1): (7, "")}) == {("t", 0): 0, ("t", 1): 0}
    assert broker.stop() == 0
    snapshot = broker.data_dir / "__consumer_offsets.snapshot"
    assert snapshot.exists(), "a clean stop writes the snapshot"

    again: BrokerProcess = broker_factory(None, data_dir=broker.data_dir)
    again.wait_for_log(r"loaded the coordinator snapshot \(3 offsets")
    with WireClient(again.host, again.port) as client:
        assert _fetch(client, 8, "moves", None) == {("t", 0): (5, -1, "before", 0)}
        assert _commit(client, 8, "moves", {("t", 0): (9, "after")}) == {("t", 0): 0}
        assert _commit(client, 8, "new", {("t", 1): (3, "late")}) == {("t", 1): 0}
    again.kill()  # no new snapshot: the two commits are in the log only

    third: BrokerProcess = broker_factory(None, data_dir=broker.data_dir)
    third.wait_for_log(r"loaded the coordinator snapshot \(4 offsets, 0 group records\) and 2 records after it")
    with WireClient(third.host, third.port) as client:
        assert _fetch(client, 8, "moves", None) == {("t", 0): (9, -1, "after", 0)}
        assert _fetch(client, 8, "new", None) == {("t", 1): (3, -1, "late", 0)}
        assert _fetch(client, 8, UNICODE, None) == {("t", 0): (6, -1, "kept", 0), ("t", 1): (7, -1, "", 0)}


def test_offsets_survive_graceful_restart_at_every_version(broker_factory: Any, tmp_path: Path) -> None:
    broker: BrokerProcess = broker_factory()
    with WireClient(broker.host, broker.port) as client:
        _create_topic(client, "t", 1)
        for version in range(9):
            assert _commit(client, version, f"r{version}", {("t", 0): (version, f"m{version}")},
                           leader_epoch=9) == {("t", 0): 0}
    assert broker.stop() == 0
    again: BrokerProcess = broker_factory(None, data_dir=broker.data_dir)
    with WireClient(again.host, again.port) as client:
        for version in range(9):
            assert _fetch(client, 8, f"r{version}", None) == {
                ("t", 0): (version, 9 if version >= 6 else -1, f"m{version}", 0)}
