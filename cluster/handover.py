"""A leader handing a partition to the replica that copied it. Sans-IO.

The new replica fetches the log as a follower (Fetch with its replica id). Once one of its
fetches asks for everything the leader had when it last answered it (Kafka's "caught up"
rule for a follower, ``Replica.updateFetchState``), the leader freezes the partition: it stops
taking writes, which fixes the log end offset. When the replica's next fetch starts at
that frozen end, the replica holds the whole log, and the leader gives up leadership and
completes the move in one compare-and-set. The replica then claims leadership, at a
higher epoch. If the replica does not get there within the timeout, the leader thaws the
partition and serves it again; the copy goes on and the handover is tried again.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Step(Enum):
    SERVE = "serve"  # answer the fetch, nothing else
    FREEZE = "freeze"  # stop writes now: the replica is caught up
    COMMIT = "commit"  # the replica has the whole frozen log: give the partition away


@dataclass
class Handover:
    target: int
    #: The log end offset when the leader last answered the target's fetch.
    answered_end: int = -1
    frozen_end: int | None = None
    frozen_at: float = 0.0
    committing: bool = False

    @property
    def frozen(self) -> bool:
        return self.frozen_end is not None

    def on_fetch(self, replica: int, fetch_offset: int, log_end: int, now: float) -> Step:
        """A fetch from ``replica`` at ``fetch_offset`` while the log ends at ``log_end``."""
        if replica != self.target or self.committing:
            return Step.SERVE
        if self.frozen_end is None:
            if self.answered_end < 0 or fetch_offset < self.answered_end:
                return Step.SERVE
            self.frozen_end = log_end
            self.frozen_at = now
            if fetch_offset < log_end:
                return Step.FREEZE
        if fetch_offset >= self.frozen_end:
            self.committing = True
            return Step.COMMIT
        return Step.SERVE

    def answered(self, log_end: int) -> None:
        self.answered_end = log_end

    def expired(self, now: float, timeout_s: float) -> bool:
        """Frozen for longer than the timeout without the replica catching the end."""
        return self.frozen_end is not None and not self.committing and now - self.frozen_at > timeout_s

    def thaw(self) -> None:
        """Back to serving (the commit failed or timed out); the copy carries on."""
        self.frozen_end = None
        self.committing = False
        self.answered_end = -1
