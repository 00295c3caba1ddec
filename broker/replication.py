"""What the data and group services ask of partition replication (a cluster node's).

A single node has none (the services hold ``None``): every record is acknowledged once it
is durable. A cluster node (``cluster.node``) replicates partitions to followers; then an
acks=all produce, and every write of the group coordinator, is acknowledged only once the
partition's in-sync replicas have it (the high watermark passed it), and refused with
NOT_ENOUGH_REPLICAS while the ISR is smaller than ``min.insync.replicas``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from protocol.errors import ErrorCode

#: Called once: ErrorCode.NONE when the ISR has the write, else why not.
Settled = Callable[[ErrorCode], None]


class Replication(Protocol):
    def in_sync(self, topic: str, partition: int) -> int:
        """How many replicas of the partition are in sync now (the leader included)."""

    def appended(self, topic: str, partition: int, end_offset: int, settled: Settled | None) -> None:
        """Records up to ``end_offset`` were appended to a partition this node leads.

        Followers are woken; ``settled``, when given, is called once the ISR has them (or
        with the reason it never will). It may be called before this returns.
        """


class AllSettled:
    """Counts down several partitions' outcomes, then calls ``then`` with the failures."""

    __slots__ = ("failures", "left", "then")

    def __init__(self, count: int, then: Callable[[dict[tuple[str, int], ErrorCode]], None]) -> None:
        self.left = count
        self.then = then
        self.failures: dict[tuple[str, int], ErrorCode] = {}

    def one(self, topic: str, partition: int) -> Settled:
        def settled(error: ErrorCode) -> None:
            if error is not ErrorCode.NONE:
                self.failures[(topic, partition)] = error
            self.left -= 1
            if self.left == 0:
                self.then(self.failures)
        return settled
