"""The cluster's sans-IO core: placement decisions, roles, handover, fencing, the image."""

from __future__ import annotations

import uuid

from cluster.assignment import (
    cancel_move,
    complete_move,
    load_of,
    place,
    place_missing,
    reassign,
    rebalance,
    start_move,
)
from cluster.fencing import LeaseClock
from cluster.handover import Handover, Step
from cluster.model import Assignment, ClusterImage, Keys, Leadership, NodeInfo, TopicInfo
from cluster.roles import Role, handover_target, role, roles

KEYS = Keys("test")


def image_with(nodes: list[int], placement: dict[tuple[str, int], tuple[int, ...]] | None = None,
               leaders: dict[tuple[str, int], int] | None = None) -> ClusterImage:
    image = ClusterImage(KEYS)
    revision = 1
    for node in nodes:
        image.apply(KEYS.node(node), NodeInfo(node, {"PLAINTEXT": ("127.0.0.1", 9000 + node)}).encode(), revision, 7)
        revision += 1
    topics: dict[str, int] = {}
    for (name, index), replicas in (placement or {}).items():
        topics[name] = max(topics.get(name, 0), index + 1)
        image.apply(KEYS.assignment(name, index), Assignment(replicas).encode(), revision)
        revision += 1
    for name, count in topics.items():
        image.apply(KEYS.topic(name), TopicInfo(name, uuid.uuid4(), count).encode(), revision)
        revision += 1
    for tp, leader in (leaders or {}).items():
        image.apply(KEYS.leader(*tp), Leadership.encode(leader), revision)
        revision += 1
    return image


# ---------------------------------------------------------------------- the image


def test_the_leader_epoch_is_the_mod_revision_of_the_leader_key() -> None:
    image = image_with([1], {("t", 0): (1,)})
    image.apply(KEYS.leader("t", 0), Leadership.encode(1), 42)
    assert image.leaders[("t", 0)] == Leadership(1, 42)
    image.apply(KEYS.leader("t", 0), None, 50)
    assert ("t", 0) not in image.leaders
    assert image.revision == 50


def test_a_leader_whose_node_is_gone_is_no_leader() -> None:
    image = image_with([1, 2], {("t", 0): (2,)}, {("t", 0): 2})
    assert image.leader_of(("t", 0)) is not None
    image.apply(KEYS.node(2), None, 99)
    assert image.leader_of(("t", 0)) is None


def test_a_full_read_replaces_the_image() -> None:
    image = image_with([1, 2], {("t", 0): (1,)})
    image.load(10, [(KEYS.node(3), NodeInfo(3, {}).encode(), 9, 0)])
    assert set(image.nodes) == {3}
    assert image.assignments == {}
    assert image.revision == 10


def test_a_change_older_than_the_one_the_image_holds_is_ignored() -> None:
    # The old leader applies its own handover (the leader key deleted at 60) once etcd answers,
    # after its watch already brought the new leader's claim (61): the claim stays.
    image = image_with([1, 2], {("t", 0): (2,)})
    image.apply(KEYS.leader("t", 0), Leadership.encode(2), 61)
    image.apply(KEYS.leader("t", 0), None, 60)
    assert image.leader_of(("t", 0)) == Leadership(2, 61)
    # nor does a put older than a delete bring the key back
    image.apply(KEYS.leader("t", 0), None, 70)
    image.apply(KEYS.leader("t", 0), Leadership.encode(1), 65)
    assert ("t", 0) not in image.leaders
    # a full read starts afresh
    image.load(80, [(KEYS.leader("t", 0), Leadership.encode(1), 5, 0)])
    assert image.leaders[("t", 0)] == Leadership(1, 5)


def test_a_full_read_keeps_the_changes_the_image_holds_from_after_it() -> None:
    # A node whose lease lapsed registers again and reads everything; while that read is under
    # way it claims a partition (etcd answers 77, applied at once) and its watch brings a
    # deletion (78). The read, as of 75, shows neither: both must survive it, or the node
    # believes no one leads the partition it just claimed and never serves it.
    image = image_with([1, 2], {("t", 0): (1,), ("t", 1): (2,)}, {("t", 1): 2})
    image.apply(KEYS.leader("t", 0), Leadership.encode(1), 77, 5)
    image.apply(KEYS.leader("t", 1), None, 78)
    image.load(75, [(KEYS.node(1), NodeInfo(1, {}).encode(), 70, 5), (KEYS.node(2), NodeInfo(2, {}).encode(), 3, 7),
                    (KEYS.assignment("t", 0), Assignment((1,)).encode(), 4, 0),
                    (KEYS.assignment("t", 1), Assignment((2,)).encode(), 5, 0),
                    (KEYS.leader("t", 1), Leadership.encode(2), 60, 7)])
    assert image.leaders[("t", 0)] == Leadership(1, 77)
    assert image.revision_of(KEYS.leader("t", 0)) == 77
    assert ("t", 1) not in image.leaders
    assert image.revision == 78
    # A read from after those changes is taken as it is.
    image.load(90, [(KEYS.node(1), NodeInfo(1, {}).encode(), 70, 5)])
    assert image.leaders == {} and set(image.nodes) == {1}
    assert image.revision == 90


