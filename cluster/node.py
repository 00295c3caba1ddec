"""A kcoord process as a cluster node: the trio shell over ``cluster``'s sans-IO core.

The node registers itself in etcd under a lease and keeps the lease alive; keeps an image
of the cluster's keys (one read, then a watch); takes part in the controller election;
and, whenever the image changes, compares what it should be for each partition
(``cluster.roles``) with what it does, and changes course: claims leadership, loads or
unloads the groups of a coordinator partition, copies a log from a leader, hands a
partition over, or drops data it no longer holds.

Requests reach the services as on a single node, through the router's routing step
(``cluster.routing``), which asks ``Serving``: a partition is served only while this node
leads it, has loaded it, is not handing it over, and its lease is valid by its own clock.

The broker's composition root (``broker.app``) calls the hooks ``open_catalog``,
``attach``, ``register``, ``run``, ``close`` and ``collectors``; nothing in ``broker/``
imports this package.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio

from broker.config import Config
from broker.context import BrokerContext
from broker.metrics import Collector, Family, counter, gauge
from broker.placement import Placement
from broker.router import Router
from broker.slots import Slot
from broker.topics import TopicCatalog
from cluster import assignment as rules
from cluster.catalog import ClusterCatalog, Intent
from cluster.etcd import Compare, Delete, DeletePrefix, EtcdClient, EtcdError, EtcdUnavailable, Put
from cluster.fencing import LeaseClock
from cluster.handover import Handover, Step
from cluster.model import (
    COORDINATOR_TOPIC,
    COORDINATOR_TOPICS,
    TRANSACTION_TOPIC,
    ClusterImage,
    Keys,
    Leadership,
    NodeInfo,
    TopicInfo,
    TopicPartition,
    encode_isr,
)
from cluster.replica import ReplicaClient
from cluster.replicator import Replicator
from cluster.roles import Role, handover_target, roles, should_hand_back
from cluster.routing import decide
from cluster.txn_markers import MarkerSender
from cluster.view import ClusterPlacement, ListenerDirectory, Serving
from protocol.api_keys import ApiKey
from protocol.codec import Request, encode_response
from protocol.consumer_offsets import partition_for
from protocol.errors import ErrorCode
from protocol.messages.fetch import fetching_replica
from protocol.records import EndTransactionMarker
from storage.coordinator_log import CoordinatorLog
from storage.fs import REAL_FS, FileSystem
from storage.layout import (
    REPLICA_COPIES_DIR,
    parse_partition_dir,
    partition_dir,
    replica_copy_dir,
)
from storage.partition import PartitionLog
from storage.replica_copy import CopySource, LogCopy

log = logging.getLogger("kcoord.cluster")

#: Producer ids are unique in the cluster: each node hands out ``local id * stride + node id``.
PRODUCER_ID_STRIDE = 1 << 20
#: How often the node looks again without a change (handover timeouts, lease expiry).
RECHECK_S = 0.25
#: Etcd transactions are kept well below etcd's --max-txn-ops (128).
TXN_BATCH = 50
#: How long CreateTopics waits for the new partitions' leaders before answering anyway.
CREATE_WAIT_S = 5.0


class ClusterNode:
    """One node of a kcoord cluster."""

    def __init__(self, config: Config, data_dir: Path, fs: FileSystem = REAL_FS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.data_dir = Path(data_dir)
        self.fs = fs
        self.clock = clock
        self.node_id: int = config["node.id"]
        self.keys = Keys(config["cluster.name"])
        self.endpoints = [e.strip() for e in config["cluster.etcd.endpoints"].split(",") if e.strip()]
        self.etcd = EtcdClient(self.endpoints)
        self.image = ClusterImage(self.keys)
        self.lease = LeaseClock()
        self.ttl_s = max(2, math.ceil(config["broker.session.timeout.ms"] / 1000))
        self.heartbeat_s = config["broker.heartbeat.interval.ms"] / 1000
        self.handover_timeout_s = config["cluster.handover.timeout.ms"] / 1000
        self.rebalance = config["cluster.rebalance.enable"]
        self.rebalance_delay_s = config["cluster.rebalance.delay.ms"] / 1000
        self.max_moves: int = config["cluster.rebalance.max.moves"]
        self.offsets_partitions: int = config["offsets.topic.num.partitions"]
        self.rack: str | None = config["broker.rack"] or None
        self.inter_broker: str | None = config["inter.broker.listener.name"] or None
        self.unclean_default: bool = config["unclean.leader.election.enable"]
        self.hand_back: bool = config["auto.leader.rebalance.enable"]
        self.offsets_replication_factor: int = config["offsets.topic.replication.factor"]
        self.transaction_partitions: int = config["transaction.state.log.num.partitions"]
        self.transaction_replication_factor: int = config["transaction.state.log.replication.factor"]
        self.serving = Serving(self.lease, clock=clock)
        self.replicator = Replicator(self)
        self.placement: Placement = ClusterPlacement(self.image, self.offsets_partitions, self.transaction_partitions,
                                                     self._want_transaction_topic)
        self._creating_transaction_topic = False
        self.markers = MarkerSender(self.node_id, self.image, lambda: self.broker.transactions, self._inter_broker)
        self.listeners: dict[str, tuple[str, int]] = {}
        self.handovers: dict[TopicPartition, Handover] = {}
        self.copies: dict[TopicPartition, trio.CancelScope] = {}
        self.busy: set[TopicPartition] = set()  # a claim or a load is under way
        self.staged: set[TopicPartition] = set()  # copies on disk
        self.catalog: ClusterCatalog | None = None
        self.broker: Any = None
        self._nursery: trio.Nursery | None = None
        #: The revision up to which etcd has shown this node every change (a full read, then the watch).
        self._seen = 0
        self._changed = trio.Event()
        self._controller_changed = trio.Event()
        self._synced_version = -1
        self._swept = False
        self._live_since = (frozenset[int](), 0.0)
        #: This node's broker epoch: the etcd revision of its current registration (-1: none yet).
        self.registration_epoch = -1
        self._topic_ids: tuple[int, dict[uuid.UUID, str]] = (-1, {})
        # Metrics, read at scrape time.
        self.moves_in = 0
        self.moves_out = 0
        self.lease_losses = 0
        self.claims = 0
        self.handovers_aborted = 0

    # ================================================================ hooks of the composition root

    def open_catalog(self, data_dir: Path, config: Config, fs: FileSystem) -> TopicCatalog:
        self.catalog = ClusterCatalog(data_dir, config, fs)
        self.catalog.live_nodes = lambda: max(1, len(self.image.nodes))
        return self.catalog

    def attach(self, broker: Any) -> None:
        """The services are built: keep them (the group service, the data service), and make
        their writes wait for the ISR of replicated partitions."""
        self.broker = broker
        broker.data.replication = self.replicator
        broker.groups.replication = self.replicator
        transactions = broker.transactions
        # Producer ids are unique in the cluster: a transactional id's is this node's own too.
        allocate = transactions.coordinator.allocate_producer_id
        transactions.coordinator.allocate_producer_id = lambda: allocate() * PRODUCER_ID_STRIDE + self.node_id
        transactions.replication = self.replicator
        transactions.channel = self.markers
        transactions.leads = lambda topic, partition: self.serving.serves((topic, partition))
        transactions.on_lost_write = lambda partition: self._reload((TRANSACTION_TOPIC, partition))

    def register(self, router: Router, ctx: BrokerContext) -> None:
        """Route this listener's requests through the cluster, and add the cluster's handlers."""
        self.listeners[ctx.listener] = (ctx.host, ctx.port)
        directory = ListenerDirectory(self.image, self.serving, self.offsets_partitions, ctx.listener,
                                      self.transaction_partitions)
        router.routing = lambda request: decide(request.header.api_key, request.header.api_version,
                                                request.body, directory)
        data_fetch = router.handlers[ApiKey.FETCH]
        router.register(ApiKey.FETCH, lambda r, peer: self._replica_fetch(r) if fetching_replica(r.body) >= 0
                        else data_fetch(r, peer))
        router.topic_name = self._topic_name
        init_producer_id = router.handlers[ApiKey.INIT_PRODUCER_ID]
        router.register(ApiKey.INIT_PRODUCER_ID, lambda r, peer: self._cluster_producer_id(r, init_producer_id(r, peer)))
        from broker.handlers import topics as topic_handlers

        catalog = self.catalog
        assert catalog is not None
        # Catalogue changes become etcd writes; the coordinator hears of them on the watch.
        router.register(ApiKey.DELETE_TOPICS, lambda r, _: topic_handlers.handle_delete_topics(ctx, catalog, r))
        router.register(ApiKey.CREATE_PARTITIONS,
                        lambda r, _: topic_handlers.handle_create_partitions(ctx, catalog, r))
        for api in (ApiKey.METADATA, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS,
                    ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
            router.register(api, self._committing(router.handlers[api]))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Join the cluster (waiting for etcd as long as it takes), then keep the node's part."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._find_staged()
            await self._join()
            nursery.start_soon(self._keep_alive)
            nursery.start_soon(self._watch)
            nursery.start_soon(self._reconcile_loop)
            nursery.start_soon(self._controller_loop)
            nursery.start_soon(self.replicator.run)
            nursery.start_soon(self.replicator.checkpoint_loop)
            log.info("node %d joined cluster %s (etcd %s)", self.node_id, self.config["cluster.name"],
                     ",".join(self.endpoints))
            task_status.started()

    async def close(self) -> None:
        """Leave: end the lease, so leadership goes at once rather than when it would expire."""
        if self._nursery is not None:
            # Stop the node's tasks first: the lease renewal would otherwise find the lease
            # revoked below and register again, with the client closed below.
            self._nursery.cancel_scope.cancel()
        await self.markers.aclose()
        # A clean stop saves the high watermarks, so the next start serves up to them at once.
        self.replicator.save_high_watermarks()
        lease_id = self.lease.lease_id
        self.lease.lost()
        if lease_id:
            with trio.move_on_after(2), trio.CancelScope(shield=True):
                try:
                    await self.etcd.revoke(lease_id)
                except EtcdUnavailable:
                    pass
        with trio.CancelScope(shield=True):
            await self.etcd.aclose()

    def collectors(self) -> list[Collector]:
        return [self.metrics, self.replicator.metrics]

    def metrics(self) -> list[Family]:
        now = self.clock()
        return [
            gauge("kcoord_cluster_lease_valid", "1 while this node's etcd lease is valid by its own clock.",
                  int(self.lease.valid(now))),
            gauge("kcoord_cluster_lease_remaining_seconds", "Seconds this node may still rely on its lease.",
                  self.lease.remaining(now)),
            gauge("kcoord_cluster_controller", "1 on the elected controller.", int(self.image.controller == self.node_id)),
            gauge("kcoord_cluster_live_nodes", "Nodes registered in etcd.", len(self.image.nodes)),
            gauge("kcoord_cluster_partitions_led", "Partitions (__consumer_offsets included) this node leads.",
                  len(self.serving.led)),
            gauge("kcoord_cluster_partitions_copying", "Partitions this node copies from their leader.",
                  len(self.copies)),
            counter("kcoord_cluster_moves_in_total", "Partitions this node took over after copying them.",
                    self.moves_in),
            counter("kcoord_cluster_moves_out_total", "Partitions this node handed over.", self.moves_out),
            counter("kcoord_cluster_handovers_aborted_total", "Handovers that timed out or failed.",
                    self.handovers_aborted),
            counter("kcoord_cluster_lease_losses_total", "Times etcd no longer had this node's lease.",
                    self.lease_losses),
            counter("kcoord_cluster_leadership_claims_total", "Partitions whose leadership this node claimed.",
                    self.claims),
        ]

    # ================================================================ membership

    def _node_info(self) -> NodeInfo:
        return NodeInfo(self.node_id, dict(self.listeners), self.rack)

    async def _join(self) -> None:
        warned = False
        while True:
            try:
                await self._register()
                await self._load_image()
                return
            except EtcdUnavailable as exc:
                if not warned:
                    log.warning("waiting for etcd (%s): %s", ",".join(self.endpoints), exc)
                    warned = True
                await trio.sleep(0.5)

    async def _register(self) -> None:
        """A new lease, and this node's key under it; waits while another process holds the id."""
        key = self.keys.node(self.node_id)
        waited = False
        while True:
            sent = self.clock()
            lease_id, ttl = await self.etcd.grant(self.ttl_s)
            result = await self.etcd.txn([Compare(key, "CREATE", 0)], [Put(key, self._node_info().encode(), lease_id)])
            if result.succeeded:
                self.lease.granted(lease_id, ttl, sent)
                self.registration_epoch = result.revision
                break
            await self.etcd.revoke(lease_id)
            if not waited:
                log.warning("node id %d is registered by another process (or this one's previous run); "
                            "waiting for its lease to end", self.node_id)
                waited = True
            await trio.sleep(0.5)
        await self.etcd.txn([Compare(self.keys.meta, "CREATE", 0)],
                            [Put(self.keys.meta, json.dumps({"cluster_id": self.config["cluster.id"]}).encode())])
        log.info("node %d registered (lease %x, %ds)", self.node_id, self.lease.lease_id, ttl)

    async def _load_image(self) -> None:
        snapshot = await self.etcd.get_prefix(self.keys.prefix)
        self.image.load(snapshot.revision, [(kv.key, kv.value, kv.mod_revision, kv.lease) for kv in snapshot.kvs])
        self._seen = snapshot.revision
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._controller_changed.set()

    async def _keep_alive(self) -> None:
        failing = False
        while True:
            await trio.sleep(self.heartbeat_s if not failing else min(self.heartbeat_s, 0.5))
            sent = self.clock()
            try:
                ttl = await self.etcd.keep_alive(self.lease.lease_id) if self.lease.lease_id else 0
            except EtcdUnavailable as exc:
                if not failing:
                    log.warning("etcd does not answer (%s); this node serves what it leads for %.1fs more",
                                exc, self.lease.remaining(self.clock()))
                failing = True
                self._changed.set()
                continue
            if failing:
                log.info("etcd answers again")
                failing = False
            if ttl > 0:
                self.lease.renewed(ttl, sent)
                continue
            log.warning("etcd no longer has this node's lease: it leads nothing until it registers again")
            self.lease_losses += 1
            self.lease.lost()
            self._give_up_leadership()
            try:
                await self._register()
                await self._load_image()
            except EtcdUnavailable:
                failing = True

    async def _watch(self) -> None:
        while True:
            try:
                # From what etcd itself has shown this node: the image's revision also moves with
                # the node's own writes, and starting past those would skip others' changes.
                async for events in self.etcd.watch(self.keys.prefix, self._seen + 1):
                    for event in events:
                        self.image.apply(event.key, event.value, event.mod_revision, event.lease)
                        self._seen = max(self._seen, event.mod_revision)
                    self._wake()
            except (EtcdUnavailable, EtcdError) as exc:
                log.debug("etcd watch ended: %s", exc)
            await trio.sleep(0.2)
            try:
                await self._load_image()
            except EtcdUnavailable:
                pass

    # ================================================================ what this node does for each partition

    async def _reconcile_loop(self) -> None:
        while True:
            self._changed = trio.Event()
            try:
                self._reconcile()
            except Exception:
                log.exception("cluster reconciliation failed; retrying")
            with trio.move_on_after(RECHECK_S):
                await self._changed.wait()

    def _reconcile(self) -> None:
        catalog = self.catalog
        assert catalog is not None
        if self._synced_version != self.image.version:
            self._synced_version = self.image.version
            catalog.sync(self.image.topics)
        if not self._swept and self.image.topics:
            self._sweep()
        now = self.clock()
        lease_ok = self.lease.valid(now)
        wanted = roles(self.image, self.node_id, self.unclean_default)
        for tp in (set(wanted) | set(self.serving.led) | set(self.copies) | self.staged | self._held()
                   | set(self.replicator.leaders) | set(self.replicator.followers)):
            role = wanted.get(tp, Role.NONE)
            if role is not Role.COPY:
                self._stop_copy(tp)
            if role is not Role.FOLLOW:
                self.replicator.unfollow(tp)
            if role is Role.LEAD:
                if lease_ok:
                    self._lead(tp)
                    if (self.hand_back and tp in self.serving.led and tp not in self.busy
                            and tp not in self.handovers and should_hand_back(self.image, self.node_id, tp)):
                        self.busy.add(tp)
                        self._spawn(self._hand_back, tp)
                continue
            self._unlead(tp)
            if role is Role.CLAIM and lease_ok and tp not in self.busy:
                self.busy.add(tp)
                self._spawn(self._claim, tp)
            elif role is Role.COPY and tp not in self.copies:
                self._start_copy(tp)
            elif role is Role.FOLLOW and tp not in self.busy:
                self.replicator.follow(tp)
            elif role is Role.NONE and tp not in self.busy:
                self._drop(tp)
        for tp, handover in list(self.handovers.items()):
            if handover.expired(now, self.handover_timeout_s):
                log.warning("handover of %s-%d to node %d timed out; serving it again", *tp, handover.target)
                self.handovers_aborted += 1
                self._thaw(tp)

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(fn, *args)

    def _held(self) -> set[TopicPartition]:
        """Partitions whose log this node has open."""
        held: set[TopicPartition] = set()
        for name in COORDINATOR_TOPICS:
            coordinator_log = self.coordinator_log(name)
            for p in range(coordinator_log.partitions):
                if coordinator_log.partition_log(p) is not None:
                    held.add((name, p))
        assert self.catalog is not None
        for name, topic in self.catalog.topics.items():
            held.update((name, i) for i, plog in enumerate(topic.partitions) if plog is not None)
        return held

    def _sweep(self) -> None:
        """Once, with the first image: partition directories of known topics this node does not hold go."""
        self._swept = True
        for name in self.fs.listdir(self.data_dir):
            parsed = parse_partition_dir(name)
            if parsed is None or parsed[0] not in self.image.topics or parsed[0] in COORDINATOR_TOPICS:
                continue
            tp = (parsed[0], parsed[1])
            if tp not in roles(self.image, self.node_id):
                log.info("deleting %s: this node does not hold that partition", name)
                self.fs.remove_tree(self.data_dir / name)

    def _find_staged(self) -> None:
        copies = self.data_dir / REPLICA_COPIES_DIR
        if self.fs.exists(copies):
            for name in self.fs.listdir(copies):
                parsed = parse_partition_dir(name)
                if parsed is not None:
                    self.staged.add((parsed[0], parsed[1]))

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        """A topic's name by its id (Fetch v13+), ``__consumer_offsets`` included."""
        version, names = self._topic_ids
        if version != self.image.version:
            names = {info.topic_id: name for name, info in self.image.topics.items()}
            self._topic_ids = (self.image.version, names)
        return names.get(topic_id)

    def topic_id(self, name: str) -> uuid.UUID | None:
        info = self.image.topics.get(name)
        return None if info is None else info.topic_id

    def coordinator_log(self, name: str) -> CoordinatorLog:
        """The log of a coordinator topic (``__consumer_offsets``, ``__transaction_state``)."""
        found: CoordinatorLog = self.broker.groups.log if name == COORDINATOR_TOPIC else self.broker.transactions.log
        return found

    def _inter_broker(self, node_id: int) -> tuple[str, int] | None:
        node = self.image.nodes.get(node_id)
        return None if node is None else node.endpoint(self.inter_broker or "")

    def _local_log(self, tp: TopicPartition) -> PartitionLog | None:
        if tp[0] in COORDINATOR_TOPICS:
            plog: PartitionLog | None = self.coordinator_log(tp[0]).partition_log(tp[1])
            return plog
        assert self.catalog is not None
        return self.catalog.partition(*tp)

    # ---------------------------------------------------------------- leading

    def _lead(self, tp: TopicPartition) -> None:
        if tp in self.serving.led:
            plog = self._local_log(tp)
            if plog is not None:  # the replicas may have grown
                self.replicator.lead(tp, self.serving.led[tp], plog, serving_before=True)
            target = handover_target(self.image, self.node_id, tp)
            handover = self.handovers.get(tp)
            if target is None and handover is not None:
                self._thaw(tp)
                self.handovers.pop(tp, None)
            elif target is not None and (handover is None or handover.target != target):
                self.handovers[tp] = Handover(target)
            return
        if tp in self.busy:
            return
        leadership = self.image.leaders[tp]
        if tp[0] == COORDINATOR_TOPIC:
            self.busy.add(tp)
            self._spawn(self._load_groups, tp, leadership.epoch)
            return
        if tp[0] == TRANSACTION_TOPIC:
            self.busy.add(tp)
            self._spawn(self._load_transactions, tp, leadership.epoch)
            return
        assert self.catalog is not None
        plog = self.catalog.hold(*tp)
        if plog is None:
            return  # the topic has not reached the catalogue yet
        self.replicator.lead(tp, leadership.epoch, plog, serving_before=False)
        self.serving.led[tp] = leadership.epoch
        log.info("leading %s-%d at epoch %d", *tp, leadership.epoch)

    def _still_leading(self, tp: TopicPartition, epoch: int) -> bool:
        """Whether a coordinator partition this node began to load at ``epoch`` may be served now.

        Loading reads the log in a thread; meanwhile the leadership may have moved away and back
        (a new epoch) or the partition may be served already. A load at a stale epoch is dropped:
        the next pass of ``_lead`` loads it again at the current one."""
        leadership = self.image.leaders.get(tp)
        return (leadership is not None and leadership.leader == self.node_id and leadership.epoch == epoch
                and tp not in self.serving.led)

    async def _load_groups(self, tp: TopicPartition, epoch: int) -> None:
        """Load the groups of a coordinator partition this node leads (records read in a thread)."""
        try:
            groups = self.broker.groups
            partition = tp[1]
            plog = groups.log.open_partition(partition)
            self.replicator.lead(tp, epoch, plog, serving_before=False)
            # Groups are built from records the ISR has, so nothing a client learns from them
            # can be lost with this leader (the log up to its end when it began to lead).
            if not await self.replicator.caught_up(tp, plog.next_offset):
                return
            # Offsets committed inside transactions stay pending until their marker, as at a
            # single node's start-up: the log's transactional batches and markers come in order.
            events = await trio.to_thread.run_sync(_partition_events, groups.log, partition)
            if not self._still_leading(tp, epoch):
                return
            coordinator = groups.coordinator
            records = _replayed(events, lambda key, value, producer_id: coordinator.replay_transactional_bytes(
                key, value, producer_id), lambda producer_id, marker: coordinator.replay_marker(
                partition, groups.log.partitions, producer_id, marker))
            fx, loaded = groups.coordinator.load_groups(records, groups.clock())
            groups.apply(fx)
            self.serving.led[tp] = epoch
            log.info("leading %s-%d at epoch %d: %d groups loaded from %d records", *tp, epoch, len(loaded),
                     len(events))
        finally:
            self.busy.discard(tp)
            self._changed.set()

    async def _load_transactions(self, tp: TopicPartition, epoch: int) -> None:
        """Coordinate the transactional ids of a ``__transaction_state`` partition this node leads
        (Kafka's loadTransactionsForTxnTopicPartition), at its leader epoch: the coordinator
        epoch its markers carry, so a deposed coordinator's markers are fenced."""
        try:
            transactions = self.broker.transactions
            partition = tp[1]
            plog = transactions.log.open_partition(partition)
            self.replicator.lead(tp, epoch, plog, serving_before=False)
            if not await self.replicator.caught_up(tp, plog.next_offset):
                return
            records = await trio.to_thread.run_sync(
                lambda: [(key, value) for key, value, _ in transactions.log.replay_partition(partition)])
            if not self._still_leading(tp, epoch):
                return
            self.serving.led[tp] = epoch
            count = transactions.load_partition(partition, epoch, records)
            log.info("leading %s-%d at epoch %d: %d transactional ids loaded from %d records", *tp, epoch, count,
                     len(records))
        finally:
            self.busy.discard(tp)
            self._changed.set()

    def _unload(self, tp: TopicPartition) -> None:
        if tp[0] == COORDINATOR_TOPIC:
            self._unload_groups(tp)
        elif tp[0] == TRANSACTION_TOPIC:
            self.broker.transactions.unload_partition(tp[1])

    def _reload(self, tp: TopicPartition) -> None:
        """A coordinator partition whose memory may be ahead of what its ISR took: unload it;
        the next pass loads it again from its log if this node still leads it."""
        if tp in self.serving.led and tp not in self.serving.frozen:
            del self.serving.led[tp]
            self._unload(tp)
            log.warning("reloading %s-%d: its in-sync replicas did not take a write", *tp)
            self._changed.set()

    def _unload_groups(self, tp: TopicPartition) -> None:
        groups = self.broker.groups
        coordinator = groups.coordinator
        mine = [g for g in set(coordinator.groups) | set(coordinator.offsets.group_ids())
                if partition_for(g, self.offsets_partitions) == tp[1]]
        groups.apply(coordinator.unload_groups(mine))

    def _unlead(self, tp: TopicPartition) -> None:
        """Stop serving a partition (leadership went elsewhere, or lapsed)."""
        self.replicator.stop_leading(tp)
        if tp not in self.serving.led:
            return
        del self.serving.led[tp]
        was_frozen = tp in self.serving.frozen
        self.serving.frozen.discard(tp)
        self.handovers.pop(tp, None)
        if tp[0] in COORDINATOR_TOPICS and not was_frozen:
            self._unload(tp)
        log.info("no longer leading %s-%d", *tp)

    def _give_up_leadership(self) -> None:
        for tp in list(self.serving.led) + list(self.replicator.leaders):
            self._unlead(tp)

    # ---------------------------------------------------------------- claiming

    async def _claim(self, tp: TopicPartition) -> None:
        """Take the leadership of a partition this node should lead: its log first, then the key."""
        try:
            await trio.to_thread.run_sync(self._prepare_log, tp)
            if self._role(tp) is not Role.CLAIM or not self.lease.valid(self.clock()):
                return
            assignment_key = self.keys.assignment(*tp)
            leader_key = self.keys.leader(*tp)
            lease_id = self.lease.lease_id
            value = Leadership.encode(self.node_id)
            result = await self.etcd.txn(
                [Compare(leader_key, "CREATE", 0), Compare(assignment_key, "MOD", self.image.revision_of(assignment_key))],
                [Put(leader_key, value, lease_id)])
            if result.succeeded:
                self.image.apply(leader_key, value, result.revision, lease_id)
                self.claims += 1
                log.info("claimed the leadership of %s-%d at epoch %d", *tp, result.revision)
        except (EtcdUnavailable, EtcdError) as exc:
            log.warning("could not claim %s-%d: %s", *tp, exc)
            await trio.sleep(0.2)
        finally:
            self.busy.discard(tp)
            self._changed.set()

    async def _hand_back(self, tp: TopicPartition) -> None:
        """Give the leadership up to the preferred replica, now in sync: delete the leader key
        (compare-and-set on this leader's epoch); that replica is the one elected next."""
        try:
            leadership = self.image.leaders.get(tp)
            if leadership is None or leadership.leader != self.node_id:
                return
            key = self.keys.leader(*tp)
            result = await self.etcd.txn([Compare(key, "MOD", leadership.epoch)], [Delete(key)])
            if result.succeeded:
                log.info("handing %s-%d back to its preferred replica", *tp)
                self.image.apply(key, None, result.revision)
                self._unlead(tp)
        except (EtcdUnavailable, EtcdError) as exc:
            log.warning("could not hand %s-%d back: %s", *tp, exc)
        finally:
            self.busy.discard(tp)
            self._changed.set()

    def _role(self, tp: TopicPartition) -> Role:
        return roles(self.image, self.node_id).get(tp, Role.NONE)

    def _prepare_log(self, tp: TopicPartition) -> None:
        """The log this node will lead from: its own, else a finished copy, else a new empty one."""
        name, index = tp
        directory = partition_dir(self.data_dir, name, index)
        staging = replica_copy_dir(self.data_dir, name, index)
        if tp in self.staged or self.fs.exists(staging):
            copy = LogCopy(staging, self._segment_bytes(tp), self.fs)
            if copy.started and self._local_log(tp) is None:
                copy.install(directory)
                self.moves_in += 1
            else:
                copy.discard()
            self.staged.discard(tp)
        if name in COORDINATOR_TOPICS:
            self.coordinator_log(name).open_partition(index)
        else:
            assert self.catalog is not None
            self.catalog.hold(name, index)

    def _segment_bytes(self, tp: TopicPartition) -> int:
        if tp[0] == COORDINATOR_TOPIC:
            return int(self.config["offsets.topic.segment.bytes"])
        if tp[0] == TRANSACTION_TOPIC:
            return int(self.config["transaction.state.log.segment.bytes"])
        assert self.catalog is not None
        topic = self.catalog.get(tp[0])
        return int(topic.config("segment.bytes")) if topic is not None else int(self.config["log.segment.bytes"])

    def _drop(self, tp: TopicPartition) -> None:
        """This node holds nothing of the partition any more."""
        self.replicator.unfollow(tp)
        name, index = tp
        if name in COORDINATOR_TOPICS:
            coordinator_log = self.coordinator_log(name)
            if coordinator_log.partition_log(index) is not None:
                log.info("deleting %s-%d: another node holds it", *tp)
            coordinator_log.drop_partition(index)
        else:
            assert self.catalog is not None
            if self.catalog.partition(name, index) is not None:
                log.info("deleting %s-%d: another node holds it", *tp)
            self.catalog.release(name, index)
        if tp in self.staged:
            LogCopy(replica_copy_dir(self.data_dir, name, index), 1, self.fs).discard()
            self.staged.discard(tp)

    # ---------------------------------------------------------------- copying (an adding replica)

    def _start_copy(self, tp: TopicPartition) -> None:
        scope = trio.CancelScope()
        self.copies[tp] = scope
        self._spawn(self._copy, tp, scope)

    def _stop_copy(self, tp: TopicPartition) -> None:
        scope = self.copies.pop(tp, None)
        if scope is not None:
            scope.cancel()

    async def _copy(self, tp: TopicPartition, scope: trio.CancelScope) -> None:
        name, index = tp
        client: ReplicaClient | None = None
        copy: LogCopy | None = None
        with scope:
            try:
                if self._local_log(tp) is not None:
                    self._drop(tp)  # a stale log from an earlier time this node held the partition
                copy = await trio.to_thread.run_sync(
                    LogCopy, replica_copy_dir(self.data_dir, name, index), self._segment_bytes(tp), self.fs)
                self.staged.add(tp)
                log.info("copying %s-%d from its leader", *tp)
                while True:
                    leadership = self.image.leader_of(tp)
                    topic = self.image.topics.get(name)
                    node = None if leadership is None else self.image.nodes.get(leadership.leader)
                    endpoint = None if node is None else node.endpoint(self.inter_broker or "")
                    if leadership is None or topic is None or endpoint is None:
                        await trio.sleep(0.1)
                        continue
                    source = CopySource(str(topic.topic_id), leadership.epoch)
                    if copy.source != source:
                        await trio.to_thread.run_sync(copy.begin, source, 0)
                    if client is None or (client.host, client.port) != endpoint:
                        if client is not None:
                            await client.aclose()
                        client = ReplicaClient(endpoint[0], endpoint[1], self.node_id, self.registration_epoch)
                    client.replica_epoch = self.registration_epoch  # a new one after a lost lease
                    try:
                        fetched = await client.fetch(name, index, copy.next_offset, leadership.epoch,
                                                     topic_id=topic.topic_id)
                    except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                        log.debug("copy of %s-%d: %s", *tp, exc)
                        await trio.sleep(0.2)
                        continue
                    if fetched.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                        await trio.to_thread.run_sync(copy.begin, source, max(fetched.log_start_offset, 0))
                        continue
                    if fetched.error:
                        await trio.sleep(0.05)
                        continue
                    if fetched.records:
                        await trio.to_thread.run_sync(_append_durably, copy, fetched.records)
                        continue
                    copy.skip_to(fetched.high_watermark)
                    await trio.sleep(0.02)
            finally:
                if client is not None:
                    await client.aclose()
                if copy is not None:
                    copy.close()

    # ---------------------------------------------------------------- handing over (the leader of a move)

    def _replica_fetch(self, request: Request) -> dict[str, Any] | Slot:
        """A replica's Fetch: a follower's of a replicated partition waits up to its
        ``max_wait_ms`` for records (woken by appends); a copy's is answered at once."""
        body, has_records, settled = self._replica_fetch_once(request)
        if has_records or settled or body_wait_ms(request) <= 0:
            return body
        header = request.header
        slot = Slot(header.api_key, header.api_version, header.correlation_id)
        self._spawn(self._replica_long_poll, request, slot, trio.current_time() + body_wait_ms(request) / 1000)
        return slot

    async def _replica_long_poll(self, request: Request, slot: Slot, deadline: float) -> None:
        while True:
            woken = self.replicator.appended_event
            with trio.move_on_at(deadline):
                await woken.wait()
            body, has_records, settled = self._replica_fetch_once(request)
            if has_records or settled or trio.current_time() >= deadline:
                header = request.header
                slot.fill(encode_response(header.api_key, header.api_version, header.correlation_id, body))
                return

    def _replica_fetch_once(self, request: Request) -> tuple[dict[str, Any], bool, bool]:
        """(reply, some partition has records, some partition has an error or a divergence)."""
        body = request.body
        replica = fetching_replica(body)
        state = body.get("replica_state")
        replica_epoch = -1 if state is None else int(state.get("replica_epoch", -1))
        now = self.clock()
        responses = []
        has_records = settled = False
        for topic in body.topics:
            partitions = []
            for part in topic.partitions:
                tp = (topic.topic, part.partition)
                plog = self._local_log(tp)
                if tp in self.replicator.leaders and plog is not None and self.lease.valid(now):
                    found = self.replicator.serve_fetch(tp, part, replica, plog, replica_epoch)
                    has_records = has_records or bool(found["records"])
                    settled = settled or bool(found["error_code"]) or "diverging_epoch" in found
                    partitions.append(found)
                    continue
                settled = True  # a copy's fetch, or an error: answered at once
                entry: dict[str, Any] = {"partition_index": part.partition, "error_code": 0, "high_watermark": -1,
                                         "last_stable_offset": -1, "log_start_offset": -1,
                                         "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}
                if tp not in self.serving.led or not self.lease.valid(now) or plog is None:
                    entry["error_code"] = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                    partitions.append(entry)
                    continue
                end = plog.next_offset
                handover = self.handovers.get(tp)
                if handover is not None:
                    step = handover.on_fetch(replica, part.fetch_offset, end, now)
                    if step is not Step.SERVE:
                        self._freeze(tp)
                        end = plog.next_offset
                    if step is Step.COMMIT:
                        self._spawn(self._commit_handover, tp, handover)
                start = plog.log_start_offset
                entry.update(high_watermark=end, last_stable_offset=end, log_start_offset=start)
                if not start <= part.fetch_offset <= end:
                    entry["error_code"] = int(ErrorCode.OFFSET_OUT_OF_RANGE)
                else:
                    entry["records"] = plog.read_raw(part.fetch_offset, part.partition_max_bytes)
                if handover is not None:
                    handover.answered(end)
                partitions.append(entry)
            responses.append({"topic": topic.topic, "topic_id": topic.get("topic_id"), "partitions": partitions})
        return ({"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses},
                has_records, settled)

    def _freeze(self, tp: TopicPartition) -> None:
        """Stop taking writes for a partition being handed over; its groups leave."""
        if tp in self.serving.frozen:
            return
        self.serving.frozen.add(tp)
        if tp[0] in COORDINATOR_TOPICS:
            self._unload(tp)
        log.info("handing %s-%d over: writes stopped at offset %s", *tp,
                 getattr(self._local_log(tp), "next_offset", "?"))

    def _thaw(self, tp: TopicPartition) -> None:
        """The handover did not happen: serve the partition again (groups reload from the log)."""
        handover = self.handovers.get(tp)
        if handover is not None:
            handover.thaw()
        if tp in self.serving.frozen:
            self.serving.frozen.discard(tp)
            if tp[0] in COORDINATOR_TOPICS:
                self.serving.led.pop(tp, None)  # reloaded by the next pass
        self._changed.set()

    async def _commit_handover(self, tp: TopicPartition, handover: Handover) -> None:
        """Give the partition to the replica that holds the whole frozen log: one compare-and-set."""
        assignment = self.image.assignments.get(tp)
        leadership = self.image.leaders.get(tp)
        try:
            if assignment is None or leadership is None or leadership.leader != self.node_id:
                raise EtcdError("the partition changed under the handover")
            assignment_key = self.keys.assignment(*tp)
            leader_key = self.keys.leader(*tp)
            done = rules.complete_move(assignment)
            result = await self.etcd.txn(
                [Compare(leader_key, "MOD", leadership.epoch),
                 Compare(assignment_key, "MOD", self.image.revision_of(assignment_key))],
                [Delete(leader_key), Put(assignment_key, done.encode()),
                 Put(self.keys.isr(*tp), encode_isr(done.replicas))])  # the copy holds the whole log
            if not result.succeeded:
                raise EtcdError("the partition changed under the handover")
            self.image.apply(leader_key, None, result.revision)
            self.image.apply(assignment_key, done.encode(), result.revision)
            self.image.apply(self.keys.isr(*tp), encode_isr(done.replicas), result.revision)
            self.moves_out += 1
            log.info("handed %s-%d over to node %d", *tp, handover.target)
            self._unlead(tp)
        except (EtcdUnavailable, EtcdError) as exc:
            log.warning("handover of %s-%d failed: %s", *tp, exc)
            self.handovers_aborted += 1
            self._thaw(tp)
        self._changed.set()

    # ================================================================ the controller

    async def _controller_loop(self) -> None:
        while True:
            self._controller_changed = trio.Event()
            try:
                if self.lease.valid(self.clock()):
                    if self.image.controller is None:
                        await self._campaign()
                    if self.image.controller == self.node_id:
                        await self._control()
            except (EtcdUnavailable, EtcdError) as exc:
                log.debug("controller: %s", exc)
            with trio.move_on_after(1.0):
                await self._controller_changed.wait()

    async def _campaign(self) -> None:
        key = self.keys.controller
        value = json.dumps({"id": self.node_id}).encode()
        result = await self.etcd.txn([Compare(key, "CREATE", 0)], [Put(key, value, self.lease.lease_id)])
        if result.succeeded:
            self.image.apply(key, value, result.revision, self.lease.lease_id)
            log.info("node %d is the controller", self.node_id)

    async def _control(self) -> None:
        image = self.image
        if COORDINATOR_TOPIC not in image.topics:
            await self._create_internal_topic(COORDINATOR_TOPIC, self.offsets_partitions,
                                              self.offsets_replication_factor)
        await self._complete_reassignments()
        changes = rules.place_missing(image)
        live = frozenset(image.nodes)
        if live != self._live_since[0]:
            self._live_since = (live, self.clock())
        settled = self.clock() - self._live_since[1] >= self.rebalance_delay_s
        if not changes:
            changes = rules.grow_replicas(image)
        if self.rebalance and settled and not changes:
            changes = rules.rebalance(image, self.max_moves)
        for start in range(0, len(changes), TXN_BATCH):
            batch = changes[start:start + TXN_BATCH]
            compares = [Compare(self.keys.assignment(*c.tp), "MOD", image.revision_of(self.keys.assignment(*c.tp)))
                        for c in batch]
            puts = [Put(self.keys.assignment(*c.tp), c.assignment.encode()) for c in batch]
            puts += [Put(self.keys.isr(*c.tp), encode_isr(c.isr)) for c in batch if c.isr is not None]
            result = await self.etcd.txn(compares, puts)
            if not result.succeeded:
                return  # the image was stale: the watch brings the news, and the next pass decides again
            for change in batch:
                image.apply(self.keys.assignment(*change.tp), change.assignment.encode(), result.revision)
                if change.isr is not None:
                    image.apply(self.keys.isr(*change.tp), encode_isr(change.isr), result.revision)
                log.info("controller: %s-%d -> %s (%s)", *change.tp, list(change.assignment.replicas), change.why)
        if changes:
            self._wake()

    async def _create_internal_topic(self, name: str, partitions: int, replication_factor: int) -> bool:
        info = TopicInfo(name, uuid.uuid4(), partitions, replication_factor=replication_factor)
        key = self.keys.topic(name)
        result = await self.etcd.txn([Compare(key, "CREATE", 0)], [Put(key, info.encode())])
        if result.succeeded:
            self.image.apply(key, info.encode(), result.revision)
            self._wake()
        return bool(result.succeeded)

    def _want_transaction_topic(self) -> None:
        """``__transaction_state`` is created when a transactional id is first looked up, as
        Kafka creates it; any node may write it (compare-and-set), the controller places it."""
        if self._creating_transaction_topic or self._nursery is None:
            return
        self._creating_transaction_topic = True
        self._spawn(self._create_transaction_topic)

    async def _create_transaction_topic(self) -> None:
        try:
            if await self._create_internal_topic(TRANSACTION_TOPIC, self.transaction_partitions,
                                                 self.transaction_replication_factor):
                log.info("created %s (%d partitions, replication factor %d) for the first transactional id",
                         TRANSACTION_TOPIC, self.transaction_partitions, self.transaction_replication_factor)
        except (EtcdUnavailable, EtcdError) as exc:
            log.warning("could not create %s: %s", TRANSACTION_TOPIC, exc)
        finally:
            self._creating_transaction_topic = False

    async def _complete_reassignments(self) -> None:
        """Reassignments of replicated partitions whose target replicas are all in sync become
        their target: one compare-and-set on the assignment and the ISR it read, and, when
        the leader is being removed, on its leader key, which goes in the same transaction so
        that an in-sync target replica is elected (Kafka's controller elects a new leader when
        the current one leaves the replicas)."""
        image = self.image
        for change in rules.complete_reassignments(image):
            tp = change.tp
            assignment_key, isr_key, leader_key = self.keys.assignment(*tp), self.keys.isr(*tp), self.keys.leader(*tp)
            compares = [Compare(assignment_key, "MOD", image.revision_of(assignment_key)),
                        Compare(isr_key, "MOD", image.revision_of(isr_key))]
            assert change.isr is not None
            ops: list[Put | Delete] = [Put(assignment_key, change.assignment.encode()),
                                       Put(isr_key, encode_isr(change.isr))]
            leadership = image.leaders.get(tp)
            stepping_down = leadership is not None and leadership.leader not in change.assignment.replicas
            if stepping_down:
                assert leadership is not None
                compares.append(Compare(leader_key, "MOD", leadership.epoch))
                ops.append(Delete(leader_key))
            result = await self.etcd.txn(compares, ops)
            if not result.succeeded:
                return  # the image was stale: the watch brings the news, and the next pass decides again
            image.apply(assignment_key, change.assignment.encode(), result.revision)
            image.apply(isr_key, encode_isr(change.isr), result.revision)
            if stepping_down:
                image.apply(leader_key, None, result.revision)
            log.info("controller: %s-%d -> %s (%s%s)", *tp, list(change.assignment.replicas), change.why,
                     "; its leader steps down" if stepping_down else "")
            self._wake()

    # ================================================================ requests the cluster answers

    def _cluster_producer_id(self, request: Request, reply: Any) -> Any:
        """Producer ids must be unique in the cluster: a fresh one is made this node's own."""
        if isinstance(reply, dict) and reply.get("error_code") == 0 and request.body.get("producer_id", -1) < 0:
            reply["producer_id"] = reply["producer_id"] * PRODUCER_ID_STRIDE + self.node_id
        return reply

    def _committing(self, handler: Callable[[Request, str], Any]) -> Callable[[Request, str], Any]:
        """A catalogue handler whose changes are written to etcd before its reply goes."""
        def run(request: Request, peer: str) -> Any:
            assert self.catalog is not None
            self.catalog.take_intents()
            body = handler(request, peer)
            intents = self.catalog.take_intents()
            if not intents or not isinstance(body, dict):
                return body
            header = request.header
            slot = Slot(header.api_key, header.api_version, header.correlation_id)
            self._spawn(self._commit_intents, request, body, intents, slot, handler, peer)
            return slot
        return run

    async def _commit_intents(self, request: Request, body: dict[str, Any], intents: list[Intent], slot: Slot,
                              handler: Callable[[Request, str], Any], peer: str) -> None:
        failures: dict[str, tuple[ErrorCode, str]] = {}
        created: list[str] = []
        for intent in intents:
            try:
                failure = await self._write_intent(intent)
            except (EtcdUnavailable, EtcdError) as exc:
                failure = (ErrorCode.REQUEST_TIMED_OUT, f"etcd did not take the change: {exc}")
            if failure is not None:
                failures[intent.name] = failure
            elif intent.kind == "create":
                created.append(intent.name)
        if created:
            with trio.move_on_after(CREATE_WAIT_S):
                while not all(self.image.leader_of(tp) for name in created
                              for tp in self._partitions_of(name)):
                    await trio.sleep(0.02)
        header = request.header
        if header.api_key == ApiKey.METADATA and created:
            assert self.catalog is not None
            self.catalog.sync(self.image.topics)
            body = handler(request, peer)
            self.catalog.take_intents()
        _amend(header.api_key, body, failures)
        slot.fill(encode_response(header.api_key, header.api_version, header.correlation_id, body))

    def _partitions_of(self, name: str) -> list[TopicPartition]:
        info = self.image.topics.get(name)
        return [] if info is None else [(name, i) for i in range(info.partitions)]

    async def _write_intent(self, intent: Intent) -> tuple[ErrorCode, str] | None:
        key = self.keys.topic(intent.name)
        image = self.image
        if intent.kind == "create":
            assert intent.topic_id is not None
            value = TopicInfo(intent.name, intent.topic_id, intent.partitions, intent.configs,
                              intent.replication_factor).encode()
            result = await self.etcd.txn([Compare(key, "CREATE", 0)], [Put(key, value)])
            if not result.succeeded:
                return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {intent.name!r} already exists"
            image.apply(key, value, result.revision)
            self._wake()
            return None
        if intent.kind == "delete":
            result = await self.etcd.txn(
                [Compare(key, "MOD", image.revision_of(key))],
                [Delete(key), DeletePrefix(self.keys.assignment(intent.name, 0)[:-1]),
                 DeletePrefix(self.keys.leader(intent.name, 0)[:-1]),
                 DeletePrefix(self.keys.isr(intent.name, 0)[:-1])])
            if not result.succeeded:
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {intent.name!r} changed; try again"
            return None
        for _ in range(3):
            current = image.topics.get(intent.name)
            if current is None:
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {intent.name!r} does not exist"
            if intent.kind == "grow":
                if intent.partitions <= current.partitions:
                    return ErrorCode.INVALID_PARTITIONS, f"topic already has {current.partitions} partitions"
                updated = replace(current, partitions=intent.partitions)
            else:
                updated = replace(current, configs=dict(intent.configs))
            result = await self.etcd.txn([Compare(key, "MOD", image.revision_of(key))], [Put(key, updated.encode())])
            if result.succeeded:
                image.apply(key, updated.encode(), result.revision)
                self._wake()
                return None
            fresh = await self.etcd.get(key)
            if fresh is None:
                image.apply(key, None, result.revision)
            else:
                image.apply(key, fresh.value, fresh.mod_revision, fresh.lease)
        return ErrorCode.REQUEST_TIMED_OUT, f"topic {intent.name!r} kept changing; try again"


#: One entry of a coordinator partition's log, in log order: (key, value, producer id, marker).
#: A plain record has producer id -1; a transactional record its producer's id; a marker no key.
Event = tuple[bytes, bytes | None, int, EndTransactionMarker | None]


class _EventRecorder:
    """``storage.coordinator_log.TransactionalReplay`` that keeps what it is told, in order."""

    def __init__(self, events: list[Event]) -> None:
        self.events = events

    def record(self, key: bytes, value: bytes | None, producer_id: int) -> None:
        self.events.append((key, value, producer_id, None))

    def marker(self, partition: int, producer_id: int, marker: EndTransactionMarker) -> None:
        self.events.append((b"", None, producer_id, marker))


def _partition_events(coordinator_log: CoordinatorLog, partition: int) -> list[Event]:
    """A ``__consumer_offsets`` partition's records, transactional ones and markers included (a thread)."""
    events: list[Event] = []
    recorder = _EventRecorder(events)
    for key, value, _ in coordinator_log.replay_partition(partition, recorder):
        events.append((key, value, -1, None))
    return events


def _replayed(events: list[Event], transactional: Callable[[bytes, bytes | None, int], None],
              marker: Callable[[int, EndTransactionMarker], None]) -> Any:
    """The plain records of ``events``, for the group coordinator's load; the transactional
    ones and the markers are replayed in their place in the log as the iteration passes them."""
    for key, value, producer_id, found in events:
        if found is not None:
            marker(producer_id, found)
        elif producer_id >= 0:
            transactional(key, value, producer_id)
        else:
            yield key, value


def body_wait_ms(request: Request) -> int:
    return int(request.body.get("max_wait_ms", 0))


def _append_durably(copy: LogCopy, records: bytes) -> None:
    """Append fetched batches to a copy and make them durable before the next fetch asks for more."""
    copy.append(records)
    copy.sync()


def _amend(api_key: int, body: dict[str, Any], failures: dict[str, tuple[ErrorCode, str]]) -> None:
    """Put the errors of intents etcd refused into the handler's reply."""
    if not failures:
        return
    where: dict[int, tuple[str, str]] = {
        ApiKey.CREATE_TOPICS: ("topics", "name"), ApiKey.DELETE_TOPICS: ("responses", "name"),
        ApiKey.CREATE_PARTITIONS: ("results", "name"), ApiKey.ALTER_CONFIGS: ("responses", "resource_name"),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: ("responses", "resource_name"), ApiKey.METADATA: ("topics", "name")}
    field, name = where.get(api_key, ("", ""))
    for entry in body.get(field, []):
        failure = failures.get(entry.get(name))
        if failure is not None:
            entry["error_code"] = int(failure[0])
            if "error_message" in entry or api_key != ApiKey.METADATA:
                entry["error_message"] = failure[1]
