"""The ``uniform`` assignor (Kafka's default): balanced, and as sticky as balance allows.

Balanced means no partition could move to another subscriber of its topic that has at
least two partitions fewer than its owner. With identical subscriptions (the homogeneous
case) that is "every member has ``total // members`` partitions or one more". Sticky means
a member keeps every partition of its current target it may keep: partitions go only when
the member no longer subscribes to the topic, the topic lost the partition, or the member
holds more than its share. Kafka's UniformAssignor splits the two cases into a homogeneous
and a heterogeneous builder; so does this module.
"""

from __future__ import annotations

import uuid

from broker.coordinator.assignor.spec import GroupAssignment, GroupSpec

TopicPartition = tuple[uuid.UUID, int]


def _kept(spec: GroupSpec, member_id: str, taken: set[TopicPartition]) -> list[TopicPartition]:
    """The member's current partitions it may still hold: subscribed, existing, not already taken."""
    member = spec.members[member_id]
    out = []
    subscribed = member.subscribed_topic_ids
    counts = spec.partitions
    for topic_id, partitions in sorted(member.assignment.items()):
        if topic_id not in subscribed:
            continue
        count = counts.get(topic_id)
        if count is None:
            continue
        for partition in sorted(partitions):
            tp = (topic_id, partition)
            if partition < count and tp not in taken:
                taken.add(tp)
                out.append(tp)
    return out


def _as_assignment(partitions: list[TopicPartition]) -> dict[uuid.UUID, frozenset[int]]:
    if not partitions:
        return {}
    first = partitions[0][0]
    if all(t == first for t, _ in partitions):
        return {first: frozenset(p for _, p in partitions)}
    grouped: dict[uuid.UUID, set[int]] = {}
    for topic_id, partition in partitions:
        grouped.setdefault(topic_id, set()).add(partition)
    return {topic_id: frozenset(ps) for topic_id, ps in grouped.items()}


class UniformAssignor:
    name = "uniform"

    def assign(self, spec: GroupSpec) -> GroupAssignment:
        if not spec.members:
            return {}
        if spec.homogeneous:
            return self._homogeneous(spec)
        return self._heterogeneous(spec)

    @staticmethod
    def _homogeneous(spec: GroupSpec) -> GroupAssignment:
        first = next(iter(spec.members.values()))
        topics = sorted(t for t in first.subscribed_topic_ids if t in spec.partitions)
        total = sum(spec.partitions[t] for t in topics)
        taken: set[TopicPartition] = set()
        current = {m: _kept(spec, m, taken) for m in sorted(spec.members)}
        # Members already holding the most keep the extra partitions, so fewer move.
        order = sorted(current, key=lambda m: (-len(current[m]), m))
        minimum, extra = divmod(total, len(order))
        quotas = {m: minimum + (1 if i < extra else 0) for i, m in enumerate(order)}
        held: dict[str, list[TopicPartition]] = {}
        for member_id in order:
            held[member_id] = current[member_id][: quotas[member_id]]
            for tp in current[member_id][quotas[member_id]:]:
                taken.discard(tp)
        free = [(t, p) for t in topics for p in range(spec.partitions[t]) if (t, p) not in taken]
        position = 0
        out: GroupAssignment = {}
        for member_id in order:
            room = quotas[member_id] - len(held[member_id])
            if room > 0:
                held[member_id].extend(free[position:position + room])
                position += room
            elif len(held[member_id]) == sum(len(ps) for ps in spec.members[member_id].assignment.values()):
                # Kept everything it had and gained nothing: the same assignment, no rebuilding.
                out[member_id] = dict(spec.members[member_id].assignment)
                continue
            out[member_id] = _as_assignment(held[member_id])
        return out

    @staticmethod
    def _heterogeneous(spec: GroupSpec) -> GroupAssignment:
        subscribers: dict[uuid.UUID, list[str]] = {}
        for member_id in sorted(spec.members):
            for topic_id in spec.members[member_id].subscribed_topic_ids:
                if topic_id in spec.partitions:
                    subscribers.setdefault(topic_id, []).append(member_id)
        taken: set[TopicPartition] = set()
        held: dict[str, list[TopicPartition]] = {m: _kept(spec, m, taken) for m in sorted(spec.members)}
        owner: dict[TopicPartition, str] = {tp: m for m, tps in held.items() for tp in tps}
        counts = {m: len(tps) for m, tps in held.items()}
        for topic_id in sorted(subscribers):
            for partition in range(spec.partitions[topic_id]):
                tp = (topic_id, partition)
                if tp in owner:
                    continue
                chosen = min(subscribers[topic_id], key=lambda m: (counts[m], m))
                owner[tp] = chosen
                counts[chosen] += 1
        # Move partitions from the fullest owners to their topic's emptiest subscribers
        # until none can move by more than one (each move lowers the sum of squared counts).
        moved = True
        while moved:
            moved = False
            for tp in sorted(owner, key=lambda tp: (-counts[owner[tp]], str(tp[0]), tp[1])):
                source = owner[tp]
                target = min(subscribers[tp[0]], key=lambda m: (counts[m], m))
                if counts[source] - counts[target] > 1:
                    owner[tp] = target
                    counts[source] -= 1
                    counts[target] += 1
                    moved = True
        by_member: dict[str, list[TopicPartition]] = {m: [] for m in spec.members}
        for tp, member_id in owner.items():
            by_member[member_id].append(tp)
        return {m: _as_assignment(tps) for m, tps in by_member.items()}
