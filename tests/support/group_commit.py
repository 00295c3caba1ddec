"""Helpers for the group-commit tests: replies to release, waiting on a condition, a
journal that offers the split sync the kernel flusher needs, and a group commit whose
rounds run on a read poller, as the server runs them."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path

import trio

from broker.poller import ReadPoller
from broker.slots import Slot
from storage.group_commit import GroupCommit
from storage.journal import Flushable, Journal, PendingSync
from storage.partition import PartitionLog


def reply(n: int) -> Slot:
    """A reply whose frame says ``ok n``, released by setting its event."""
    slot = Slot(8, 8, n)
    slot.frame = b"ok %d" % n
    return slot


async def eventually(condition: Callable[[], object], seconds: float = 10.0) -> None:
    """Let trio run until ``condition()`` holds (bounded in real time, whatever the clock)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await trio.sleep(0)


class SplitJournal:
    """The Disk's journal with the split sync ``CoordinatorLog`` offers, so that the kernel
    flusher runs: a "descriptor" is the index of a partition log."""

    splits_sync = True
    checkpoint_due = False

    def __init__(self, journal: Journal, logs: list[PartitionLog]) -> None:
        self.journal = journal
        self.logs = logs

    @property
    def written_seq(self) -> int:
        return self.journal.written_seq

    def sync(self) -> int:
        return self.journal.sync()

    def sync_start(self) -> PendingSync | None:
        started = self.journal.start_sync()
        if started is None:
            return None
        target, dirty = started
        return PendingSync(target, dirty, *self.descriptors(dirty))

    def descriptors(self, dirty: list[Flushable]) -> tuple[list[int], list[Path]]:
        """What the kernel is asked to sync for ``dirty``, and the paths to name in errors."""
        indexes = [self.logs.index(log) for log in dirty]  # type: ignore[arg-type]
        return indexes, [self.logs[i].directory for i in indexes]

    def sync_finish(self, pending: PendingSync, synced: bool) -> int:
        return self.journal.finish_sync(pending.target, pending.dirty, synced)

    def checkpoint(self) -> None:
        raise AssertionError("never due")


class PolledCommit(GroupCommit):
    """A group commit run as ``broker.server`` runs it: beside its flusher task, a
    ``ReadPoller`` runs (``poller``), and the kernel flusher's rounds run on the poller's
    task. ``run`` returns once the poller took them over."""

    poller: ReadPoller
    #: Cancelling it stops the poller alone.
    poller_scope: trio.CancelScope

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(GroupCommit.run, self))
            self.poller = ReadPoller()
            self.poller.drive(self)
            self.poller_scope = trio.CancelScope()
            nursery.start_soon(self._poll)
            if self.flusher == "kernel":
                await eventually(lambda: self.polled or self.failure is not None)
            task_status.started()

    async def _poll(self) -> None:
        with self.poller_scope:
            await self.poller.run()