def test_values_it_cannot_read_are_ignored() -> None:
    image = ClusterImage(KEYS)
    image.apply(KEYS.topic("t"), b"not json", 3)
    image.apply("/elsewhere/key", b"x", 4)
    assert image.topics == {}


# ---------------------------------------------------------------------- placement


def test_new_partitions_are_striped_over_the_nodes_least_loaded_first() -> None:
    load = {1: 2, 2: 0, 3: 1}
    assert place(4, [1, 2, 3], load) == [(2,), (3,), (1,), (2,)]
    assert load == {1: 3, 2: 2, 3: 2}
    assert place(3, [], {}) == []
    assert load_of(image_with([1, 2], {("t", 0): (1,), ("t", 1): (1,)})) == {1: 2, 2: 0}


def test_missing_assignments_are_placed_over_the_live_nodes() -> None:
    image = image_with([1, 2, 3])
    image.apply(KEYS.topic("new"), TopicInfo("new", uuid.uuid4(), 6).encode(), 20)
    changes = place_missing(image)
    assert sorted(c.tp for c in changes) == [("new", i) for i in range(6)]
    per_node: dict[int, int] = {}
    for change in changes:
        per_node[change.assignment.replicas[0]] = per_node.get(change.assignment.replicas[0], 0) + 1
    assert per_node == {1: 2, 2: 2, 3: 2}


def test_a_move_adds_the_target_then_removes_the_old_replica() -> None:
    moving = start_move(Assignment((1,)), 4)
    assert moving == Assignment((4, 1), adding=(4,), removing=(1,))
    assert moving.preferred_leader == 1  # the target leads only once it holds the whole log
    assert complete_move(moving) == Assignment((4,))
    assert cancel_move(moving) == Assignment((1,))


def test_rebalance_moves_partitions_to_a_node_that_joined() -> None:
    placement = {("t", i): (1 + i % 3,) for i in range(9)}
    image = image_with([1, 2, 3], placement, {tp: r[0] for tp, r in placement.items()})
    assert rebalance(image, max_moves=10) == []
    image.apply(KEYS.node(4), NodeInfo(4, {}).encode(), 500)
    changes = rebalance(image, max_moves=10)
    assert len(changes) == 2  # 9 partitions over 4 nodes: 3, 2, 2, 2
    assert all(c.assignment.adding == (4,) for c in changes)


def test_rebalance_respects_the_limit_of_moves_under_way() -> None:
    placement = {("t", i): (1,) for i in range(8)}
    image = image_with([1, 2], placement, {tp: 1 for tp in placement})
    assert len(rebalance(image, max_moves=2)) == 2


def test_rebalance_leaves_partitions_of_a_dead_node_where_they_are() -> None:
    placement = {("t", i): (3,) for i in range(4)}
    image = image_with([1, 2], placement)  # node 3 is gone: its partitions are offline
    assert rebalance(image, max_moves=10) == []


def test_a_move_whose_target_died_is_cancelled() -> None:
    image = image_with([1], {("t", 0): (2, 1)}, {("t", 0): 1})
    image.apply(KEYS.assignment("t", 0), Assignment((2, 1), adding=(2,), removing=(1,)).encode(), 90)
    changes = rebalance(image, max_moves=4)
    assert [c.assignment for c in changes] == [Assignment((1,))]


def test_operator_reassignment_rules() -> None:
    image = image_with([1, 2], {("t", 0): (1,)}, {("t", 0): 1})
    assert reassign(image, ("t", 0), [2])[0] == Assignment((2, 1), adding=(2,), removing=(1,))
    assert "already on node 1" in (reassign(image, ("t", 0), [1])[1] or "")
    assert "not alive" in (reassign(image, ("t", 0), [5])[1] or "")
    # More than one target replica: the partition becomes replicated (a reassignment, not a copy).
    assert reassign(image, ("t", 0), [1, 2])[0] == Assignment((1, 2), adding=(2,))
    assert "distinct" in (reassign(image, ("t", 0), [2, 2])[1] or "")
    assert "does not exist" in (reassign(image, ("u", 0), [1])[1] or "")
    assert "live leader" in (reassign(image, ("t", 0), [2], unclean=True)[1] or "")


