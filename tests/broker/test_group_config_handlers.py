"""GROUP config resources through the config APIs, Kafka's rules, without a server.

DescribeConfigs reports every group config (ConfigHelper.createGroupConfigEntry); the alter
APIs validate as ControllerConfigurationValidator and GroupConfig.validate do, keep the
change in the group config log, replay it at once, and tell the coordinator, which applies a
newly chosen ``nearest`` to the group's offsets.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from broker.config import Config
from broker.context import BrokerContext
from broker.coordinator.records import OffsetCommitRecord, OffsetValue
from broker.group_config_service import GroupConfigService
from broker.group_service import GroupService
from broker.handlers.configs import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from broker.slots import Slot
from broker.topics import TopicCatalog
from protocol.codec import decode_request, decode_response, encode_request
from protocol.errors import ErrorCode

GROUP = 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DEFAULT_CONFIG, STATIC_BROKER_CONFIG, GROUP_CONFIG = 5, 4, 8
E = ErrorCode


class Bounds:
    def __init__(self) -> None:
        self.bounds: dict[tuple[str, int], tuple[int, int]] = {}

    def log_bounds(self, topic: str, partition: int) -> tuple[int, int] | None:
        return self.bounds.get((topic, partition))


@dataclass
class World:
    ctx: BrokerContext
    catalog: TopicCatalog
    configs: GroupConfigService
    groups: GroupService
    bounds: Bounds
    data_dir: Path


def open_world(data_dir: Path, settings: dict[str, Any] | None = None) -> World:
    config = Config(settings or {})
    configs = GroupConfigService.open(config, data_dir)
    groups = GroupService.open(config, data_dir, group_configs=configs.configs)
    configs.groups = groups
    bounds = Bounds()
    groups.coordinator.log_bounds = bounds
    catalog = TopicCatalog(data_dir, config)
    return World(BrokerContext(config, 0, "127.0.0.1", 9092, "c"), catalog, configs, groups, bounds, data_dir)


def close_world(world: World) -> None:
    world.configs.log.flush()
    world.configs.log.close()
    world.groups.log.sync()
    world.groups.log.close()
    world.catalog.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = open_world(tmp_path)
    yield w
    close_world(w)


def request(api_key: int, version: int, body: dict[str, Any]) -> Any:
    return decode_request(encode_request(api_key, version, 1, body)[4:])


def body_of(api_key: int, version: int, outcome: Any) -> Any:
    """A handler's reply body, whether it answered at once or through a slot."""
    if isinstance(outcome, Slot):
        assert outcome.event.is_set() and outcome.frame is not None
        return decode_response(api_key, version, outcome.frame[4:])[1]
    return outcome


