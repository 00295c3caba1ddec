"""Runs the sans-IO group coordinator inside the trio shell.

For every request: call the coordinator with a ticket and the current time, append the
records it returns (one batch per group), and release each reply only once every record
written before it is durable (invariant: no response reveals state that is not yet
durable). The waiting and the shared fsyncs are ``storage.group_commit``; an OffsetCommit
still not durable after ``offsets.commit.timeout.ms`` is answered REQUEST_TIMED_OUT. A
failed append or fsync stops the broker (``on_storage_failure``). A timer task calls
``on_time`` at the coordinator's next deadline, and an expiry task removes old offsets;
compaction and history pruning are maintenance jobs (``maintenance_jobs``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from broker import admin_audit, coordinator_load, heap
from broker.coordinator import CoordinatorConfig, Effects, GroupCoordinatorShard
from broker.coordinator.api import BINDINGS, Binding, Rejected, error_result
from broker.coordinator.classic.state import ClassicGroupState
from broker.coordinator.group_configs import GroupConfigs
from broker.coordinator.modern.consumer.group import ConsumerGroupState
from broker.coordinator.modern.topics import MetadataImage
from broker.coordinator.records import encode_all as encode_records
from broker.coordinator.records import encode_batch_records
from broker.coordinator.requests import ClientInfo, Result
from broker.coordinator.snapshot import payload as coordinator_snapshot_payload
from broker.deadlines import DeadlineTask
from broker.metrics import CLEAN_BUCKETS, FSYNC_BUCKETS, Family, Histogram, counter, gauge
from broker.replication import AllSettled, Replication
from broker.slots import Slot, set_all
from protocol.api_keys import ApiKey
from protocol.codec import (
    FRAME_HEAD,
    Request,
    encode_response,
    encode_response_body,
    response_frame,
    response_tail,
)
from protocol.errors import ErrorCode
from protocol.records import EndTransactionMarker
from storage.cleaner import CleanResult
from storage.coordinator_log import CoordinatorLog
from storage.coordinator_snapshot import Prefetch as SnapshotPrefetch
from storage.fs import REAL_FS, FileSystem
from storage.group_commit import GroupCommit
from storage.history import history_dir_for, prune_history
from storage.layout import COORDINATOR_TOPIC
from storage.maintenance import Job

#: Where the kernel cannot run the journal's fdatasync itself (``storage.aio``): how long the
#: event loop waits for a coordinator log sync in a thread (one fsync of its journal file)
#: before going back to other work; see ``GroupCommit.wait_seconds``.
SYNC_WAIT_SECONDS = 0.002

log = logging.getLogger("kcoord.groups")

OFFSET_COMMIT = 8
#: APIs whose encoded reply bodies are kept by result (``GroupService._reply_frame``), and how many.
REPEATING_REPLIES = frozenset({ApiKey.OFFSET_COMMIT, ApiKey.HEARTBEAT, ApiKey.CONSUMER_GROUP_HEARTBEAT})
REPLY_BODIES_KEPT = 4096
_frame_head = FRAME_HEAD.pack

#: Called when a write or fsync of the coordinator log fails: ``(what was being done, error)``.
StorageFailure = Callable[[str, OSError], None]


#: Every group state a group type can be in, so a scrape always shows each (0 when none).
GROUP_STATES = tuple(dict.fromkeys(
    [state.wire_name for state in ClassicGroupState] + [state.wire_name for state in ConsumerGroupState]))


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def raise_storage_failure(what: str, error: OSError) -> None:
    """The default outside a server: log the failure and let the error propagate."""
    log.error("%s failed: %s", what, error)
    raise error


def commit_timed_out(slot: Slot, result: Result) -> bytes:
    """The OffsetCommit reply once ``offsets.commit.timeout.ms`` passed without durability.

    As Kafka's GroupMetadataManager.storeOffsets: every partition the commit accepted gets
    REQUEST_TIMED_OUT (retriable: clients look the coordinator up again and retry), and a
    partition refused for its own reason keeps that error.
    """
    body = BINDINGS[OFFSET_COMMIT].encode(slot.version, result)
    timed_out = int(ErrorCode.REQUEST_TIMED_OUT)
    topics = [
        {**topic, "partitions": [
            {**part, "error_code": timed_out} if part["error_code"] == 0 else part
            for part in topic["partitions"]
        ]}
        for topic in body["topics"]
    ]
    return encode_response(slot.api_key, slot.version, slot.correlation_id, {**body, "topics": topics})


#: When the snapshot is rewritten: after this many records appended since the last one, or
#: after SNAPSHOT_MAX_AGE_S if any were; checked every SNAPSHOT_CHECK_S. Start-up replays at
#: most about SNAPSHOT_AFTER_RECORDS records after the snapshot (more only after a crash
#: that came before the next snapshot could be written).
SNAPSHOT_AFTER_RECORDS = 500_000
SNAPSHOT_MAX_AGE_S = 600.0
SNAPSHOT_CHECK_S = 30.0


class GroupService:
    def __init__(
        self,
        coordinator: GroupCoordinatorShard,
        coordinator_log: CoordinatorLog,
        durable: bool = True,
        clock: Callable[[], int] = wall_clock_ms,
        expiry_interval_ms: int = 600_000,
        cleaner: dict[str, Any] | None = None,
        commit_timeout_ms: int | None = None,
        history_retention_ms: int = -1,
        history_check_ms: int = 15_000,
    ) -> None:
        self.expiry_interval_ms = expiry_interval_ms
        self.cleaner = cleaner  # None: compaction off
        self.history_retention_ms = history_retention_ms
        self.history_check_ms = history_check_ms
        self.cleanings = 0
        self.coordinator = coordinator
        self.log = coordinator_log
        self.durable = durable
        self.clock = clock
        self.on_storage_failure: StorageFailure = raise_storage_failure
        self.stopped = False  # a write or fsync failed: nothing more is appended or answered
        self._tickets: dict[int, tuple[Slot, Binding, Any]] = {}
        #: Encoded replies of REPEATING_REPLIES by result: the frame's size and what follows
        #: the correlation id (``protocol.codec.response_tail``).
        self._reply_tails: dict[tuple[int, int, Result], tuple[int, bytes]] = {}
        #: The latest record of every group key, in log order: the snapshot's group section.
        self._group_records: dict[bytes, bytes] = {}
        #: Records the state holds that the snapshot on disk does not (1: no snapshot yet).
        self._records_since_snapshot = 1
        self._snapshot_written_at = time.monotonic()
        self._snapshotting: trio.Event | None = None  # set once the snapshot being written is done
        #: False on a cluster node, which loads partitions as it comes to lead them
        self.snapshots = True
        #: A cluster node's partition replication (None: one node, one replica).
        self.replication: Replication | None = None
        self._next_ticket = 0
        self.timers = DeadlineTask(lambda: self.coordinator.next_deadline(),
                                   lambda now: self.apply(self.coordinator.on_time(now)), lambda: self.clock(),
                                   lambda: self.coordinator.timers.take_earliest_new())
        # Metrics (read by broker.metrics at scrape time).
        self.records_appended = 0
        self.batches_appended = 0
        self.fsync_seconds = Histogram(FSYNC_BUCKETS)
        self.clean_seconds = Histogram(CLEAN_BUCKETS)
        self.bytes_reclaimed = 0
        self.commit = GroupCommit(
            coordinator_log, durable=durable,
            timeout=commit_timeout_ms / 1000 if commit_timeout_ms is not None else None,
            on_failure=self._sync_failed, fsync_seconds=self.fsync_seconds, name=COORDINATOR_TOPIC,
            wait_seconds=SYNC_WAIT_SECONDS, release=set_all,
        )

    @classmethod
    def open(cls, config: Any, data_dir: Path, fs: FileSystem = REAL_FS,
             topics: MetadataImage | None = None, group_configs: GroupConfigs | None = None,
             load: bool = True) -> GroupService:
        """Open the log, load the snapshot and replay the log after it (or all of it), finish loading.

        ``group_configs``: the groups' own configs, already replayed from their log.
        ``load=False`` (a cluster node) opens the log without replaying it: the groups of a
        partition are loaded when the node comes to lead it, and no snapshot is read or
        written (it would cover only the partitions led at the time).
        """
        history_retention_ms = config["log.history.retention.ms"]
        # A large snapshot is read on a thread while the log opens (both take a while); one
        # the C heap would serve from its own memory is read in line, after the log.
        prefetch = SnapshotPrefetch(fs, data_dir, heap.MMAP_THRESHOLD) if load else None
        coordinator_log = CoordinatorLog(
            data_dir, config["offsets.topic.num.partitions"], config["offsets.topic.segment.bytes"],
            history_dir=history_dir_for(data_dir, history_retention_ms), fs=fs,
            journal=config["log.flush.policy"] == "durable",
        )
        started = time.monotonic()
        def new_shard() -> GroupCoordinatorShard:
            return GroupCoordinatorShard(CoordinatorConfig.from_config(config), topics=topics,
                                         group_configs=group_configs)

        with coordinator_load.collector_paused():
            if load:
                loaded = coordinator_load.load(coordinator_log, new_shard, config["delete.retention.ms"],
                                               wall_clock_ms(), prefetch)
            else:
                loaded = coordinator_load.Loaded(new_shard(), {}, None, 0)
        coordinator = loaded.shard
        cleaner = None
        if config["log.cleaner.enable"]:
            cleaner = {
                "backoff_ms": config["log.cleaner.backoff.ms"],
                "delete_retention_ms": config["delete.retention.ms"],
                "min_dirty_ratio": config["log.cleaner.min.cleanable.ratio"],
            }
        service = cls(coordinator, coordinator_log, durable=config["log.flush.policy"] == "durable",
                      expiry_interval_ms=config["offsets.retention.check.interval.ms"], cleaner=cleaner,
                      commit_timeout_ms=config["offsets.commit.timeout.ms"],
                      history_retention_ms=history_retention_ms, history_check_ms=config["log.cleaner.backoff.ms"])
        service._group_records = loaded.group_records
        service.snapshots = load
        # With no snapshot loaded there is none that fits the log: write one soon.
        service._records_since_snapshot = loaded.replayed + (loaded.snapshot is None)
        with coordinator_load.collector_paused():
            service.apply(coordinator.finish_load(service.clock()))
        if loaded.snapshot is None:
            log.info("loaded %d coordinator records: %d groups in %.2fs", loaded.replayed, len(coordinator.groups),
                     time.monotonic() - started)
        else:
            log.info("loaded the coordinator snapshot (%d offsets, %d group records) and %d records after it: "
                     "%d groups in %.2fs", coordinator.offsets.count(), len(loaded.group_records), loaded.replayed,
                     len(coordinator.groups), time.monotonic() - started)
        return service

    # ---------------------------------------------------------------- requests

    def submit(self, request: Request, client: ClientInfo) -> Slot | bytes:
        """Run one request through the coordinator: its reply's frame if it is answered at
        once, else a slot that fills when the reply is ready and durable."""
        header = request.header
        api_key = header.api_key
        binding = BINDINGS[api_key]
        # Read straight from the frame (OffsetCommit, OffsetFetch, ConsumerGroupHeartbeat), else decoded here.
        typed = request.typed
        if typed is None:
            typed = binding.decode(header.api_version, request.body, client)
        elif binding.with_client is not None:
            typed = binding.with_client(typed, client)
        if isinstance(typed, Rejected):
            # Answered before the coordinator looks at it: it reveals no state, so no wait.
            return encode_response(api_key, header.api_version, header.correlation_id,
                                   binding.encode(header.api_version, typed.result))
        self._next_ticket += 1
        ticket = self._next_ticket
        audit = admin_audit.snapshot(api_key, request, typed, self.coordinator.offsets) \
            if api_key in admin_audit.AUDITED else None
        now = self.clock()
        fx = binding.handle(self.coordinator, ticket, now, typed)
        replies = fx.replies
        if (not fx.records and len(replies) == 1 and replies[0][0] == ticket and not fx.transactional
                and not self.stopped and self.commit.durable_by(self.log.written_seq)):
            # Answered at once (most heartbeats and fetches): nothing written, and nothing
            # written before it still to be made durable, so its frame goes out as it is.
            frame: Slot | bytes = self._reply_frame(api_key, header.api_version, header.correlation_id, binding,
                                                    replies[0][1])
            if self.coordinator.timers.earliest_new is not None:  # most fetches schedule no timer
                self.timers.moved()
        else:
            frame = Slot(api_key, header.api_version, header.correlation_id)
            self._tickets[ticket] = (frame, binding, typed)
            self.apply(fx, now=now)
        if audit is not None:
            admin_audit.log_changes(audit, self.coordinator.offsets, self.coordinator.groups, client)
        return frame

    def respond_after(self, request: Request, body: dict[str, Any]) -> Slot:
        """Answer ``request`` with ``body`` once every coordinator record written so far is durable.

        For requests handled elsewhere whose effects reached the coordinator through a
        listener hook (a topic deleted, a topic grown): their reply must not come before
        what the coordinator recorded about them.
        """
        header = request.header
        slot = Slot(header.api_key, header.api_version, header.correlation_id)
        slot.frame = encode_response(header.api_key, header.api_version, header.correlation_id, body)
        self.apply(Effects(), (slot,))
        return slot

    # ---------------------------------------------------------------- topic changes (TopicListener)

    def on_partitions_added(self, topic: str, start_offsets: dict[int, int]) -> None:
        self.apply(self.coordinator.on_partitions_added(topic, start_offsets, self.clock()))

    def on_topic_deleted(self, topic: str) -> None:
        self.apply(self.coordinator.on_topic_deleted(topic, self.clock()))

    def apply(self, fx: Effects, answered: tuple[Slot, ...] = (), now: int | None = None) -> None:
        """Append the effects' records, then queue or release their replies (and ``answered``).

        ``now``: the time the coordinator was called with (the batches' timestamp), if known.

        If an append fails the broker stops (``on_storage_failure``) and none of these
        replies is released: the coordinator's memory is ahead of its log now.
        """
        if self.stopped:
            return
        written: dict[int, int] = {}
        replication = self.replication
        if fx.records or fx.transactional:
            if now is None:
                now = self.clock()
            log_ = self.log
            appended = 0
            try:
                for group_id, records in fx.records.items():
                    log_.append(group_id, encode_batch_records(records, self._group_records), now)
                    appended += len(records)
                    if replication is not None:
                        partition = log_.partition_of(group_id)
                        plog = log_.partition_log(partition)
                        if plog is not None:
                            written[partition] = plog.next_offset
                for (group_id, producer_id, epoch), records in fx.transactional.items():
                    log_.append(group_id, encode_records(records, self._group_records), now,
                                producer_id=producer_id, producer_epoch=epoch)
                    appended += len(records)
                    if replication is not None:
                        # A TxnOffsetCommit is answered once the ISR has it: its COMMIT marker,
                        # written later, must never reach a log that lost the offsets.
                        partition = log_.partition_of(group_id)
                        plog = log_.partition_log(partition)
                        if plog is not None:
                            written[partition] = plog.next_offset
            except OSError as exc:
                self.stopped = True
                self.on_storage_failure(f"appending to {COORDINATOR_TOPIC}", exc)
                return
            self.records_appended += appended
            self.batches_appended += len(fx.records) + len(fx.transactional)
            self._records_since_snapshot += appended
            self.commit.appended()
        needed = self.log.written_seq
        replies: list[tuple[Slot, Result | None, Binding | None, Any]] = []
        tickets = self._tickets
        for ticket, result in fx.replies:
            entry = tickets.pop(ticket, None)
            if entry is not None:
                slot, binding, typed = entry
                slot.frame = self._reply_frame(slot.api_key, slot.version, slot.correlation_id, binding, result)
                replies.append((slot, result, binding, typed))
        if answered:
            replies.extend((slot, None, None, None) for slot in answered)
        if replication is not None and written:
            self._after_replication(written, needed, replies)
        elif self.commit.durable_by(needed):
            for slot, _, _, _ in replies:  # most heartbeats and fetches: nothing to wait for
                slot.set()
        else:
            for slot, reply_result, _, _ in replies:
                self._when_durable(needed, slot, reply_result)
        # Wake the timer task only if the earliest deadline moved earlier than what it
        # sleeps until (a heartbeat pushes a later deadline: no wake-up needed); a change that
        # scheduled no timer (most commits) cannot move it.
        if self.coordinator.timers.earliest_new is not None:
            self.timers.moved()

    def _reply_frame(self, api_key: int, version: int, correlation_id: int, binding: Binding,
                     result: Result) -> bytes:
        """The reply's frame; for the APIs whose results repeat, the body is encoded once.

        A steady consumer commits the same partitions and gets the same answer, and a
        heartbeat's answer is one error code: their encoded bodies are kept by result
        (bounded), and only the header, with its correlation id, is built per reply.
        """
        if api_key not in REPEATING_REPLIES:
            if binding.encode_body is not None:
                return response_frame(api_key, version, correlation_id, binding.encode_body(version, result))
            return encode_response(api_key, version, correlation_id, binding.encode(version, result))
        tails = self._reply_tails
        key = (api_key, version, result)
        try:
            kept = tails.get(key)
            hashable = True
        except TypeError:  # a result holding something unhashable: encode it every time
            kept, hashable = None, False
        if kept is None:
            body = encode_response_body(api_key, version, binding.encode(version, result))
            kept = response_tail(api_key, version, body)
            if hashable:
                if len(tails) >= REPLY_BODIES_KEPT:
                    tails.clear()
                tails[key] = kept
        size, tail = kept
        return _frame_head(size, correlation_id) + tail

    def write_marker(self, partition: int, producer_id: int, producer_epoch: int,
                     marker: EndTransactionMarker) -> int | None:
        """Append a transaction's marker to ``__consumer_offsets-<partition>`` and replay it.

        Returns the append's number (durable once ``commit.durable_seq`` reaches it), or
        None when the broker has stopped on a storage failure.
        """
        if self.stopped:
            return None
        try:
            seq = self.log.append_marker(partition, producer_id, producer_epoch, marker, self.clock())
        except OSError as exc:
            self.stopped = True
            self.on_storage_failure(f"appending to {COORDINATOR_TOPIC}", exc)
            return None
        self.batches_appended += 1
        self.coordinator.replay_marker(partition, self.log.partitions, producer_id, marker)
        self.commit.appended()
        self._records_since_snapshot += 1
        return seq

    def _when_durable(self, needed: int, slot: Slot, result: Result | None) -> None:
        if slot.api_key == OFFSET_COMMIT and result is not None:
            self.commit.reply_when_durable(needed, slot, commit_timed_out, result)
        else:
            self.commit.reply_when_durable(needed, slot)

    def _after_replication(self, written: dict[int, int], needed: int,
                           replies: list[tuple[Slot, Result | None, Binding | None, Any]]) -> None:
        """On a cluster node: the records go to the followers, and the replies wait until the
        ISR of every partition written has them (then for the local fsync). If it never will
        (this node stopped leading, the ISR fell below min.insync.replicas), each reply is the
        request's NOT_COORDINATOR error, as Kafka's coordinator answers a failed write, and
        the client finds the coordinator again."""
        replication = self.replication
        assert replication is not None

        def settled(failures: dict[tuple[str, int], ErrorCode]) -> None:
            for slot, body, binding, typed in replies:
                if not failures:
                    self._when_durable(needed, slot, body)
                    continue
                if binding is not None:
                    failed = binding.encode(slot.version, error_result(typed, ErrorCode.NOT_COORDINATOR))
                    slot.frame = encode_response(slot.api_key, slot.version, slot.correlation_id, failed)
                slot.event.set()

        if not replies:
            for partition, end in written.items():
                replication.appended(COORDINATOR_TOPIC, partition, end, None)
            return
        gate = AllSettled(len(written), settled)
        for partition, end in written.items():
            replication.appended(COORDINATOR_TOPIC, partition, end, gate.one(COORDINATOR_TOPIC, partition))

    def _sync_failed(self, exc: OSError) -> None:
        self.stopped = True
        self.on_storage_failure(f"fsync of {COORDINATOR_TOPIC}", exc)

    @property
    def offsets_committed(self) -> int:
        return self.coordinator.offsets_committed

    @property
    def offsets_expired(self) -> int:
        return self.coordinator.offsets_expired

    @property
    def flushes(self) -> int:
        """fsync rounds of the coordinator log."""
        return self.commit.syncs

    def count_rebalances(self) -> int:
        """Generation bumps since start-up (completed joins)."""
        return self.coordinator.rebalances

    # ---------------------------------------------------------------- maintenance

    def maintenance_jobs(self) -> list[Job]:
        """Compaction of ``__consumer_offsets`` and history pruning, for ``storage.maintenance``.

        Both run every ``log.cleaner.backoff.ms``; compaction only with ``log.cleaner.enable``.
        """
        jobs: list[Job] = []
        if self.cleaner is not None:
            cleaner = self.cleaner
            jobs.append(Job(
                "compaction of __consumer_offsets", cleaner["backoff_ms"] / 1000,
                lambda: self.log.compact_all(self.clock(), cleaner["delete_retention_ms"],
                                             min_dirty_ratio=cleaner["min_dirty_ratio"]),
                self._cleaned,
            ))
        history = self.log.history_dir
        if history is not None:
            retention = self.history_retention_ms
            jobs.append(Job(
                "pruning of the coordinator-log history", self.history_check_ms / 1000,
                lambda: prune_history(history, self.clock(), retention, self.log.fs),
            ))
        return jobs

    def _cleaned(self, results: dict[int, CleanResult], seconds: float) -> None:
        """Replay keeps only the latest record per key, so a compacted log loads the same state."""
        self.cleanings += 1
        self.clean_seconds.observe(seconds)
        self.bytes_reclaimed += sum(max(0, r.bytes_before - r.bytes_after) for r in results.values())
        for partition, result in results.items():
            changed = result.bytes_after != result.bytes_before
            log.log(logging.INFO if changed else logging.DEBUG,
                    "cleaned __consumer_offsets-%d: %s", partition, result)

    # ---------------------------------------------------------------- metrics

    def metrics(self) -> list[Family]:
        """Groups by state, members, rebalances, offsets, and the coordinator log."""
        coordinator = self.coordinator
        by_state: dict[str, int] = dict.fromkeys(GROUP_STATES, 0)
        members = 0
        for group in coordinator.groups.values():
            state = group.state.wire_name
            by_state[state] = by_state.get(state, 0) + 1
            members += len(group.members)
        groups = gauge("kcoord_groups", "Consumer groups by state.")
        for state, count in by_state.items():
            groups.add(count, state=state)
        types = gauge("kcoord_groups_by_type", "Groups by protocol: classic, or consumer (KIP-848).")
        by_type = {"classic": 0, "consumer": 0}
        for group in coordinator.groups.values():
            by_type[group.group_type] = by_type.get(group.group_type, 0) + 1
        for kind, count in by_type.items():
            types.add(count, type=kind)
        consumer = coordinator.consumer
        return [
            groups,
            types,
            counter("kcoord_consumer_group_heartbeats_total", "ConsumerGroupHeartbeat requests (KIP-848).",
                    consumer.heartbeats),
            counter("kcoord_consumer_group_epoch_bumps_total",
                    "Consumer group epoch bumps: joins, leaves, subscription and metadata changes.",
                    consumer.epoch_bumps),
            counter("kcoord_consumer_group_members_fenced_total",
                    "Consumer group members removed: left, session or rebalance timeout.", consumer.fenced),
            Family("kcoord_consumer_group_reconciliation_seconds", "histogram",
                   "Time from a member's target assignment changing to the member being stable at it.")
            .add_histogram(consumer.reconciliation_seconds),
            gauge("kcoord_group_members", "Members of all groups.", members),
            counter("kcoord_rebalances_total", "Group generation bumps (completed joins).",
                    self.count_rebalances()),
            counter("kcoord_offsets_committed_total", "Partition offsets stored by OffsetCommit requests.",
                    self.offsets_committed),
            counter("kcoord_offsets_expired_total", "Committed offsets removed by retention (KIP-211 expiry).",
                    self.offsets_expired),
            gauge("kcoord_offsets", "Committed offsets held (group, topic, partition).", coordinator.offsets.count()),
            gauge("kcoord_offsets_pending_transactional",
                  "Offsets committed inside transactions still open (invisible until their COMMIT marker).",
                  coordinator.pending_offsets.count()),
            *self._log_metrics(),
        ]

    def _log_metrics(self) -> list[Family]:
        log_ = self.log
        size = segments = partitions = 0
        for partition in range(log_.partitions):
            plog = log_.partition_log(partition)
            if plog is not None:
                partitions += 1
                size += plog.size_bytes
                segments += len(plog.segments)
        return [
            gauge("kcoord_coordinator_log_bytes", "Size of the __consumer_offsets segment files.", size),
            gauge("kcoord_coordinator_log_segments", "__consumer_offsets segment files.", segments),
            gauge("kcoord_coordinator_log_partitions", "__consumer_offsets partitions written so far.", partitions),
            counter("kcoord_coordinator_log_records_appended_total", "Records appended to __consumer_offsets.",
                    self.records_appended),
            counter("kcoord_coordinator_log_batches_appended_total",
                    "Record batches appended to __consumer_offsets (one per group per request).",
                    self.batches_appended),
            counter("kcoord_coordinator_log_fsyncs_total",
                    "fsync rounds of __consumer_offsets (each covers every partition written since the last).",
                    self.fsync_seconds.count),
            Family("kcoord_coordinator_log_fsync_duration_seconds", "histogram",
                   "Duration of one fsync round of __consumer_offsets.").add_histogram(self.fsync_seconds),
            counter("kcoord_coordinator_log_cleaner_runs_total", "Log cleaner passes over __consumer_offsets.",
                    self.cleanings),
            Family("kcoord_coordinator_log_cleaner_duration_seconds", "histogram",
                   "Duration of one log cleaner pass over __consumer_offsets.").add_histogram(self.clean_seconds),
            counter("kcoord_coordinator_log_cleaner_reclaimed_bytes_total",
                    "Bytes of sealed __consumer_offsets segments removed by compaction.", self.bytes_reclaimed),
        ]

    # ---------------------------------------------------------------- background tasks

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.commit.run)
            nursery.start_soon(self.timers.run)
            nursery.start_soon(self._expiry_loop)
            nursery.start_soon(self._snapshot_loop)
            task_status.started()

    async def _expiry_loop(self) -> None:
        """Kafka's offsets.retention.check.interval.ms cleanup task."""
        while not self.timers.stopped:
            await trio.sleep(self.expiry_interval_ms / 1000)
            if self.timers.stopped:
                return
            self.apply(self.coordinator.expire_offsets(self.clock()))

    async def close(self) -> None:
        """Make everything durable, write the snapshot, close the log (after connections have drained).

        The timers stop first: nothing may change the state between the snapshot and the close.
        """
        self.timers.stop()
        if self.durable and await self.commit.sync_now():
            # The segments alone hold everything after a clean stop (storage.wal): a reader of
            # the data directory, or an older kcoord, needs nothing from the journal.
            await trio.to_thread.run_sync(self.log.checkpoint)
        if self._snapshotting is not None:  # one being written by the snapshot task: let it finish
            await self._snapshotting.wait()
        if self._records_since_snapshot and not self.stopped:
            await self.write_snapshot()
        self.log.close()

    # ---------------------------------------------------------------- snapshot

    async def _snapshot_loop(self) -> None:
        """Write a snapshot once enough was appended, or some was and the last one is getting old."""
        while True:
            await trio.sleep(SNAPSHOT_CHECK_S)  # first, so start-up serves before it writes one
            if self.timers.stopped:  # closing: close() writes the last one
                return
            grown = self._records_since_snapshot
            age = time.monotonic() - self._snapshot_written_at
            if grown >= SNAPSHOT_AFTER_RECORDS or (grown and age >= SNAPSHOT_MAX_AGE_S):
                await self.write_snapshot()

    async def write_snapshot(self) -> bool:
        """Capture the coordinator's state now and make it the snapshot; False if that did not happen.

        The state is captured on the event loop a part at a time and each part written by a
        worker thread while requests are served in between (what they change is after the
        covered offsets, and is replayed again at load). Before the file replaces the last
        snapshot, the log is made durable up to everything captured. A snapshot that cannot
        be written is logged and skipped: the log is the truth, the snapshot only makes
        start-up faster.
        """
        if self._snapshotting is not None or self.stopped or not self.snapshots:
            return False
        if self.coordinator.offset_manager.pending.any_open():
            # An open transaction's offsets sit before the covered offsets and its marker
            # would come after them: the snapshot would miss them. Try again later.
            return False
        done = self._snapshotting = trio.Event()
        try:
            covered = self.log.end_offsets()
            created_ms = self.clock()
            records = self._records_since_snapshot
            group_records = list(self._group_records.items())
            try:
                writer = await trio.to_thread.run_sync(coordinator_load.begin_snapshot, self.log, covered, created_ms)
            except OSError as exc:
                log.warning("could not write the coordinator snapshot: %s", exc)
                return False
            try:
                for part in coordinator_snapshot_payload(self.coordinator, group_records):
                    await trio.to_thread.run_sync(writer.write, part)
                if self.stopped:  # an append failed meanwhile: the state holds what the log does not
                    writer.abort()
                    return False
                size = await trio.to_thread.run_sync(coordinator_load.finish_snapshot, self.log, writer)
            except BaseException as exc:
                writer.abort()
                if isinstance(exc, coordinator_load.LogSyncFailed):
                    self.stopped = True
                    self.on_storage_failure(f"fsync of {COORDINATOR_TOPIC}", exc.error)
                    return False
                if isinstance(exc, OSError):
                    log.warning("could not write the coordinator snapshot: %s", exc)
                    return False
                raise
        finally:
            self._snapshotting = None
            done.set()
        self._records_since_snapshot -= records
        self._snapshot_written_at = time.monotonic()
        log.info("wrote the coordinator snapshot: %d offsets, %d group records, %.1f MB",
                 self.coordinator.offsets.count(), len(group_records), size / 1e6)
        return True
