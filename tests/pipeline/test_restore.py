"""``kcoord offsets restore --as-of``: a group goes back to the offsets it had at a past time."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

from pipeline.history import offsets_as_of
from tests.pipeline.scenario import next_millisecond, now_ms
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.clients import create_topic, learn_partitions, wait_until

pytestmark = pytest.mark.integration

SETTINGS = {
    "log.history.retention.ms": 86_400_000,
    "offsets.topic.segment.bytes": 1024,
    "log.cleaner.backoff.ms": 50,
    "log.cleaner.min.cleanable.ratio": 0.01,
    "group.initial.rebalance.delay.ms": 0,
}
GROUP = "restore-me"


def subscribed_consumer(bootstrap: str, first: dict[tuple[str, int], int] | None = None) -> Any:
    """A member of the group with both partitions assigned; ``first`` collects the first
    offset it consumes from each partition (polling may already return records)."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=10000, heartbeat_interval_ms=500)
    consumer.subscribe(["r"])
    learn_partitions(consumer, ["r"])
    deadline = time.monotonic() + 30
    while len(consumer.assignment()) < 2:
        assert time.monotonic() < deadline, "the consumer was never assigned both partitions"
        _note_first(consumer.poll(timeout_ms=100), first)
    return consumer


def _note_first(polled: dict[Any, list[Any]], first: dict[tuple[str, int], int] | None) -> None:
    if first is not None:
        for tp, records in polled.items():
            first.setdefault((tp.topic, tp.partition), records[0].offset)


def test_restore_as_of_makes_a_consumer_resume_at_the_offsets_of_that_time(broker_factory: Any) -> None:
    from kafka import KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    broker: BrokerProcess = broker_factory(SETTINGS)
    create_topic(broker.bootstrap, "r", 2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(40):
        producer.send("r", value=b"%d" % i, partition=i % 2)
    producer.flush()
    producer.close()
    tps = [TopicPartition("r", 0), TopicPartition("r", 1)]

    consumer = subscribed_consumer(broker.bootstrap)
    at: dict[int, int] = {}
    for step in range(1, 16):  # 15 commits: enough segments for the cleaner to compact
        consumer.commit({tp: OffsetAndMetadata(step + tp.partition, "", -1) for tp in tps})
        at[step] = now_ms()
        next_millisecond(at[step])
    consumer.close()  # the group is Empty now, as a restore requires
    t1 = at[5]  # offsets 5 and 6 were committed then, and moved on ten times since
    wanted = {("r", 0): 5, ("r", 1): 6}

    history = broker.data_dir / "history"
    wait_until(lambda: any(history.rglob("*.log")), 30, "the cleaner to keep history")
    restored = offsets_as_of(broker.data_dir, t1, GROUP)
    assert {tp: v["offset"] for tp, v in restored[GROUP].items()} == wanted

    done = subprocess.run(
        [sys.executable, "-m", "kcoord", "offsets", "restore", "--bootstrap-server", broker.bootstrap,
         "--group", GROUP, "--as-of", str(t1), "--data-dir", str(broker.data_dir), "--execute"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    first: dict[tuple[str, int], int] = {}
    resumed = subscribed_consumer(broker.bootstrap, first)
    try:
        assert {(tp.topic, tp.partition): resumed.committed(tp) for tp in tps} == wanted
        deadline = time.monotonic() + 30
        while len(first) < 2:
            assert time.monotonic() < deadline, f"only {first} consumed"
            _note_first(resumed.poll(timeout_ms=200), first)
        assert first == wanted
    finally:
        resumed.close()