def describe(world: World, name: str, keys: list[str] | None = None, synonyms: bool = False) -> Any:
    body = handle_describe_configs(world.ctx, world.catalog, request(32, 4, {
        "resources": [{"resource_type": GROUP, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": synonyms, "include_documentation": True}), world.configs)
    (result,) = body["results"]
    return result


def values(world: World, name: str = "g") -> dict[str, tuple[str, int]]:
    return {c["name"]: (c["value"], c["config_source"]) for c in describe(world, name)["configs"]}


def incremental(world: World, name: str, configs: list[tuple[str, int, str | None]],
                validate_only: bool = False) -> tuple[int, str | None]:
    outcome = handle_incremental_alter_configs(world.ctx, world.catalog, request(44, 1, {"resources": [
        {"resource_type": GROUP, "resource_name": name, "configs": [
            {"name": k, "config_operation": op, "value": v} for k, op, v in configs]}],
        "validate_only": validate_only}), world.configs)
    (response,) = body_of(44, 1, outcome)["responses"]
    return response["error_code"], response["error_message"]


def legacy(world: World, name: str, configs: dict[str, str]) -> tuple[int, str | None]:
    outcome = handle_alter_configs(world.ctx, world.catalog, request(33, 2, {"resources": [
        {"resource_type": GROUP, "resource_name": name, "configs": [
            {"name": k, "value": v} for k, v in configs.items()]}], "validate_only": False}), world.configs)
    (response,) = body_of(33, 2, outcome)["responses"]
    return response["error_code"], response["error_message"]


# ---------------------------------------------------------------------- describe


def test_every_group_config_is_described_for_any_group(world: World) -> None:
    result = describe(world, "never-seen", synonyms=True)
    assert result["error_code"] == 0
    configs = {c["name"]: c for c in result["configs"]}
    assert {n: (c["value"], c["config_source"], c["config_type"], c["read_only"]) for n, c in configs.items()} == {
        "consumer.heartbeat.interval.ms": ("5000", DEFAULT_CONFIG, 3, False),
        "consumer.session.timeout.ms": ("45000", DEFAULT_CONFIG, 3, False),
        "kcoord.initial.offset": ("none", DEFAULT_CONFIG, 2, False),
        "kcoord.offset.out.of.range": ("none", DEFAULT_CONFIG, 2, False),
    }
    assert [(s["name"], s["value"], s["source"]) for s in configs["consumer.session.timeout.ms"]["synonyms"]] == [
        ("group.consumer.session.timeout.ms", "45000", DEFAULT_CONFIG)]
    assert all(c["documentation"] for c in configs.values())


def test_a_groups_own_value_then_the_brokers_static_value_then_the_default(tmp_path: Path) -> None:
    w = open_world(tmp_path, {"kcoord.offset.out.of.range": "nearest", "group.consumer.session.timeout.ms": 50000})
    try:
        assert incremental(w, "g", [("kcoord.offset.out.of.range", SET, "none")]) == (0, None)
        result = describe(w, "g", synonyms=True)
        configs = {c["name"]: c for c in result["configs"]}
        own = configs["kcoord.offset.out.of.range"]
        assert (own["value"], own["config_source"]) == ("none", GROUP_CONFIG)
        assert [(s["name"], s["value"], s["source"]) for s in own["synonyms"]] == [
            ("kcoord.offset.out.of.range", "none", GROUP_CONFIG),
            ("kcoord.offset.out.of.range", "nearest", STATIC_BROKER_CONFIG),
            ("kcoord.offset.out.of.range", "none", DEFAULT_CONFIG)]
        session = configs["consumer.session.timeout.ms"]
        assert (session["value"], session["config_source"]) == ("50000", STATIC_BROKER_CONFIG)
        assert values(w, "other")["kcoord.offset.out.of.range"] == ("nearest", STATIC_BROKER_CONFIG)
    finally:
        close_world(w)


def test_describe_filters_by_key_and_refuses_an_empty_name(world: World) -> None:
    assert [c["name"] for c in describe(world, "g", ["kcoord.initial.offset", "nope"])["configs"]] == [
        "kcoord.initial.offset"]
    empty = describe(world, "")
    assert (empty["error_code"], empty["error_message"], list(empty["configs"])) == (
        E.INVALID_REQUEST, "Group name must not be empty", [])


# ---------------------------------------------------------------------- alter


def test_set_and_delete_take_effect_at_once_and_survive_a_reopen(tmp_path: Path) -> None:
    w = open_world(tmp_path)
    assert incremental(w, "g", [("kcoord.initial.offset", SET, "latest"),
                                ("consumer.heartbeat.interval.ms", SET, " 6000 ")]) == (0, None)
    assert values(w)["kcoord.initial.offset"] == ("latest", GROUP_CONFIG)
    assert w.groups.coordinator.group_configs.heartbeat_interval_ms("g") == 6000  # in force, no restart
    assert incremental(w, "g", [("consumer.heartbeat.interval.ms", DELETE, None)]) == (0, None)
    close_world(w)
    again = open_world(tmp_path)
    try:
        assert values(again)["kcoord.initial.offset"] == ("latest", GROUP_CONFIG)
        assert values(again)["consumer.heartbeat.interval.ms"] == ("5000", DEFAULT_CONFIG)
        assert again.groups.coordinator.group_configs.initial_offset("g") == "latest"
    finally:
        close_world(again)


@pytest.mark.parametrize(("configs", "code", "message"), [
    ([("group.id", SET, "x")], E.INVALID_CONFIG, "Unknown group config name: group.id"),
    ([("kcoord.offset.out.of.range", SET, "earliest")], E.INVALID_CONFIG,
     "Invalid value earliest for configuration kcoord.offset.out.of.range: String must be one of: nearest, none"),
    ([("consumer.session.timeout.ms", SET, "1000")], E.INVALID_CONFIG,
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ([("kcoord.initial.offset", APPEND, "latest")], E.INVALID_CONFIG,
     "Can't APPEND to key kcoord.initial.offset because its type is not LIST."),
    ([("kcoord.initial.offset", SET, None)], E.INVALID_REQUEST, "Null value not supported for : kcoord.initial.offset"),
])
def test_refusals_change_nothing(world: World, configs: list[Any], code: ErrorCode, message: str) -> None:
    assert incremental(world, "g", configs) == (code, message)
    assert world.configs.current("g") == {}


def test_an_empty_group_name_is_refused(world: World) -> None:
    assert incremental(world, "", [("kcoord.initial.offset", SET, "latest")]) == (
        E.INVALID_REQUEST, "Default group resources are not allowed.")


def test_validate_only_checks_and_keeps_nothing(world: World) -> None:
    assert incremental(world, "g", [("kcoord.initial.offset", SET, "latest")], validate_only=True) == (0, None)
    assert incremental(world, "g", [("kcoord.initial.offset", SET, "sometimes")], validate_only=True)[0] \
        == E.INVALID_CONFIG
    assert world.configs.current("g") == {} and world.configs.changes == 0


def test_legacy_alter_replaces_every_group_config(world: World) -> None:
    assert incremental(world, "g", [("kcoord.initial.offset", SET, "latest")]) == (0, None)
    assert legacy(world, "g", {"kcoord.offset.out.of.range": "nearest"}) == (0, None)
    assert world.configs.current("g") == {"kcoord.offset.out.of.range": "nearest"}


def test_choosing_nearest_moves_the_groups_offsets_out_of_the_log_before_the_reply(world: World) -> None:
    coordinator = world.groups.coordinator
    value = OffsetValue(offset=3, leader_epoch=-1, metadata="", commit_timestamp=0, expire_timestamp=-1)
    coordinator.replay(OffsetCommitRecord("g", "t", 0, value))
    coordinator.replay(OffsetCommitRecord("other", "t", 0, value))
    world.bounds.bounds[("t", 0)] = (10, 20)
    written = world.groups.records_appended
    assert incremental(world, "g", [("kcoord.offset.out.of.range", SET, "nearest")]) == (0, None)
    moved = coordinator.offsets.get("g", "t", 0)
    assert moved is not None and (moved.offset, moved.metadata) == (10, "kcoord:nearest")
    assert world.groups.records_appended == written + 1  # in the coordinator log, awaited by the reply
    untouched = coordinator.offsets.get("other", "t", 0)
    assert untouched is not None and untouched.offset == 3


async def test_a_change_is_answered_once_the_config_and_the_commits_it_caused_are_fsynced(tmp_path: Path) -> None:
    import trio

    config = Config({})
    configs = GroupConfigService.open(config, tmp_path)
    groups = GroupService.open(config, tmp_path, group_configs=configs.configs)
    configs.groups = groups
    bounds = Bounds()
    bounds.bounds[("t", 0)] = (10, 20)
    groups.coordinator.log_bounds = bounds
    value = OffsetValue(offset=3, leader_epoch=-1, metadata="", commit_timestamp=0, expire_timestamp=-1)
    groups.coordinator.replay(OffsetCommitRecord("g", "t", 0, value))
    catalog = TopicCatalog(tmp_path, config)
    ctx = BrokerContext(config, 0, "127.0.0.1", 9092, "c")
    async with trio.open_nursery() as nursery:
        await nursery.start(configs.run)
        await nursery.start(groups.run)
        outcome = handle_incremental_alter_configs(ctx, catalog, request(44, 1, {"resources": [
            {"resource_type": GROUP, "resource_name": "g", "configs": [
                {"name": "kcoord.offset.out.of.range", "config_operation": SET, "value": "nearest"}]}],
            "validate_only": False}), configs)
        assert isinstance(outcome, Slot)
        config_written, coordinator_written = configs._journal.written_seq, groups.log.written_seq
        assert coordinator_written > 0
        with trio.fail_after(10):
            await outcome.event.wait()
        assert configs._journal.durable_seq >= config_written
        assert groups.log.durable_seq >= coordinator_written
        nursery.cancel_scope.cancel()
    configs.log.close()
    groups.log.close()
    catalog.close()


def test_an_unreadable_group_config_log_stops_the_start_naming_it(tmp_path: Path) -> None:
    from storage.group_config_log import GroupConfigLog
    from storage.partition import CorruptLogError

    log = GroupConfigLog(tmp_path)
    log.append([(b'["something","else"]', b"{}")], 1)
    log.flush()
    log.close()
    with pytest.raises(CorruptLogError, match="__kcoord_group_configs-0: unknown group config record key"):
        GroupConfigService.open(Config({}), tmp_path)
