"""What this node should be for each partition, from the image alone. Sans-IO.

The shell compares the roles with what it is doing and changes course: open or close a
partition's log, load or unload the groups of a coordinator partition, start or stop a
copy, claim leadership. Whether the node may *act* as a leader right now also needs its
lease (``cluster.fencing``); the roles say what it would be if the lease holds.
"""

from __future__ import annotations

from enum import Enum

from cluster.model import ClusterImage, TopicPartition


class Role(Enum):
    LEAD = "lead"  # this node holds the partition's leader key
    CLAIM = "claim"  # this node is the replica that should lead, and nobody does: claim it
    COPY = "copy"  # this node is a replica being added: copy the log from the leader
    KEEP = "keep"  # a replica that does not lead now (its leadership lapsed): keep the data
    NONE = "none"  # not a replica: hold nothing


def role(image: ClusterImage, me: int, tp: TopicPartition) -> Role:
    assignment = image.assignments.get(tp)
    leadership = image.leaders.get(tp)
    if leadership is not None and leadership.leader == me:
        return Role.LEAD
    if assignment is None or me not in assignment.replicas:
        return Role.NONE
    if me in assignment.adding:
        return Role.COPY
    if leadership is None and assignment.preferred_leader == me:
        return Role.CLAIM
    return Role.KEEP


def roles(image: ClusterImage, me: int) -> dict[TopicPartition, Role]:
    """Every partition this node has something to do with (role other than NONE)."""
    out: dict[TopicPartition, Role] = {}
    for tp in set(image.assignments) | set(image.leaders):
        found = role(image, me, tp)
        if found is not Role.NONE:
            out[tp] = found
    return out


def handover_target(image: ClusterImage, me: int, tp: TopicPartition) -> int | None:
    """The node this leader should hand the partition to: the first replica being added."""
    assignment = image.assignments.get(tp)
    leadership = image.leaders.get(tp)
    if assignment is None or leadership is None or leadership.leader != me or not assignment.adding:
        return None
    return assignment.adding[0]
