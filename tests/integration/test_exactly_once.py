"""Exactly-once under kill -9: a consume-transform-produce application on real clients, the real
broker process killed at random points, and at the end each input record exactly once in the
output as a read_committed consumer reads it: no duplicate, no gap.

The confluent-kafka run kills the broker at least five times (``KCOORD_EOS_KILLS`` raises it:
``make chaos`` runs a longer soak); kafka-python's and aiokafka's transactional producers run
the same loop with fewer kills.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from protocol.api_keys import ApiKey
from tests.support.broker_process import BrokerProcess
from tests.support.clients import wait_until
from tests.support.eos import (
    AiokafkaApp,
    ConfluentApp,
    KafkaPythonApp,
    Killer,
    create_topics,
    read_committed,
    seed,
    value_of,
)
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

PARTITIONS = 3


def _start(tmp_path: Path) -> BrokerProcess:
    # Timeouts of the coordinator's own are kept far from the kills' downtime.
    return BrokerProcess(tmp_path / "data", {"group.initial.rebalance.delay.ms": 0}).start()


def _transaction_state(client: WireClient, transactional_id: str) -> str:
    reply = client.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]})
    return str(reply.transaction_states[0].transaction_state)


def _check_exactly_once(broker: BrokerProcess, records: int) -> None:
    values = read_committed(broker.bootstrap, "eos-out", PARTITIONS, records)
    duplicates = sorted({v for v in values if values.count(v) > 1})
    missing = sorted(set(map(value_of, range(records))) - set(values))
    assert not duplicates and not missing, (
        f"{len(values)} values for {records} inputs; duplicates {duplicates[:10]}, missing {missing[:10]}")


def test_confluent_kafka_consume_transform_produce_survives_kill_9(tmp_path: Path) -> None:
    kills = int(os.environ.get("KCOORD_EOS_KILLS", "5"))
    # Headroom: on a busy machine the application can commit several more transactions
    # between the killer's aim and its kill, and the input must outlast every kill.
    records = max(800, kills * 160)
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
        _check_exactly_once(broker, records)
        assert killer.done == kills, (f"only {killer.done} of {kills} kills landed before the input ran out: "
                                      f"{killer.log}, {app.progress.commits} commits")
    finally:
        broker.stop()


@pytest.mark.parametrize("app_class", [KafkaPythonApp, AiokafkaApp], ids=["kafka-python", "aiokafka"])
def test_python_clients_consume_transform_produce_survives_kill_9(tmp_path: Path,
                                                                   app_class: type[KafkaPythonApp]) -> None:
    kills, records = 2, 200
    broker = _start(tmp_path)
    try:
        create_topics(broker.bootstrap, {"eos-in": PARTITIONS, "eos-out": PARTITIONS})
        ends = seed(broker.bootstrap, "eos-in", PARTITIONS, records)
        app = app_class(broker.bootstrap, "eos-in", "eos-out", ends, batch=4, deadline=120)
        killer = Killer(broker, app.progress, kills, seed=0xE06)
        app.start()
        killer.start()
        app.join(max(1.0, app.deadline - time.monotonic()) + 30)
        killer.join(90)
        assert not app.is_alive(), f"the application is stuck; steps {app.log[-15:]}"
        assert app.error is None, f"{app.error!r}; steps {app.log[-15:]}"
        assert killer.failure is None, killer.failure
        _check_exactly_once(broker, records)
        assert killer.done == kills, (f"only {killer.done} of {kills} kills landed before the input ran out: "
                                      f"{killer.log}, {app.progress.commits} commits")
    finally:
        broker.stop()


def test_an_application_killed_mid_transaction_is_fenced_by_its_next_instance(tmp_path: Path) -> None:
    """kill -9 of the client: its open transaction is aborted when the next instance (same
    transactional id, same static group member) starts, which resumes from the committed offsets."""
    # Enough input that the first instance is still mid-run, with transactions open most of the
    # time, when the test looks: 400 records took it about 0.3 s, which a busy machine missed.
    records = 3000
    broker = _start(tmp_path)
    try:
        create_topics(broker.bootstrap, {"eos-in": PARTITIONS, "eos-out": PARTITIONS})
        ends = seed(broker.bootstrap, "eos-in", PARTITIONS, records)
        command = [sys.executable, "-m", "tests.support.eos", broker.bootstrap, "eos-in", "eos-out", json.dumps(ends)]
        first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert first.stdout is not None
            target = random.Random(0xE07).randint(3, 8)
            for line in first.stdout:
                if line.strip() == f"committed {target}":
                    break
            else:
                pytest.fail(f"the first instance ended before {target} commits: {first.wait()}")
            with WireClient(broker.host, broker.port) as client:
                wait_until(lambda: _transaction_state(client, "ctp-app") == "Ongoing", 30,
                           "the first instance to be inside a transaction")
                first.kill()  # SIGKILL, inside that transaction unless it just ended
                first.wait(10)
                interrupted = _transaction_state(client, "ctp-app") == "Ongoing"
        finally:
            first.kill()
            first.wait(10)
        second = subprocess.run(command, capture_output=True, text=True, timeout=150)
        assert second.returncode == 0, second.stderr[-3000:]
        _check_exactly_once(broker, records)
        if interrupted:  # else the transaction ended between the check and the kill
            assert "a new producer fences producer" in broker.log()
    finally:
        broker.stop()
