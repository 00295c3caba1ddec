"""Topic administration against the real broker: create, grow, delete."""

from __future__ import annotations

import uuid

import pytest

from protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration


def _create(client: WireClient, name: str, partitions: int, version: int = 5, **extra: object) -> object:
    body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                        "assignments": [], "configs": [{"name": k.replace("_", "."), "value": str(v)}
                                                       for k, v in extra.items()]}],
            "timeout_ms": 5000, "validate_only": False}
    return client.request(19, version, body).topics[0]


def _partitions(client: WireClient, name: str) -> list[int]:
    topic = client.request(3, 9, {"topics": [{"name": name}], "allow_auto_topic_creation": False}).topics[0]
    return [p.partition_index for p in topic.partitions] if topic.error_code == 0 else []


@pytest.mark.parametrize("version", range(0, 8))
def test_create_topics_every_version(broker: BrokerProcess, version: int) -> None:
    with WireClient(broker.host, broker.port) as client:
        created = _create(client, f"t{version}", 3, version)
        assert created.error_code == 0
        if version >= 5:
            assert (created.num_partitions, created.replication_factor) == (3, 1)
            assert {c.name for c in created.configs} >= {"retention.ms", "cleanup.policy"}
        if version >= 7:
            assert created.topic_id != uuid.UUID(int=0)
        assert _partitions(client, f"t{version}") == [0, 1, 2]
        again = _create(client, f"t{version}", 3, version)
        assert again.error_code == ErrorCode.TOPIC_ALREADY_EXISTS


@pytest.mark.parametrize(
    ("name", "partitions", "replication", "configs", "error"),
    [
        ("bad name!", 1, 1, {}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("x" * 250, 1, 1, {}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("..", 1, 1, {}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("zero", 0, 1, {}, ErrorCode.INVALID_PARTITIONS),
        ("rf3", 1, 3, {}, ErrorCode.INVALID_REPLICATION_FACTOR),
        ("badcfg", 1, 1, {"no.such.config": "1"}, ErrorCode.INVALID_CONFIG),
        ("badval", 1, 1, {"retention.ms": "soon"}, ErrorCode.INVALID_CONFIG),
    ],
)
def test_create_topics_validation(broker: BrokerProcess, name: str, partitions: int, replication: int,
                                  configs: dict[str, str], error: ErrorCode) -> None:
    with WireClient(broker.host, broker.port) as client:
        body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication,
                            "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                "timeout_ms": 5000, "validate_only": False}
        result = client.request(19, 5, body).topics[0]
    assert result.error_code == error
    assert result.error_message


def test_validate_only_creates_nothing(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as client:
        body = {"topics": [{"name": "dry", "num_partitions": 2, "replication_factor": 1, "assignments": [],
                            "configs": []}], "timeout_ms": 5000, "validate_only": True}
        assert client.request(19, 5, body).topics[0].error_code == 0
        assert _partitions(client, "dry") == []


def test_catalogue_survives_restart(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as client:
        topic_id = _create(client, "durable", 4, 7).topic_id
    broker.restart()
    with WireClient(broker.host, broker.port) as client:
        topic = client.request(3, 12, {"topics": [{"name": "durable", "topic_id": uuid.UUID(int=0)}],
                                       "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False}).topics[0]
    assert (topic.error_code, topic.topic_id, len(topic.partitions)) == (0, topic_id, 4)


@pytest.mark.parametrize("version", range(0, 4))
def test_create_partitions(broker: BrokerProcess, version: int) -> None:
    with WireClient(broker.host, broker.port) as client:
        _create(client, "grow", 2)

        def grow(count: int, validate_only: bool = False) -> object:
            return client.request(37, version, {"topics": [{"name": "grow", "count": count, "assignments": None}],
                                                "timeout_ms": 5000, "validate_only": validate_only}).results[0]

        assert grow(5, validate_only=True).error_code == 0
        assert _partitions(client, "grow") == [0, 1]
        assert grow(5).error_code == 0
        assert _partitions(client, "grow") == [0, 1, 2, 3, 4]
        shrink = grow(3)
        assert shrink.error_code == ErrorCode.INVALID_PARTITIONS and "higher than the requested" in shrink.error_message
        missing = client.request(37, version, {"topics": [{"name": "nope", "count": 3, "assignments": None}],
                                               "timeout_ms": 5000, "validate_only": False}).results[0]
        assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("version", [0, 5, 6])
def test_delete_topics_removes_data_and_committed_offsets(broker: BrokerProcess, version: int) -> None:
    with WireClient(broker.host, broker.port) as client:
        topic_id = _create(client, "doomed", 2, 7).topic_id
        keep_id = _create(client, "kept", 1, 7).topic_id
        del keep_id
        commit = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                  "group_instance_id": None, "topics": [
                      {"name": "doomed", "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                         "committed_leader_epoch": -1, "committed_metadata": ""}]},
                      {"name": "kept", "partitions": [{"partition_index": 0, "committed_offset": 9,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
        assert all(p.error_code == 0 for t in client.request(8, 8, commit).topics for p in t.partitions)
        if version >= 6:
            request = {"topics": [{"name": None, "topic_id": topic_id}], "timeout_ms": 5000}
        else:
            request = {"topic_names": ["doomed"], "timeout_ms": 5000}
        (result,) = client.request(20, version, request).responses
        assert result.error_code == 0
        assert _partitions(client, "doomed") == []
        fetched = client.request(9, 7, {"group_id": "g", "topics": None, "require_stable": False}).topics
        assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions]) for t in fetched] == [
            ("kept", [(0, 9)])]
        again = client.request(20, version, request).responses[0]
        expected = ErrorCode.UNKNOWN_TOPIC_ID if version >= 6 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert again.error_code == expected
    assert not (broker.data_dir / "doomed-0").exists()
    broker.restart()  # the tombstones were durable before the reply
    with WireClient(broker.host, broker.port) as client:
        fetched = client.request(9, 7, {"group_id": "g", "topics": None, "require_stable": False}).topics
        assert [t.name for t in fetched] == ["kept"]


def test_metadata_names_every_operation_without_an_authorizer(broker: BrokerProcess) -> None:
    """Kafka's AuthHelper.authorizedOperations: with no authorizer, everything a resource
    supports is allowed, and Metadata says so when it is asked (and only then)."""
    from security.acl import ResourceType
    from security.authorizer import all_operations

    def metadata(client: WireClient, version: int, asked: bool) -> object:
        topics = [{"name": name, "topic_id": uuid.UUID(int=0)} if version >= 10 else {"name": name}
                  for name in ("ops", "ops-missing")]
        body: dict[str, object] = {"topics": topics, "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": asked}
        if version <= 10:
            body["include_cluster_authorized_operations"] = asked
        return client.request(3, version, body)

    with WireClient(broker.host, broker.port) as client:
        assert _create(client, "ops", 1).error_code == 0
        for version in (8, 10, 12):
            asked = metadata(client, version, True)
            by_name = {t.name: t for t in asked.topics}
            assert by_name["ops"].topic_authorized_operations == all_operations(ResourceType.TOPIC)
            assert by_name["ops-missing"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert by_name["ops-missing"].topic_authorized_operations == all_operations(ResourceType.TOPIC)
            if version <= 10:
                assert asked.cluster_authorized_operations == all_operations(ResourceType.CLUSTER)
            quiet = metadata(client, version, False)
            assert {t.topic_authorized_operations for t in quiet.topics} == {-2147483648}
            if version <= 10:
                assert quiet.cluster_authorized_operations == -2147483648
