"""Replication's sans-IO core: replicas placed and grown, the leader elected from the ISR,
the ISR and high watermark a leader keeps, and the truncation point of a follower."""

from __future__ import annotations

import uuid

from cluster.assignment import (
    complete_reassignments,
    completed_reassignment,
    grow_replicas,
    place,
    place_missing,
    reassign,
)
from cluster.model import Assignment, ClusterImage, Keys, Leadership, NodeInfo, TopicInfo, encode_isr
from cluster.replication import LeaderState, check_last_fetched_epoch, divergence
from cluster.roles import Role, elected, handover_target, role
from protocol.errors import ErrorCode

KEYS = Keys("test")


def image_of(nodes: list[int], replicas: tuple[int, ...] | None = None, isr: tuple[int, ...] | None = None,
             leader: int | None = None, rf: int = 3, configs: dict[str, str] | None = None) -> ClusterImage:
    image = ClusterImage(KEYS)
    for node in nodes:
        image.apply(KEYS.node(node), NodeInfo(node, {"PLAINTEXT": ("127.0.0.1", 9000 + node)}).encode(), 1, 7)
    image.apply(KEYS.topic("t"), TopicInfo("t", uuid.uuid4(), 1, configs or {}, rf).encode(), 2)
    if replicas is not None:
        image.apply(KEYS.assignment("t", 0), Assignment(replicas).encode(), 3)
    if isr is not None:
        image.apply(KEYS.isr("t", 0), encode_isr(isr), 4)
    if leader is not None:
        image.apply(KEYS.leader("t", 0), Leadership.encode(leader), 5)
    return image


def test_replicas_are_striped_and_capped_at_the_live_nodes() -> None:
    assert place(3, [1, 2, 3], {}, 3) == [(1, 2, 3), (2, 3, 1), (3, 1, 2)]
    assert place(2, [1, 2], {}, 3) == [(1, 2), (2, 1)]
    changes = place_missing(image_of([1, 2, 3]))
    assert [(c.assignment.replicas, c.isr) for c in changes] == [((1, 2, 3), (1, 2, 3))]


def test_a_partition_short_of_its_replication_factor_grows_as_nodes_join_without_joining_the_isr() -> None:
    image = image_of([1, 2, 3], replicas=(1,), isr=(1,))
    changes = grow_replicas(image)
    assert [(c.assignment.replicas, c.isr) for c in changes] == [((1, 2, 3), None)]
    assert grow_replicas(image_of([1, 2, 3], replicas=(1, 2, 3), isr=(1,))) == []


def test_a_new_leader_comes_from_the_isr_unless_unclean_election_is_allowed() -> None:
    assert elected(image_of([2, 3], (1, 2, 3), isr=(1, 3)), ("t", 0)) == 3
    assert elected(image_of([2], (1, 2, 3), isr=(1, 3)), ("t", 0)) is None
    assert elected(image_of([2], (1, 2, 3), isr=(1, 3)), ("t", 0), unclean=True) == 2
    offline = image_of([2], (1, 2, 3), isr=(1, 3), configs={"unclean.leader.election.enable": "true"})
    assert role(offline, 2, ("t", 0)) is Role.CLAIM
    assert role(image_of([2], (1, 2, 3), isr=(1, 3)), 2, ("t", 0)) is Role.KEEP


def test_replicas_of_a_led_partition_follow_it() -> None:
    image = image_of([1, 2, 3], (1, 2, 3), isr=(1, 2, 3), leader=1)
    assert [role(image, n, ("t", 0)) for n in (1, 2, 3)] == [Role.LEAD, Role.FOLLOW, Role.FOLLOW]


def test_the_high_watermark_is_the_smallest_log_end_in_the_isr_and_never_goes_back() -> None:
    state = LeaderState.begin(1, 10, (1, 2, 3), (1, 2, 3), log_end=5, high_watermark=0, now=0.0)
    assert not state.advance(5)
    state.on_fetch(2, 5, 5, 0.1)
    state.on_fetch(3, 3, 5, 0.1)
    assert state.advance(5) and state.high_watermark == 3
    state.on_fetch(3, 5, 8, 0.2)
    assert state.advance(8) and state.high_watermark == 5
    state.on_fetch(2, 4, 8, 0.3)  # a follower that cut its log back does not move it back
    assert not state.advance(8) and state.high_watermark == 5


