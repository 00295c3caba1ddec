"""The groups' own configs inside the trio shell: their log, DescribeConfigs entries, durable changes.

Kafka 4 keeps a group's configs (the GROUP config resource of DescribeConfigs and
IncrementalAlterConfigs) in its metadata log; kcoord keeps them in ``__kcoord_group_configs-0``
(``storage.group_config_log``), replayed at start-up into the coordinator's ``GroupConfigs``
before the coordinator log is loaded. A change is one batch per request: appended, replayed
into ``GroupConfigs`` at once (so it takes effect without a restart), then handed to the
coordinator, which applies a newly chosen ``nearest`` policy to the group's offsets. The
reply goes out only once both the config record and those commits are fsynced.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from broker.config import SETTINGS
from broker.coordinator.config import CoordinatorConfig
from broker.coordinator.group_configs import GROUP_CONFIGS, GroupConfigs, decode_record, encode_record
from broker.metrics import Family, counter, gauge
from broker.slots import Slot, set_all
from broker.topic_configs import ConfigSource, ConfigType
from protocol.codec import Request, encode_response
from storage.fs import REAL_FS, FileSystem
from storage.group_commit import GroupCommit
from storage.group_config_log import GroupConfigLog
from storage.journal import Journal
from storage.layout import group_configs_partition_dir
from storage.partition import CorruptLogError

if TYPE_CHECKING:
    from broker.group_service import GroupService

log = logging.getLogger("kcoord.groups")

_DEFAULTS = {setting.name: setting.default for setting in SETTINGS}


def _raise(what: str, error: OSError) -> None:
    log.error("%s failed: %s", what, error)
    raise error


class GroupConfigService:
    def __init__(self, config: Mapping[str, Any], config_log: GroupConfigLog, configs: GroupConfigs,
                 durable: bool = True, clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.config = config
        self.log = config_log
        self.configs = configs
        self.durable = durable
        self.clock_ms = clock_ms
        #: The coordinator's shell, told of every change (set when the broker is wired).
        self.groups: GroupService | None = None
        self.on_storage_failure: Callable[[str, OSError], None] = _raise
        self.stopped = False
        self._journal = Journal()
        self.commit = GroupCommit(self._journal, durable=durable, on_failure=self._sync_failed,
                                  name="group config log", release=set_all)
        self._nursery: trio.Nursery | None = None
        self.changes = 0

    @classmethod
    def open(cls, config: Mapping[str, Any], data_dir: Path, fs: FileSystem = REAL_FS) -> GroupConfigService:
        """Open the log and replay it (before the coordinator log loads: sessions start with the group's timeout)."""
        service = cls(config, GroupConfigLog(data_dir, fs), GroupConfigs(CoordinatorConfig.from_config(config)),
                      durable=config["log.flush.policy"] == "durable")
        count = 0
        for key, value in service.log.replay():
            try:
                service.configs.replay(*decode_record(key, value))
            except ValueError as exc:  # refuse to start rather than run without a group's configs
                service.log.close()
                raise CorruptLogError(f"{group_configs_partition_dir(data_dir)}: {exc}") from None
            count += 1
        log.info("loaded %d group config records: %d groups with their own configs", count,
                 len(service.configs.overrides))
        return service

    # ---------------------------------------------------------------- DescribeConfigs

    def describe(self, group_id: str, synonyms: bool = False, documentation: bool = False) -> list[dict[str, Any]]:
        """Every group config, as Kafka's ConfigHelper.createGroupConfigEntry reports it.

        The source is GROUP_CONFIG for the group's own value; otherwise the broker config
        that supplies it, STATIC_BROKER_CONFIG when set at start-up, else DEFAULT_CONFIG.
        Synonyms list that chain, the group's value first.
        """
        own = self.configs.overrides.get(group_id, {})
        explicit: frozenset[str] = getattr(self.config, "explicit", frozenset())
        entries = []
        for name in sorted(GROUP_CONFIGS):
            definition = GROUP_CONFIGS[name]
            chain: list[tuple[str, str, ConfigSource]] = []
            if name in own:
                chain.append((name, own[name], ConfigSource.GROUP_CONFIG))
            broker = definition.broker_name
            if broker in explicit:
                chain.append((broker, str(self.config[broker]), ConfigSource.STATIC_BROKER_CONFIG))
            chain.append((broker, str(_DEFAULTS[broker]), ConfigSource.DEFAULT_CONFIG))
            entries.append({
                "name": name, "value": chain[0][1], "read_only": False, "config_source": int(chain[0][2]),
                "is_sensitive": False,
                "synonyms": [{"name": n, "value": v, "source": int(s)} for n, v, s in chain] if synonyms else [],
                "config_type": int(ConfigType.INT if definition.kind == "INT" else ConfigType.STRING),
                "documentation": definition.doc if documentation else None,
            })
        return entries

    def current(self, group_id: str) -> dict[str, str]:
        """The group's own values (what IncrementalAlterConfigs starts from)."""
        return dict(self.configs.overrides.get(group_id, {}))

    def validated(self, group_id: str, overrides: Mapping[str, str | None]) -> dict[str, str]:
        """The group's new overrides, canonical; ``GroupConfigError`` (INVALID_CONFIG) if Kafka refuses them."""
        return self.configs.validated(group_id, overrides)

    # ---------------------------------------------------------------- changes

    def change(self, changes: Mapping[str, Mapping[str, str]]) -> bool:
        """Make each group's overrides exactly those given; False if the log could not be written.

        One batch, replayed at once; the coordinator hears of each group so a ``nearest``
        now in force applies to its offsets. ``respond_when_durable`` answers afterwards.
        """
        if self.stopped:
            return False
        now = self.clock_ms()
        before = {group_id: self.current(group_id) for group_id in changes}
        records = [encode_record(group_id, configs) for group_id, configs in changes.items()]
        try:
            self.log.append(records, now)
        except OSError as exc:
            self.stopped = True
            self.on_storage_failure("appending to the group config log", exc)
            return False
        self._journal.mark(self.log)
        self.commit.appended()
        for group_id, configs in changes.items():
            self.configs.replay(group_id, dict(configs) or None)
            self.changes += 1
            log.info("altered configs of group %s: %s", group_id, _described(before[group_id], dict(configs)))
        groups = self.groups
        if groups is not None:
            for group_id in changes:
                groups.apply(groups.coordinator.on_group_config_changed(group_id, groups.clock()))
        return True

    def respond_when_durable(self, request: Request, body: dict[str, Any]) -> Slot:
        """Answer once the group config log and the coordinator log hold everything written so far."""
        header = request.header
        slot = Slot(header.api_key, header.api_version, header.correlation_id)
        slot.frame = encode_response(header.api_key, header.api_version, header.correlation_id, body)
        groups = self.groups
        coordinator_seq = groups.log.written_seq if groups is not None else 0
        config_seq = self._journal.written_seq
        if self._nursery is None:  # not running (a test without the service's tasks): nothing to wait for
            slot.event.set()
        else:
            self._nursery.start_soon(self._release, slot, config_seq, coordinator_seq)
        return slot

    async def _release(self, slot: Slot, config_seq: int, coordinator_seq: int) -> None:
        waiter = Slot(0, 0, 0)
        self.commit.reply_when_durable(config_seq, waiter)
        await waiter.event.wait()
        groups = self.groups
        if groups is not None:
            waiter = Slot(0, 0, 0)
            groups.commit.reply_when_durable(coordinator_seq, waiter)
            await waiter.event.wait()
        slot.event.set()

    # ---------------------------------------------------------------- lifecycle and metrics

    def _sync_failed(self, exc: OSError) -> None:
        self.stopped = True
        self.on_storage_failure("fsync of the group config log", exc)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.commit.run)
            task_status.started()
            await trio.sleep_forever()  # open for the release tasks, even when nothing is fsynced

    async def close(self) -> None:
        if self.durable and not self.stopped:
            await self.commit.sync_now()
        self.log.close()

    def metrics(self) -> list[Family]:
        """Groups with their own configs, config changes, and the commits each reset policy made."""
        policies = counter("kcoord_offset_policy_commits_total",
                           "Offsets committed by the broker's reset policies (nearest, earliest_on_start, "
                           "latest_on_start, new_partitions), since start-up.")
        made = self.groups.coordinator.policies.commits if self.groups is not None else {}
        for policy in ("nearest", "earliest_on_start", "latest_on_start", "new_partitions"):
            policies.add(made.get(policy, 0), policy=policy)
        return [
            gauge("kcoord_group_configs", "Groups with configs of their own (GROUP config resources).",
                  len(self.configs.overrides)),
            counter("kcoord_group_config_changes_total", "Groups whose configs were altered, since start-up.",
                    self.changes),
            policies,
        ]


def _described(before: dict[str, str], after: dict[str, str]) -> str:
    names = sorted(set(before) | set(after))
    changed = [n for n in names if before.get(n) != after.get(n)]
    return ", ".join(f"{n}={after.get(n, '(default)')} (was {before.get(n, '(default)')})" for n in changed) \
        or "no change"
