"""Online migration between the classic and the consumer protocol (KIP-848), as in Kafka 4.

``group.consumer.migration.policy`` (default ``bidirectional``) allows:

- **upgrade**: a consumer-protocol member joining a classic group of the "consumer"
  protocol type turns it into a consumer group. Its classic members keep their current
  partitions at an epoch equal to the old generation and go on with JoinGroup, SyncGroup
  and Heartbeat (``classic_members``); parked JoinGroup and SyncGroup requests are told
  REBALANCE_IN_PROGRESS. An empty classic group is simply replaced.
- **downgrade**: when the last consumer-protocol member leaves and only classic members
  remain, the group turns back into a classic group at the same generation, with each
  member's partitions as its assignment, and rebalances.

Kafka's GroupMetadataManager.convertToConsumerGroup / convertToClassicGroup and
ConsumerGroup.fromClassicGroup / ClassicGroup.fromConsumerGroup do the same. Each
conversion is written as records: the old group's tombstones, then the new group's records.
"""

from __future__ import annotations

import logging
import uuid

from broker.coordinator.classic.group import ClassicGroup
from broker.coordinator.classic.manager import ClassicGroupManager
from broker.coordinator.classic.rebalance import join_error, sync_reply
from broker.coordinator.effects import Effects
from broker.coordinator.modern.assignment import assignment_of
from broker.coordinator.modern.consumer.classic_members import ClassicMembers, subscription_version
from broker.coordinator.modern.consumer.group import ConsumerGroup, apply_record
from broker.coordinator.modern.consumer.manager import ConsumerGroupManager
from broker.coordinator.modern.consumer.member import ClassicMemberMetadata, ConsumerGroupMember, MemberState
from broker.coordinator.records import (
    ConsumerGroupCurrentAssignmentRecord,
    ConsumerGroupEpochRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupSubscriptionMetadataRecord,
    ConsumerGroupTargetAssignmentEpochRecord,
    ConsumerGroupTargetMemberRecord,
    CoordinatorRecord,
    GroupMemberMetadata,
    GroupMetadata,
    GroupMetadataRecord,
)
from protocol.consumer_protocol import decode_assignment, decode_subscription
from protocol.errors import ErrorCode, ProtocolError

log = logging.getLogger("kcoord.coordinator")

E = ErrorCode