def test_a_follower_that_stops_catching_up_leaves_the_isr_and_comes_back_once_it_has() -> None:
    state = LeaderState.begin(1, 10, (1, 2, 3), (1, 2, 3), log_end=5, high_watermark=5, now=0.0)
    state.on_fetch(2, 5, 5, 1.0)
    assert state.wanted_isr(now=1.5, lag_s=1.0) == frozenset({1, 2})
    state.pending_isr = frozenset({1, 2})
    assert state.wanted_isr(now=1.5, lag_s=1.0) is None  # one change at a time
    state.isr_written(frozenset({1, 2}))
    state.on_fetch(3, 4, 5, 2.0)
    assert state.wanted_isr(now=2.0, lag_s=1.0) is None  # behind the high watermark
    state.on_fetch(3, 5, 5, 2.1)
    assert state.wanted_isr(now=2.1, lag_s=1.0) == frozenset({1, 2, 3})
    assert state.wanted_isr(now=2.1, lag_s=1.0, live=frozenset({1, 3})) == frozenset({1, 3})  # 2's lease ended


def test_writes_wait_for_the_isr_and_fail_when_leadership_ends() -> None:
    state = LeaderState.begin(1, 10, (1, 2), (1, 2), log_end=0, high_watermark=0, now=0.0, min_insync=2)
    outcomes: list[ErrorCode] = []
    state.wait(3, outcomes.append)
    state.wait(5, outcomes.append)
    state.on_fetch(2, 3, 5, 0.1)
    state.advance(5)
    for done, error in state.release():
        done(error)
    assert outcomes == [ErrorCode.NONE]
    assert state.abandon() and state.waiting == 0
    state.isr_written(frozenset({1}))
    state.wait(2, outcomes.append)
    assert outcomes[-1] is ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_a_follower_that_comes_back_without_acknowledged_records_leaves_the_isr_at_once() -> None:
    state = LeaderState.begin(1, 10, (1, 2, 3), (1, 2, 3), log_end=5, high_watermark=0, now=0.0)
    state.on_fetch(2, 5, 5, 0.1)
    state.on_fetch(3, 5, 5, 0.1)
    state.advance(5)
    state.on_fetch(2, 0, 5, 0.2)  # node 2 restarted with an empty disk
    assert state.wanted_isr(now=0.2, lag_s=30.0) == frozenset({1, 3})


def test_a_follower_cuts_its_log_at_the_leaders_end_of_the_diverging_epoch() -> None:
    # The follower wrote offsets 5-7 at epoch 4 that the new leader (epoch 6) never had.
    assert divergence(4, 5, local_end_for_epoch=(4, 8), log_end=8) == 5
    # The leader has no epoch 4: it answers epoch 3 ending at 5; the follower's epoch 3 ends at 6.
    assert divergence(3, 5, local_end_for_epoch=(3, 6), log_end=8) == 5
    assert divergence(3, 5, local_end_for_epoch=(2, 4), log_end=8) == 4


# ---------------------------------------------------------------------- reassigning a replicated partition


def test_a_replicated_reassignment_adds_the_target_replicas_as_followers_and_removes_the_others_later() -> None:
    image = image_of([1, 2, 3, 4], (1, 2, 3), isr=(1, 2, 3), leader=1)
    assignment, problem = reassign(image, ("t", 0), [4, 2, 3])
    assert problem is None and assignment == Assignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    assert not assignment.single_move
    image.apply(KEYS.assignment("t", 0), assignment.encode(), 10)
    # The new replica follows the leader like any follower (no copy, no handover); the one
    # being removed goes on following, and the leader goes on leading.
    assert [role(image, n, ("t", 0)) for n in (1, 2, 3, 4)] == [Role.LEAD, Role.FOLLOW, Role.FOLLOW, Role.FOLLOW]
    assert handover_target(image, 1, ("t", 0)) is None
    assert completed_reassignment(image, ("t", 0)) is None  # node 4 is not in sync yet


