"""Every topic config Kafka has: its type, default, broker synonyms and valid values.

The table follows Kafka's ``LogConfig`` (types, defaults, validators) and
``ServerTopicConfigSynonyms`` (which broker config supplies a topic's value when the topic
has no override, in priority order, with the hours/minutes conversions). CreateTopics,
AlterConfigs and IncrementalAlterConfigs accept every name here and refuse others with
INVALID_CONFIG, as Kafka does. ``honoured`` marks the configs kcoord acts on; the others
are validated, stored and reported (docs/configuration.md lists which is which).

Values are kept as canonical strings (``ConfigDef.convertToString``'s form: ``true``, not
``TRUE``; a list without blanks), which is what DescribeConfigs reports.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
HOURS = 3_600_000
MINUTES = 60_000


class ConfigType(enum.IntEnum):
    """DescribeConfigs v3+ ``config_type`` (Kafka's DescribeConfigsResponse.ConfigType)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """Where a described value comes from (Kafka's DescribeConfigsResponse.ConfigSource)."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigValueError(ValueError):
    """A value a config does not accept; the message is Kafka's ``Invalid value ...`` form."""


@dataclass(frozen=True)
class Synonym:
    """A broker config that supplies a topic config's default; its value times ``factor``."""

    name: str
    factor: int = 1


Check = Callable[[object], str | None]


@dataclass(frozen=True)
class TopicConfigDef:
    name: str
    type: ConfigType
    default: str
    synonyms: tuple[Synonym, ...]
    doc: str
    check: Check | None = None
    #: kcoord changes its behaviour by this config (the others are stored and reported).
    honoured: bool = False

    def canonical(self, raw: str) -> str:
        """The value as Kafka would store and report it; ``ConfigValueError`` if invalid."""
        value = _parse(self.name, self.type, raw)
        if self.check is not None:
            problem = self.check(value)
            if problem is not None:
                raise ConfigValueError(f"Invalid value {raw} for configuration {self.name}: {problem}")
        return _format(value)

    @property
    def is_list(self) -> bool:
        return self.type is ConfigType.LIST


# --- parsing as Kafka's ConfigDef does --------------------------------------------------------

_BOUNDS = {ConfigType.INT: (INT32_MIN, INT32_MAX), ConfigType.SHORT: (-(2**15), 2**15 - 1),
           ConfigType.LONG: (INT64_MIN, INT64_MAX)}


def _parse(name: str, kind: ConfigType, raw: str) -> object:
    text = raw.strip()

    def bad(expected: str) -> ConfigValueError:
        return ConfigValueError(f"Invalid value {raw} for configuration {name}: {expected}")

    if kind in _BOUNDS:
        if not re.fullmatch(r"[+-]?\d+", text):
            raise bad(f"Not a number of type {kind.name}")
        number = int(text)
        low, high = _BOUNDS[kind]
        if not low <= number <= high:
            raise bad(f"Not a number of type {kind.name}")
        return number
    if kind is ConfigType.DOUBLE:
        try:
            return float(text)
        except ValueError:
            raise bad("Not a number of type DOUBLE") from None
    if kind is ConfigType.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise bad("Expected value to be either true or false")
        return text.lower() == "true"
    if kind is ConfigType.LIST:
        return [] if not text else [item.strip() for item in text.split(",")]
    return text


