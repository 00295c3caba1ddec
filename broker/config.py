"""Broker configuration: Kafka's config names, Kafka's defaults, validated at start-up.

Values come from a TOML file (``--config``) and ``--set name=value`` (which wins). An
unknown name or a bad value is a ``ConfigError`` naming the key, raised before the
broker binds a socket.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A configuration problem, with a message that names the key."""


MAX_PORT = 65535
_LISTENER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_host_port(text: str, what: str, *, allow_any_port: bool = True) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 hosts in brackets) checked at configuration time.

    ``what`` names the option in the error. Port 0 ("any free port") is allowed only for
    addresses the broker binds (``allow_any_port``); a port above 65535 is always an
    error, rather than the silent wrap-around the socket layer would do.
    """
    host, sep, port = text.rpartition(":")
    host = host.strip("[]") if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"{what} {text!r}: expected HOST:PORT")
    number = int(port)
    lowest = 0 if allow_any_port else 1
    if not lowest <= number <= MAX_PORT:
        raise ConfigError(f"{what} {text!r}: port {number} is not between {lowest} and {MAX_PORT}")
    return host, number


def parse_listeners(text: str, what: str) -> list[tuple[str, str, int]]:
    """Kafka's listener list ``NAME://HOST:PORT[,NAME://HOST:PORT...]`` as (name, host, port)."""
    found = []
    for item in text.split(","):
        item = item.strip()
        name, sep, address = item.partition("://")
        if not sep or not _LISTENER_NAME.fullmatch(name):
            raise ConfigError(f"{what}: {item!r} is not NAME://HOST:PORT (for example PLAINTEXT://localhost:9092)")
        host, port = parse_host_port(address, what, allow_any_port=False)
        found.append((name, host, port))
    return found


@dataclass(frozen=True)
class Setting:
    name: str
    kind: type  # int, bool, str, float
    default: Any  # None: unset unless given (as Kafka's log.retention.ms)
    doc: str
    check: Callable[[Any], bool] | None = None
    rule: str = ""


def _positive(v: int) -> bool:
    return v > 0


def _non_negative(v: int) -> bool:
    return v >= 0


def _one_of(*choices: str) -> Callable[[Any], bool]:
    return lambda v: v in choices


def _list_of(*choices: str) -> Callable[[Any], bool]:
    return lambda v: bool(v.strip()) and all(item.strip() in choices for item in v.split(","))


def _level(default: int, low: int, high: int) -> Callable[[Any], bool]:
    return lambda v: v == default or low <= v <= high


INT32_MAX = 2147483647
INT64_MAX = 2**63 - 1

