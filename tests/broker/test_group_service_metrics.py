"""The group service's counters: commits, records, fsyncs, rebalances, expiry and cleaning.

Cleaning runs as the service's maintenance jobs in a ``storage.maintenance`` scheduler,
as the server runs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from broker.config import Config
from broker.context import BrokerContext
from broker.group_service import GroupService, wall_clock_ms
from broker.handlers import groups
from broker.router import Router
from storage.maintenance import Maintenance
from tests.support.routing import call


async def _until(condition: Any, what: str) -> None:
    with trio.fail_after(10):
        while not condition():
            await trio.sleep(0.01)


def _commit_body(offset: int) -> dict[str, Any]:
    return {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [
                {"partition_index": p, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": "x" * 200} for p in (0, 1)]}]}


async def test_counters_follow_commits_rebalances_expiry_and_cleaning(tmp_path: Path) -> None:
    config = Config({
        "offsets.topic.num.partitions": 1, "offsets.topic.segment.bytes": 2048,
        "log.cleaner.backoff.ms": 20, "log.cleaner.min.cleanable.ratio": 0.0,
        "offsets.retention.minutes": 1, "offsets.retention.check.interval.ms": 20,
        "group.initial.rebalance.delay.ms": 0,
    })
    service = GroupService.open(config, tmp_path)
    router = Router(BrokerContext(config=config, node_id=0, host="127.0.0.1", port=9092, cluster_id="c"))
    groups.register(router, service)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        await nursery.start(Maintenance(service.maintenance_jobs()).run)
        for offset in range(40):
            reply = await call(router, 8, 8, _commit_body(offset))
            assert [p.error_code for t in reply.topics for p in t.partitions] == [0, 0]
        assert service.offsets_committed == 80
        assert service.records_appended == 80 and service.batches_appended == 40
        assert 1 <= service.fsync_seconds.count <= 40 and service.fsync_seconds.sum > 0
        assert router.api_stats[8].requests[8] == 40 and router.api_stats[8].latency.count == 40

        # The same two keys written 40 times over small segments: the cleaner reclaims bytes.
        await _until(lambda: service.bytes_reclaimed > 0, "the cleaner to reclaim bytes")
        assert service.cleanings >= 1 and service.clean_seconds.count >= 1

        # A member joins (generation 1) and leaves (generation 2).
        join = {"group_id": "dyn", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}]}
        first = await call(router, 11, 5, join)
        joined = await call(router, 11, 5, dict(join, member_id=first.member_id))
        assert joined.error_code == 0 and joined.generation_id == 1
        assert service.count_rebalances() == 1
        await call(router, 13, 3, {"group_id": "dyn", "members": [
            {"member_id": joined.member_id, "group_instance_id": None}]})
        assert service.count_rebalances() == 2

        # Two minutes later, g's two offsets are past offsets.retention.minutes.
        service.clock = lambda: wall_clock_ms() + 120_000
        await _until(lambda: service.offsets_expired == 2, "the offsets to expire")
        assert service.offsets_committed == 80  # expiry tombstones are not commits
        nursery.cancel_scope.cancel()
    await service.close()


async def test_consumer_group_counters_follow_heartbeats_epochs_fencing_and_reconciliation(tmp_path: Path) -> None:
    from broker.coordinator.modern.topics import StaticImage

    # Every epoch bump computes its target at once, so each step below sees its own.
    config = Config({"offsets.topic.num.partitions": 1, "group.consumer.assignment.interval.ms": 0})
    service = GroupService.open(config, tmp_path)
    service.coordinator.topics = StaticImage.of({"t": 4})
    router = Router(BrokerContext(config=config, node_id=0, host="127.0.0.1", port=9092, cluster_id="c"))
    groups.register(router, service)
    consumer = service.coordinator.consumer

    def beat(member: str, epoch: int, owned: list[dict[str, Any]] | None) -> dict[str, Any]:
        return {"group_id": "cg", "member_id": member, "member_epoch": epoch, "instance_id": None,
                "rack_id": None, "rebalance_timeout_ms": 30000 if epoch == 0 else -1,
                "subscribed_topic_names": ["t"] if epoch == 0 else None, "subscribed_topic_regex": None,
                "server_assignor": None, "topic_partitions": owned}

    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        a = await call(router, 68, 1, beat("a", 0, []))
        b = await call(router, 68, 1, beat("b", 0, []))
        assert (a.member_epoch, b.member_epoch) == (1, 2)
        assert consumer.heartbeats == 2 and consumer.epoch_bumps == 2
        # a gives half up; b then gets its share and both are stable at epoch 2.
        kept = await call(router, 68, 1, beat("a", 1, [
            {"topic_id": tp.topic_id, "partitions": tp.partitions} for tp in a.assignment.topic_partitions]))
        half = [{"topic_id": tp.topic_id, "partitions": tp.partitions} for tp in kept.assignment.topic_partitions]
        await call(router, 68, 1, beat("a", kept.member_epoch, half))
        await call(router, 68, 1, beat("b", 2, []))
        assert consumer.reconciliation_seconds.count >= 1
        await call(router, 68, 1, beat("b", -1, None))
        assert consumer.fenced == 1 and consumer.epoch_bumps == 3
        names = {family.name for family in service.metrics()}
        # prometheus-client names a counter family without its _total (the samples keep it).
        assert {"kcoord_consumer_group_heartbeats", "kcoord_consumer_group_epoch_bumps",
                "kcoord_consumer_group_members_fenced", "kcoord_consumer_group_reconciliation_seconds",
                "kcoord_groups_by_type"} <= names
        nursery.cancel_scope.cancel()
    await service.close()
