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


def reassign(image: ClusterImage, tp: TopicPartition, target: Sequence[int], unclean: bool = False
             ) -> tuple[Assignment | None, str | None]:
    """An operator's reassignment of one partition: (the assignment to write, or why not).

    One replica per partition for now, so ``target`` names exactly one live node. A partition
    already moving may only be sent back where it came from (a cancellation). ``unclean``
    places the partition on the target at once, with an empty log, and only when it has no
    live leader: the data of the old replica is given up.
    """
    assignment = image.assignments.get(tp)
    if assignment is None:
        return None, f"{tp[0]}-{tp[1]} does not exist"
    if len(target) != 1:
        return None, f"{tp[0]}-{tp[1]}: exactly one replica is supported, got {list(target)}"
    node = target[0]
    if not image.live(node):
        return None, f"node {node} is not alive"
    if unclean:
        if image.leader_of(tp) is not None:
            return None, (f"{tp[0]}-{tp[1]} has a live leader (node {image.leader_of(tp).leader}); "  # type: ignore[union-attr]
                          "move it without --unclean")
        return Assignment((node,)), None
    if assignment.moving:
        if (node,) == assignment.removing:
            return cancel_move(assignment), None
        return None, f"{tp[0]}-{tp[1]} is already moving to {list(assignment.adding)}"
    if assignment.replicas == (node,):
        return None, f"{tp[0]}-{tp[1]} is already on node {node}"
    return start_move(assignment, node), None
