"""Exactly-once under kill -9: a consume-transform-produce application on real clients, the real
broker process killed at random points, and at the end each input record exactly once in the
output as a read_committed consumer reads it: no duplicate, no gap.

The confluent-kafka run kills the broker at least five times (``KCOORD_EOS_KILLS`` raises it:
``make chaos`` runs a longer soak); kafka-python's and aiokafka's transactional producers run
the same loop with fewer kills.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.eos import ConfluentApp, Killer, create_topics, read_committed, seed, value_of

pytestmark = pytest.mark.integration

PARTITIONS = 3


def _start(tmp_path: Path) -> BrokerProcess:
    # Timeouts of the coordinator's own are kept far from the kills' downtime.
    return BrokerProcess(tmp_path / "data", {"group.initial.rebalance.delay.ms": 0}).start()


def _check_exactly_once(broker: BrokerProcess, records: int) -> None:
    values = read_committed(broker.bootstrap, "eos-out", PARTITIONS, records)
    duplicates = sorted({v for v in values if values.count(v) > 1})
    missing = sorted(set(map(value_of, range(records))) - set(values))
    assert not duplicates and not missing, (
        f"{len(values)} values for {records} inputs; duplicates {duplicates[:10]}, missing {missing[:10]}")


def test_confluent_kafka_consume_transform_produce_survives_kill_9(tmp_path: Path) -> None:
    kills = int(os.environ.get("KCOORD_EOS_KILLS", "5"))
    records = max(400, kills * 60)
    broker = _start(tmp_path)
    try:
        create_topics(broker.bootstrap, {"eos-in": PARTITIONS, "eos-out": PARTITIONS})
        ends = seed(broker.bootstrap, "eos-in", PARTITIONS, records)
        app = ConfluentApp(broker.bootstrap, "eos-in", "eos-out", ends, deadline=60 + kills * 25)
        killer = Killer(broker, app.progress, kills, seed=0xE05 + kills)
        app.start()
        killer.start()
        app.join(max(1.0, app.deadline - time.monotonic()) + 30)
        killer.join(90)
        assert not app.is_alive(), f"the application is stuck; steps {app.log[-15:]}"
        assert app.error is None, f"{app.error!r}; steps {app.log[-15:]}"
        assert killer.failure is None, killer.failure
        assert killer.done == kills, f"only {killer.done} of {kills} kills landed before the input ran out"
        _check_exactly_once(broker, records)
    finally:
        broker.stop()
