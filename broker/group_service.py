"""Runs the sans-IO group coordinator inside the trio shell.

For every request: call the coordinator with a ticket and the current time, append the
records it returns (one batch per group), and release each reply only once every record
written before it is durable (invariant: no response reveals state that is not yet
durable). fsyncs are shared: while one runs, new appends wait for the next (group
commit). A timer task calls ``on_time`` at the coordinator's next deadline.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import trio

from broker.coordinator import CoordinatorConfig, Effects, GroupCoordinatorShard
from broker.coordinator.api import BINDINGS, Binding, Rejected
from broker.coordinator.offsets import TopicsView
from broker.coordinator.records import encode as encode_record
from broker.coordinator.requests import ClientInfo
from broker.metrics import CLEAN_BUCKETS, FSYNC_BUCKETS, Histogram
from broker.slots import Slot
from protocol.codec import Request, encode_response
from storage.coordinator_log import CoordinatorLog
from storage.history import history_dir_for, prune_history

log = logging.getLogger("kcoord.groups")


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class GroupService:
    def __init__(
        self,
        coordinator: GroupCoordinatorShard,
        coordinator_log: CoordinatorLog,
        durable: bool = True,
        clock: Callable[[], int] = wall_clock_ms,
        expiry_interval_ms: int = 600_000,
        cleaner: dict[str, Any] | None = None,
    ) -> None:
        self.expiry_interval_ms = expiry_interval_ms
        self.cleaner = cleaner  # None: compaction off
        self.cleanings = 0
        self.coordinator = coordinator
        self.log = coordinator_log
        self.durable = durable
        self.clock = clock
        self._tickets: dict[int, tuple[Slot, Binding]] = {}
        self._next_ticket = 0
        self._waiting: deque[tuple[int, Slot]] = deque()  # (needed written_seq, slot)
        self._flush_needed = trio.Event()
        self._timers_changed = trio.Event()
        self._sleeping_until: int | None = None
        self.flushes = 0
        # Metrics (read by broker.metrics at scrape time).
        self.records_appended = 0
        self.batches_appended = 0
        self.fsync_seconds = Histogram(FSYNC_BUCKETS)
        self.clean_seconds = Histogram(CLEAN_BUCKETS)
        self.bytes_reclaimed = 0

    @classmethod
    def open(cls, config: Any, data_dir: Any, topics: TopicsView | None = None) -> GroupService:
        """Open the log, replay it into a fresh coordinator, and finish loading."""
        history_retention_ms = config["log.history.retention.ms"]
        coordinator_log = CoordinatorLog(
            data_dir, config["offsets.topic.num.partitions"], config["offsets.topic.segment.bytes"],
            history_dir=history_dir_for(data_dir, history_retention_ms),
        )
        coordinator = GroupCoordinatorShard(CoordinatorConfig.from_config(config), topics=topics)
        started = time.monotonic()
        count = 0
        for key, value, _timestamp in coordinator_log.replay():
            coordinator.replay_bytes(key, value)
            count += 1
        cleaner = None
        if config["log.cleaner.enable"]:
            cleaner = {
                "backoff_ms": config["log.cleaner.backoff.ms"],
                "delete_retention_ms": config["delete.retention.ms"],
                "min_dirty_ratio": config["log.cleaner.min.cleanable.ratio"],
                "history_retention_ms": history_retention_ms,
            }
        service = cls(coordinator, coordinator_log, durable=config["log.flush.policy"] == "durable",
                      expiry_interval_ms=config["offsets.retention.check.interval.ms"], cleaner=cleaner)
        service.apply(coordinator.finish_load(service.clock()))
        log.info("loaded %d coordinator records: %d groups in %.2fs", count, len(coordinator.groups),
                 time.monotonic() - started)
        return service

    # ---------------------------------------------------------------- requests

    def submit(self, request: Request, client: ClientInfo) -> Slot:
        """Run one request through the coordinator; the slot fills when its reply is durable."""
        header = request.header
        binding = BINDINGS[header.api_key]
        slot = Slot(header.api_key, header.api_version, header.correlation_id)
        typed = binding.decode(header.api_version, request.body, client)
        if isinstance(typed, Rejected):
            # Answered before the coordinator looks at it: it reveals no state, so no wait.
            slot.fill(encode_response(slot.api_key, slot.version, slot.correlation_id,
                                      binding.encode(slot.version, typed.result)))
            return slot
        self._next_ticket += 1
        ticket = self._next_ticket
        self._tickets[ticket] = (slot, binding)
        self.apply(binding.handle(self.coordinator, ticket, self.clock(), typed))
        return slot

    def respond_after(self, request: Request, body: dict[str, Any], fx: Effects) -> Slot:
        """Answer ``request`` with ``body`` once ``fx``'s records (and all before) are durable."""
        header = request.header
        slot = Slot(header.api_key, header.api_version, header.correlation_id)
        slot.frame = encode_response(header.api_key, header.api_version, header.correlation_id, body)
        self.apply(fx, (slot,))
        return slot

    def apply(self, fx: Effects, answered: tuple[Slot, ...] = ()) -> None:
        """Append the effects' records, then queue or release their replies (and ``answered``)."""
        if fx.records:
            now = self.clock()
            for group_id, records in fx.records.items():
                self.log.append(group_id, [encode_record(r) for r in records], now)
                self.records_appended += len(records)
            self.batches_appended += len(fx.records)
            self._flush_needed.set()
        needed = self.log.written_seq
        ready = needed <= self.log.durable_seq or not self.durable
        for ticket, result in fx.replies:
            entry = self._tickets.pop(ticket, None)
            if entry is None:
                continue
            slot, binding = entry
            slot.frame = encode_response(slot.api_key, slot.version, slot.correlation_id,
                                         binding.encode(slot.version, result))
            self._release(slot, needed, ready)
        for slot in answered:
            self._release(slot, needed, ready)
        # Wake the timer task only if the earliest deadline moved earlier than what it
        # sleeps until (a heartbeat pushes a later deadline: no wake-up needed).
        deadline = self.coordinator.next_deadline()
        if deadline is not None and (self._sleeping_until is None or deadline < self._sleeping_until):
            self._timers_changed.set()

    def _release(self, slot: Slot, needed: int, ready: bool) -> None:
        if ready:
            slot.event.set()
        else:
            self._waiting.append((needed, slot))

    @property
    def offsets_committed(self) -> int:
        return self.coordinator.offsets_committed

    @property
    def offsets_expired(self) -> int:
        return self.coordinator.offsets_expired

    def count_rebalances(self) -> int:
        """Generation bumps since start-up (completed joins)."""
        return self.coordinator.rebalances

    # ---------------------------------------------------------------- background tasks

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._flusher)
            nursery.start_soon(self._timer_loop)
            nursery.start_soon(self._expiry_loop)
            if self.cleaner is not None:
                nursery.start_soon(self._cleaner_loop)
            task_status.started()

    async def _cleaner_loop(self) -> None:
        """Compact sealed coordinator-log segments off the event loop, one clean at a time.

        Replay keeps only the latest record per key, so a compacted log loads the same state.
        """
        assert self.cleaner is not None
        while True:
            await trio.sleep(self.cleaner["backoff_ms"] / 1000)
            started = time.perf_counter()
            try:
                results = await trio.to_thread.run_sync(
                    lambda: self.log.compact_all(
                        self.clock(), self.cleaner["delete_retention_ms"],  # type: ignore[index]
                        min_dirty_ratio=self.cleaner["min_dirty_ratio"],  # type: ignore[index]
                    )
                )
            except Exception:
                log.exception("coordinator log cleaning failed; will retry")
                continue
            self.cleanings += 1
            self.clean_seconds.observe(time.perf_counter() - started)
            self.bytes_reclaimed += sum(max(0, r.bytes_before - r.bytes_after) for r in results.values())
            for partition, result in results.items():
                changed = result.bytes_after != result.bytes_before
                log.log(logging.INFO if changed else logging.DEBUG,
                        "cleaned __consumer_offsets-%d: %s", partition, result)
            history = self.log.history_dir
            if history is not None:
                retention = self.cleaner["history_retention_ms"]
                try:
                    await trio.to_thread.run_sync(prune_history, history, self.clock(), retention)
                except OSError:
                    log.exception("pruning the coordinator-log history failed; will retry")

    async def _expiry_loop(self) -> None:
        """Kafka's offsets.retention.check.interval.ms cleanup task."""
        while True:
            await trio.sleep(self.expiry_interval_ms / 1000)
            self.apply(self.coordinator.expire_offsets(self.clock()))

    async def _flusher(self) -> None:
        while True:
            await self._flush_needed.wait()
            self._flush_needed = trio.Event()
            if self.durable:
                durable, seconds = await trio.to_thread.run_sync(self._timed_sync)
                self.fsync_seconds.observe(seconds)
            else:
                durable = self.log.written_seq
            self.flushes += 1
            waiting = self._waiting
            while waiting and waiting[0][0] <= durable:
                waiting.popleft()[1].event.set()

    def _timed_sync(self) -> tuple[int, float]:
        started = time.perf_counter()
        durable = self.log.sync()
        return durable, time.perf_counter() - started

    async def _timer_loop(self) -> None:
        while True:
            deadline = self.coordinator.next_deadline()
            self._timers_changed = trio.Event()
            self._sleeping_until = deadline
            if deadline is None:
                await self._timers_changed.wait()
                continue
            delay = (deadline - self.clock()) / 1000
            if delay > 0:
                with trio.move_on_after(delay):
                    await self._timers_changed.wait()
                    continue
            self._sleeping_until = None
            self.apply(self.coordinator.on_time(self.clock()))

    async def close(self) -> None:
        """Make everything durable and close the log (after connections have drained)."""
        if self.durable:
            await trio.to_thread.run_sync(self.log.sync)
        self.log.close()
