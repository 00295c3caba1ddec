"""A coordinator log written by the real broker under real kafka-python clients.

Three groups commit over time through two coordinator partitions, with small segments and
an eager cleaner so compaction happens and history is kept: ``svc-a`` is a subscribed
consumer (group metadata with a member and its subscription) that also commits an offset
for a topic it does not subscribe to; ``svc-b`` and ``svc-c`` commit with manual
assignment; ``svc-b`` loses one offset to OffsetDelete; ``svc-c`` is deleted with
DeleteGroups and then commits again. The scenario keeps its own model of every group's
committed offsets at checkpoints, which is what ``as-of`` must reproduce.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.segments import read_batch_headers
from tests.support.broker_process import BrokerProcess
from tests.support.clients import create_topic, learn_partitions, wait_until

BROKER_SETTINGS: dict[str, object] = {
    "log.history.retention.ms": 86_400_000,
    "offsets.topic.segment.bytes": 1024,
    "log.cleaner.backoff.ms": 50,
    "log.cleaner.min.cleanable.ratio": 0.01,
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 2,
}
Offsets = dict[str, dict[tuple[str, int], int]]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def next_millisecond(after: int) -> None:
    """Return once the wall clock has moved past ``after`` (a millisecond at most)."""
    while now_ms() <= after:
        time.sleep(0.0002)


@dataclass
class Scenario:
    data_dir: Path
    model: Offsets = field(default_factory=dict)
    #: (time, committed offsets of every group at that time), in time order
    checkpoints: list[tuple[int, Offsets]] = field(default_factory=list)
    #: a time at which svc-a had a member subscribed to "orders"
    stable_at: int = 0

    def checkpoint(self) -> int:
        """Everything acknowledged so far is at or before the returned time, everything later after it."""
        at = now_ms()
        self.checkpoints.append((at, copy.deepcopy(self.model)))
        next_millisecond(at)
        return at


def _commit(consumer: Any, scenario: Scenario, group: str, offsets: dict[tuple[str, int], int]) -> None:
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o, f"{group}@{o}", -1) for (t, p), o in offsets.items()})
    scenario.model.setdefault(group, {}).update(offsets)


def run(data_dir: Path) -> Scenario:
    """Drive the broker through the scenario; the broker is stopped when this returns."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

    broker = BrokerProcess(data_dir, BROKER_SETTINGS).start()
    scenario = Scenario(data_dir)
    consumers: list[Any] = []
    try:
        bootstrap = broker.bootstrap
        create_topic(bootstrap, "orders", 3)
        create_topic(bootstrap, "audit", 1)
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        for i in range(60):
            producer.send("orders", value=b"x%d" % i, partition=i % 3)
        producer.send("audit", value=b"a")
        producer.flush()

        def manual(group: str) -> Any:
            consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
            consumer.assign([TopicPartition("orders", p) for p in range(3)])
            consumers.append(consumer)
            return consumer

        b, c = manual("svc-b"), manual("svc-c")
        a = KafkaConsumer(bootstrap_servers=bootstrap, group_id="svc-a", enable_auto_commit=False,
                          auto_offset_reset="earliest", session_timeout_ms=10000, heartbeat_interval_ms=500)
        consumers.append(a)
        a.subscribe(["orders"])
        learn_partitions(a, ["orders"])
        deadline = time.monotonic() + 30
        while len(a.assignment()) < 3:
            assert time.monotonic() < deadline, "svc-a was never assigned its partitions"
            a.poll(timeout_ms=100)
        scenario.checkpoint()
        for round_no in range(1, 13):
            for group, consumer in (("svc-a", a), ("svc-b", b), ("svc-c", c)):
                _commit(consumer, scenario, group, {("orders", p): round_no * 3 + p for p in range(3)})
            if round_no == 4:
                _commit(a, scenario, "svc-a", {("audit", 0): 1})
            if round_no % 3 == 0:
                scenario.checkpoint()
        scenario.stable_at = scenario.checkpoint()

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.delete_group_offsets("svc-b", [TopicPartition("orders", 2)])
            del scenario.model["svc-b"][("orders", 2)]
            scenario.checkpoint()
            admin.delete_groups(["svc-c"])
            del scenario.model["svc-c"]
            scenario.checkpoint()
        finally:
            admin.close()
        _commit(c, scenario, "svc-c", {("orders", 0): 100})
        scenario.checkpoint()
        a.close()  # leaves: svc-a becomes Empty with a new generation
        consumers.remove(a)
        scenario.checkpoint()

        history = data_dir / "history"
        wait_until(lambda: any(history.rglob("*.log")), 30, "the cleaner to move segments into history")
        # 108 commit records alone were written; fewer live records means the cleaner dropped some
        wait_until(lambda: live_records(data_dir) < 3 * 12 * 3, 30, "compaction to drop records")
    finally:
        for consumer in consumers:
            consumer.close()
        code = broker.stop()
    assert code == 0, broker.log()
    return scenario


def live_records(data_dir: Path) -> float:
    """Records in the live segments; infinite when the cleaner swapped a segment away while
    they were being counted (the count is then not known: a caller waiting for it asks again)."""
    try:
        return sum(h.records_count for p in data_dir.glob("__consumer_offsets-*/*.log") for _, h in read_batch_headers(p))
    except FileNotFoundError:
        return math.inf
