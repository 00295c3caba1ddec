"""A replicated partition as its leader keeps it: the followers' positions, the ISR and the
high watermark, and the writes waiting for the ISR. Sans-IO (times are passed in).

As Kafka's Partition and Replica classes:

- a follower's fetch at ``fetch_offset`` says its log ends there (it fetched, and made
  durable, everything below). It counts as caught up at the time of a fetch that asks for
  the leader's whole log, or for everything the leader had when it answered the previous
  fetch (``Replica.updateFetchState``);
- the high watermark is the smallest log end among the leader and the ISR; it never goes
  back. While an ISR change is being written, the larger of the old and the new ISR counts
  (Kafka's "maximal ISR", KIP-497), so the high watermark never runs ahead of what the
  committed ISR has;
- a follower in the ISR that has not caught up for ``replica.lag.time.max.ms`` leaves it
  (``Partition.maybeShrinkIsr``); a replica outside it whose log reaches the high watermark
  and this leader's first offset joins it (``Partition.maybeExpandIsr``);
- a write acknowledged "when the ISR has it" waits until the high watermark passes its end;
  it fails with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR is then smaller than
  ``min.insync.replicas`` (Kafka's Partition.checkEnoughReplicasReachOffset),
  and with NOT_LEADER_OR_FOLLOWER if this node stops leading first.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from protocol.errors import ErrorCode

#: Called once a write is settled: ErrorCode.NONE when the ISR has it.
Done = Callable[[ErrorCode], None]

_order = itertools.count()
#: A follower that has never caught up (or lost what it had).
NEVER = float("-inf")


@dataclass
class FollowerState:
    """What the leader knows of one follower."""

    #: The follower's log end, from its last fetch (-1: it has not fetched from this leader).
    end_offset: int = -1
    last_caught_up: float = float("-inf")
    last_fetch_at: float = 0.0
    #: The leader's log end when it answered the follower's previous fetch.
    leader_end_at_last_fetch: int = -1


@dataclass
class LeaderState:
    """One partition this node leads, at ``epoch``."""

    me: int
    epoch: int
    replicas: tuple[int, ...]
    #: The ISR as etcd has it.
    isr: frozenset[int]
    high_watermark: int
    #: The log end when this leadership began: a follower must reach it to join the ISR.
    epoch_start_offset: int
    min_insync: int = 1
    followers: dict[int, FollowerState] = field(default_factory=dict)
    #: An ISR change written to etcd and not yet confirmed.
    pending_isr: frozenset[int] | None = None
    #: The ISR lost replicas that are no longer assigned (a cancelled reassignment): etcd's
    #: ISR may still name them, so the next look writes it.
    isr_stale: bool = False
    _waiting: list[tuple[int, int, Done]] = field(default_factory=list)

    @classmethod
    def begin(cls, me: int, epoch: int, replicas: Iterable[int], isr: Iterable[int], log_end: int,
              high_watermark: int, now: float, min_insync: int = 1) -> LeaderState:
        """A new leadership: every ISR member counts as caught up now (Kafka resets the
        followers' states when a leader is elected)."""
        replicas = tuple(replicas)
        state = cls(me, epoch, replicas, frozenset(isr) | {me}, min(high_watermark, log_end), log_end, min_insync)
        for replica in replicas:
            if replica != me:
                state.followers[replica] = FollowerState(last_caught_up=now if replica in state.isr else NEVER)
        return state

    # ---------------------------------------------------------------- the followers

    def on_fetch(self, replica: int, fetch_offset: int, log_end: int, now: float) -> None:
        """A fetch from ``replica`` at ``fetch_offset`` while the leader's log ends at ``log_end``."""
        follower = self.followers.get(replica)
        if follower is None:
            if replica not in self.replicas:
                return
            follower = self.followers[replica] = FollowerState()
        if 0 <= fetch_offset < min(follower.end_offset, self.high_watermark):
            # Its log lost records the ISR acknowledged (a wiped disk): it is out of sync.
            follower.last_caught_up = NEVER
        elif fetch_offset >= log_end:
            follower.last_caught_up = now
        elif follower.leader_end_at_last_fetch >= 0 and fetch_offset >= follower.leader_end_at_last_fetch:
            follower.last_caught_up = max(follower.last_caught_up, follower.last_fetch_at)
        follower.end_offset = fetch_offset
        follower.last_fetch_at = now
        follower.leader_end_at_last_fetch = log_end

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr if self.pending_isr is None else self.isr | self.pending_isr

    def advance(self, log_end: int) -> bool:
        """Move the high watermark to the smallest log end in the (maximal) ISR; True if it moved."""
        lowest = log_end
        for replica in self.maximal_isr:
            if replica != self.me:
                follower = self.followers.get(replica)
                lowest = min(lowest, follower.end_offset if follower is not None else -1)
        if lowest > self.high_watermark:
            self.high_watermark = lowest
            return True
        return False

    def wanted_isr(self, now: float, lag_s: float, live: frozenset[int] | None = None) -> frozenset[int] | None:
        """The ISR this leader should write, or None when it is right (or a change is pending).

        A replica whose node is no longer ``live`` (its lease ended) leaves at once, as KRaft
        takes a fenced broker out of every ISR, rather than after the lag time."""
        if self.pending_isr is not None:
            return None
        wanted = set(self.isr) | {self.me}
        for replica in list(wanted):
            follower = self.followers.get(replica)
            if replica != self.me and (follower is None or now - follower.last_caught_up > lag_s
                                       or (live is not None and replica not in live)):
                wanted.discard(replica)
        for replica, follower in self.followers.items():
            if (replica not in wanted and replica in self.replicas and (live is None or replica in live)
                    and follower.end_offset >= self.high_watermark
                    and follower.end_offset >= self.epoch_start_offset):
                wanted.add(replica)
        found = frozenset(wanted)
        return None if found == self.isr and not self.isr_stale else found

    def set_replicas(self, replicas: tuple[int, ...]) -> None:
        """The assignment changed (a reassignment started or completed): replicas that were
        removed leave the ISR at once (the controller wrote that ISR with the assignment),
        and added ones are followers that have not fetched yet."""
        self.replicas = replicas
        kept = frozenset(r for r in self.isr if r in replicas or r == self.me)
        if kept != self.isr:
            self.isr = kept
            self.isr_stale = True
            if self.pending_isr is not None:
                self.pending_isr = frozenset(r for r in self.pending_isr if r in replicas or r == self.me)
        for replica in [r for r in self.followers if r not in replicas]:
            del self.followers[replica]

    def isr_written(self, isr: frozenset[int]) -> None:
        self.isr = isr
        self.pending_isr = None
        self.isr_stale = False

    def lagging(self, log_end: int) -> dict[int, int]:
        """Records each replica is behind the leader's log end (-1: it has not fetched yet)."""
        return {r: (log_end - f.end_offset if f.end_offset >= 0 else -1) for r, f in self.followers.items()}

    # ---------------------------------------------------------------- writes waiting for the ISR

    def wait(self, end_offset: int, done: Done) -> None:
        """Call ``done`` once the ISR has every record below ``end_offset``."""
        if end_offset <= self.high_watermark:
            done(self._outcome())
            return
        heapq.heappush(self._waiting, (end_offset, next(_order), done))

    def release(self) -> list[tuple[Done, ErrorCode]]:
        """The waiting writes the high watermark now covers, with their outcome."""
        out = []
        while self._waiting and self._waiting[0][0] <= self.high_watermark:
            _, _, done = heapq.heappop(self._waiting)
            out.append((done, self._outcome()))
        return out

    def abandon(self) -> list[Done]:
        """This node no longer leads: every waiting write fails."""
        waiting, self._waiting = self._waiting, []
        return [done for _, _, done in waiting]

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _outcome(self) -> ErrorCode:
        return ErrorCode.NONE if len(self.isr) >= self.min_insync else ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def check_last_fetched_epoch(last_fetched_epoch: int, fetch_offset: int,
                             leader_end_for_epoch: tuple[int, int]) -> tuple[ErrorCode, tuple[int, int] | None]:
    """Does a follower's log agree with the leader's up to its fetch offset (KIP-279)?

    ``leader_end_for_epoch`` is the leader's (largest epoch at or below the follower's last
    fetched epoch, that epoch's end offset). (NONE, None): it agrees; (NONE, (epoch, end)):
    it diverges, and the follower cuts its log there. When the leader's log knows no epoch
    that old ((-1, -1): a new leader with an empty log, or one whose batches are all of later
    epochs), the answer is OFFSET_OUT_OF_RANGE, as Kafka's Partition.fetchRecords answers,
    and the follower cuts its log back to the high watermark. A diverging epoch of (-1, -1)
    could not say it: those are the field's defaults, which a follower reads as "no
    divergence", so it would fetch past the leader's end forever without being counted,
    holding the high watermark (and every write waiting for the ISR) until it left the ISR.
    """
    epoch, end = leader_end_for_epoch
    if epoch < 0 or end < 0:
        return ErrorCode.OFFSET_OUT_OF_RANGE, None
    if epoch < last_fetched_epoch or end < fetch_offset:
        return ErrorCode.NONE, (epoch, end)
    return ErrorCode.NONE, None


def divergence(diverging_epoch: int, diverging_end: int, local_end_for_epoch: tuple[int, int],
               log_end: int) -> int:
    """Where a follower cuts its log when its leader reports a diverging epoch (KIP-279):
    the leader's end of that epoch, or the follower's own end of the largest epoch it has
    at or below it, whichever is lower (Kafka's AbstractFetcherThread.truncateOnFetchResponse)."""
    local_epoch, local_end = local_end_for_epoch
    if local_epoch < 0:
        return min(diverging_end, log_end) if diverging_end >= 0 else 0
    if local_epoch == diverging_epoch:
        return min(diverging_end, local_end, log_end)
    return min(local_end, log_end)
