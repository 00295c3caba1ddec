"""The ``range`` assignor: each topic's partitions in contiguous ranges over its sorted subscribers.

As Kafka's RangeAssignor for the consumer protocol: members are ordered by instance id
(static members first) and then member id; each subscriber of a topic gets
``partitions // subscribers`` consecutive partitions, and the first ``partitions %
subscribers`` get one more. Members with the same subscriptions get the same partition
numbers of co-partitioned topics. It does not try to keep current assignments.
"""

from __future__ import annotations

import uuid

from broker.coordinator.assignor.spec import GroupAssignment, GroupSpec


class RangeAssignor:
    name = "range"

    def assign(self, spec: GroupSpec) -> GroupAssignment:
        order = sorted(spec.members, key=lambda m: (spec.members[m].instance_id is None,
                                                    spec.members[m].instance_id or "", m))
        subscribers: dict[uuid.UUID, int] = {}
        for member_id in order:
            for topic_id in spec.members[member_id].subscribed_topic_ids:
                if topic_id in spec.partitions:
                    subscribers[topic_id] = subscribers.get(topic_id, 0) + 1
        next_start: dict[uuid.UUID, int] = dict.fromkeys(subscribers, 0)
        extra = {t: spec.partitions[t] % n for t, n in subscribers.items()}
        out: GroupAssignment = {}
        for member_id in order:
            assignment: dict[uuid.UUID, frozenset[int]] = {}
            for topic_id in sorted(spec.members[member_id].subscribed_topic_ids):
                count = subscribers.get(topic_id)
                if count is None:
                    continue
                quota = spec.partitions[topic_id] // count
                if extra[topic_id] > 0:
                    quota += 1
                    extra[topic_id] -= 1
                start = next_start[topic_id]
                end = min(start + quota, spec.partitions[topic_id])
                next_start[topic_id] = end
                if start < end:
                    assignment[topic_id] = frozenset(range(start, end))
            out[member_id] = assignment
        return out