def test_a_reassignment_completes_once_every_target_replica_is_in_sync() -> None:
    image = image_of([1, 2, 3, 4], (4, 2, 3, 1), isr=(1, 2, 3, 4), leader=1)
    image.apply(KEYS.assignment("t", 0), Assignment((4, 2, 3, 1), adding=(4,), removing=(1,)).encode(), 10)
    change = completed_reassignment(image, ("t", 0))
    assert change is not None
    assert change.assignment == Assignment((4, 2, 3)) and change.isr == (2, 3, 4)
    assert complete_reassignments(image) == [change]
    # Written, and the removed leader's key deleted with it: an in-sync target replica, the
    # first in assignment order, is elected; node 1 holds nothing any more.
    image.apply(KEYS.assignment("t", 0), change.assignment.encode(), 11)
    image.apply(KEYS.isr("t", 0), encode_isr(change.isr), 11)
    image.apply(KEYS.leader("t", 0), None, 11)
    assert elected(image, ("t", 0)) == 4
    assert role(image, 4, ("t", 0)) is Role.CLAIM and role(image, 1, ("t", 0)) is Role.NONE


def test_an_in_sync_added_replica_may_lead_but_a_copy_never_does() -> None:
    image = image_of([2, 4], (4, 2, 3, 1), isr=(1, 4), leader=None)
    image.apply(KEYS.assignment("t", 0), Assignment((4, 2, 3, 1), adding=(4,), removing=(1,)).encode(), 10)
    assert elected(image, ("t", 0)) == 4
    single = image_of([1, 2], (2, 1), isr=(1,), leader=None, rf=1)
    single.apply(KEYS.assignment("t", 0), Assignment((2, 1), adding=(2,), removing=(1,)).encode(), 10)
    assert single.assignments[("t", 0)].single_move and elected(single, ("t", 0)) != 2


def test_a_reassignment_sent_back_to_the_original_replicas_is_cancelled() -> None:
    image = image_of([1, 2, 3, 4], (1, 2, 3), isr=(1, 2, 3), leader=1)
    image.apply(KEYS.assignment("t", 0), Assignment((4, 2, 3, 1), adding=(4,), removing=(1,)).encode(), 10)
    assignment, problem = reassign(image, ("t", 0), [1, 2, 3])
    assert problem is None and assignment is not None and set(assignment.replicas) == {1, 2, 3}
    assert not assignment.moving
    assert "already moving" in (reassign(image, ("t", 0), [2, 3, 4, 1])[1] or "")


def test_the_leader_drops_removed_replicas_from_its_isr_and_high_watermark_at_once() -> None:
    state = LeaderState.begin(1, 5, (1, 2, 3), (1, 2, 3), log_end=10, high_watermark=4, now=0.0)
    state.on_fetch(2, 10, 10, 1.0)
    state.advance(10)
    assert state.high_watermark == 4  # node 3 has not fetched
    state.set_replicas((1, 2))  # the reassignment completed without node 3
    assert state.isr == frozenset({1, 2}) and 3 not in state.followers
    state.advance(10)
    assert state.high_watermark == 10


def test_a_cancelled_reassignment_makes_the_leader_write_its_isr_without_the_added_replica() -> None:
    state = LeaderState.begin(1, 5, (4, 2, 1), (1, 2, 4), log_end=10, high_watermark=10, now=0.0)
    assert state.wanted_isr(0.5, 2.0) is None
    state.set_replicas((2, 1))  # the move to 4 was cancelled after 4 had joined the ISR
    assert state.wanted_isr(0.5, 2.0) == frozenset({1, 2})
    state.isr_written(frozenset({1, 2}))
    assert state.wanted_isr(0.5, 2.0) is None


def test_a_follower_whose_last_epoch_the_leader_does_not_know_is_told_its_offset_is_out_of_range() -> None:
    # Agrees: the leader's epoch 5 runs past the follower's offset.
    assert check_last_fetched_epoch(5, 10, (5, 12)) == (ErrorCode.NONE, None)
    # Diverges: the leader's epoch 5 ended at 8, or the leader's latest epoch at or below 7 is 5.
    assert check_last_fetched_epoch(5, 10, (5, 8)) == (ErrorCode.NONE, (5, 8))
    assert check_last_fetched_epoch(7, 10, (5, 12)) == (ErrorCode.NONE, (5, 12))
    # Unknown (a new leader with an empty log): not a diverging epoch of (-1, -1), which is
    # the wire field's default and reads as "no divergence".
    assert check_last_fetched_epoch(5, 1, (-1, -1)) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)
