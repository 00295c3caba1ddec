"""Topic configs as Kafka has them: every name, validation, broker defaults and sources."""

from __future__ import annotations

import pytest

from broker.config import Config
from broker.topic_configs import (
    TOPIC_CONFIGS,
    BrokerDefaults,
    ConfigSource,
    ConfigValueError,
    canonical_value,
    resolve,
)

#: Every topic config name of Kafka 3.9's LogConfig (TopicConfig and QuotaConfig names).
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy", "compression.type", "compression.gzip.level", "compression.lz4.level",
    "compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms",
    "follower.replication.throttled.replicas", "index.interval.bytes", "leader.replication.throttled.replicas",
    "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms", "max.message.bytes",
    "message.downconversion.enable", "message.format.version", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.difference.max.ms", "message.timestamp.type",
    "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
    "remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable", "retention.bytes",
    "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable",
}


def defaults(**sets: object) -> BrokerDefaults:
    config = Config({k.replace("_", "."): v for k, v in sets.items()})
    return BrokerDefaults(config, config.explicit)


def test_every_kafka_topic_config_is_known() -> None:
    assert set(TOPIC_CONFIGS) == KAFKA_TOPIC_CONFIGS


def test_every_default_is_valid_and_canonical() -> None:
    for name, config in TOPIC_CONFIGS.items():
        assert canonical_value(name, config.default) == config.default, name


@pytest.mark.parametrize(("name", "value", "stored"), [
    ("compression.type", "zstd", "zstd"),
    ("cleanup.policy", "compact, delete", "compact,delete"),
    ("preallocate", "TRUE", "true"),
    ("retention.ms", " -1 ", "-1"),
    ("min.cleanable.dirty.ratio", "0.25", "0.25"),
    ("message.format.version", "2.8", "2.8"),
    ("leader.replication.throttled.replicas", "0:1,1:1", "0:1,1:1"),
    ("compression.gzip.level", "-1", "-1"),
])
def test_values_are_stored_canonically(name: str, value: str, stored: str) -> None:
    assert canonical_value(name, value) == stored


@pytest.mark.parametrize(("name", "value", "complaint"), [
    ("no.such.config", "1", "Unknown topic config name: no.such.config"),
    ("retention.ms", "soon", "Not a number of type LONG"),
    ("retention.ms", "-2", "Value must be at least -1"),
    ("segment.bytes", "3000000000", "Not a number of type INT"),
    ("compression.type", "brotli", "String must be one of"),
    ("cleanup.policy", "compact,forever", "Invalid value forever"),
    ("min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1"),
    ("preallocate", "yes", "either true or false"),
    ("compression.gzip.level", "0", "Value must be between 1 and 9"),
    ("leader.replication.throttled.replicas", "nonsense", "[partitionId]:[brokerId]"),
    ("retention.ms", None, "Null value"),
])
def test_bad_values_name_the_problem(name: str, value: str | None, complaint: str) -> None:
    with pytest.raises(ConfigValueError, match=complaint.replace("[", r"\[").replace("]", r"\]")):
        canonical_value(name, value)


def test_kafka_defaults_without_broker_settings() -> None:
    resolved = resolve("retention.ms", {}, defaults())
    assert resolved.value == "604800000"
    assert resolved.source is ConfigSource.DEFAULT_CONFIG
    assert resolved.synonyms == (("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),)


def test_broker_retention_hours_apply_to_topics_without_overrides() -> None:
    resolved = resolve("retention.ms", {}, defaults(log_retention_hours=1))
    assert resolved.value == "3600000"
    assert resolved.source is ConfigSource.STATIC_BROKER_CONFIG
    assert resolved.synonyms[0] == ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG)


def test_minutes_win_over_hours_and_ms_over_both() -> None:
    assert resolve("retention.ms", {}, defaults(log_retention_hours=1, log_retention_minutes=2)).value == "120000"
    both = defaults(log_retention_hours=1, log_retention_minutes=2, log_retention_ms=5)
    assert resolve("retention.ms", {}, both).value == "5"


def test_negative_broker_retention_is_forever() -> None:
    assert resolve("retention.ms", {}, defaults(log_retention_hours=-1)).value == "-1"


def test_topic_override_wins_and_is_named_first() -> None:
    resolved = resolve("retention.ms", {"retention.ms": "1000"}, defaults(log_retention_hours=1))
    assert (resolved.value, resolved.source) == ("1000", ConfigSource.TOPIC_CONFIG)
    assert [s[0] for s in resolved.synonyms] == ["retention.ms", "log.retention.hours"]


@pytest.mark.parametrize(("topic", "broker", "value"), [
    ("segment.bytes", {"log_segment_bytes": 4096}, "4096"),
    ("retention.bytes", {"log_retention_bytes": 10}, "10"),
    ("cleanup.policy", {"log_cleanup_policy": "compact"}, "compact"),
    ("compression.type", {"compression_type": "lz4"}, "lz4"),
    ("max.message.bytes", {"message_max_bytes": 1000}, "1000"),
    ("min.insync.replicas", {"min_insync_replicas": 2}, "2"),
    ("message.timestamp.type", {"log_message_timestamp_type": "LogAppendTime"}, "LogAppendTime"),
])
def test_broker_defaults_use_kafkas_names(topic: str, broker: dict[str, object], value: str) -> None:
    resolved = resolve(topic, {}, defaults(**broker))
    assert (resolved.value, resolved.source) == (value, ConfigSource.STATIC_BROKER_CONFIG)
