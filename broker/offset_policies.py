"""The shell side of the offset reset policies (docs/coordinator-rules.md#offset-reset-policies).

The coordinator decides; this module gives it what it may not fetch itself and holds the
data path to its promise:

- ``CatalogLogBounds``: each partition's (log start, log end) from the topic catalogue, the
  coordinator's ``LogBounds`` seam;
- ``LogStartGuard``: called before retention or DeleteRecords moves a log start. It has the
  coordinator commit ``nearest`` offsets for the groups the move would leave behind, and
  returns only once those commits are durable, so no Fetch, ListOffsets or DeleteRecords
  reply can show the new start while a group's committed offset still points below it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from broker.slots import Slot

if TYPE_CHECKING:
    from broker.group_service import GroupService
    from broker.topics import TopicCatalog


class CatalogLogBounds:
    """Where each partition's log starts and ends, as the topic catalogue knows it now."""

    def __init__(self, catalog: TopicCatalog) -> None:
        self.catalog = catalog

    def log_bounds(self, topic: str, partition: int) -> tuple[int, int] | None:
        log = self.catalog.partition(topic, partition)
        if log is None or log.closed:
            return None
        return log.log_start_offset, log.next_offset


class LogStartGuard:
    """Makes the coordinator's ``nearest`` commits durable before a partition's log start moves."""

    def __init__(self, groups: GroupService) -> None:
        self.groups = groups
        self.guarded_moves = 0

    async def before_log_start_moves(self, topic: str, partition: int, new_start: int) -> None:
        """On the event loop: commit, then wait until the coordinator log is durable up to the commits.

        Raises ``RuntimeError`` when the coordinator cannot write (the broker is stopping
        after a storage failure): the log start must then not move.
        """
        groups = self.groups
        fx = groups.coordinator.before_log_start_moves(topic, partition, new_start, groups.clock())
        if not fx.records:
            return
        self.guarded_moves += 1
        groups.apply(fx)
        if groups.stopped:
            raise RuntimeError(f"the coordinator log cannot be written: the log start of {topic}-{partition} "
                               "stays where it is")
        waiter = Slot(0, 0, 0)
        groups.commit.reply_when_durable(groups.log.written_seq, waiter)
        await waiter.event.wait()

    def before_log_start_moves_blocking(self, topic: str, partition: int, new_start: int) -> None:
        """The same from a worker thread trio started (the retention job): blocks until durable."""
        trio.from_thread.run(self.before_log_start_moves, topic, partition, new_start)
