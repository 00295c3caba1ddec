"""Background storage maintenance: one scheduler, one job at a time, off the event loop.

Compaction of the coordinator log and of compacted topics, delete-policy retention and
history pruning are all blocking passes over files. The broker hands them to one
``Maintenance`` scheduler as ``Job``s, each with its own interval
(``log.cleaner.backoff.ms``, ``log.retention.check.interval.ms``). The scheduler runs the
job that is due first in a worker thread, waits for it, and only then considers the next,
so two passes never compete for the disk or for a partition's clean lock. A job that
fails is logged and tried again after its interval; it does not stop the others.

Each job may have a ``done`` callback, run on the event loop with the job's result and
how long it took: that is where the broker counts cleanings and reclaimed bytes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio

__all__ = ["Job", "Maintenance"]

log = logging.getLogger("kcoord.storage")


@dataclass(frozen=True)
class Job:
    """A blocking pass (``run``, in a worker thread) repeated every ``interval`` seconds.

    The interval counts from the end of one run to the start of the next, as Kafka's
    cleaner backs off between passes.
    """

    name: str
    interval: float
    run: Callable[[], Any]
    done: Callable[[Any, float], None] | None = None

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ValueError(f"{self.name}: interval must be positive, got {self.interval}")


class Maintenance:
    """Runs ``jobs`` forever, the earliest due first, never two at once."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        names = [job.name for job in jobs]
        if len(set(names)) != len(names):
            raise ValueError(f"job names must differ: {names}")
        self.jobs = list(jobs)
        self.runs = dict.fromkeys(names, 0)
        self.failures = dict.fromkeys(names, 0)
        #: The job running now, if any (for tests and the log).
        self.running: str | None = None
        self._one_at_a_time = trio.Lock()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        now = trio.current_time()
        due = [now + job.interval for job in self.jobs]
        task_status.started()
        if not self.jobs:
            await trio.sleep_forever()
        while True:
            index = min(range(len(due)), key=due.__getitem__)
            await trio.sleep_until(due[index])
            job = self.jobs[index]
            await self.run_job(job)
            due[index] = trio.current_time() + job.interval

    async def run_job(self, job: Job) -> bool:
        """Run one pass of ``job`` (in a worker thread, after any pass running now); False if it failed."""
        async with self._one_at_a_time:
            self.running = job.name
            started = time.perf_counter()
            try:
                result = await trio.to_thread.run_sync(job.run)
            except Exception:
                self.failures[job.name] += 1
                log.exception("%s failed; trying again in %.0f ms", job.name, job.interval * 1000)
                return False
            finally:
                self.running = None
        self.runs[job.name] += 1
        if job.done is not None:
            job.done(result, time.perf_counter() - started)
        return True
