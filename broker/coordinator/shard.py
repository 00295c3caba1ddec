"""The group coordinator of one broker: the façade the shell talks to (Kafka's GroupCoordinatorShard).

Every call takes a ticket (when it answers a request), ``now`` in epoch milliseconds and a
typed request, and returns ``Effects``: the records to append, one batch per group, and
replies by ticket, to be released once those records are durable. A request whose ticket
is not answered is parked and answered in the effects of a later call. Nothing here awaits,
reads a clock or touches a file.

The shard dispatches to the group managers (one per group type) and to the offset manager,
routes ``replay`` of every record to its owner, runs the load, and owns the timers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping

from broker.coordinator.config import CoordinatorConfig
from broker.coordinator.effects import Effects
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
)
from broker.coordinator.timers import Timers
from protocol.errors import ErrorCode

log = logging.getLogger("kcoord.coordinator")

E = ErrorCode


class GroupCoordinatorShard:
    """All groups and offsets of this broker, and the rules that change them."""

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        new_id: Callable[[], str] | None = None,
        topics: MetadataImage | None = None,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self.timers = Timers()
        self._image = topics
        self.offset_manager = OffsetMetadataManager(self.config, topics)
        self.group_manager = GroupMetadataManager(self.config, self.timers, new_id, self.offsets.has_group,
                                                  lambda: self._image)
        self.classic = self.group_manager.classic
        self.consumer = self.group_manager.consumer

    # ------------------------------------------------------------------ state, for the shell and tests

    @property
    def groups(self) -> dict[str, Group]:
        return self.group_manager.groups

    @property
    def offsets(self) -> OffsetStore:
        return self.offset_manager.store

    @property
    def topics(self) -> MetadataImage | None:
        """The broker's topics as the coordinator sees them (Kafka's metadata image)."""
        return self._image

    @topics.setter
    def topics(self, topics: MetadataImage | None) -> None:
        self._image = topics
        self.offset_manager.topics = topics

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
        return Effects(self.replay)

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

    def finish_load(self, now: int) -> Effects:
        """After replay: offset-only groups exist, sessions restart, oversized groups rebalance."""
        fx = self.effects()
        self.group_manager.on_loaded(self.offsets.group_ids(), now, fx)
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
        return fx

    # ------------------------------------------------------------------ timers

    def next_deadline(self) -> int | None:
        """The earliest time ``on_time`` has work to do, or None."""
        return self.timers.next_deadline()

    def on_time(self, now: int) -> Effects:
        """Fire every deadline that has passed."""
        fx = self.effects()
        self.timers.fire_due(now, fx)
        return fx

    # ------------------------------------------------------------------ classic protocol

    def join_group(self, ticket: int, now: int, request: JoinGroupRequest) -> Effects:
        fx = self.effects()
        self.group_manager.join_group(ticket, now, request, fx)
        return fx

    def sync_group(self, ticket: int, now: int, request: SyncGroupRequest) -> Effects:
        fx = self.effects()
        self.group_manager.sync_group(ticket, now, request, fx)
        return fx

    def heartbeat(self, ticket: int, now: int, request: HeartbeatRequest) -> Effects:
        fx = self.effects()
        self.group_manager.heartbeat(ticket, now, request, fx)
        return fx

    def leave_group(self, ticket: int, now: int, request: LeaveGroupRequest) -> Effects:
        fx = self.effects()
        self.group_manager.leave_group(ticket, now, request, fx)
        return fx

    # ------------------------------------------------------------------ consumer protocol (KIP-848)

    def consumer_group_heartbeat(self, ticket: int, now: int, request: ConsumerGroupHeartbeatRequest) -> Effects:
        fx = self.effects()
        self.consumer.heartbeat(ticket, now, request, fx)
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
        self.group_manager.after_offset_commit(request.group_id)
        return fx

    def offset_fetch(self, ticket: int, now: int, request: OffsetFetchRequest) -> Effects:
        fx = self.effects()
        groups = []
        for group in request.groups:
            error = self.group_manager.validate_offset_fetch(group)
            if error is not None:
                groups.append(FetchedGroup(group.group_id, (), error))
            else:
                groups.append(self.offset_manager.fetch_group(group))
        fx.reply(ticket, OffsetFetchResult(tuple(groups)))
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
            committed = self.offset_manager.commit_start_offsets(group.group_id, topic, new_partitions, now, fx)
            if committed:
                log.info("topic %s grew: committed the start offsets of new partitions %s for group %s",
                         topic, committed, group.group_id)
        return fx

