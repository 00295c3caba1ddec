"""The composition root: the one place that builds a broker from its configuration.

It opens storage, builds the services, tells the topic catalogue who listens to its
changes (the group coordinator, as Kafka's coordinator hears onPartitionsDeleted), registers
every API's handler on the router by its ``ApiKey``, and lists each service's metrics
collector. ``broker.server`` is the trio shell that runs what is built here; nothing else
wires services together.

In a cluster, a ``ClusterMembership`` (``cluster.node``) is handed in: it supplies the
placement service and the topic catalogue, and adds its routing step and handlers to each
router. Without one, the broker is the single node it always was.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import trio

from broker import data_service
from broker.config import Config
from broker.context import BrokerContext
from broker.data_service import DataService
from broker.group_config_service import GroupConfigService
from broker.group_service import GroupService
from broker.handlers import cluster
from broker.handlers import configs as config_handlers
from broker.handlers import groups as group_handlers
from broker.handlers import topics as topic_handlers
from broker.lag import LagCollector
from broker.metrics import Collector
from broker.offset_policies import CatalogLogBounds, LogStartGuard
from broker.placement import SINGLE_NODE, Placement
from broker.router import Authorization, Router
from broker.security_service import SecurityService
from broker.topics import TopicCatalog
from broker.txn_service import TransactionService
from broker.txn_service import register as register_transactions
from protocol.api_keys import ApiKey
from storage.fs import REAL_FS, FileSystem
from storage.group_commit import GroupCommit
from storage.maintenance import Maintenance


class ClusterMembership(Protocol):
    """What a cluster adds to a broker (``cluster.node.ClusterNode``)."""

    placement: Placement

    def open_catalog(self, data_dir: Path, config: Config, fs: FileSystem) -> TopicCatalog: ...

    def attach(self, broker: Broker) -> None: ...

    def register(self, router: Router, ctx: BrokerContext) -> None: ...

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None: ...

    async def close(self) -> None: ...

    def collectors(self) -> list[Collector]: ...


@dataclass
class Broker:
    """Everything one kcoord process serves, built and wired."""

    config: Config
    data_dir: Path
    groups: GroupService
    catalog: TopicCatalog
    data: DataService
    maintenance: Maintenance
    security: SecurityService
    group_configs: GroupConfigService
    transactions: TransactionService
    cluster: ClusterMembership | None = None

    @classmethod
    def open(cls, config: Config, data_dir: Path, fs: FileSystem = REAL_FS,
             cluster: ClusterMembership | None = None) -> Broker:
        """Open (and recover) the logs and build the services; raises on unreadable storage.

        In a cluster, groups are loaded partition by partition as this node comes to lead them.
        """
        # Group configs first: the coordinator loads with each group's own session timeout.
        group_configs = GroupConfigService.open(config, data_dir, fs)
        groups = GroupService.open(config, data_dir, fs, group_configs=group_configs.configs, load=cluster is None)
        group_configs.groups = groups
        group_configs.on_storage_failure = lambda what, exc: groups.on_storage_failure(what, exc)
        catalog = TopicCatalog(data_dir, config, fs) if cluster is None else cluster.open_catalog(data_dir, config, fs)
        groups.coordinator.topics = catalog
        groups.coordinator.log_bounds = CatalogLogBounds(catalog)
        catalog.listeners.append(groups)
        data = DataService(catalog, groups.clock, config["log.flush.policy"] == "durable",
                           retention_check_ms=config["log.retention.check.interval.ms"],
                           cleaner=groups.cleaner, producer_expiration_ms=config["producer.id.expiration.ms"],
                           checkpoint_interval_ms=config["producer.state.checkpoint.interval.ms"])
        data.log_start_guard = LogStartGuard(groups)
        catalog.listeners.append(data)
        # The transaction coordinator writes markers through the data and group services, and
        # answers Produce's question whether a partition is in a transaction.
        transactions = TransactionService.open(config, data_dir, groups, data, fs, load=cluster is None)
        data.transactions = transactions
        # Offsets left out of their log (a truncated tail, a crash before a nearest commit
        # was durable) move back in before anything is served.
        groups.apply(groups.coordinator.enforce_offset_policies(groups.clock()))
        maintenance = Maintenance(groups.maintenance_jobs() + data.maintenance_jobs())
        security = SecurityService.open(config, data_dir, fs)
        broker = cls(config, data_dir, groups, catalog, data, maintenance, security, group_configs, transactions,
                     cluster)
        if cluster is not None:
            cluster.attach(broker)
        return broker

    @property
    def placement(self) -> Placement:
        """Who leads what: this node alone, or the cluster's answer."""
        return SINGLE_NODE if self.cluster is None else self.cluster.placement

    def authorization(self) -> Authorization | None:
        """What the routers enforce ACLs with, or None when no authorizer is configured."""
        security = self.security
        if security.authorizer is None:
            return None
        return Authorization(security.authorizer, CatalogTopics(self.catalog), security.denied,
                             auto_create=self.config["auto.create.topics.enable"])

    def router(self, ctx: BrokerContext, *, request_logging: bool = False,
               shares_stats_with: Router | None = None) -> Router:
        """A router with every API this broker serves (one per listener; they share their stats)."""
        router = Router(ctx, request_logging=request_logging, authorization=self.authorization(),
                        shares_stats_with=shares_stats_with)
        catalog = self.catalog
        router.topic_name = catalog.topic_name
        groups = self.groups
        security = self.security
        authorizer_on = security.authorizer is not None
        router.register(ApiKey.SASL_HANDSHAKE, lambda r, _: cluster.handle_sasl_outside_sasl(r))
        router.register(ApiKey.SASL_AUTHENTICATE, lambda r, _: cluster.handle_sasl_outside_sasl(r))
        router.register(ApiKey.DESCRIBE_CLUSTER, lambda r, _: cluster.handle_describe_cluster(ctx, r, authorizer_on))
        router.register(ApiKey.CREATE_ACLS, lambda r, _: security.create_acls(r, router.session.principal))
        router.register(ApiKey.DESCRIBE_ACLS, lambda r, _: security.describe_acls(r))
        router.register(ApiKey.DELETE_ACLS, lambda r, _: security.delete_acls(r, router.session.principal))
        router.register(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                        lambda r, _: security.describe_user_scram_credentials(r))
        router.register(ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                        lambda r, _: security.alter_user_scram_credentials(r, router.session.principal))
        router.register(ApiKey.METADATA,
                        lambda r, _: topic_handlers.handle_metadata(ctx, catalog, r, authorizer_on))
        router.register(ApiKey.CREATE_TOPICS, lambda r, _: topic_handlers.handle_create_topics(ctx, catalog, r))
        group_configs = self.group_configs
        router.register(ApiKey.DESCRIBE_CONFIGS,
                        lambda r, _: config_handlers.handle_describe_configs(ctx, catalog, r, group_configs))
        router.register(ApiKey.ALTER_CONFIGS,
                        lambda r, _: config_handlers.handle_alter_configs(ctx, catalog, r, group_configs))
        router.register(ApiKey.INCREMENTAL_ALTER_CONFIGS,
                        lambda r, _: config_handlers.handle_incremental_alter_configs(ctx, catalog, r, group_configs))
        # The coordinator hears of deleted and grown topics through the catalogue's listener
        # hook; these replies wait until what it wrote about them is durable.
        router.register(ApiKey.DELETE_TOPICS, lambda r, _: groups.respond_after(
            r, topic_handlers.handle_delete_topics(ctx, catalog, r)))
        router.register(ApiKey.CREATE_PARTITIONS, lambda r, _: groups.respond_after(
            r, topic_handlers.handle_create_partitions(ctx, catalog, r)))
        group_handlers.register(router, groups)
        data_service.register(router, self.data)
        register_transactions(router, self.transactions)
        if self.cluster is not None:
            self.cluster.register(router, ctx)
        return router

    def collectors(self) -> list[Collector]:
        lag = LagCollector(self.groups.coordinator.offsets, self.catalog,
                           self.config["metrics.group.lag.max.series"])
        cluster = [] if self.cluster is None else self.cluster.collectors()
        return [self.groups.metrics, self.data.metrics, self.transactions.metrics, self.security.metrics,
                self.group_configs.metrics, lag, *cluster]

    def group_commits(self) -> list[GroupCommit]:
        """Every service's group commit (``storage.group_commit``)."""
        return [self.groups.commit, self.data.commit, self.transactions.commit, self.security.commit,
                self.group_configs.commit]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The services' background tasks (group commit, timers, expiry, maintenance)."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.groups.run)
            await nursery.start(self.data.run)
            await nursery.start(self.transactions.run)
            await nursery.start(self.maintenance.run)
            await nursery.start(self.security.run)
            await nursery.start(self.group_configs.run)
            if self.cluster is not None:
                await nursery.start(self.cluster.run)
            task_status.started()

    async def close(self) -> None:
        """Make everything durable and close the files (after connections have drained)."""
        if self.cluster is not None:
            await self.cluster.close()
        await self.transactions.close()
        await self.groups.close()
        await trio.to_thread.run_sync(self.catalog.flush)
        # Producer state checkpoints bound what the next start replays of each partition.
        await trio.to_thread.run_sync(self.data.checkpoint_producer_states)
        self.catalog.close()
        await self.security.close()
        await self.group_configs.close()


class CatalogTopics:
    """The topic catalogue as the authorization rules see it."""

    def __init__(self, catalog: TopicCatalog) -> None:
        self.catalog = catalog

    def topic_exists(self, name: str) -> bool:
        return self.catalog.get(name) is not None

    def topic_name(self, topic_id: Any) -> str | None:
        topic = self.catalog.by_id(topic_id)
        return None if topic is None else topic.name
