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
    CLAIM = "claim"  # this node is the replica elected to lead, and nobody does: claim it
    FOLLOW = "follow"  # a replica of a replicated partition with a live leader: fetch from it
    COPY = "copy"  # this node is a replica being added by a move: copy the log from the leader
    KEEP = "keep"  # a replica that does not lead now (its leadership lapsed): keep the data
    NONE = "none"  # not a replica: hold nothing


def unclean_allowed(image: ClusterImage, tp: TopicPartition, default: bool) -> bool:
    topic = image.topics.get(tp[0])
    value = None if topic is None else topic.configs.get("unclean.leader.election.enable")
    return default if value is None else value.lower() == "true"


def elected(image: ClusterImage, tp: TopicPartition, unclean: bool = False) -> int | None:
    """The replica that should lead a partition nobody leads (Kafka's
    PartitionLeaderElectionAlgorithms.offlinePartitionLeaderElection): the first live
    replica, in assignment order, that is in the ISR; with ``unclean``, else the first live
    replica at all. A replica being added by a copy (``single_move``) never leads; one added
    by a reassignment of a replicated partition may once it is in the ISR. A partition with a
    single replica is led by it. None: the partition stays offline."""
    assignment = image.assignments.get(tp)
    if assignment is None:
        return None
    candidates = [r for r in assignment.replicas
                  if image.live(r) and not (assignment.single_move and r in assignment.adding)]
    if len(assignment.target) == 1 and not assignment.moving:
        return candidates[0] if candidates else None
    isr = image.isr_of(tp)
    for replica in candidates:
        if replica in isr:
            return replica
    if unclean and candidates:
        return candidates[0]
    return None


def role(image: ClusterImage, me: int, tp: TopicPartition, unclean: bool = False) -> Role:
    assignment = image.assignments.get(tp)
    leadership = image.leaders.get(tp)
    if leadership is not None and leadership.leader == me:
        return Role.LEAD
    if assignment is None or me not in assignment.replicas:
        return Role.NONE
    if me in assignment.adding and assignment.single_move:
        return Role.COPY
    if leadership is None:
        if elected(image, tp, unclean_allowed(image, tp, unclean)) == me:
            return Role.CLAIM
        return Role.KEEP
    if len(assignment.replicas) > 1 and not assignment.single_move and image.live(leadership.leader):
        return Role.FOLLOW
    return Role.KEEP


def roles(image: ClusterImage, me: int, unclean: bool = False) -> dict[TopicPartition, Role]:
    """Every partition this node has something to do with (role other than NONE)."""
    out: dict[TopicPartition, Role] = {}
    for tp in set(image.assignments) | set(image.leaders):
        found = role(image, me, tp, unclean)
        if found is not Role.NONE:
            out[tp] = found
    return out


def handover_target(image: ClusterImage, me: int, tp: TopicPartition) -> int | None:
    """The node this leader should hand a single-replica partition to: the replica being added."""
    assignment = image.assignments.get(tp)
    leadership = image.leaders.get(tp)
    if assignment is None or leadership is None or leadership.leader != me or not assignment.single_move:
        return None
    return assignment.adding[0]


def should_hand_back(image: ClusterImage, me: int, tp: TopicPartition) -> bool:
    """This leader should give the partition up to its preferred leader: that replica is
    alive and in the ISR (Kafka's preferred replica election, auto.leader.rebalance.enable)."""
    assignment = image.assignments.get(tp)
    leadership = image.leaders.get(tp)
    if assignment is None or leadership is None or leadership.leader != me or assignment.moving:
        return False
    preferred = assignment.preferred_leader
    return preferred != me and preferred >= 0 and image.live(preferred) and preferred in image.isr_of(tp)
