"""Per-group configs (KIP-848's GROUP config resource, Kafka's GroupConfig and GroupConfigManager).

A group may override a few settings the broker otherwise applies to every group: Kafka 4's
own ``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms`` (KIP-848 consumer
groups), and kcoord's offset reset policies ``kcoord.offset.out.of.range`` and
``kcoord.initial.offset`` (docs/coordinator-rules.md#offset-reset-policies). Each has a
broker-wide default: ``group.consumer.session.timeout.ms`` and
``group.consumer.heartbeat.interval.ms`` for Kafka's, and the same name for kcoord's.

Overrides are kept as canonical strings, one record per group holding all of them (the
last record per group wins, a None value clears the group), in a log of their own that the
broker replays at start-up; they exist independently of the group, so a policy can be set
before the group's first member joins. ``GroupConfigs`` is what replay builds; validation
is Kafka's ``GroupConfig.validate`` over the broker's values with the overrides on top.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.coordinator.config import CoordinatorConfig

__all__ = [
    "GROUP_CONFIGS",
    "HEARTBEAT_INTERVAL",
    "INITIAL_OFFSET",
    "OUT_OF_RANGE",
    "SESSION_TIMEOUT",
    "GroupConfigDef",
    "GroupConfigError",
    "GroupConfigs",
    "decode_record",
    "encode_record",
]

SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
OUT_OF_RANGE = "kcoord.offset.out.of.range"
INITIAL_OFFSET = "kcoord.initial.offset"

INT32_MAX = 2**31 - 1


class GroupConfigError(ValueError):
    """A group config change Kafka answers with INVALID_CONFIG; the message is Kafka's."""


@dataclass(frozen=True)
class GroupConfigDef:
    """One group config: its type as DescribeConfigs reports it, and where its default comes from."""

    name: str
    kind: str  # "INT" or "STRING", Kafka's ConfigDef.Type
    broker_name: str  # the broker config whose value is the default
    default: Callable[[CoordinatorConfig], int | str]
    doc: str
    choices: tuple[str, ...] = ()

    def canonical(self, raw: str) -> str:
        """The value as stored and described; ``GroupConfigError`` with Kafka's message if invalid."""
        text = raw.strip()
        if self.kind == "INT":
            try:
                value = int(text, 10)
            except ValueError:
                raise GroupConfigError(f"Invalid value {raw} for configuration {self.name}: "
                                       "Not a number of type INT") from None
            if not 1 <= value <= INT32_MAX:
                raise GroupConfigError(f"Invalid value {raw} for configuration {self.name}: "
                                       "Value must be at least 1")
            return str(value)
        if text not in self.choices:
            raise GroupConfigError(f"Invalid value {raw} for configuration {self.name}: "
                                   f"String must be one of: {', '.join(self.choices)}")
        return text


GROUP_CONFIGS: dict[str, GroupConfigDef] = {d.name: d for d in (
    GroupConfigDef(
        SESSION_TIMEOUT, "INT", "group.consumer.session.timeout.ms", lambda c: c.consumer_session_timeout_ms,
        "The timeout to detect client failures when using the consumer group protocol."),
    GroupConfigDef(
        HEARTBEAT_INTERVAL, "INT", "group.consumer.heartbeat.interval.ms",
        lambda c: c.consumer_heartbeat_interval_ms,
        "The heartbeat interval given to the members of a consumer group."),
    GroupConfigDef(
        OUT_OF_RANGE, "STRING", OUT_OF_RANGE, lambda c: c.offset_out_of_range,
        "kcoord: 'nearest' moves a committed offset that falls out of the log into it (to the log start "
        "when retention or DeleteRecords passes it, to the log end when it is beyond the end), as a "
        "commit marked kcoord:nearest; 'none' leaves it to the client's auto.offset.reset.",
        ("nearest", "none")),
    GroupConfigDef(
        INITIAL_OFFSET, "STRING", INITIAL_OFFSET, lambda c: c.initial_offset,
        "kcoord: where the group starts on a partition it has no offset for, committed before the "
        "assignment is answered: 'earliest' (log start), 'latest' (log end) or 'none' (the client's "
        "auto.offset.reset).",
        ("earliest", "latest", "none")),
)}