class Migration:
    def __init__(self, consumer: ConsumerGroupManager, classic: ClassicGroupManager,
                 classic_members: ClassicMembers) -> None:
        self.consumer = consumer
        self.classic = classic
        self.classic_members = classic_members
        self.upgrades = 0
        self.downgrades = 0
        consumer.upgrade = self.upgrade
        consumer.downgrade = self.downgrade

    # ------------------------------------------------------------------ classic -> consumer

    def upgrade(self, group_id: str, records: list[CoordinatorRecord], fx: Effects, now: int) -> ConsumerGroup | None:
        group = self.classic.classic_group(group_id)
        if group is None:
            return None
        config = self.consumer.config
        if not group.members:
            records.append(GroupMetadataRecord(group_id, None))
            log.info("empty classic group %s is replaced by a consumer group", group_id)
            return ConsumerGroup(group_id)
        if not config.upgrade_enabled or "consumer" not in config.rebalance_protocols:
            log.info("cannot upgrade classic group %s: group.consumer.migration.policy=%s",
                     group_id, config.migration_policy)
            return None
        if group.protocol_type != "consumer" or group.protocol is None:
            log.info("cannot upgrade classic group %s: it does not use the consumer embedded protocol", group_id)
            return None
        if group.size > config.consumer_max_size:
            log.info("cannot upgrade classic group %s: more members than group.consumer.max.size", group_id)
            return None
        try:
            converted = self._consumer_records(group)
        except ProtocolError as exc:
            log.warning("cannot upgrade classic group %s: unreadable consumer protocol (%s)", group_id, exc)
            return None
        # Members parked in a join or sync learn that a rebalance is under way, and rejoin.
        for member in group.members.values():
            if member.join_ticket is not None:
                fx.reply(member.join_ticket, join_error(E.REBALANCE_IN_PROGRESS, member.member_id))
                group.set_join_ticket(member, None)
            if member.sync_ticket is not None:
                fx.reply(member.sync_ticket, sync_reply(E.REBALANCE_IN_PROGRESS))
                member.sync_ticket = None
        records.append(GroupMetadataRecord(group_id, None))
        records.extend(converted)
        consumer_group = ConsumerGroup(group_id)
        for record in converted:
            apply_record(consumer_group, record)  # type: ignore[arg-type]
        for member in group.members.values():
            self.consumer.schedule_session(group_id, member.member_id, now, member.session_timeout_ms)
        self.upgrades += 1
        log.info("classic group %s upgraded to a consumer group at epoch %d", group_id, group.generation)
        return consumer_group

    def _consumer_records(self, group: ClassicGroup) -> list[CoordinatorRecord]:
        """Kafka's ConsumerGroup.fromClassicGroup followed by createConsumerGroupRecords."""
        image = self.consumer.image()
        epoch = group.generation
        members = []
        for m in group.members.values():
            subscription = decode_subscription(m.metadata_for(group.protocol))
            assignment = decode_assignment(m.assignment) if m.assignment else None
            pairs: list[tuple[uuid.UUID, list[int]]] = []
            for tp in (assignment.assigned_partitions if assignment is not None else []):
                meta = image.topic_metadata(tp.topic) if image is not None else None
                if meta is not None:
                    pairs.append((meta.topic_id, list(tp.partitions)))
            members.append(ConsumerGroupMember(
                member_id=m.member_id, instance_id=m.group_instance_id, rack_id=subscription.get("rack_id"),
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols)),
                member_epoch=epoch, previous_member_epoch=epoch, state=MemberState.STABLE,
                assigned_partitions=assignment_of(pairs),
            ))
        gid = group.group_id
        records: list[CoordinatorRecord] = [ConsumerGroupMemberMetadataRecord(gid, m.member_id, m) for m in members]
        records.append(ConsumerGroupEpochRecord(gid, epoch))
        records.extend(ConsumerGroupTargetMemberRecord(gid, m.member_id, m.assigned_partitions) for m in members)
        records.append(ConsumerGroupTargetAssignmentEpochRecord(gid, epoch))
        records.extend(ConsumerGroupCurrentAssignmentRecord(gid, m.member_id, m) for m in members)
        return records

    # ------------------------------------------------------------------ consumer -> classic

    def downgrade(self, group: ConsumerGroup, leaving: str, fx: Effects, now: int) -> bool:
        """Turn ``group`` back into a classic group if ``leaving`` was its last consumer-protocol member."""
        config = self.consumer.config
        if group.size <= 1 or not group.all_members_use_classic_protocol_except(leaving):
            return False
        if not config.downgrade_enabled:
            log.info("cannot downgrade consumer group %s: group.consumer.migration.policy=%s",
                     group.group_id, config.migration_policy)
            return False
        if group.size - 1 > config.max_size:
            log.info("cannot downgrade consumer group %s: more members than group.max.size", group.group_id)
            return False
        remaining = [m for mid, m in group.members.items() if mid != leaving]
        gid = group.group_id
        records: list[CoordinatorRecord] = []
        for m in group.members.values():
            records.append(ConsumerGroupCurrentAssignmentRecord(gid, m.member_id, None))
            records.append(ConsumerGroupTargetMemberRecord(gid, m.member_id, None))
        records.append(ConsumerGroupTargetAssignmentEpochRecord(gid, None))
        records.extend(ConsumerGroupMemberMetadataRecord(gid, m.member_id, None) for m in group.members.values())
        records.append(ConsumerGroupSubscriptionMetadataRecord(gid, None))
        records.append(ConsumerGroupEpochRecord(gid, None))
        protocol = self._select_protocol(remaining)
        members = []
        for m in remaining:
            assert m.classic is not None
            metadata = next((md for name, md in m.classic.protocols if name == protocol), b"")
            target = group.target_assignment.get(m.member_id, {})
            members.append(GroupMemberMetadata(
                m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.classic.session_timeout_ms, metadata,
                self.classic_members.serialize(group, target, subscription_version(metadata)),
            ))
        records.append(GroupMetadataRecord(gid, GroupMetadata(
            "consumer", group.group_epoch, protocol, remaining[0].member_id, now, tuple(members))))
        for record in records:
            fx.write(gid, record)
        classic = self.classic.classic_group(gid)
        assert classic is not None
        for m in remaining:
            member = classic.members[m.member_id]
            assert m.classic is not None
            classic.set_protocols(member, m.classic.protocols)
            self.classic.touch(classic, member, now)
            self.classic_members.joins.pop((gid, m.member_id), None)
            self.classic_members.syncs.pop((gid, m.member_id), None)
        self.downgrades += 1
        log.info("consumer group %s downgraded to a classic group at generation %d", gid, group.group_epoch)
        self.classic.prepare_rebalance(classic, now, fx, f"downgrade of group {gid} from consumer to classic")
        return True

    @staticmethod
    def _select_protocol(members: list[ConsumerGroupMember]) -> str:
        """The classic protocol vote: candidates every member supports, each member's first choice."""
        supported = [{name for name, _ in m.classic.protocols} for m in members if m.classic is not None]
        candidates = set.intersection(*supported) if supported else set()
        votes: dict[str, int] = {}
        for m in members:
            assert m.classic is not None
            for name, _ in m.classic.protocols:
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    break
        if not votes:
            first = members[0].classic
            return first.protocols[0][0] if first is not None else ""
        best = max(votes.values())
        first_member = members[0].classic
        assert first_member is not None
        for name, _ in first_member.protocols:
            if votes.get(name) == best:
                return name
        return max(votes, key=lambda n: votes[n])
