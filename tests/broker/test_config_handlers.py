"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs, Kafka's rules, without a server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import Config
from broker.context import BrokerContext
from broker.handlers.configs import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from broker.topics import TopicCatalog
from protocol.codec import decode_request, encode_request
from protocol.errors import ErrorCode

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[BrokerContext, TopicCatalog]]:
    config = Config({"log.retention.hours": 2})
    catalog = TopicCatalog(tmp_path, config)
    assert catalog.create("t", 1, 1, {"cleanup.policy": "compact"})[0] is ErrorCode.NONE
    yield BrokerContext(config, 0, "127.0.0.1", 9092, "c"), catalog
    catalog.close()


def request(api_key: int, version: int, body: dict[str, Any]) -> Any:
    return decode_request(encode_request(api_key, version, 1, body)[4:])


def describe(world: Any, resources: list[tuple[int, str, list[str] | None]], version: int = 4,
             synonyms: bool = False) -> list[Any]:
    ctx, catalog = world
    body = handle_describe_configs(ctx, catalog, request(32, version, {
        "resources": [{"resource_type": t, "resource_name": n, "configuration_keys": k} for t, n, k in resources],
        "include_synonyms": synonyms, "include_documentation": True}))
    return list(body["results"])


def incremental(world: Any, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]],
                validate_only: bool = False) -> list[tuple[int, str | None]]:
    ctx, catalog = world
    body = handle_incremental_alter_configs(ctx, catalog, request(44, 1, {"resources": [
        {"resource_type": t, "resource_name": n, "configs": [
            {"name": k, "config_operation": op, "value": v} for k, op, v in configs]}
        for t, n, configs in resources], "validate_only": validate_only}))
    return [(r["error_code"], r["error_message"]) for r in body["responses"]]


def values(world: Any, topic: str = "t") -> dict[str, tuple[str, int]]:
    (result,) = describe(world, [(TOPIC, topic, None)])
    return {c["name"]: (c["value"], c["config_source"]) for c in result["configs"]}


def test_describe_topic_sources_synonyms_and_filter(world: Any) -> None:
    (result,) = describe(world, [(TOPIC, "t", ["retention.ms", "cleanup.policy", "nonsense"])], synonyms=True)
    configs = {c["name"]: c for c in result["configs"]}
    assert set(configs) == {"retention.ms", "cleanup.policy"}
    assert (configs["retention.ms"]["value"], configs["retention.ms"]["config_source"]) == ("7200000", 4)
    assert [(s["name"], s["value"], s["source"]) for s in configs["retention.ms"]["synonyms"]] == [
        ("log.retention.hours", "2", 4)]
    assert configs["cleanup.policy"]["config_source"] == 1
    assert configs["retention.ms"]["config_type"] == 5  # LONG
    assert configs["retention.ms"]["documentation"]


def test_describe_v0_marks_defaults(world: Any) -> None:
    (result,) = describe(world, [(TOPIC, "t", ["segment.bytes", "cleanup.policy"])], version=0)
    assert {c["name"]: c["is_default"] for c in result["configs"]} == {"segment.bytes": True,
                                                                      "cleanup.policy": False}


def test_describe_errors(world: Any) -> None:
    results = describe(world, [(TOPIC, "missing", None), (TOPIC, "bad name!", None), (BROKER, "7", None),
                               (BROKER, "x", None), (99, "?", None)])
    assert [r["error_code"] for r in results] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                  ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.INVALID_REQUEST,
                                                  ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
    assert "Unexpected broker id, expected 0 or empty string, but received 7" in results[2]["error_message"]


def test_describe_broker(world: Any) -> None:
    (result,) = describe(world, [(BROKER, "0", None)], synonyms=True)
    configs = {c["name"]: c for c in result["configs"]}
    assert (configs["log.retention.hours"]["value"], configs["log.retention.hours"]["config_source"]) == ("2", 4)
    assert (configs["num.partitions"]["value"], configs["num.partitions"]["config_source"]) == ("1", 5)
    assert all(c["read_only"] for c in configs.values())
    assert configs["log.retention.ms"]["value"] is None
    (cluster,) = describe(world, [(BROKER, "", None)])
    assert cluster["error_code"] == 0 and cluster["configs"] == []


def test_incremental_set_delete_append_subtract(world: Any) -> None:
    assert incremental(world, [(TOPIC, "t", [("retention.ms", SET, "1000"), ("cleanup.policy", APPEND, "delete")])]) \
        == [(0, None)]
    assert values(world)["retention.ms"] == ("1000", 1)
    assert values(world)["cleanup.policy"] == ("compact,delete", 1)
    assert incremental(world, [(TOPIC, "t", [("cleanup.policy", SUBTRACT, "compact"),
                                             ("retention.ms", DELETE, None)])]) == [(0, None)]
    assert values(world)["cleanup.policy"] == ("delete", 1)
    assert values(world)["retention.ms"] == ("7200000", 4)


@pytest.mark.parametrize(("configs", "code", "message"), [
    ([("retention.ms", SET, "1"), ("retention.ms", SET, "2")], ErrorCode.INVALID_REQUEST, "duplicate config keys"),
    ([("retention.ms", SET, None)], ErrorCode.INVALID_REQUEST, "Null value not supported for : retention.ms"),
    ([("retention.ms", APPEND, "1")], ErrorCode.INVALID_CONFIG, "because its type is not LIST"),
    ([("no.such", SET, "1")], ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such"),
    ([("retention.ms", SET, "soon")], ErrorCode.INVALID_CONFIG, "Not a number of type LONG"),
    ([("retention.ms", 9, "1")], ErrorCode.INVALID_REQUEST, "Unknown operations type 9"),
])
def test_incremental_refusals_change_nothing(world: Any, configs: list[Any], code: ErrorCode, message: str) -> None:
    before = values(world)
    [(got, text)] = incremental(world, [(TOPIC, "t", configs)])
    assert got == code and message in (text or "")
    assert values(world) == before


def test_incremental_resource_rules(world: Any) -> None:
    twice = (TOPIC, "t", [("retention.ms", SET, "5")])
    assert [c for c, _ in incremental(world, [twice, twice])] == [ErrorCode.INVALID_REQUEST] * 2
    assert incremental(world, [(TOPIC, "missing", [("retention.ms", SET, "5")])])[0][0] == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    broker = incremental(world, [(BROKER, "0", [("log.retention.hours", SET, "1")])])[0]
    assert broker[0] == ErrorCode.INVALID_REQUEST and "Cannot update these configs dynamically" in str(broker[1])
    assert incremental(world, [(BROKER_LOGGER, "0", [("kcoord", SET, "DEBUG")])])[0][0] == ErrorCode.INVALID_REQUEST
    assert incremental(world, [(TOPIC, "t", [("retention.ms", SET, "5")])], validate_only=True) == [(0, None)]
    assert values(world)["retention.ms"] != ("5", 1)


def test_legacy_alter_replaces_every_override(world: Any) -> None:
    ctx, catalog = world
    body = handle_alter_configs(ctx, catalog, request(33, 2, {"resources": [
        {"resource_type": TOPIC, "resource_name": "t", "configs": [{"name": "retention.bytes", "value": "99"}]}],
        "validate_only": False}))
    assert [r["error_code"] for r in body["responses"]] == [0]
    assert values(world)["retention.bytes"] == ("99", 1)
    assert values(world)["cleanup.policy"] == ("delete", 5)  # the old override is gone
    reopened = TopicCatalog(catalog.data_dir, ctx.config)
    try:
        assert reopened.get("t").configs == {"retention.bytes": "99"}  # type: ignore[union-attr]
    finally:
        reopened.close()
