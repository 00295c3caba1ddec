"""Where partitions live: the placement decisions, sans-IO (Kafka's QuorumController and
its ReplicaPlacer).

Each function reads a ``ClusterImage`` and returns the assignments to write; the shell
writes them with compare-and-set on the revisions it read, so a decision made on a stale
image fails and is made again on a fresh one. Nothing here awaits or reads a clock.

- New partitions are striped over the live nodes, the least loaded first, with as many
  replicas as their topic's replication factor and the live nodes allow; their ISR is
  written with them (every replica of an empty partition is in sync).
- A partition with fewer replicas than its replication factor (placed while fewer nodes
  were alive) gets more as nodes join: the new replica follows the leader and joins the
  ISR once it has caught up, as a replica added by a KIP-455 reassignment does.
- When the live nodes change, the controller moves single-replica partitions from the most loaded live
  node to the least loaded until no two differ by more than one (at most ``max_moves`` at
  a time). A move is KIP-455's: the target is added, copies the log, takes over, and the
  old replica is removed.
- A move whose target is no longer alive is cancelled.
- A reassignment of a replicated partition completes once every target replica is in the
  ISR (``completed_reassignment``).
- Partitions of a node that is gone stay where they are, offline (Kafka with one replica):
  nothing else holds their data. An operator may move them anyway (``unclean``), with an
  empty log, when that node will not come back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cluster.model import Assignment, ClusterImage, TopicPartition


@dataclass(frozen=True, slots=True)
class Change:
    """Write ``assignment`` for ``tp`` if its key is still at the revision decided on."""

    tp: TopicPartition
    assignment: Assignment
    why: str
    #: The ISR to write with it (a new partition), or None to leave the ISR as it is.
    isr: tuple[int, ...] | None = None


def load_of(image: ClusterImage, nodes: Iterable[int] | None = None) -> dict[int, int]:
    """Partitions each node will hold once moves complete (every live node appears)."""
    load = dict.fromkeys(image.nodes if nodes is None else nodes, 0)
    for assignment in image.assignments.values():
        for replica in assignment.target:
            load[replica] = load.get(replica, 0) + 1
    return load


def place(count: int, live: Sequence[int], load: dict[int, int], replication_factor: int = 1
          ) -> list[tuple[int, ...]]:
    """Replicas for each of ``count`` new partitions: the first (the preferred leader) goes
    round-robin over the live nodes, the least loaded first (ties to the lowest id), and the
    others to the nodes after it, as Kafka's StripedReplicaPlacer stripes a topic over the
    brokers. At most one replica per node. ``load`` is updated as partitions are placed."""
    if not live:
        return []
    order = sorted(live, key=lambda n: (load.get(n, 0), n))
    width = max(1, min(replication_factor, len(order)))
    out: list[tuple[int, ...]] = []
    for i in range(count):
        replicas = tuple(order[(i + j) % len(order)] for j in range(width))
        for node in replicas:
            load[node] = load.get(node, 0) + 1
        out.append(replicas)
    return out


def place_missing(image: ClusterImage) -> list[Change]:
    """Assignments (and ISRs) for partitions of topics that have none yet (a new or grown topic)."""
    live = sorted(image.nodes)
    load = load_of(image, live)
    changes: list[Change] = []
    for name in sorted(image.topics):
        topic = image.topics[name]
        missing = [i for i in range(topic.partitions) if (name, i) not in image.assignments]
        for index, replicas in zip(missing, place(len(missing), live, load, topic.replication_factor),
                                   strict=False):
            changes.append(Change((name, index), Assignment(replicas), "new partition", isr=replicas))
    return changes


def grow_replicas(image: ClusterImage) -> list[Change]:
    """More replicas for partitions that have fewer than their topic's replication factor,
    on the least loaded live nodes that do not hold them yet. The ISR stays as it is.

    The preferred leader (the first replica) of a grown partition becomes whichever of its
    replicas is the preferred leader of the fewest partitions, so leadership spreads over
    the nodes as they join (the leader hands over once that replica is in sync)."""
    live = sorted(image.nodes)
    load = load_of(image, live)
    preferred: dict[int, int] = dict.fromkeys(live, 0)
    for assignment in image.assignments.values():
        if assignment.preferred_leader >= 0:
            preferred[assignment.preferred_leader] = preferred.get(assignment.preferred_leader, 0) + 1
    changes: list[Change] = []
    for tp, assignment in sorted(image.assignments.items()):
        topic = image.topics.get(tp[0])
        if topic is None or assignment.moving or len(assignment.replicas) >= topic.replication_factor:
            continue
        others = sorted((n for n in live if n not in assignment.replicas), key=lambda n: (load[n], n))
        added = tuple(others[:topic.replication_factor - len(assignment.replicas)])
        if not added:
            continue
        for node in added:
            load[node] += 1
        replicas = (*assignment.replicas, *added)
        first = min(replicas, key=lambda n: (preferred.get(n, 0) - (n == replicas[0]), replicas.index(n)))
        preferred[replicas[0]] = preferred.get(replicas[0], 0) - 1
        preferred[first] = preferred.get(first, 0) + 1
        replicas = (first, *(r for r in replicas if r != first))
        changes.append(Change(tp, Assignment(replicas),
                              f"replication factor {topic.replication_factor}: adding {list(added)}"))
    return changes


def start_move(assignment: Assignment, target: int) -> Assignment:
    """KIP-455: the target joins as an adding replica; the current ones are removing."""
    current = assignment.target
    return Assignment((target, *current), adding=(target,), removing=current)


def complete_move(assignment: Assignment) -> Assignment:
    """The adding replicas caught up and took over: the removing ones go."""
    return Assignment(assignment.target)


def cancel_move(assignment: Assignment) -> Assignment:
    """Back to the replicas from before the move."""
    return Assignment(tuple(r for r in assignment.replicas if r not in assignment.adding))


def rebalance(image: ClusterImage, max_moves: int) -> list[Change]:
    """Moves that even out the partitions over the live nodes, and cancellations of stalled ones."""
    changes: list[Change] = []
    moving = 0
    for tp, assignment in sorted(image.assignments.items()):
        if not assignment.moving:
            continue
        if any(not image.live(r) for r in assignment.adding):
            changes.append(Change(tp, cancel_move(assignment),
                                  f"the move target {list(assignment.adding)} is not alive"))
        else:
            moving += 1
    live = sorted(image.nodes)
    if len(live) < 2 or moving >= max_moves:
        return changes
    load = load_of(image, live)
    live_load = {n: load[n] for n in live}
    # Candidates: partitions on a live node, led there, not moving; the highest indexes go first.
    movable: dict[int, list[TopicPartition]] = {n: [] for n in live}
    for tp, assignment in sorted(image.assignments.items(), reverse=True):
        if assignment.moving or len(assignment.replicas) != 1:
            continue
        owner = assignment.replicas[0]
        leadership = image.leader_of(tp)
        if owner in movable and leadership is not None and leadership.leader == owner:
            movable[owner].append(tp)
    while moving < max_moves:
        heaviest = max(live, key=lambda n: (live_load[n], -n))
        lightest = min(live, key=lambda n: (live_load[n], n))
        if live_load[heaviest] - live_load[lightest] <= 1 or not movable[heaviest]:
            break
        tp = movable[heaviest].pop(0)
        changes.append(Change(tp, start_move(image.assignments[tp], lightest),
                              f"rebalance from node {heaviest} to node {lightest}"))
        live_load[heaviest] -= 1
        live_load[lightest] += 1
        moving += 1
    return changes


def start_reassignment(assignment: Assignment, target: Sequence[int]) -> Assignment:
    """KIP-455 for a replicated partition: the target replicas first (in the operator's
    order, the first one becoming the preferred leader), then those being removed."""
    current = assignment.replicas
    return Assignment((*target, *(r for r in current if r not in target)),
                      adding=tuple(r for r in target if r not in current),
                      removing=tuple(r for r in current if r not in target))


def completed_reassignment(image: ClusterImage, tp: TopicPartition) -> Change | None:
    """The completion of a replicated partition's reassignment once every target replica is
    in the ISR (Kafka's ReplicationControlManager, PartitionReassignmentReplicas): the
    replicas become the target and the ISR keeps only target replicas. Whether the leader
    must step down (it is being removed) is the shell's part: it deletes the leader key in
    the same transaction, and the first in-sync target replica is elected."""
    assignment = image.assignments.get(tp)
    if assignment is None or not assignment.moving or assignment.single_move:
        return None
    isr = image.isr_of(tp)
    target = assignment.target
    if not target or any(r not in isr for r in target):
        return None
    return Change(tp, Assignment(target), f"reassignment to {list(target)} complete: every target replica is in sync",
                  isr=tuple(r for r in isr if r in target))


def complete_reassignments(image: ClusterImage) -> list[Change]:
    changes = []
    for tp in sorted(image.assignments):
        change = completed_reassignment(image, tp)
        if change is not None:
            changes.append(change)
    return changes


def reassign(image: ClusterImage, tp: TopicPartition, target: Sequence[int], unclean: bool = False
             ) -> tuple[Assignment | None, str | None]:
    """An operator's reassignment of one partition: (the assignment to write, or why not).

    A single replica moving to one other node is copied and handed over (``start_move``);
    any other target (a replicated partition, or a single one growing) is Kafka's
    reassignment: the new replicas follow the leader and join the ISR, then the controller
    completes the move (``completed_reassignment``). Every target replica must be alive, and
    there must be no fewer than the topic's replication factor (unlike Kafka, where the
    replicas are the replication factor: here the controller grows a partition to it). A
    partition already moving may only be sent back where it came from (a cancellation).
    ``unclean`` places the partition on one target node at once, with an empty log, and
    only when it has no live leader: the data of the old replicas is given up.
    """
    assignment = image.assignments.get(tp)
    if assignment is None:
        return None, f"{tp[0]}-{tp[1]} does not exist"
    target = tuple(target)
    if not target or len(set(target)) != len(target):
        return None, f"{tp[0]}-{tp[1]}: the target replicas must be distinct nodes, got {list(target)}"
    dead = [n for n in target if not image.live(n)]
    if dead:
        return None, f"node {dead[0]} is not alive" if len(dead) == 1 else f"nodes {dead} are not alive"
    if unclean:
        if len(target) != 1:
            return None, f"{tp[0]}-{tp[1]}: an unclean placement names one node, got {list(target)}"
        if image.leader_of(tp) is not None:
            return None, (f"{tp[0]}-{tp[1]} has a live leader (node {image.leader_of(tp).leader}); "  # type: ignore[union-attr]
                          "move it without --unclean")
        return Assignment(target), None
    topic = image.topics.get(tp[0])
    floor = min(topic.replication_factor if topic is not None else 1, len(assignment.original))
    if len(target) < floor:
        return None, (f"{tp[0]}-{tp[1]}: its topic's replication factor is {floor}: name at least {floor} "
                      "replicas (the controller would add the missing ones back)")
    if assignment.moving:
        if target == assignment.original or set(target) == set(assignment.original):
            return cancel_move(assignment), None
        return None, f"{tp[0]}-{tp[1]} is already moving to {list(assignment.target)}"
    if assignment.replicas == target:
        return None, f"{tp[0]}-{tp[1]} is already on {'node ' + str(target[0]) if len(target) == 1 else list(target)}"
    if len(target) == 1 and len(assignment.replicas) == 1:
        return start_move(assignment, target[0]), None
    return start_reassignment(assignment, target), None
