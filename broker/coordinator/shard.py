"""The group coordinator of one broker: the façade the shell talks to (Kafka's GroupCoordinatorShard).

Every call takes a ticket (when it answers a request), ``now`` in epoch milliseconds and a
typed request, and returns ``Effects``: the records to append, one batch per group, and
replies by ticket, to be released once those records are durable. A request whose ticket
is not answered is parked and answered in the effects of a later call. Nothing here awaits,
reads a clock or touches a file.

The shard dispatches to the group managers (one per group type) and to the offset manager,
routes ``replay`` of every record to its owner, runs the load, and owns the timers. It also
holds the groups' own configs and applies the offset reset policies they choose
(``reset_policies``) after every call that may assign partitions or move an offset.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping

from broker.coordinator.config import CoordinatorConfig
from broker.coordinator.effects import Effects
from broker.coordinator.group_configs import GroupConfigs
from broker.coordinator.groups import Group, GroupMetadataManager
from broker.coordinator.modern.topics import MetadataImage
from broker.coordinator.offset_store import OffsetStore
from broker.coordinator.offsets import OffsetMetadataManager
from broker.coordinator.records import CoordinatorRecord, OffsetCommitRecord, decode
from broker.coordinator.requests import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    DeleteGroupsResult,
    DescribeGroupsRequest,
    FetchedGroup,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetDeleteResult,
    OffsetFetchRequest,
    OffsetFetchResult,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from broker.coordinator.reset_policies import NEW_PARTITIONS, LogBounds, ResetPolicies
from broker.coordinator.timers import Timers
from broker.coordinator.txn_offsets import PendingTransactionalOffsets
from protocol.consumer_offsets import partition_for
from protocol.errors import ErrorCode
from protocol.records import EndTransactionMarker

log = logging.getLogger("kcoord.coordinator")

E = ErrorCode


class GroupCoordinatorShard:
    """All groups and offsets of this broker, and the rules that change them."""

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        new_id: Callable[[], str] | None = None,
        topics: MetadataImage | None = None,
        group_configs: GroupConfigs | None = None,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self.timers = Timers()
        self._image = topics
        self.offset_manager = OffsetMetadataManager(self.config, topics)
        #: What every call's effects replay through (``effects``), bound once.
        self._replays = (self.replay, self.offset_manager.replay_all, self.replay_transactional)
        pending = self.offset_manager.pending
        self.group_manager = GroupMetadataManager(
            self.config, self.timers, new_id,
            # A group stays while it has offsets, committed or pending in a transaction (Kafka).
            lambda group: self.offsets.has_group(group) or pending.has_open_transactions(group),
            lambda: self._image)
        self.classic = self.group_manager.classic
        self.consumer = self.group_manager.consumer
        #: Every group's own configs (GROUP config resources), replayed from their log by the shell.
        self.group_configs = group_configs or GroupConfigs(self.config)
        self.consumer.session_timeout_ms = self.group_configs.session_timeout_ms
        self.consumer.heartbeat_interval_ms = self.group_configs.heartbeat_interval_ms
        self.policies = ResetPolicies(self.group_configs, self.offsets,
                                      lambda topic_id: None if self._image is None else self._image.topic_name(topic_id))

    # ------------------------------------------------------------------ state, for the shell and tests

    @property
    def groups(self) -> dict[str, Group]:
        return self.group_manager.groups

    @property
    def offsets(self) -> OffsetStore:
        return self.offset_manager.store

    @property
    def pending_offsets(self) -> PendingTransactionalOffsets:
        """Offsets committed inside transactions that are still open."""
        return self.offset_manager.pending

    @property
    def topics(self) -> MetadataImage | None:
        """The broker's topics as the coordinator sees them (Kafka's metadata image)."""
        return self._image

    @topics.setter
    def topics(self, topics: MetadataImage | None) -> None:
        self._image = topics
        self.offset_manager.topics = topics

    @property
    def log_bounds(self) -> LogBounds | None:
        """Where each partition's log starts and ends, for the offset reset policies (the broker's catalogue)."""
        return self.policies.bounds

    @log_bounds.setter
    def log_bounds(self, bounds: LogBounds | None) -> None:
        self.policies.bounds = bounds

    @property
    def rebalances(self) -> int:
        return self.classic.rebalances

    @property
    def offsets_committed(self) -> int:
        return self.offset_manager.offsets_committed

    @property
    def offsets_expired(self) -> int:
        return self.offset_manager.offsets_expired

    def effects(self) -> Effects:
        """Effects whose records replay into this shard as they are written."""
        return Effects(*self._replays)

    # ------------------------------------------------------------------ replay and load

    def replay(self, record: CoordinatorRecord) -> None:
        """Apply one record; the same path for records written live and read at load."""
        if isinstance(record, OffsetCommitRecord):
            self.offset_manager.replay(record)
        else:
            self.group_manager.replay(record)

    def replay_bytes(self, key: bytes, value: bytes | None) -> None:
        """Apply one record read from the log; the last record per key wins."""
        record = decode(key, value)
        if record is None:
            log.warning("skipping a __consumer_offsets record of a type this coordinator does not keep")
            return
        self.replay(record)

    def replay_transactional(self, record: CoordinatorRecord, producer_id: int) -> None:
        """Apply one record of a transactional batch: an offset pending until its marker."""
        if isinstance(record, OffsetCommitRecord):
            self.offset_manager.replay_transactional(record, producer_id)
        else:
            log.warning("skipping a %s in a transactional batch of producer %d", type(record).__name__, producer_id)

    def replay_transactional_bytes(self, key: bytes, value: bytes | None, producer_id: int) -> None:
        record = decode(key, value)
        if record is not None:
            self.replay_transactional(record, producer_id)

    def replay_marker(self, partition: int, partitions: int, producer_id: int, marker: EndTransactionMarker) -> int:
        """A transaction marker in ``__consumer_offsets-<partition>`` (of ``partitions``).

        It settles the producer's pending offsets of the groups in that partition: visible
        on COMMIT (if newer in the log than the committed offset), dropped on ABORT.
        Returns how many offsets became visible.
        """
        return self.offset_manager.replay_marker(
            producer_id, marker.commit, lambda group: partition_for(group, partitions) == partition)

    def finish_load(self, now: int) -> Effects:
        """After replay: offset-only groups exist, sessions restart, oversized groups rebalance."""
        fx = self.effects()
        groups = list(dict.fromkeys(self.offsets.group_ids() + self.offset_manager.pending.group_ids()))
        self.group_manager.on_loaded(groups, now, fx)
        return fx

    def load_groups(self, records: Iterable[tuple[bytes, bytes | None]], now: int) -> tuple[Effects, set[str]]:
        """Take over the groups of a coordinator partition: replay its records, then finish
        loading those groups only (a cluster node that now leads the partition)."""
        loaded: set[str] = set()
        for key, value in records:
            record = decode(key, value)
            if record is None:
                continue
            self.replay(record)
            loaded.add(record.group_id)
        fx = self.effects()
        self.group_manager.on_loaded(self.offsets.group_ids(), now, fx, only=loaded)
        return fx, loaded

    def unload_groups(self, group_ids: Collection[str]) -> Effects:
        """Give up groups another node coordinates now (Kafka's onUnloaded): their parked requests
        get NOT_COORDINATOR, and they and their offsets leave memory; nothing is written."""
        fx = Effects()
        self.group_manager.unload(group_ids, fx)
        offsets = self.offsets
        for group_id in group_ids:
            for topic, partition in offsets.partitions_of(group_id):
                offsets.delete(group_id, topic, partition)
        # Pending transactional offsets go too: the next load replays them with their markers.
        unloaded = set(group_ids)
        pending = self.offset_manager.pending
        for producer_id in {p for g in unloaded for p in pending.producers_of(g)}:
            pending.complete(producer_id, False, unloaded.__contains__, lambda key: None)
        return fx

    # ------------------------------------------------------------------ timers

    def next_deadline(self) -> int | None:
        """The earliest time ``on_time`` has work to do, or None."""
        return self.timers.next_deadline()

    def on_time(self, now: int) -> Effects:
        """Fire every deadline that has passed."""
        fx = self.effects()
        self.timers.fire_due(now, fx)
        self._commit_initial_offsets(fx, now)
        return fx

    # ------------------------------------------------------------------ classic protocol

    def join_group(self, ticket: int, now: int, request: JoinGroupRequest) -> Effects:
        fx = self.effects()
        self.group_manager.join_group(ticket, now, request, fx)
        self._commit_initial_offsets(fx, now)
        return fx

    def sync_group(self, ticket: int, now: int, request: SyncGroupRequest) -> Effects:
        fx = self.effects()
        self.group_manager.sync_group(ticket, now, request, fx)
        self._commit_initial_offsets(fx, now)
        return fx

    def heartbeat(self, ticket: int, now: int, request: HeartbeatRequest) -> Effects:
        fx = self.effects()
        self.group_manager.heartbeat(ticket, now, request, fx)
        self._commit_initial_offsets(fx, now)
        return fx

    def leave_group(self, ticket: int, now: int, request: LeaveGroupRequest) -> Effects:
        fx = self.effects()
        self.group_manager.leave_group(ticket, now, request, fx)
        self._commit_initial_offsets(fx, now)
        return fx

    # ------------------------------------------------------------------ consumer protocol (KIP-848)

    def consumer_group_heartbeat(self, ticket: int, now: int, request: ConsumerGroupHeartbeatRequest) -> Effects:
        fx = self.effects()
        self.consumer.heartbeat(ticket, now, request, fx)
        self._commit_initial_offsets(fx, now)
        return fx

    def consumer_group_describe(self, ticket: int, now: int, request: ConsumerGroupDescribeRequest) -> Effects:
        fx = self.effects()
        fx.reply(ticket, self.group_manager.consumer_describe(request))
        return fx

    # ------------------------------------------------------------------ offsets

    def offset_commit(self, ticket: int, now: int, request: OffsetCommitRequest) -> Effects:
        fx = self.effects()
        error = self.group_manager.validate_offset_commit(request, now)
        fx.reply(ticket, self.offset_manager.commit(request, error, now, fx))
        if not fx.records:  # a group that now has offsets is not unused
            self.group_manager.after_offset_commit(request.group_id)
        if error is None and self.group_configs.out_of_range(request.group_id) == "nearest":
            committed = [(t.name, p.partition) for t in request.topics for p in t.partitions]
            self._write_policy_commits(request.group_id, self.policies.out_of_range(request.group_id, committed, now),
                                       "a commit outside the log", fx)
        return fx

    def txn_offset_commit(self, ticket: int, now: int, request: TxnOffsetCommitRequest) -> Effects:
        """Kafka's commitTransactionalOffset: offsets pending in the producer's transaction.

        The transaction coordinator has checked the producer (its epoch, and that the
        group's partition is in its open transaction) before this runs.
        """
        fx = self.effects()
        error = self.group_manager.validate_offset_commit(request.as_offset_commit(), now)
        fx.reply(ticket, self.offset_manager.commit_transactional(request, error, now, fx))
        return fx

    def offset_fetch(self, ticket: int, now: int, request: OffsetFetchRequest) -> Effects:
        fx = self.effects()
        groups = []
        validate = self.group_manager.validate_offset_fetch
        fetch_group = self.offset_manager.fetch_group
        for group in request.groups:
            error = validate(group)
            if error is not None:
                groups.append(FetchedGroup(group.group_id, (), error))
            else:
                groups.append(fetch_group(group, request.require_stable))
        fx.reply(ticket, tuple.__new__(OffsetFetchResult, (tuple(groups),)))
        return fx

    def offset_delete(self, ticket: int, now: int, request: OffsetDeleteRequest) -> Effects:
        fx = self.effects()
        error, subscribed = self.group_manager.validate_offset_delete(request.group_id)
        if error is not None:
            fx.reply(ticket, OffsetDeleteResult(error))
        else:
            fx.reply(ticket, self.offset_manager.delete(request, subscribed, fx))
        return fx

    def expire_offsets(self, now: int) -> Effects:
        """Tombstone expired offsets; Empty groups left with none become Dead and go (KIP-211)."""
        fx = self.effects()
        expired = 0
        for group in list(self.groups.values()):
            condition = group.offset_expiration()
            if condition is not None:
                expired += self.offset_manager.expire(group.group_id, *condition, now, fx)
            self.group_manager.maybe_delete_expired(group, now, fx)
        if expired:
            log.info("offset expiry wrote %d tombstones", expired)
        return fx

    # ------------------------------------------------------------------ admin

    def describe_groups(self, ticket: int, now: int, request: DescribeGroupsRequest) -> Effects:
        fx = self.effects()
        fx.reply(ticket, self.group_manager.describe(request))
        return fx

    def list_groups(self, ticket: int, now: int, request: ListGroupsRequest) -> Effects:
        fx = self.effects()
        fx.reply(ticket, self.group_manager.list_groups(request))
        return fx

    def delete_groups(self, ticket: int, now: int, request: DeleteGroupsRequest) -> Effects:
        """Kafka's GroupCoordinatorShard.deleteGroups: offsets first, then the group's tombstone."""
        fx = self.effects()
        results = []
        for group_id in request.group_ids:
            error = self.group_manager.validate_delete_group(group_id)
            if error is None:
                self.offset_manager.delete_all(group_id, fx)
                self.group_manager.delete_group(group_id, now, fx)
            results.append((group_id, error or E.NONE))
        fx.reply(ticket, DeleteGroupsResult(tuple(results)))
        return fx

    # ------------------------------------------------------------------ topic changes (listener hooks)

    def on_topic_deleted(self, topic: str, now: int) -> Effects:
        """A topic was deleted: every group's committed offsets for it are tombstoned."""
        fx = self.effects()
        self.offset_manager.on_topic_deleted(topic, fx)
        return fx

    def on_partitions_added(self, topic: str, new_partitions: Mapping[int, int], now: int) -> Effects:
        """CreatePartitions grew ``topic``; ``new_partitions`` maps each new index to its log start offset.

        With ``group.new.partitions.start=earliest``, every group with live members whose
        consumer-protocol subscription names ``topic`` gets the new partitions' start offsets
        committed, as ordinary offset commit records. Without this a consumer with
        auto.offset.reset=latest that learns of the partitions only at its next metadata
        refresh and rebalance starts them at their end then, skipping whatever producers
        (who may learn sooner) wrote in between. An offset already committed is kept.

        Only groups that are consuming are covered: an Empty group has no subscription to go
        by, and where a group starts when it next comes up is its clients' reset policy.
        ``latest`` commits nothing: a new partition is empty, so its end offset equals its
        start offset and committing it would be ``earliest`` under another name; leaving
        the partitions uncommitted is what gives the client's own (latest) reset, as on Kafka.
        """
        fx = self.effects()
        if self.config.new_partitions_start != "earliest" or not new_partitions:
            return fx
        for group in self.group_manager.consuming(topic):
            committed = self.offset_manager.commit_start_offsets(group.group_id, topic, new_partitions, now, fx,
                                                                 NEW_PARTITIONS)
            if committed:
                self.policies.counted(NEW_PARTITIONS, len(committed))
                log.info("topic %s grew: committed the start offsets of new partitions %s for group %s",
                         topic, committed, group.group_id)
        return fx


    # ------------------------------------------------------------------ group configs and reset policies

    def replay_group_config(self, group_id: str, configs: Mapping[str, str] | None) -> None:
        """Apply one record of the group config log (the shell replays it before ``finish_load``)."""
        self.group_configs.replay(group_id, configs)

    def on_group_config_changed(self, group_id: str, now: int) -> Effects:
        """A group's configs changed: with ``nearest`` now in force, its offsets out of the log move at once.

        The consumer session timeout and heartbeat interval are read on every heartbeat, so
        they apply from the group's next heartbeat on.
        """
        fx = self.effects()
        for gid, records in self.policies.sweep(now, [group_id]).items():
            self._write_policy_commits(gid, records, "its policy changed", fx)
        return fx

    def before_log_start_moves(self, topic: str, partition: int, new_start: int, now: int) -> Effects:
        """Retention or DeleteRecords will move ``topic-partition``'s log start to ``new_start``.

        Groups with ``nearest`` whose committed offset lies below it get ``new_start``
        committed (docs/coordinator-rules.md#offset-reset-policies); the shell makes these
        records durable before the new log start is visible to anyone.
        """
        fx = self.effects()
        by_group: dict[str, list[OffsetCommitRecord]] = {}
        for record in self.policies.before_log_start_moves(topic, partition, new_start, now):
            by_group.setdefault(record.group_id, []).append(record)
        for group_id, records in by_group.items():
            self._write_policy_commits(group_id, records, f"the log start of {topic}-{partition} moves to {new_start}",
                                       fx)
        return fx

    def enforce_offset_policies(self, now: int) -> Effects:
        """After load, once the log bounds are known: ``nearest`` for every committed offset out of its log.

        Catches a log that recovery truncated below a commit, a topic recreated under a group's
        offsets, and a crash between a log start moving and its commits becoming durable.
        """
        fx = self.effects()
        for group_id, records in self.policies.sweep(now).items():
            self._write_policy_commits(group_id, records, "its offsets were out of the log at start-up", fx)
        return fx

    def _commit_initial_offsets(self, fx: Effects, now: int) -> None:
        """``kcoord.initial.offset``: partitions this call assigned, with no offset, get one before any reply."""
        if not fx.records or not self.group_configs.any_initial_policy:
            return
        assigned = self.policies.assigned_partitions(r for records in list(fx.records.values()) for r in records)
        for group_id, partitions in assigned.items():
            self._write_policy_commits(group_id, self.policies.initial(group_id, partitions, now),
                                       "it was assigned partitions it had no offset for", fx)

    def _write_policy_commits(self, group_id: str, records: list[OffsetCommitRecord], why: str,
                              fx: Effects) -> None:
        for record in records:
            fx.write(group_id, record)
        if records:
            log.info("group %s: %s, so kcoord committed %s", group_id, why, ", ".join(
                f"{r.topic}-{r.partition}={r.value.offset if r.value else None} "
                f"({r.value.metadata if r.value else ''})" for r in records))
