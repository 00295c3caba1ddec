"""Partition replication on a cluster node, leader and follower side: the trio shell over
``cluster.replication``.

As a **follower** of a partition (``Role.FOLLOW``), the node fetches from the leader over
the Kafka protocol, exactly as a Kafka follower does (``ReplicaFetcherThread``): Fetch with
its node id as ``replica_id``, its log end as ``fetch_offset``, the epoch of its last batch
as ``last_fetched_epoch`` and the leader's epoch as ``current_leader_epoch``. It appends
what comes back at the leader's offsets, makes it durable (``log.flush.policy``) before it
asks for more, and keeps the leader's high watermark. When the leader answers with a
diverging epoch (KIP-279) it cuts its log back to where the two agree; when it is behind
the leader's log start it starts over there.

As the **leader** of a replicated partition, the node answers those fetches (long-polled,
woken by appends), learns from each where the follower's log ends, moves the high
watermark, releases the writes waiting for the ISR (``broker.replication``), and writes
ISR changes to etcd by compare-and-set on the ISR key and on its own leader key, so that a
deposed leader cannot change it.

A partition with a single replica is not replicated: it is served as before, every append
readable and acknowledged once durable.

The high watermarks of the replicated partitions the node holds are saved every
``replica.high.watermark.checkpoint.interval.ms`` and when the node stops
(``storage.hw_checkpoint``, Kafka's ``replication-offset-checkpoint``). A log opened again
as a leader or a follower starts its high watermark at the smaller of the saved one and its
log end, as Kafka's replica does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import trio

from broker.metrics import Family, counter, gauge
from broker.replication import Settled
from cluster.etcd import Compare, EtcdClient, EtcdError, EtcdUnavailable, Put
from cluster.fencing import LeaseClock
from cluster.model import (
    COORDINATOR_TOPIC,
    COORDINATOR_TOPICS,
    TRANSACTION_TOPIC,
    ClusterImage,
    Keys,
    TopicPartition,
    encode_isr,
)
from cluster.replica import ReplicaClient
from cluster.replication import LeaderState, check_last_fetched_epoch, divergence
from protocol.errors import ErrorCode
from storage.hw_checkpoint import HighWatermarkCheckpoint
from storage.partition import CorruptLogError, PartitionLog


class Node(Protocol):
    """What replication uses of its node (``cluster.node.ClusterNode``)."""

    config: Any
    data_dir: Any
    fs: Any
    node_id: int
    registration_epoch: int
    image: ClusterImage
    keys: Keys
    etcd: EtcdClient
    lease: LeaseClock
    catalog: Any
    broker: Any
    inter_broker: str | None

    def clock(self) -> float: ...

    def _local_log(self, tp: TopicPartition) -> PartitionLog | None: ...

    def coordinator_log(self, name: str) -> Any: ...

    def topic_id(self, name: str) -> Any: ...

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> None: ...

log = logging.getLogger("kcoord.cluster")

#: How long a follower's fetch waits at the leader for records.
FOLLOWER_WAIT_MS = 500
#: How often the leader looks at its ISRs without being woken.
ISR_CHECK_S = 0.25
_NOT_LEADER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)


class Replicator:
    """Replication for one node: ``broker.replication.Replication`` for its services."""

    def __init__(self, node: Node) -> None:
        self.node = node
        config = node.config
        self.lag_s = config["replica.lag.time.max.ms"] / 1000
        self.min_insync_default = int(config["min.insync.replicas"])
        self.durable = config["log.flush.policy"] == "durable"
        self.leaders: dict[TopicPartition, LeaderState] = {}
        self.followers: dict[TopicPartition, tuple[tuple[int, int], trio.CancelScope]] = {}
        self.appended_event = trio.Event()
        self._isr_wake = trio.Event()
        self.checkpoint_interval_s = config["replica.high.watermark.checkpoint.interval.ms"] / 1000
        self.checkpoint = HighWatermarkCheckpoint(node.data_dir, node.fs)
        #: The high watermarks of the last checkpoint read or written (None: not read yet).
        self._saved: dict[TopicPartition, int] | None = None
        # Metrics.
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.truncations = 0

    # ================================================================ broker.replication.Replication

    def in_sync(self, topic: str, partition: int) -> int:
        state = self.leaders.get((topic, partition))
        return 1 if state is None else len(state.isr)

    def appended(self, topic: str, partition: int, end_offset: int, settled: Settled | None) -> None:
        tp = (topic, partition)
        state = self.leaders.get(tp)
        if state is None:
            if settled is not None:
                settled(ErrorCode.NONE)
            return
        self._wake_fetches()
        plog = self.node._local_log(tp)
        if plog is not None:
            self._advance(tp, state, plog)
        if settled is not None:
            state.wait(end_offset, settled)

    # ================================================================ leading

    def replicated(self, tp: TopicPartition) -> bool:
        """The partition has (or is growing or being reassigned to) more than one replica, and
        is not a single replica being copied to another node."""
        assignment = self.node.image.assignments.get(tp)
        return assignment is not None and len(assignment.replicas) > 1 and not assignment.single_move

    def lead(self, tp: TopicPartition, epoch: int, plog: PartitionLog, serving_before: bool) -> None:
        """This node leads ``tp`` at ``epoch`` from ``plog``: stamp its batches, keep its ISR."""
        plog.leader_epoch = epoch
        state = self.leaders.get(tp)
        if state is not None and state.epoch == epoch:
            assignment = self.node.image.assignments.get(tp)
            if assignment is not None and assignment.replicas != state.replicas:
                state.set_replicas(assignment.replicas)
                self._advance(tp, state, plog)
                self._isr_wake.set()
            return
        if state is not None:
            self.stop_leading(tp)
        if not self.replicated(tp):
            # One replica (a replicated partition reassigned to this node alone, say): every
            # record it has is readable, whatever high watermark it kept as a follower.
            plog.set_high_watermark(None)
            return
        image = self.node.image
        self.restore_high_watermark(tp, plog)
        known = plog.replicated_high_watermark
        start_hw = plog.next_offset if serving_before else (known if known is not None else plog.log_start_offset)
        state = LeaderState.begin(self.node.node_id, epoch, image.assignments[tp].replicas, image.isr_of(tp),
                                  plog.next_offset, start_hw, self.node.clock(), self._min_insync(tp))
        self.leaders[tp] = state
        plog.set_high_watermark(state.high_watermark)
        self.node.broker.data.forget_producers(plog)
        self._advance(tp, state, plog)
        self._isr_wake.set()
        log.info("leading replicated %s-%d at epoch %d: replicas %s, ISR %s, high watermark %d, log end %d",
                 *tp, epoch, list(state.replicas), sorted(state.isr), state.high_watermark, plog.next_offset)

    def stop_leading(self, tp: TopicPartition) -> None:
        state = self.leaders.pop(tp, None)
        if state is None:
            return
        for done in state.abandon():
            done(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        plog = self.node._local_log(tp)
        if plog is not None:
            plog.leader_epoch = -1

    async def caught_up(self, tp: TopicPartition, end_offset: int) -> bool:
        """Wait until the ISR has everything below ``end_offset`` (a new coordinator's log,
        before it serves groups built from it); False if this node stops leading first."""
        state = self.leaders.get(tp)
        if state is None:
            return True
        done = trio.Event()
        outcome: list[ErrorCode] = []

        def settled(error: ErrorCode) -> None:
            outcome.append(error)
            done.set()

        state.wait(end_offset, settled)
        await done.wait()
        return outcome[0] is not ErrorCode.NOT_LEADER_OR_FOLLOWER

    def _min_insync(self, tp: TopicPartition) -> int:
        if tp[0] == COORDINATOR_TOPIC:
            return self.min_insync_default
        if tp[0] == TRANSACTION_TOPIC:
            return int(self.node.config["transaction.state.log.min.isr"])
        catalog = self.node.catalog
        topic = None if catalog is None else catalog.get(tp[0])
        return int(topic.config("min.insync.replicas")) if topic is not None else self.min_insync_default

    def _advance(self, tp: TopicPartition, state: LeaderState, plog: PartitionLog) -> None:
        """Recompute the high watermark; readers and waiting writes hear of a move."""
        if state.advance(plog.next_offset):
            plog.set_high_watermark(state.high_watermark)
            self.node.broker.data.readable_moved()
        for done, error in state.release():
            done(error)

    def _wake_fetches(self) -> None:
        self.appended_event.set()
        self.appended_event = trio.Event()

    # ---------------------------------------------------------------- a follower's fetch, answered

    def serve_fetch(self, tp: TopicPartition, part: Any, replica: int, plog: PartitionLog,
                    replica_epoch: int = -1) -> dict[str, Any]:
        """One partition of a follower's Fetch: its position noted, records or a diverging epoch.

        A fetch that carries a broker epoch (Fetch v15+, KIP-903) older than the replica's
        registration in etcd comes from a process that has since restarted (its disk may be
        gone): it is answered, but does not count toward the replica's place in the ISR."""
        state = self.leaders[tp]
        entry: dict[str, Any] = {"partition_index": part.partition, "error_code": 0, "high_watermark": -1,
                                 "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                                 "preferred_read_replica": -1, "records": b""}
        asked_epoch = int(part.get("current_leader_epoch", -1))
        if asked_epoch >= 0 and asked_epoch != state.epoch:
            entry["error_code"] = int(ErrorCode.FENCED_LEADER_EPOCH if asked_epoch < state.epoch
                                      else ErrorCode.UNKNOWN_LEADER_EPOCH)
            return entry
        end = plog.next_offset
        start = plog.log_start_offset
        offset = int(part.fetch_offset)
        last_epoch = int(part.get("last_fetched_epoch", -1))
        if last_epoch >= 0:
            # KIP-279: does the follower's log agree with ours up to its fetch offset?
            error, diverging = check_last_fetched_epoch(last_epoch, offset, plog.end_offset_for_epoch(last_epoch))
            if error is not ErrorCode.NONE:
                entry.update(error_code=int(error), high_watermark=state.high_watermark, log_start_offset=start)
                return entry
            if diverging is not None:
                entry.update(high_watermark=state.high_watermark, log_start_offset=start,
                             last_stable_offset=state.high_watermark,
                             diverging_epoch={"epoch": diverging[0], "end_offset": diverging[1]})
                return entry
        if offset < start or offset > end:
            entry.update(error_code=int(ErrorCode.OFFSET_OUT_OF_RANGE), high_watermark=state.high_watermark,
                         log_start_offset=start)
            return entry
        registered = self.node.image.revision_of(self.node.keys.node(replica))
        if not (0 <= replica_epoch < registered):
            state.on_fetch(replica, offset, end, self.node.clock())
            self._advance(tp, state, plog)
        if state.wanted_isr(self.node.clock(), self.lag_s) is not None:
            self._isr_wake.set()
        entry.update(high_watermark=state.high_watermark, last_stable_offset=state.high_watermark,
                     log_start_offset=start, records=plog.read_raw(offset, part.partition_max_bytes))
        return entry

    # ---------------------------------------------------------------- the ISR, in etcd

    async def run(self) -> None:
        while True:
            self._isr_wake = trio.Event()
            now = self.node.clock()
            if self.node.lease.valid(now):
                live = frozenset(self.node.image.nodes)
                for tp, state in list(self.leaders.items()):
                    wanted = state.wanted_isr(now, self.lag_s, live)
                    if wanted is not None:
                        await self._write_isr(tp, state, wanted)
            with trio.move_on_after(ISR_CHECK_S):
                await self._isr_wake.wait()

    async def _write_isr(self, tp: TopicPartition, state: LeaderState, wanted: frozenset[int]) -> None:
        node = self.node
        isr_key = node.keys.isr(*tp)
        leader_key = node.keys.leader(*tp)
        value = encode_isr(wanted)
        if frozenset(node.image.isrs.get(tp, ())) == wanted:
            # etcd has it already (the controller wrote it with a completed reassignment).
            state.isr_written(wanted)
            return
        state.pending_isr = wanted
        try:
            result = await node.etcd.txn(
                [Compare(isr_key, "MOD", node.image.revision_of(isr_key)), Compare(leader_key, "MOD", state.epoch)],
                [Put(isr_key, value)])
        except (EtcdUnavailable, EtcdError) as exc:
            log.warning("could not write the ISR of %s-%d: %s", *tp, exc)
            state.pending_isr = None
            return
        if not result.succeeded:
            state.pending_isr = None
            log.info("the ISR of %s-%d changed under this leader; looking again", *tp)
            return
        node.image.apply(isr_key, value, result.revision)
        if self.leaders.get(tp) is not state:
            return
        shrunk = state.isr - wanted
        grown = wanted - state.isr
        self.isr_shrinks += bool(shrunk)
        self.isr_expands += bool(grown)
        log.info("ISR of %s-%d: %s -> %s", *tp, sorted(state.isr), sorted(wanted))
        state.isr_written(wanted)
        plog = node._local_log(tp)
        if plog is not None:
            self._advance(tp, state, plog)

    # ================================================================ following

    def follow(self, tp: TopicPartition) -> None:
        """Fetch ``tp`` from its current leader (restarting when the leader or its epoch changes)."""
        leadership = self.node.image.leader_of(tp)
        if leadership is None:
            self.unfollow(tp)
            return
        key = (leadership.leader, leadership.epoch)
        current = self.followers.get(tp)
        if current is not None and current[0] == key:
            return
        self.unfollow(tp)
        scope = trio.CancelScope()
        self.followers[tp] = (key, scope)
        self.node._spawn(self._follow, tp, key, scope)

    def unfollow(self, tp: TopicPartition) -> None:
        current = self.followers.pop(tp, None)
        if current is not None:
            current[1].cancel()

    async def _follow(self, tp: TopicPartition, key: tuple[int, int], scope: trio.CancelScope) -> None:
        node = self.node
        leader, epoch = key
        name, index = tp
        client: ReplicaClient | None = None
        with scope:
            try:
                plog = await trio.to_thread.run_sync(self._follower_log, tp)
                if plog is None:
                    return
                plog.leader_epoch = -1
                self.restore_high_watermark(tp, plog)
                log.info("following %s-%d from node %d at epoch %d (log end %d, high watermark %s)", *tp, leader,
                         epoch, plog.next_offset, plog.replicated_high_watermark)
                while True:
                    info = node.image.nodes.get(leader)
                    endpoint = None if info is None else info.endpoint(node.inter_broker or "")
                    if endpoint is None:
                        await trio.sleep(0.1)
                        continue
                    if client is None:
                        client = ReplicaClient(endpoint[0], endpoint[1], node.node_id, node.registration_epoch)
                    client.replica_epoch = node.registration_epoch  # a new one after a lost lease
                    try:
                        with trio.fail_after(FOLLOWER_WAIT_MS / 1000 + 5):
                            fetched = await client.fetch(name, index, plog.next_offset, epoch,
                                                         last_fetched_epoch=plog.latest_epoch,
                                                         max_wait_ms=FOLLOWER_WAIT_MS,
                                                         topic_id=node.topic_id(name))
                    except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError) as exc:
                        log.debug("fetching %s-%d from node %d: %r", *tp, leader, exc)
                        await client.aclose()
                        client = None
                        await trio.sleep(0.2)
                        continue
                    try:
                        await self._on_fetched(tp, plog, fetched)
                    except (ValueError, CorruptLogError) as exc:
                        # The log was closed under the fetch (the topic went), or the leader sent
                        # what does not fit: look again from what the log holds now.
                        log.warning("following %s-%d: %s", *tp, exc)
                        await trio.sleep(0.5)
                        found = await trio.to_thread.run_sync(self._follower_log, tp)
                        if found is None or found.closed:
                            return
                        plog = found
            finally:
                if client is not None:
                    await client.aclose()

    def _follower_log(self, tp: TopicPartition) -> PartitionLog | None:
        node = self.node
        if tp[0] in COORDINATOR_TOPICS:
            plog: PartitionLog | None = node.coordinator_log(tp[0]).open_partition(tp[1])
            return plog
        assert node.catalog is not None
        held: PartitionLog | None = node.catalog.hold(*tp)
        return held

    async def _on_fetched(self, tp: TopicPartition, plog: PartitionLog, fetched: Any) -> None:
        if fetched.diverging is not None:
            d_epoch, d_end = fetched.diverging
            cut = divergence(d_epoch, d_end, plog.end_offset_for_epoch(d_epoch), plog.next_offset)
            log.warning("%s-%d diverges from its leader at epoch %d (leader's end %d): cutting the log from %d "
                        "back to %d", *tp, d_epoch, d_end, plog.next_offset, cut)
            await trio.to_thread.run_sync(plog.truncate_to, cut)
            self.truncations += 1
            self.node.broker.data.forget_producers(plog)
            return
        if fetched.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            if plog.next_offset < fetched.log_start_offset:
                await trio.to_thread.run_sync(plog.reset_to, fetched.log_start_offset)
            else:
                await trio.to_thread.run_sync(plog.truncate_to, max(fetched.high_watermark, 0))
            self.truncations += 1
            self.node.broker.data.forget_producers(plog)
            return
        if fetched.error:
            await trio.sleep(0.1)  # a leader change under way: the image brings it
            return
        if fetched.records:
            await trio.to_thread.run_sync(self._append_durably, plog, fetched.records)
        if fetched.high_watermark >= 0:
            plog.set_high_watermark(min(fetched.high_watermark, plog.next_offset))

    def _append_durably(self, plog: PartitionLog, records: bytes) -> None:
        plog.append_replicated(records)
        if self.durable:
            plog.flush()

    # ================================================================ the high watermark checkpoint

    def _saved_high_watermarks(self) -> dict[TopicPartition, int]:
        if self._saved is None:
            self._saved = self.checkpoint.read()
        return self._saved

    def restore_high_watermark(self, tp: TopicPartition, plog: PartitionLog) -> None:
        """A log opened again starts at the saved high watermark, capped at its log end
        (Kafka: ``min(checkpoint, logEndOffset)``); one that already has one keeps it."""
        saved = self._saved_high_watermarks().get(tp)
        if plog.replicated_high_watermark is None and saved is not None:
            plog.set_high_watermark(max(min(saved, plog.next_offset), plog.log_start_offset))

    def high_watermarks(self) -> dict[TopicPartition, int]:
        """What the next checkpoint holds: each led or followed partition's high watermark, and
        the saved one of every partition this node still holds a replica of but does not
        serve now (a replica waiting for a leader keeps what it had)."""
        image = self.node.image
        me = self.node.node_id
        out: dict[TopicPartition, int] = {}
        for tp, offset in self._saved_high_watermarks().items():
            assignment = image.assignments.get(tp)
            if not image.assignments or (assignment is not None and me in assignment.replicas):
                out[tp] = offset
        for tp in set(self.leaders) | set(self.followers):
            plog = self.node._local_log(tp)
            found = None if plog is None else plog.replicated_high_watermark
            if plog is not None and found is not None:
                out[tp] = min(found, plog.next_offset)
        return out

    def save_high_watermarks(self, current: dict[TopicPartition, int] | None = None) -> None:
        """Write the checkpoint (blocking file I/O: from a thread, or at shutdown)."""
        if current is None:
            current = self.high_watermarks()
        try:
            self.checkpoint.write(current)
        except OSError as exc:
            log.warning("could not write %s: %s", self.checkpoint.path, exc)
            return
        self._saved = current

    async def checkpoint_loop(self) -> None:
        """Kafka's ReplicaManager.checkpointHighWatermarks, every
        ``replica.high.watermark.checkpoint.interval.ms``. The high watermarks are read here,
        where the partitions change; only the write runs in a thread."""
        while True:
            await trio.sleep(self.checkpoint_interval_s)
            current = self.high_watermarks()
            await trio.to_thread.run_sync(self.save_high_watermarks, current)

    # ================================================================ tools

    def partition_states(self) -> dict[TopicPartition, LeaderState]:
        return dict(self.leaders)

    def metrics(self) -> list[Family]:
        under = sum(1 for tp, s in self.leaders.items() if len(s.isr) < len(s.replicas))
        below_min = sum(1 for s in self.leaders.values() if len(s.isr) < s.min_insync)
        lag = gauge("kcoord_replica_lag_records", "Records each follower is behind this leader's log end.")
        for tp, state in sorted(self.leaders.items()):
            plog = self.node._local_log(tp)
            if plog is None:
                continue
            for replica, behind in sorted(state.lagging(plog.next_offset).items()):
                lag.add(behind, topic=tp[0], partition=str(tp[1]), replica=str(replica))
        return [
            gauge("kcoord_under_replicated_partitions",
                  "Partitions this node leads whose ISR is smaller than their replica set.", under),
            gauge("kcoord_under_min_isr_partitions",
                  "Partitions this node leads whose ISR is below min.insync.replicas.", below_min),
            gauge("kcoord_partitions_followed", "Partitions this node fetches from their leader.",
                  len(self.followers)),
            counter("kcoord_isr_shrinks_total", "ISR changes that removed a replica.", self.isr_shrinks),
            counter("kcoord_isr_expands_total", "ISR changes that added a replica.", self.isr_expands),
            counter("kcoord_replica_truncations_total",
                    "Times a follower cut its log back to its leader's (diverging epoch, out of range).",
                    self.truncations),
            lag,
        ]
