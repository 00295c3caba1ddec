"""ConsumerGroupDescribe: a consumer group's epochs and each member's current and target assignment."""

from __future__ import annotations

from broker.coordinator.modern.assignment import Assignment, pairs_of
from broker.coordinator.modern.consumer.group import ConsumerGroup
from broker.coordinator.modern.topics import MetadataImage
from broker.coordinator.requests import DescribedAssignment, DescribedConsumerGroup, DescribedConsumerMember


def _described(assignment: Assignment, names: dict[object, str], image: MetadataImage | None) -> DescribedAssignment:
    out = []
    for topic_id, partitions in pairs_of(assignment):
        name = names.get(topic_id) or (image.topic_name(topic_id) if image is not None else None) or ""
        out.append((topic_id, name, tuple(partitions)))
    return DescribedAssignment(tuple(out))


def describe_consumer_group(group: ConsumerGroup, assignors: tuple[str, ...], image: MetadataImage | None,
                            authorized_operations: int | None) -> DescribedConsumerGroup:
    names: dict[object, str] = {meta.topic_id: name for name, meta in group.subscription_metadata.items()}
    default = assignors[0] if assignors else "uniform"
    return DescribedConsumerGroup(
        group_id=group.group_id,
        state=group.state.wire_name,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=group.preferred_assignor(default),
        members=tuple(
            DescribedConsumerMember(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=m.subscribed_topic_names,
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=_described(m.assigned_partitions, names, image),
                target_assignment=_described(group.target_assignment.get(m.member_id, {}), names, image),
            )
            for m in group.members.values()
        ),
        authorized_operations=authorized_operations,
    )
