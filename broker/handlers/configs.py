"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and the broker.

The rules are Kafka's (``ConfigHelper.describeConfigs``, ``ConfigAdminManager.preprocess``
and the controller's incremental alter): a resource named twice, a config named twice in
one resource and a null value are INVALID_REQUEST; an unknown topic is
UNKNOWN_TOPIC_OR_PARTITION; an unknown topic config name or a bad value is INVALID_CONFIG;
APPEND and SUBTRACT work on list configs only. Topic overrides are kept in ``topics.json``
and take effect at once. kcoord reads broker configs only at start-up (``--config``,
``--set``), so a broker resource is described (with each value's source and synonyms) but
any change to it is refused the way Kafka refuses a config that cannot be updated
dynamically. A GROUP resource (KIP-848's group configs) is described and changed through
``GroupConfigAccess`` (``broker.group_config_service``); a change is answered once it is
durable.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from broker.config import SETTINGS, Config, Setting
from broker.context import BrokerContext
from broker.coordinator.group_configs import GroupConfigError
from broker.slots import Slot
from broker.topic_configs import (
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    ConfigValueError,
    TopicConfigDef,
)
from broker.topics import Topic, TopicCatalog, validate_topic_name
from protocol.codec import Request
from protocol.errors import ErrorCode

__all__ = [
    "ResourceType",
    "described_topic_configs",
    "handle_alter_configs",
    "handle_describe_configs",
    "handle_incremental_alter_configs",
]


class ResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type ids."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class OpType(enum.IntEnum):
    """IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class GroupConfigAccess(Protocol):
    """What these handlers need for GROUP resources (``broker.group_config_service.GroupConfigService``)."""

    def describe(self, group_id: str, synonyms: bool, documentation: bool) -> list[dict[str, Any]]: ...

    def current(self, group_id: str) -> dict[str, str]: ...

    def validated(self, group_id: str, overrides: Mapping[str, str | None]) -> dict[str, str]: ...

    def change(self, changes: Mapping[str, Mapping[str, str]]) -> bool: ...

    def respond_when_durable(self, request: Request, body: dict[str, Any]) -> Slot: ...


class ResourceError(Exception):
    """One resource's answer is an error: its code and message."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


#: Words that make a broker config's value secret (passwords, keys, JAAS configs).
_SENSITIVE = ("password", "secret", "jaas.config", ".key")


# ---------------------------------------------------------------------- DescribeConfigs


def handle_describe_configs(ctx: BrokerContext, catalog: TopicCatalog, request: Request,
                            groups: GroupConfigAccess | None = None) -> dict[str, Any]:
    version = request.header.api_version
    body = request.body
    synonyms = bool(body.get("include_synonyms", False))
    documentation = bool(body.get("include_documentation", False))
    results = []
    for resource in body.resources:
        result: dict[str, Any] = {"error_code": 0, "error_message": None,
                                  "resource_type": resource.resource_type,
                                  "resource_name": resource.resource_name, "configs": []}
        try:
            entries = _describe(ctx, catalog, resource.resource_type, resource.resource_name, synonyms,
                                documentation, groups)
        except ResourceError as exc:
            result.update(error_code=int(exc.code), error_message=exc.message)
        else:
            keys = resource.configuration_keys
            wanted = None if not keys else set(keys)
            result["configs"] = [_versioned(e, version) for e in entries if wanted is None or e["name"] in wanted]
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}


def _describe(ctx: BrokerContext, catalog: TopicCatalog, resource_type: int, name: str,
              synonyms: bool, documentation: bool, groups: GroupConfigAccess | None) -> list[dict[str, Any]]:
    if resource_type == ResourceType.TOPIC:
        topic = _existing_topic(catalog, name)
        return described_topic_configs(topic, synonyms, documentation)
    if resource_type == ResourceType.BROKER:
        if not name:
            return []  # the cluster-wide dynamic defaults: kcoord has none
        _check_broker_id(ctx, name, "or empty string, ")
        return _described_broker_configs(ctx.config, synonyms, documentation)
    if resource_type == ResourceType.GROUP and groups is not None:
        if not name:
            raise ResourceError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        return groups.describe(name, synonyms, documentation)
    raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {_type_name(resource_type)}")


def described_topic_configs(topic: Topic, synonyms: bool = False, documentation: bool = False,
                            names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Every topic config (or ``names``) as DescribeConfigs (and CreateTopics v5+) report it."""
    entries = []
    for name in sorted(TOPIC_CONFIGS if names is None else names):
        config = TOPIC_CONFIGS[name]
        resolved = topic.resolved(name)
        entries.append({
            "name": name, "value": resolved.value, "read_only": False, "config_source": int(resolved.source),
            "is_sensitive": False,
            "synonyms": [{"name": n, "value": v, "source": int(s)} for n, v, s in resolved.synonyms]
            if synonyms else [],
            "config_type": int(config.type), "documentation": config.doc if documentation else None,
        })
    return entries


def _versioned(entry: dict[str, Any], version: int) -> dict[str, Any]:
    if version == 0:
        entry = {**entry, "is_default": entry["config_source"] == ConfigSource.DEFAULT_CONFIG}
    return entry


def _described_broker_configs(config: Config, synonyms: bool, documentation: bool) -> list[dict[str, Any]]:
    entries = []
    for setting in sorted(SETTINGS, key=lambda s: s.name):
        sensitive = _is_sensitive(setting.name)
        found = _broker_synonyms(config, setting.name)
        value = None if sensitive else _broker_value(config[setting.name])
        entries.append({
            "name": setting.name, "value": value,
            "read_only": True,  # read at start-up only
            "config_source": int(found[0][2]) if found else int(ConfigSource.DEFAULT_CONFIG),
            "is_sensitive": sensitive,
            "synonyms": [{"name": n, "value": None if sensitive else v, "source": int(s)} for n, v, s in found]
            if synonyms else [],
            "config_type": int(_broker_type(setting)), "documentation": setting.doc if documentation else None,
        })
    return entries


def _broker_synonyms(config: Config, name: str) -> list[tuple[str, str | None, ConfigSource]]:
    """As ConfigHelper.configSynonyms: the set synonyms, then those with defaults, from ``name`` on."""
    chain = [name]
    for topic_config in TOPIC_CONFIGS.values():
        names = [s.name for s in topic_config.synonyms]
        if name in names:
            chain = names
            break
    explicit: frozenset[str] = getattr(config, "explicit", frozenset())
    by_name = {s.name: s for s in SETTINGS}
    found: list[tuple[str, str | None, ConfigSource]] = []
    for synonym in chain:
        if synonym in explicit and synonym in by_name and config[synonym] is not None:
            found.append((synonym, _broker_value(config[synonym]), ConfigSource.STATIC_BROKER_CONFIG))
    for synonym in chain:
        setting = by_name.get(synonym)
        if setting is not None and setting.default is not None:
            found.append((synonym, _broker_value(setting.default), ConfigSource.DEFAULT_CONFIG))
    while found and found[0][0] != name:
        found.pop(0)
    return found


def _broker_value(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _broker_type(setting: Setting) -> ConfigType:
    if _is_sensitive(setting.name):
        return ConfigType.PASSWORD
    if setting.kind is bool:
        return ConfigType.BOOLEAN
    if setting.kind is float:
        return ConfigType.DOUBLE
    if setting.kind is int:
        long_valued = setting.name.endswith((".ms", ".minutes")) or setting.name.endswith("retention.bytes")
        return ConfigType.LONG if long_valued else ConfigType.INT
    return ConfigType.LIST if setting.name.endswith("listeners") or setting.name == "log.cleanup.policy" \
        else ConfigType.STRING


def _is_sensitive(name: str) -> bool:
    return any(word in name for word in _SENSITIVE)


# ---------------------------------------------------------------------- AlterConfigs


def handle_alter_configs(ctx: BrokerContext, catalog: TopicCatalog, request: Request,
                         groups: GroupConfigAccess | None = None) -> dict[str, Any] | Slot | None:
    """Legacy AlterConfigs: a topic's (or a group's) overrides become exactly the configs given."""
    body = request.body
    validate_only = bool(body.validate_only)
    repeated = _repeated_resources(body.resources)
    responses = []
    changed_groups: dict[str, dict[str, str]] = {}
    for resource in body.resources:
        try:
            if (resource.resource_type, resource.resource_name) in repeated:
                raise ResourceError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            _check_config_list([c.name for c in resource.configs],
                               [c.name for c in resource.configs if c.value is None])
            changes = {c.name: c.value for c in resource.configs}
            if resource.resource_type == ResourceType.TOPIC:
                topic = _existing_topic(catalog, resource.resource_name)
                overrides = _validated(changes)
                _apply(catalog, topic, overrides, validate_only)
            elif resource.resource_type == ResourceType.BROKER:
                _refuse_broker_change(ctx, resource.resource_name, changes)
            elif resource.resource_type == ResourceType.GROUP and groups is not None:
                changed_groups[resource.resource_name] = _group_overrides(groups, resource.resource_name, changes)
            else:
                raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource.resource_type}")
        except ResourceError as exc:
            responses.append(_alter_response(resource, exc.code, exc.message))
        else:
            responses.append(_alter_response(resource, ErrorCode.NONE, None))
    return _answer(request, {"throttle_time_ms": 0, "responses": responses}, groups, changed_groups, validate_only)


def handle_incremental_alter_configs(ctx: BrokerContext, catalog: TopicCatalog, request: Request,
                                     groups: GroupConfigAccess | None = None) -> dict[str, Any] | Slot | None:
    """KIP-339: SET, DELETE, APPEND and SUBTRACT single configs of a topic (or of a group)."""
    body = request.body
    validate_only = bool(body.validate_only)
    repeated = _repeated_resources(body.resources)
    responses = []
    changed_groups: dict[str, dict[str, str]] = {}
    for resource in body.resources:
        try:
            if (resource.resource_type, resource.resource_name) in repeated:
                raise ResourceError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            _check_config_list([c.name for c in resource.configs],
                               [c.name for c in resource.configs
                                if c.config_operation != OpType.DELETE and c.value is None])
            for c in resource.configs:
                if c.config_operation not in OpType._value2member_map_:
                    raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {c.config_operation}")
            if resource.resource_type == ResourceType.TOPIC:
                topic = _existing_topic(catalog, resource.resource_name)
                overrides = _incremental(topic.configs, [(c.name, OpType(c.config_operation), c.value)
                                                         for c in resource.configs])
                _apply(catalog, topic, _validated(overrides), validate_only)
            elif resource.resource_type == ResourceType.BROKER:
                _refuse_broker_change(ctx, resource.resource_name, {c.name: c.value for c in resource.configs})
            elif resource.resource_type == ResourceType.BROKER_LOGGER:
                raise ResourceError(ErrorCode.INVALID_REQUEST,
                                    "kcoord sets log levels at start-up only (--log-level)")
            elif resource.resource_type == ResourceType.GROUP and groups is not None:
                name = resource.resource_name
                overrides = _incremental_group(groups.current(name), [(c.name, OpType(c.config_operation), c.value)
                                                                      for c in resource.configs])
                changed_groups[name] = _group_overrides(groups, name, overrides)
            else:
                raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource.resource_type}")
        except ResourceError as exc:
            responses.append(_alter_response(resource, exc.code, exc.message))
        else:
            responses.append(_alter_response(resource, ErrorCode.NONE, None))
    return _answer(request, {"throttle_time_ms": 0, "responses": responses}, groups, changed_groups, validate_only)


# ---------------------------------------------------------------------- groups


def _incremental_group(current: dict[str, str], ops: list[tuple[str, OpType, str | None]]) -> dict[str, str | None]:
    """A group's overrides after the operations; no group config is a list, so APPEND and SUBTRACT are refused."""
    result: dict[str, str | None] = dict(current)
    for name, op, value in ops:
        if op is OpType.SET:
            result[name] = value
        elif op is OpType.DELETE:
            result.pop(name, None)
        else:
            raise ResourceError(ErrorCode.INVALID_CONFIG, f"Can't {op.name} to key {name} because its type is not LIST.")
    return result


def _group_overrides(groups: GroupConfigAccess, name: str, overrides: Mapping[str, str | None]) -> dict[str, str]:
    """Kafka's ControllerConfigurationValidator for GROUP: a named group, known names, valid values."""
    if not name:
        raise ResourceError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
    try:
        return groups.validated(name, overrides)
    except GroupConfigError as exc:
        raise ResourceError(ErrorCode.INVALID_CONFIG, str(exc)) from None


def _answer(request: Request, body: dict[str, Any], groups: GroupConfigAccess | None,
            changed: dict[str, dict[str, str]], validate_only: bool) -> dict[str, Any] | Slot | None:
    """The reply; when group configs changed, once the change (and what the coordinator made of it) is durable."""
    if not changed or validate_only or groups is None:
        return body
    if not groups.change(changed):
        return None  # the log could not be written: the broker is stopping
    return groups.respond_when_durable(request, body)


def _incremental(current: dict[str, str], ops: list[tuple[str, OpType, str | None]]) -> dict[str, str | None]:
    """The overrides after the operations; APPEND/SUBTRACT start from the override or Kafka's default."""
    result: dict[str, str | None] = dict(current)
    for name, op, value in ops:
        config = TOPIC_CONFIGS.get(name)
        if config is None:
            raise ResourceError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if op is OpType.SET:
            result[name] = value
        elif op is OpType.DELETE:
            result.pop(name, None)
        else:
            if not config.is_list:
                raise ResourceError(ErrorCode.INVALID_CONFIG,
                                    f"Can't {op.name} to key {name} because its type is not LIST.")
            base = result.get(name)
            old = _parts(config.default if base is None else base)
            given = _parts(value or "")
            new = old + [v for v in given if v not in old] if op is OpType.APPEND else [v for v in old
                                                                                      if v not in given]
            result[name] = ",".join(new)
    return result


def _parts(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _validated(configs: dict[str, str | None]) -> dict[str, str]:
    clean: dict[str, str] = {}
    for name, value in configs.items():
        config: TopicConfigDef | None = TOPIC_CONFIGS.get(name)
        if config is None:
            raise ResourceError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if value is None:
            raise ResourceError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {name}")
        try:
            clean[name] = config.canonical(value)
        except ConfigValueError as exc:
            raise ResourceError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    return clean


def _apply(catalog: TopicCatalog, topic: Topic, overrides: dict[str, str], validate_only: bool) -> None:
    if validate_only:
        return
    error, message = catalog.alter_configs(topic.name, overrides)
    if error is not ErrorCode.NONE:
        raise ResourceError(error, message)


def _refuse_broker_change(ctx: BrokerContext, name: str, changes: dict[str, str | None]) -> None:
    if name:
        _check_broker_id(ctx, name, "")
    if changes:
        raise ResourceError(
            ErrorCode.INVALID_REQUEST,
            f"Cannot update these configs dynamically: {', '.join(sorted(changes))} "
            "(kcoord reads broker configs at start-up: use --config or --set and restart)")


def _check_config_list(names: list[str], null_values: list[str]) -> None:
    if len(set(names)) != len(names):
        raise ResourceError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    if null_values:
        raise ResourceError(ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(null_values))


def _repeated_resources(resources: Iterable[Any]) -> set[tuple[int, str]]:
    seen: set[tuple[int, str]] = set()
    repeated: set[tuple[int, str]] = set()
    for resource in resources:
        key = (resource.resource_type, resource.resource_name)
        (repeated if key in seen else seen).add(key)
    return repeated


def _alter_response(resource: Any, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"error_code": int(code), "error_message": message, "resource_type": resource.resource_type,
            "resource_name": resource.resource_name}


# ---------------------------------------------------------------------- shared


def _existing_topic(catalog: TopicCatalog, name: str) -> Topic:
    problem = validate_topic_name(name)
    if problem is not None:
        raise ResourceError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    topic = catalog.get(name)
    if topic is None:
        raise ResourceError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
    return topic


def _check_broker_id(ctx: BrokerContext, name: str, or_empty: str) -> None:
    try:
        node = int(name)
    except ValueError:
        raise ResourceError(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}") from None
    if node != ctx.node_id:
        raise ResourceError(ErrorCode.INVALID_REQUEST,
                            f"Unexpected broker id, expected {ctx.node_id} {or_empty}but received {name}")


def _type_name(resource_type: int) -> str:
    try:
        return ResourceType(resource_type).name
    except ValueError:
        return str(resource_type)