SETTINGS: tuple[Setting, ...] = (
    Setting("node.id", int, 0, "The id this broker advertises in Metadata and FindCoordinator.",
            _non_negative, ">= 0"),
    Setting("cluster.id", str, "kcoord-cluster", "The cluster id returned in Metadata."),
    Setting("advertised.listeners", str, "",
            "PLAINTEXT://host:port clients are told to connect to; default: the --listen address."),
    Setting("socket.request.max.bytes", int, 104857600,
            "Largest request frame accepted; a larger size prefix closes the connection.",
            _positive, "> 0"),
    Setting("group.initial.rebalance.delay.ms", int, 3000,
            "How long a new group waits for more members before its first rebalance.",
            _non_negative, ">= 0"),
    Setting("group.min.session.timeout.ms", int, 6000, "Smallest session timeout a member may ask for.",
            _non_negative, ">= 0"),
    Setting("group.max.session.timeout.ms", int, 1800000, "Largest session timeout a member may ask for.",
            _non_negative, ">= 0"),
    Setting("group.max.size", int, INT32_MAX, "Most members one consumer group may have (KIP-389).",
            _positive, "> 0"),
    Setting("group.new.partitions.start", str, "earliest",
            "kcoord-specific: when CreatePartitions grows a topic, 'earliest' commits each new "
            "partition's log start offset for every group whose live members subscribe to the topic "
            "(offsets already committed are kept), so consumers with auto.offset.reset=latest do not "
            "skip the first records written there; 'latest' commits nothing and leaves the new "
            "partitions to the client's auto.offset.reset, as Kafka does.",
            _one_of("earliest", "latest"), "one of earliest, latest"),
    Setting("offsets.retention.minutes", int, 10080,
            "How long committed offsets live after their group became empty (KIP-211).",
            _positive, "> 0"),
    Setting("offsets.retention.check.interval.ms", int, 600000, "How often expired offsets are removed.",
            _positive, "> 0"),
    Setting("offset.metadata.max.bytes", int, 4096, "Largest metadata string an offset commit may carry.",
            _non_negative, ">= 0"),
    Setting("offsets.topic.num.partitions", int, 50,
            "Partitions of the coordinator log; a group's partition is hash(group) mod this.",
            _positive, "> 0"),
    Setting("offsets.topic.segment.bytes", int, 104857600, "Segment size of the coordinator log.",
            _positive, "> 0"),
    Setting("offsets.commit.timeout.ms", int, 5000,
            "How long an OffsetCommit may wait for its records to be fsynced. Past it, each partition "
            "the commit accepted is answered REQUEST_TIMED_OUT (as Kafka's GroupMetadataManager."
            "storeOffsets; clients look the coordinator up again and retry) and one refused for its own "
            "reason keeps its error; the records may still become durable later. Other coordinator "
            "replies wait until they are durable (docs/storage.md).",
            _positive, "> 0"),
    Setting("num.partitions", int, 1, "Partitions of an auto-created topic.", _positive, "> 0"),
    Setting("auto.create.topics.enable", bool, True,
            "Create a topic when a client asks for metadata of (or produces to) an unknown one."),
    Setting("offsets.commit.require.known.topic", bool, True,
            "kcoord-specific: refuse commits for unknown topics or partitions "
            "(UNKNOWN_TOPIC_OR_PARTITION, as Kafka does); false makes kcoord a pure offset store."),
    Setting("log.flush.policy", str, "durable",
            "'durable': fsync before acknowledging; 'os': leave flushing to the OS.",
            _one_of("durable", "os"), "one of durable, os"),
    Setting("log.segment.bytes", int, 1073741824,
            "Segment size of topic partitions; the default of a topic's segment.bytes.", lambda v: v >= 14, ">= 14"),
    Setting("log.retention.hours", int, 168,
            "How long topics with cleanup.policy=delete keep data; the default of a topic's retention.ms "
            "unless log.retention.minutes or log.retention.ms is set (negative: forever)."),
    Setting("log.retention.minutes", int, None, "As log.retention.hours, in minutes; wins over it."),
    Setting("log.retention.ms", int, None,
            "As log.retention.hours, in milliseconds; wins over both (-1: forever)."),
    Setting("log.retention.bytes", int, -1,
            "Size a partition of a topic with cleanup.policy=delete is trimmed to; the default of a topic's "
            "retention.bytes (-1: no limit)."),
    Setting("log.cleanup.policy", str, "delete", "The default cleanup.policy of topics.",
            _list_of("delete", "compact"), "delete, compact or both, comma-separated"),
    Setting("compression.type", str, "producer",
            "The default compression.type of topics: producer keeps what producers send; uncompressed, gzip, "
            "snappy, lz4 or zstd recompress every batch on the broker.",
            _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
            "one of uncompressed, zstd, lz4, snappy, gzip, producer"),
    Setting("compression.gzip.level", int, -1, "gzip level of broker-side recompression.",
            _level(-1, 1, 9), "-1 or 1-9"),
    Setting("compression.lz4.level", int, 9, "lz4 level of broker-side recompression.", _level(9, 1, 17), "1-17"),
    Setting("compression.zstd.level", int, 3, "zstd level of broker-side recompression.",
            _level(3, -131072, 22), "-131072 to 22"),
    Setting("message.max.bytes", int, 1048588,
            "Largest record batch a topic accepts (after compression); the default of a topic's "
            "max.message.bytes.", _non_negative, ">= 0"),
    Setting("log.message.timestamp.type", str, "CreateTime", "The default message.timestamp.type of topics.",
            _one_of("CreateTime", "LogAppendTime"), "CreateTime or LogAppendTime"),
    Setting("log.message.timestamp.before.max.ms", int, INT64_MAX,
            "The default message.timestamp.before.max.ms of topics.", _non_negative, ">= 0"),
    Setting("log.message.timestamp.after.max.ms", int, INT64_MAX,
            "The default message.timestamp.after.max.ms of topics.", _non_negative, ">= 0"),
    Setting("min.insync.replicas", int, 1,
            "The default min.insync.replicas of topics; kcoord has one replica, so above 1 acks=all "
            "produce is refused with NOT_ENOUGH_REPLICAS, as Kafka refuses it.", _positive, ">= 1"),
    Setting("log.cleaner.enable", bool, True,
            "Compact the coordinator log in the background (latest record per key, then tombstones go)."),
    Setting("log.cleaner.backoff.ms", int, 15000, "How long the cleaner sleeps between checks.",
            _positive, "> 0"),
    Setting("log.cleaner.min.cleanable.ratio", float, 0.5,
            "Clean a partition once this share of its sealed bytes was written since its last clean.",
            lambda v: 0.0 <= v <= 1.0, "between 0 and 1"),
    Setting("log.retention.check.interval.ms", int, 300000,
            "How often topics with cleanup.policy=delete drop segments past retention.ms / retention.bytes.",
            _positive, "> 0"),
    Setting("log.history.retention.ms", int, 0,
            "Keep coordinator-log segments the cleaner rewrites in DATA_DIR/history for this long, "
            "so the pipeline sees the full commit history. 0: off (replaced segments are deleted); "
            "-1: keep forever. Costs disk: every committed offset stays on disk until it ages out.",
            lambda v: v >= -1, ">= -1"),
    Setting("delete.retention.ms", int, 86400000,
            "How long the cleaner keeps tombstones before dropping them.", _non_negative, ">= 0"),
    Setting("shutdown.grace.ms", int, 5000,
            "On SIGTERM/SIGINT, how long in-flight requests may take to finish.", _non_negative, ">= 0"),
)