def _format(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def at_least(low: int) -> Check:
    def check(value: object) -> str | None:
        return None if isinstance(value, int | float) and value >= low else f"Value must be at least {low}"
    return check


def between(low: float, high: float) -> Check:
    def check(value: object) -> str | None:
        assert isinstance(value, int | float)
        if value < low:
            return f"Value must be at least {low}"
        return f"Value must be no more than {high}" if value > high else None
    return check


def one_of(*choices: str) -> Check:
    def check(value: object) -> str | None:
        return None if value in choices else f"String must be one of: {', '.join(choices)}"
    return check


def list_of(*choices: str) -> Check:
    def check(value: object) -> str | None:
        assert isinstance(value, list)
        bad = [v for v in value if v not in choices]
        return None if not bad else f"Invalid value {bad[0]} for configuration: String must be one of: " \
            + ", ".join(choices)
    return check


def _level(default: int, low: int, high: int) -> Check:
    def check(value: object) -> str | None:
        ok = isinstance(value, int) and (value == default or low <= value <= high)
        return None if ok else f"Value must be between {low} and {high}" + (
            f", or {default}" if not low <= default <= high else "")
    return check


_VERSION = re.compile(r"\d+\.\d+(\.\d+)?(-IV\d+)?")


def _message_format(value: object) -> str | None:
    ok = isinstance(value, str) and _VERSION.fullmatch(value) is not None
    return None if ok else "Version must be a Kafka version such as 2.8 or 3.0-IV1"


_THROTTLED = re.compile(r"\d+:\d+")


def _throttled_replicas(value: object) -> str | None:
    assert isinstance(value, list)
    if value == ["*"] or all(_THROTTLED.fullmatch(item) for item in value):
        return None
    return "Must be the literal '*' or a list of replicas in the following format: " \
        "[partitionId]:[brokerId],[partitionId]:[brokerId],..."


COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

# --- the table --------------------------------------------------------------------------------

T = ConfigType
S = Synonym
_DEFS: tuple[TopicConfigDef, ...] = (
    TopicConfigDef("cleanup.policy", T.LIST, "delete", (S("log.cleanup.policy"),),
                   "delete: drop old segments by retention.ms and retention.bytes; compact: keep the latest "
                   "record per key; both may be given.", list_of("compact", "delete"), honoured=True),
    TopicConfigDef("compression.type", T.STRING, "producer", (S("compression.type"),),
                   "The codec batches are stored with: producer keeps the producer's; uncompressed, gzip, "
                   "snappy, lz4 or zstd recompress on the broker.", one_of(*COMPRESSION_TYPES), honoured=True),
    TopicConfigDef("compression.gzip.level", T.INT, "-1", (S("compression.gzip.level"),),
                   "gzip level when the broker recompresses with gzip (-1: the codec's default).",
                   _level(-1, 1, 9), honoured=True),
    TopicConfigDef("compression.lz4.level", T.INT, "9", (S("compression.lz4.level"),),
                   "lz4 level when the broker recompresses with lz4.", _level(9, 1, 17), honoured=True),
    TopicConfigDef("compression.zstd.level", T.INT, "3", (S("compression.zstd.level"),),
                   "zstd level when the broker recompresses with zstd.", _level(3, -131072, 22), honoured=True),
    # kcoord's broker setting delete.retention.ms (the coordinator log's) follows Kafka's name.
    TopicConfigDef("delete.retention.ms", T.LONG, "86400000",
                   (S("log.cleaner.delete.retention.ms"), S("delete.retention.ms")),
                   "How long the cleaner keeps tombstones of a compacted topic.", at_least(0), honoured=True),
    TopicConfigDef("file.delete.delay.ms", T.LONG, "60000", (S("log.segment.delete.delay.ms"),),
                   "Delay before a deleted segment file is removed (kcoord removes it at once).", at_least(0)),
    TopicConfigDef("flush.messages", T.LONG, str(INT64_MAX), (S("log.flush.interval.messages"),),
                   "fsync after this many records (kcoord's log.flush.policy decides instead).", at_least(1)),
    TopicConfigDef("flush.ms", T.LONG, str(INT64_MAX),
                   (S("log.flush.interval.ms"), S("log.flush.scheduler.interval.ms")),
                   "fsync after this long (kcoord's log.flush.policy decides instead).", at_least(0)),
    TopicConfigDef("follower.replication.throttled.replicas", T.LIST, "", (),
                   "Replicas whose follower replication is throttled (one broker: none).", _throttled_replicas),
    TopicConfigDef("index.interval.bytes", T.INT, "4096", (S("log.index.interval.bytes"),),
                   "Bytes between offset index entries (kcoord indexes every batch in memory).", at_least(0)),
    TopicConfigDef("leader.replication.throttled.replicas", T.LIST, "", (),
                   "Replicas whose leader replication is throttled (one broker: none).", _throttled_replicas),
    TopicConfigDef("local.retention.bytes", T.LONG, "-2", (S("log.local.retention.bytes"),),
                   "Tiered storage: bytes kept locally (-2: retention.bytes).", at_least(-2)),
    TopicConfigDef("local.retention.ms", T.LONG, "-2", (S("log.local.retention.ms"),),
                   "Tiered storage: time kept locally (-2: retention.ms).", at_least(-2)),
    TopicConfigDef("max.compaction.lag.ms", T.LONG, str(INT64_MAX), (S("log.cleaner.max.compaction.lag.ms"),),
                   "Longest a record stays uncompacted.", at_least(1)),
    TopicConfigDef("max.message.bytes", T.INT, "1048588", (S("message.max.bytes"),),
                   "Largest record batch accepted, after compression; a larger one is refused with "
                   "MESSAGE_TOO_LARGE.", at_least(0), honoured=True),
    TopicConfigDef("message.downconversion.enable", T.BOOLEAN, "true", (S("log.message.downconversion.enable"),),
                   "Down-convert batches for old consumers (kcoord serves only record batch v2)."),
    TopicConfigDef("message.format.version", T.STRING, "3.0-IV1", (S("log.message.format.version"),),
                   "Deprecated; record batch v2 is always written.", _message_format),
    TopicConfigDef("message.timestamp.after.max.ms", T.LONG, str(INT64_MAX),
                   (S("log.message.timestamp.after.max.ms"),),
                   "With CreateTime, how far in the future a record's timestamp may be (INVALID_TIMESTAMP "
                   "beyond).", at_least(0), honoured=True),
    TopicConfigDef("message.timestamp.before.max.ms", T.LONG, str(INT64_MAX),
                   (S("log.message.timestamp.before.max.ms"),),
                   "With CreateTime, how far in the past a record's timestamp may be (INVALID_TIMESTAMP "
                   "beyond).", at_least(0), honoured=True),
    TopicConfigDef("message.timestamp.difference.max.ms", T.LONG, str(INT64_MAX),
                   (S("log.message.timestamp.difference.max.ms"),),
                   "Deprecated; the before and after bounds when those are not set.", at_least(0), honoured=True),
    TopicConfigDef("message.timestamp.type", T.STRING, "CreateTime", (S("log.message.timestamp.type"),),
                   "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's time.",
                   one_of("CreateTime", "LogAppendTime"), honoured=True),
    TopicConfigDef("min.cleanable.dirty.ratio", T.DOUBLE, "0.5", (S("log.cleaner.min.cleanable.ratio"),),
                   "Compact once this share of the log was written since the last clean.", between(0, 1),
                   honoured=True),
    TopicConfigDef("min.compaction.lag.ms", T.LONG, "0", (S("log.cleaner.min.compaction.lag.ms"),),
                   "Shortest time a record stays uncompacted.", at_least(0)),
    TopicConfigDef("min.insync.replicas", T.INT, "1", (S("min.insync.replicas"),),
                   "In-sync replicas an acks=all write needs; with fewer, acks=all produce is refused with "
                   "NOT_ENOUGH_REPLICAS (a single node has one replica).", at_least(1), honoured=True),
    TopicConfigDef("preallocate", T.BOOLEAN, "false", (S("log.preallocate"),),
                   "Preallocate segment files (kcoord does not)."),
    TopicConfigDef("remote.log.copy.disable", T.BOOLEAN, "false", (),
                   "Tiered storage: stop copying segments to remote storage."),
    TopicConfigDef("remote.log.delete.on.disable", T.BOOLEAN, "false", (),
                   "Tiered storage: delete remote data when tiering is turned off."),
    TopicConfigDef("remote.storage.enable", T.BOOLEAN, "false", (),
                   "Tiered storage (kcoord has none; only false is useful)."),
    TopicConfigDef("retention.bytes", T.LONG, "-1", (S("log.retention.bytes"),),
                   "With cleanup.policy delete, the size a partition is trimmed to, oldest segments first "
                   "(-1: no limit).", honoured=True),
    TopicConfigDef("retention.ms", T.LONG, "604800000",
                   (S("log.retention.ms"), S("log.retention.minutes", MINUTES), S("log.retention.hours", HOURS)),
                   "With cleanup.policy delete, how long segments are kept after their newest record (-1: "
                   "forever).", at_least(-1), honoured=True),
    TopicConfigDef("segment.bytes", T.INT, "1073741824", (S("log.segment.bytes"),),
                   "Size at which a partition's active segment is rolled.", at_least(14), honoured=True),
    TopicConfigDef("segment.index.bytes", T.INT, "10485760", (S("log.index.size.max.bytes"),),
                   "Size of a segment's offset index file (kcoord keeps no index files).", at_least(4)),
    TopicConfigDef("segment.jitter.ms", T.LONG, "0", (S("log.roll.jitter.ms"), S("log.roll.jitter.hours", HOURS)),
                   "Random jitter of time-based segment rolls.", at_least(0)),
    TopicConfigDef("segment.ms", T.LONG, "604800000", (S("log.roll.ms"), S("log.roll.hours", HOURS)),
                   "Roll the active segment after this long (kcoord rolls by size only).", at_least(1)),
    TopicConfigDef("unclean.leader.election.enable", T.BOOLEAN, "false", (S("unclean.leader.election.enable"),),
                   "Allow an out-of-sync replica to lead when no in-sync one is alive (a cluster; "
                   "one node: no effect).", honoured=True),
)
del T, S

TOPIC_CONFIGS: Mapping[str, TopicConfigDef] = {d.name: d for d in _DEFS}


def definition(name: str) -> TopicConfigDef | None:
    return TOPIC_CONFIGS.get(name)


def canonical_value(name: str, value: str | None) -> str:
    """Validate one topic config; the canonical value, or ``ConfigValueError`` with Kafka's message."""
    config = TOPIC_CONFIGS.get(name)
    if config is None:
        raise ConfigValueError(f"Unknown topic config name: {name}")
    if value is None:
        raise ConfigValueError(f"Null value not supported for topic config {name}")
    return config.canonical(value)


@dataclass(frozen=True)
class Resolved:
    """A topic config's effective value, where it came from, and every synonym that was set."""

    value: str
    source: ConfigSource
    synonyms: tuple[tuple[str, str, ConfigSource], ...]  # (name, value, source), winning one first


def resolve(name: str, overrides: Mapping[str, str], broker: BrokerDefaults) -> Resolved:
    """The value a topic has for ``name``: its override, else the first broker synonym set, else Kafka's default.

    Broker synonyms are read as ``ConfigHelper.createTopicConfigEntry`` reports them: those
    the operator set (STATIC_BROKER_CONFIG) before those at their broker default
    (DEFAULT_CONFIG), each converted to the topic's unit.
    """
    config = TOPIC_CONFIGS[name]
    found: list[tuple[str, str, ConfigSource]] = []
    if name in overrides:
        found.append((name, overrides[name], ConfigSource.TOPIC_CONFIG))
    explicit: list[tuple[str, str, ConfigSource]] = []
    defaults: list[tuple[str, str, ConfigSource]] = []
    for synonym in config.synonyms:
        raw, was_set = broker.broker_value(synonym.name)
        if raw is None:
            continue
        (explicit if was_set else defaults).append(
            (synonym.name, raw, ConfigSource.STATIC_BROKER_CONFIG if was_set else ConfigSource.DEFAULT_CONFIG))
    found += explicit + defaults
    if not found:
        return Resolved(config.default, ConfigSource.DEFAULT_CONFIG, ())
    winner_name, winner_raw, source = found[0]
    if source is ConfigSource.TOPIC_CONFIG:
        value = winner_raw
    else:
        factor = next(s.factor for s in config.synonyms if s.name == winner_name)
        value = _scaled(config, winner_raw, factor)
    return Resolved(value, source, tuple(found))


def _scaled(config: TopicConfigDef, raw: str, factor: int) -> str:
    """A broker synonym's value in the topic config's unit.

    As KafkaConfig.logRetentionTimeMillis, any negative retention means "forever" (-1).
    """
    if config.name == "retention.ms":
        millis = int(raw) * factor
        return str(-1 if millis < 0 else millis)
    return config.canonical(raw) if factor == 1 else str(int(raw) * factor)


class BrokerDefaults:
    """The broker configuration as topic configs see it: a value and whether it was set."""

    def __init__(self, values: Mapping[str, object], explicit: frozenset[str]) -> None:
        self.values = values
        self.explicit = explicit

    def broker_value(self, name: str) -> tuple[str | None, bool]:
        if name not in self.values:
            return None, False
        value = self.values[name]
        if value is None:
            return None, False
        return _format(value) if not isinstance(value, float) else repr(value), name in self.explicit


def effective(name: str, overrides: Mapping[str, str], broker: BrokerDefaults) -> str:
    return resolve(name, overrides, broker).value


# --- the reference in docs/configuration.md -------------------------------------------------

REFERENCE_START = "<!-- topic-configs: generated by python -m broker.config -->"
REFERENCE_END = "<!-- end of topic-configs -->"


def reference_markdown() -> str:
    """The topic config table of docs/configuration.md (between the two markers)."""
    lines = [REFERENCE_START, "",
             "| topic config | type | default | broker default from | kcoord | meaning |",
             "|---|---|---|---|---|---|"]
    for config in _DEFS:
        synonyms = ", ".join(f"`{s.name}`" for s in config.synonyms) or "-"
        lines.append(f"| `{config.name}` | {config.type.name.lower()} | `{config.default}` | {synonyms} | "
                     f"{'acts on it' if config.honoured else 'stored'} | {config.doc} |")
    lines += ["", REFERENCE_END]
    return "\n".join(lines)


def write_reference(path: object) -> None:
    """Replace the text between the markers of ``path`` with ``reference_markdown()``."""
    from pathlib import Path

    doc = Path(str(path))
    text = doc.read_text()
    start, end = text.index(REFERENCE_START), text.index(REFERENCE_END) + len(REFERENCE_END)
    doc.write_text(text[:start] + reference_markdown() + text[end:])
