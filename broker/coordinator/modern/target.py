"""The target assignment: what the assignor gives each member at a group epoch (Kafka's TargetAssignmentBuilder).

The group's members, with one member added, updated or removed, and the subscribed topics'
metadata go to the assignor; the records are only the delta: a target record for each
member whose target changed, tombstones for members gone, and the new assignment epoch.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.coordinator.assignor import Assignor, GroupSpec, MemberSpec
from broker.coordinator.modern.assignment import EMPTY, Assignment
from broker.coordinator.modern.consumer.member import ConsumerGroupMember
from broker.coordinator.modern.topics import TopicMetadata
from broker.coordinator.records import (
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentEpochRecord,
    ConsumerGroupTargetMemberRecord,
)


@dataclass(frozen=True, slots=True)
class TargetAssignment:
    records: list[ConsumerGroupRecord]
    members: dict[str, Assignment]


def build_target(
    group_id: str,
    epoch: int,
    assignor: Assignor,
    members: Mapping[str, ConsumerGroupMember],
    targets: Mapping[str, Assignment],
    subscription: Mapping[str, TopicMetadata],
    topics_of: Callable[[ConsumerGroupMember], set[str]],
    changes: Mapping[str, ConsumerGroupMember | None] | None = None,
    inherit_from: Mapping[str, str] | None = None,
) -> TargetAssignment:
    """Run the assignor over ``members`` with ``changes`` applied (None removes a member).

    ``inherit_from`` maps a new member id to the member it replaces (a static member
    rejoining under a new id), whose target it starts from.
    """
    current = dict(members)
    for member_id, member in (changes or {}).items():
        if member is None:
            current.pop(member_id, None)
        else:
            current[member_id] = member
    ids = {name: meta.topic_id for name, meta in subscription.items()}
    partitions: dict[uuid.UUID, int] = {meta.topic_id: meta.num_partitions for meta in subscription.values()}
    specs = {}
    for member_id, member in current.items():
        previous = (inherit_from or {}).get(member_id, member_id)
        specs[member_id] = MemberSpec(
            member.instance_id,
            frozenset(ids[name] for name in topics_of(member) if name in ids),
            targets.get(previous, targets.get(member_id, EMPTY)),
        )
    assigned = assignor.assign(GroupSpec(specs, partitions))
    records: list[ConsumerGroupRecord] = []
    out: dict[str, Assignment] = {}
    for member_id in specs:
        new = assigned.get(member_id, {})
        out[member_id] = new
        if dict(targets.get(member_id, EMPTY)) != new or member_id not in targets:
            records.append(ConsumerGroupTargetMemberRecord(group_id, member_id, new))
    records.append(ConsumerGroupTargetAssignmentEpochRecord(group_id, epoch))
    return TargetAssignment(records, out)
