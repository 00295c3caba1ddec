"""When a node may still act as a leader: its etcd lease, seen from its own clock. Sans-IO.

etcd ends a lease ``TTL`` seconds after the last renewal it received. A node cannot know
when etcd received its renewal, only when it sent it: so it counts the lease as valid until
``sent + TTL`` (minus a safety margin), which is never later than etcd's own expiry. The
clock is ``time.monotonic``, which keeps counting while the process is stopped (SIGSTOP), so
a node that wakes up after a long pause finds its lease lapsed before it reads a single
request. Past that moment it answers nothing as leader, whatever its image of etcd says,
until a renewal succeeds again (or a new lease is granted and leadership re-acquired).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LeaseClock:
    """The node's lease as the node may rely on it."""

    #: Kept back from the TTL, for clock rate differences between this host and etcd's.
    margin_s: float = 0.5
    lease_id: int = 0
    ttl_s: float = 0.0
    deadline: float = 0.0

    def granted(self, lease_id: int, ttl_s: float, sent_at: float) -> None:
        """A new lease, asked for at ``sent_at``."""
        self.lease_id = lease_id
        self.ttl_s = ttl_s
        self.renewed(ttl_s, sent_at)

    def renewed(self, ttl_s: float, sent_at: float) -> None:
        """A keep-alive sent at ``sent_at`` came back with ``ttl_s`` seconds left (0: the lease is gone)."""
        if ttl_s <= 0:
            self.lost()
            return
        self.deadline = max(self.deadline, sent_at + ttl_s - self.margin_s)

    def lost(self) -> None:
        self.deadline = 0.0
        self.lease_id = 0

    def valid(self, now: float) -> bool:
        return self.lease_id != 0 and now < self.deadline

    def remaining(self, now: float) -> float:
        return max(0.0, self.deadline - now) if self.lease_id else 0.0