def test_an_unclean_move_needs_an_offline_partition() -> None:
    image = image_with([2], {("t", 0): (1,)})  # node 1 is gone, and with it the leadership
    assert reassign(image, ("t", 0), [2]) == (Assignment((2, 1), adding=(2,), removing=(1,)), None)
    assert reassign(image, ("t", 0), [2], unclean=True) == (Assignment((2,)), None)


# ---------------------------------------------------------------------- roles


def test_roles_follow_the_assignment_and_the_leader_key() -> None:
    image = image_with([1, 2], {("t", 0): (1,), ("t", 1): (2,), ("t", 2): (1,)}, {("t", 0): 1, ("t", 1): 2})
    assert role(image, 1, ("t", 0)) is Role.LEAD
    assert role(image, 1, ("t", 1)) is Role.NONE
    assert role(image, 1, ("t", 2)) is Role.CLAIM
    image.apply(KEYS.assignment("t", 1), Assignment((1, 2), adding=(1,), removing=(2,)).encode(), 77)
    assert role(image, 1, ("t", 1)) is Role.COPY
    assert handover_target(image, 2, ("t", 1)) == 1
    assert set(roles(image, 1)) == {("t", 0), ("t", 1), ("t", 2)}


def test_a_replica_that_cannot_lead_yet_keeps_its_data() -> None:
    image = image_with([1, 2], {("t", 0): (1,)}, {("t", 0): 2})  # led elsewhere (stale leadership)
    assert role(image, 1, ("t", 0)) is Role.KEEP


# ---------------------------------------------------------------------- handover


def test_handover_freezes_once_the_replica_caught_up_then_commits_at_the_frozen_end() -> None:
    handover = Handover(target=4)
    assert handover.on_fetch(4, 0, 100, now=1.0) is Step.SERVE  # the first fetch proves nothing
    handover.answered(100)
    assert handover.on_fetch(5, 100, 120, now=1.1) is Step.SERVE  # another replica
    assert handover.on_fetch(4, 100, 120, now=1.2) is Step.FREEZE  # has all it was given: freeze at 120
    assert handover.frozen_end == 120
    handover.answered(120)
    assert handover.on_fetch(4, 110, 120, now=1.3) is Step.SERVE
    assert handover.on_fetch(4, 120, 120, now=1.4) is Step.COMMIT
    assert handover.on_fetch(4, 120, 120, now=1.5) is Step.SERVE  # committing once


def test_handover_of_a_caught_up_replica_commits_at_once() -> None:
    handover = Handover(target=2)
    handover.on_fetch(2, 0, 0, now=0.0)
    handover.answered(0)
    assert handover.on_fetch(2, 0, 0, now=0.1) is Step.COMMIT


def test_a_frozen_handover_times_out_and_thaws() -> None:
    handover = Handover(target=2)
    handover.answered(10)
    handover.on_fetch(2, 10, 20, now=5.0)
    assert not handover.expired(now=9.0, timeout_s=10)
    assert handover.expired(now=15.1, timeout_s=10)
    handover.thaw()
    assert not handover.frozen and handover.answered_end == -1


# ---------------------------------------------------------------------- fencing


def test_the_lease_is_trusted_until_sent_plus_ttl_minus_the_margin() -> None:
    lease = LeaseClock(margin_s=0.5)
    assert not lease.valid(0.0)
    lease.granted(77, 9, sent_at=100.0)
    assert lease.valid(108.4)
    assert not lease.valid(108.5)  # etcd expires it no earlier than 109: the node stops first
    lease.renewed(9, sent_at=105.0)
    assert lease.valid(113.0)


def test_a_pause_past_the_lease_fences_the_node_before_any_renewal() -> None:
    lease = LeaseClock()
    lease.granted(77, 9, sent_at=0.0)
    # SIGSTOP for 30 s: the monotonic clock kept counting; the first look finds the lease lapsed.
    assert not lease.valid(30.0)
    lease.renewed(0, sent_at=30.0)  # etcd no longer has it
    assert lease.lease_id == 0 and not lease.valid(30.0)


def test_a_late_renewal_never_moves_the_deadline_back() -> None:
    lease = LeaseClock(margin_s=0)
    lease.granted(1, 10, sent_at=50.0)
    lease.renewed(10, sent_at=45.0)  # an answer to an older request
    assert lease.deadline == 60.0
