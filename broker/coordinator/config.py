"""The coordinator's settings, taken from the broker configuration by their Kafka names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000  # Kafka's GroupCoordinatorConfig.CLASSIC_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2_147_483_647
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    # group.new.partitions.start: "earliest" commits new partitions' start offsets for
    # subscribed groups; "latest" commits nothing (the client's auto.offset.reset decides).
    new_partitions_start: str = "earliest"
    # offsets.commit.require.known.topic: commits for unknown partitions are refused.
    require_known_topic: bool = True
    # KIP-848 consumer groups (group.consumer.*), with Kafka 4's defaults.
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    # The bounds a group's own consumer.session.timeout.ms / consumer.heartbeat.interval.ms must keep.
    consumer_min_session_timeout_ms: int = 45_000
    consumer_max_session_timeout_ms: int = 60_000
    consumer_min_heartbeat_interval_ms: int = 5_000
    consumer_max_heartbeat_interval_ms: int = 15_000
    consumer_max_size: int = 2_147_483_647
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    # group.consumer.assignment.interval.ms: a group's target is computed at most this often
    # (0: on every epoch bump, as Kafka 4.0 does).
    consumer_assignment_interval_ms: int = 100
    # group.consumer.migration.policy: which way a group may change protocol with members in it.
    migration_policy: str = "bidirectional"
    # group.coordinator.rebalance.protocols
    rebalance_protocols: tuple[str, ...] = ("classic", "consumer")
    # kcoord.offset.out.of.range and kcoord.initial.offset: the broker-wide defaults of the
    # offset reset policies a group may override (docs/coordinator-rules.md#offset-reset-policies).
    offset_out_of_range: str = "none"
    initial_offset: str = "none"

    @property
    def upgrade_enabled(self) -> bool:
        return self.migration_policy in ("bidirectional", "upgrade")

    @property
    def downgrade_enabled(self) -> bool:
        return self.migration_policy in ("bidirectional", "downgrade")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> CoordinatorConfig:
        return cls(
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            max_size=config["group.max.size"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
            new_partitions_start=config["group.new.partitions.start"],
            require_known_topic=config["offsets.commit.require.known.topic"],
            consumer_session_timeout_ms=config["group.consumer.session.timeout.ms"],
            consumer_heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
            consumer_min_session_timeout_ms=config["group.consumer.min.session.timeout.ms"],
            consumer_max_session_timeout_ms=config["group.consumer.max.session.timeout.ms"],
            consumer_min_heartbeat_interval_ms=config["group.consumer.min.heartbeat.interval.ms"],
            consumer_max_heartbeat_interval_ms=config["group.consumer.max.heartbeat.interval.ms"],
            consumer_max_size=config["group.consumer.max.size"],
            consumer_assignment_interval_ms=config["group.consumer.assignment.interval.ms"],
            consumer_assignors=tuple(a.strip() for a in config["group.consumer.assignors"].split(",") if a.strip()),
            migration_policy=config["group.consumer.migration.policy"],
            rebalance_protocols=tuple(
                p.strip() for p in config["group.coordinator.rebalance.protocols"].split(",") if p.strip()),
            offset_out_of_range=config["kcoord.offset.out.of.range"],
            initial_offset=config["kcoord.initial.offset"],
        )