class GroupConfigs:
    """Every group's overrides (what replay of the group config log gives) and the values in force."""

    def __init__(self, config: CoordinatorConfig | None = None) -> None:
        self.config = config or CoordinatorConfig()
        self.overrides: dict[str, dict[str, str]] = {}
        #: Groups whose overrides set an initial offset policy other than none.
        self._initial: set[str] = set()

    # ------------------------------------------------------------------ replay

    def replay(self, group_id: str, configs: Mapping[str, str] | None) -> None:
        """Apply one record: the group's overrides become ``configs`` (None: none at all)."""
        if configs:
            self.overrides[group_id] = dict(configs)
        else:
            self.overrides.pop(group_id, None)
        if configs and configs.get(INITIAL_OFFSET, "none") != "none":
            self._initial.add(group_id)
        else:
            self._initial.discard(group_id)

    # ------------------------------------------------------------------ values in force

    def value(self, group_id: str, name: str) -> str:
        """The override, else the broker's value, as a string."""
        found = self.overrides.get(group_id)
        if found is not None and name in found:
            return found[name]
        return str(GROUP_CONFIGS[name].default(self.config))

    def session_timeout_ms(self, group_id: str) -> int:
        found = self.overrides.get(group_id)
        if found is not None and SESSION_TIMEOUT in found:
            return int(found[SESSION_TIMEOUT])
        return self.config.consumer_session_timeout_ms

    def heartbeat_interval_ms(self, group_id: str) -> int:
        found = self.overrides.get(group_id)
        if found is not None and HEARTBEAT_INTERVAL in found:
            return int(found[HEARTBEAT_INTERVAL])
        return self.config.consumer_heartbeat_interval_ms

    def out_of_range(self, group_id: str) -> str:
        found = self.overrides.get(group_id)
        if found is not None and OUT_OF_RANGE in found:
            return found[OUT_OF_RANGE]
        return self.config.offset_out_of_range

    def initial_offset(self, group_id: str) -> str:
        found = self.overrides.get(group_id)
        if found is not None and INITIAL_OFFSET in found:
            return found[INITIAL_OFFSET]
        return self.config.initial_offset

    @property
    def any_initial_policy(self) -> bool:
        """Whether some group may have an initial offset policy (a cheap test for the hot path)."""
        return self.config.initial_offset != "none" or bool(self._initial)

    def nearest_groups(self, group_ids: list[str]) -> list[str]:
        """Those of ``group_ids`` whose out-of-range policy is nearest."""
        return [g for g in group_ids if self.out_of_range(g) == "nearest"]

    # ------------------------------------------------------------------ validation

    def validated(self, group_id: str, overrides: Mapping[str, str | None]) -> dict[str, str]:
        """The group's new overrides, canonical, or ``GroupConfigError`` (Kafka's ``GroupConfig.validate``).

        Names must be group configs; values must parse; and the consumer session timeout and
        heartbeat interval, with the broker's values for the ones not overridden, must lie in
        ``group.consumer.{min,max}.{session.timeout,heartbeat.interval}.ms`` with the timeout
        above the interval.
        """
        clean: dict[str, str] = {}
        for name, raw in overrides.items():
            definition = GROUP_CONFIGS.get(name)
            if definition is None:
                raise GroupConfigError(f"Unknown group config name: {name}")
            if raw is None:
                raise GroupConfigError(f"Null value not supported for group configs: {name}")
            clean[name] = definition.canonical(raw)
        config = self.config
        session = int(clean.get(SESSION_TIMEOUT, config.consumer_session_timeout_ms))
        heartbeat = int(clean.get(HEARTBEAT_INTERVAL, config.consumer_heartbeat_interval_ms))
        bounds = (
            (HEARTBEAT_INTERVAL, heartbeat, config.consumer_min_heartbeat_interval_ms,
             config.consumer_max_heartbeat_interval_ms, "group.consumer.min.heartbeat.interval.ms",
             "group.consumer.max.heartbeat.interval.ms"),
            (SESSION_TIMEOUT, session, config.consumer_min_session_timeout_ms,
             config.consumer_max_session_timeout_ms, "group.consumer.min.session.timeout.ms",
             "group.consumer.max.session.timeout.ms"),
        )
        for name, value, low, high, low_name, high_name in bounds:
            if value < low:
                raise GroupConfigError(f"{name} must be greater than or equal to {low_name}")
            if value > high:
                raise GroupConfigError(f"{name} must be less than or equal to {high_name}")
        if session <= heartbeat:
            raise GroupConfigError(f"{SESSION_TIMEOUT} must be greater than {HEARTBEAT_INTERVAL}")
        return clean


# ---------------------------------------------------------------------- records


def encode_record(group_id: str, configs: Mapping[str, str] | None) -> tuple[bytes, bytes | None]:
    """One group's overrides as a record of the group config log; no overrides is a tombstone."""
    key = json.dumps(["group", group_id], separators=(",", ":")).encode()
    if not configs:
        return key, None
    return key, json.dumps(dict(sorted(configs.items())), separators=(",", ":")).encode()


def decode_record(key: bytes, value: bytes | None) -> tuple[str, dict[str, str] | None]:
    """``(group id, overrides or None)``; ValueError for a record this version cannot read."""
    try:
        parts = json.loads(key)
        if not (isinstance(parts, list) and len(parts) == 2 and parts[0] == "group" and isinstance(parts[1], str)):
            raise ValueError(f"unknown group config record key {key[:80]!r}")
        if value is None:
            return parts[1], None
        configs = json.loads(value)
        if not isinstance(configs, dict):
            raise ValueError("a group config record value must be an object")
        return parts[1], {str(k): str(v) for k, v in configs.items()}
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"unreadable group config record: {exc}") from None