_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def _coerce(setting: Setting, raw: Any) -> Any:
    """Turn a TOML value or a --set string into the setting's type."""
    name = setting.name
    if setting.kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false"):
            return raw.lower() == "true"
        raise ConfigError(f"{name}: expected true or false, got {raw!r}")
    if setting.kind is float:
        if isinstance(raw, bool):
            raise ConfigError(f"{name}: expected a number, got {raw!r}")
        if isinstance(raw, (int, float)):
            return float(raw)
        if isinstance(raw, str):
            try:
                return float(raw.strip())
            except ValueError:
                pass
        raise ConfigError(f"{name}: expected a number, got {raw!r}")
    if setting.kind is int:
        if isinstance(raw, bool):
            raise ConfigError(f"{name}: expected an integer, got {raw!r}")
        if isinstance(raw, int):
            return raw
        if isinstance(raw, str):
            try:
                return int(raw.strip(), 10)
            except ValueError:
                pass
        raise ConfigError(f"{name}: expected an integer, got {raw!r}")
    if not isinstance(raw, str):
        raise ConfigError(f"{name}: expected a string, got {raw!r}")
    return raw


class Config(Mapping[str, Any]):
    """A complete, validated configuration: every known key, with defaults filled in."""

    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        values = {s.name: s.default for s in SETTINGS}
        #: The keys the operator set (in the file or with --set), as opposed to defaults.
        self.explicit = frozenset((overrides or {}).keys())
        for name, raw in (overrides or {}).items():
            setting = _BY_NAME.get(name)
            if setting is None:
                raise ConfigError(f"{name}: unknown configuration key")
            value = _coerce(setting, raw)
            if setting.check is not None and not setting.check(value):
                raise ConfigError(f"{name}: {value!r} is out of range ({setting.rule})")
            values[name] = value
        lo = values["group.min.session.timeout.ms"]
        hi = values["group.max.session.timeout.ms"]
        if lo > hi:
            raise ConfigError(
                f"group.min.session.timeout.ms: {lo} is above group.max.session.timeout.ms={hi}"
            )
        if values["advertised.listeners"]:
            parse_listeners(values["advertised.listeners"], "advertised.listeners")
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Any:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML may nest dotted keys ([group] max.size = 3); flatten back to Kafka names."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def parse_set_option(item: str) -> tuple[str, str]:
    """One ``--set name=value``."""
    name, sep, value = item.partition("=")
    if not sep or not name.strip():
        raise ConfigError(f"--set {item!r}: expected name=value")
    return name.strip(), value


def load_config(path: Path | None = None, sets: Iterable[str] = ()) -> Config:
    """The file's values, then each --set on top, validated together."""
    overrides: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as handle:
                overrides.update(_flatten(tomllib.load(handle)))
        except OSError as exc:
            raise ConfigError(f"--config {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"--config {path}: not valid TOML: {exc}") from None
    for item in sets:
        name, value = parse_set_option(item)
        overrides[name] = value
    return Config(overrides)


def reference_markdown() -> str:
    """The configuration reference table (docs/configuration.md embeds it verbatim)."""
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for s in SETTINGS:
        default = ("(unset)" if s.default is None else str(s.default).lower() if s.kind is bool
                   else repr(s.default) if s.kind is str else s.default)
        rule = f" ({s.rule})" if s.rule else ""
        lines.append(f"| `{s.name}` | {s.kind.__name__} | `{default}` | {s.doc}{rule} |")
    return "\n".join(lines) + "\n"


# Documents that end with the reference table: the text before the table's header row is
# kept, the table itself is regenerated (`python -m broker.config`).
REFERENCE_DOCS = ("configuration.md", "operations.md")


def write_reference_docs(docs_dir: Path) -> None:
    """Replace the table at the end of each REFERENCE_DOCS file with reference_markdown()."""
    table = reference_markdown()
    header = table.splitlines()[0]
    for name in REFERENCE_DOCS:
        path = docs_dir / name
        text = path.read_text()
        path.write_text(text[: text.index(header)] + table)


if __name__ == "__main__":
    from broker import topic_configs

    docs = Path(__file__).resolve().parents[1] / "docs"
    write_reference_docs(docs)
    topic_configs.write_reference(docs / "configuration.md")
