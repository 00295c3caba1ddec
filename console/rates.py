"""The broker's commit rate over the last hour, sampled in the broker process.

Every ``INTERVAL`` seconds the sampler reads the count of partition offsets stored by
OffsetCommit (a plain counter the group service keeps), so the overview can chart commits
per second without asking anything of the Kafka port.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable

import trio

INTERVAL = 5.0
KEEP = 720  # one hour of samples


class CommitRate:
    def __init__(self, read: Callable[[], int], interval: float = INTERVAL, keep: int = KEEP) -> None:
        self.read = read
        self.interval = interval
        self.samples: deque[tuple[float, int]] = deque(maxlen=keep + 1)

    def sample(self, now: float | None = None) -> None:
        self.samples.append((time.time() if now is None else now, self.read()))

    async def run(self) -> None:
        while True:
            self.sample()
            await trio.sleep(self.interval)

    def points(self) -> list[tuple[int, float]]:
        """``(time ms, commits per second since the previous sample)`` per interval."""
        out = []
        pairs = list(self.samples)
        for (t0, c0), (t1, c1) in itertools.pairwise(pairs):
            if t1 > t0:
                out.append((int(t1 * 1000), round(max(0, c1 - c0) / (t1 - t0), 3)))
        return out
