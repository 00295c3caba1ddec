"""``kcoord topics``, ``produce``, ``consume`` and the newcomer's group and offset fixes, against the real broker.

Every command runs as a subprocess the way an operator runs it; what it did is checked
through real clients (kafka-python, confluent-kafka) and the raw protocol, and what the
broker logged about administrative changes is read from its log.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.test_admin_cli import LiveConsumer, commit, group_state, offsets_of
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.clients import wait_until

pytestmark = pytest.mark.integration


def kcoord(broker: BrokerProcess, *args: str, expect: int = 0, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "kcoord", *args, "--bootstrap-server", broker.bootstrap],
                          cwd=REPO, capture_output=True, text=True, timeout=60, input=stdin)
    assert proc.returncode == expect, (
        f"kcoord {' '.join(args)} exited {proc.returncode}, expected {expect}\n"
        f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def kcoord_json(broker: BrokerProcess, *args: str, stdin: str | None = None) -> Any:
    return json.loads(kcoord(broker, *args, "--output", "json", stdin=stdin).stdout)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("topic-cli") / "data",
                         {"group.initial.rebalance.delay.ms": 0, "auto.create.topics.enable": "false"}).start()
    yield proc
    assert proc.stop() == 0, proc.log()
    assert "Traceback" not in proc.log()


# ---------------------------------------------------------------------- topics


def test_topic_lifecycle(server: BrokerProcess) -> None:
    created = kcoord(server, "topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=60000",
                     "--config", "compression.type=lz4")
    assert created.stdout == "Topic 'orders' created.\n"
    assert "already exists" in kcoord(server, "topics", "create", "orders", expect=2).stderr
    assert kcoord(server, "topics", "create", "orders", "--if-not-exists").returncode == 0
    bad = kcoord(server, "topics", "create", "bad", "--config", "no.such.config=1", expect=2)
    assert "Unknown topic config name: no.such.config" in bad.stderr and "INVALID_CONFIG" in bad.stderr

    listed = kcoord_json(server, "topics", "list")["topics"]
    assert {"topic": "orders", "partitions": 3, "replication_factor": 1, "internal": False} in listed

    described = kcoord_json(server, "topics", "describe", "orders")
    assert [(p["partition"], p["leader"], p["log_end_offset"]) for p in described["partitions"]] == [
        (0, 0, 0), (1, 0, 0), (2, 0, 0)]
    assert {c["name"]: (c["value"], c["source"]) for c in described["configs"]} == {
        "compression.type": ("lz4", "TOPIC_CONFIG"), "retention.ms": ("60000", "TOPIC_CONFIG")}
    every = kcoord_json(server, "topics", "describe", "orders", "--all-configs")["configs"]
    assert {c["name"]: c["source"] for c in every}["segment.bytes"] == "DEFAULT_CONFIG"

    kcoord(server, "topics", "alter", "orders", "--partitions", "4", "--config", "retention.ms=120000",
           "--delete-config", "compression.type")
    described = kcoord_json(server, "topics", "describe", "orders")
    assert len(described["partitions"]) == 4
    assert {c["name"]: c["value"] for c in described["configs"]} == {"retention.ms": "120000"}
    shrink = kcoord(server, "topics", "alter", "orders", "--partitions", "2", expect=2)
    assert "INVALID_PARTITIONS" in shrink.stderr

    assert kcoord(server, "topics", "delete", "orders").stdout == "Deleted topic 'orders'.\n"
    assert "does not exist" in kcoord(server, "topics", "describe", "orders", expect=2).stderr
    assert kcoord(server, "topics", "delete", "orders", "--if-exists").returncode == 0


def test_produce_and_consume_round_trip_with_real_clients(server: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    kcoord(server, "topics", "create", "events", "--partitions", "3")
    produced = kcoord_json(server, "produce", "events", "--key-separator", ":", "--header", "source=cli",
                           stdin="k1:first\nk2:second\nk1:third\n")
    assert produced["records"] == 3
    # keys land where kafka-python's default (murmur2) partitioner puts them
    producer = KafkaProducer(bootstrap_servers=server.bootstrap)
    try:
        expected_partition = producer.send("events", key=b"k1", value=b"from kafka-python").get(10).partition
    finally:
        producer.close()
    by_key = {p["partition"]: p["count"] for p in produced["partitions"]}
    assert by_key[expected_partition] >= 2  # k1's two records

    lines = kcoord(server, "consume", "events", "--partition", str(expected_partition), "--output", "json").stdout
    records = [json.loads(line) for line in lines.splitlines()]
    assert [(r["key"], r["value"]) for r in records if r["key"] == "k1"] == [
        ("k1", "first"), ("k1", "third"), ("k1", "from kafka-python")]
    assert records[0]["headers"] == [{"key": "source", "value": "cli"}]
    assert records[-1]["value"] == "from kafka-python"

    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    try:
        consumer.assign([TopicPartition("events", p) for p in range(3)])
        seen = sorted(m.value for m in consumer)
    finally:
        consumer.close()
    assert seen == [b"first", b"from kafka-python", b"second", b"third"]

    # the last record of each partition, key first
    last = kcoord(server, "consume", "events", "--offset", "-1", "--print-key").stdout.splitlines()
    assert "k1\tfrom kafka-python" in last and len(last) <= 2 and all("\t" in line for line in last)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_produce_is_read_by_confluent(server: BrokerProcess, codec: str) -> None:
    from confluent_kafka import Consumer

    topic = f"packed-{codec}"
    kcoord(server, "topics", "create", topic)
    kcoord(server, "produce", topic, "--compression", codec, *[a for i in range(5) for a in ("--value", f"v{i}")])
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"g-{codec}",
                         "auto.offset.reset": "earliest"})
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])

        def polled() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
            return len(got) >= 5

        wait_until(polled, 30, "confluent to read the compressed batch")
    finally:
        consumer.close()
    assert got == [b"v%d" % i for i in range(5)]
    assert kcoord(server, "consume", topic).stdout.splitlines() == [f"v{i}" for i in range(5)]


def test_delete_records(server: BrokerProcess, tmp_path: Any) -> None:
    kcoord(server, "topics", "create", "trimmed", "--partitions", "2")
    for partition in (0, 1):
        kcoord(server, "produce", "trimmed", "--partition", str(partition),
               *[a for i in range(10) for a in ("--value", f"{partition}-{i}")])
    result = kcoord_json(server, "topics", "delete-records", "trimmed", "--partition", "0", "--offset", "4")
    assert result == {"partitions": [{"topic": "trimmed", "partition": 0, "low_watermark": 4, "error": None}]}
    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({"partitions": [{"topic": "trimmed", "partition": 1, "offset": -1}], "version": 1}))
    kcoord(server, "topics", "delete-records", "--offset-json-file", str(plan))
    assert kcoord(server, "consume", "trimmed").stdout.splitlines() == [f"0-{i}" for i in range(4, 10)]
    beyond = kcoord(server, "topics", "delete-records", "trimmed", "--partition", "0", "--offset", "99", expect=1)
    assert "OFFSET_OUT_OF_RANGE" in beyond.stderr


# ---------------------------------------------------------------------- groups and offsets


def test_groups_describe_as_kafka_consumer_groups_users_type_it(server: BrokerProcess) -> None:
    kcoord(server, "topics", "create", "lagging", "--partitions", "2")
    kcoord(server, "produce", "lagging", "--partition", "0", *[a for i in range(10) for a in ("--value", str(i))])
    commit(server, "lag-a", {("lagging", 0): 4})
    commit(server, "lag-b", {("lagging", 0): 9})

    by_option = kcoord(server, "groups", "describe", "--group", "lag-a").stdout
    assert by_option == kcoord(server, "groups", "describe", "lag-a").stdout
    assert "Total lag: 6 across 1 partition" in by_option

    both = kcoord_json(server, "groups", "describe", "--group", "lag-a", "--group", "lag-b")
    assert [(g["group"], g["total_lag"]) for g in both["groups"]] == [("lag-a", 6), ("lag-b", 1)]
    every = kcoord_json(server, "groups", "describe", "--all-groups")
    assert {"lag-a", "lag-b"} <= {g["group"] for g in every["groups"]}

    states = kcoord_json(server, "groups", "describe", "--group", "lag-a", "--state")["groups"]
    assert states == [{"group": "lag-a", "coordinator": {"node_id": 0, "host": server.host, "port": server.port},
                       "assignment_strategy": None, "state": "Empty", "members": 0}]
    text = kcoord(server, "groups", "describe", "--all-groups", "--state").stdout
    assert text.splitlines()[0].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                            "#MEMBERS"]
    assert "give either group names or --all-groups" in kcoord(
        server, "groups", "describe", "lag-a", "--all-groups", expect=2).stderr


def test_delete_all_groups_asks_first(server: BrokerProcess) -> None:
    kcoord(server, "topics", "create", "doomed", "--if-not-exists")
    commit(server, "doomed-1", {("doomed", 0): 0})
    commit(server, "doomed-2", {("doomed", 0): 0})
    refused = kcoord(server, "groups", "delete", "--all-groups", expect=2)
    assert "add --yes to confirm" in refused.stderr
    assert offsets_of(server, "doomed-1") == {("doomed", 0): 0}
    done = kcoord_json(server, "groups", "delete", "--all-groups", "--yes")
    assert {"doomed-1", "doomed-2"} <= set(done["deleted"]) and done["failed"] == []
    assert kcoord(server, "groups", "list").stdout == "No groups.\n"


def test_offsets_delete_of_a_missing_partition_is_a_usage_error(server: BrokerProcess) -> None:
    kcoord(server, "topics", "create", "three", "--partitions", "3")
    commit(server, "three-g", {("three", 0): 0})
    delete = kcoord(server, "offsets", "delete", "three-g", "--topic", "three:9", expect=2)
    reset = kcoord(server, "offsets", "reset", "three-g", "--topic", "three:7", "--to-earliest", expect=2)
    assert delete.stderr == "kcoord: topic 'three' has partitions 0-2; no partition 9\n"
    assert reset.stderr == "kcoord: topic 'three' has partitions 0-2; no partition 7\n"


def test_a_mistyped_group_is_named_and_not_created(server: BrokerProcess) -> None:
    kcoord(server, "topics", "create", "typo", "--if-not-exists")
    commit(server, "real-group", {("typo", 0): 0})
    dry = kcoord(server, "offsets", "reset", "raal-group", "--topic", "typo", "--to-earliest")
    assert "group 'raal-group' does not exist; --execute would create it" in dry.stderr
    refused = kcoord(server, "offsets", "reset", "raal-group", "--topic", "typo", "--to-earliest", "--execute",
                     expect=2)
    assert "group 'raal-group' does not exist" in refused.stderr
    assert group_state(server, "raal-group") == "Dead" and offsets_of(server, "raal-group") == {}
    kcoord(server, "offsets", "reset", "raal-group", "--topic", "typo", "--to-earliest", "--execute",
           "--allow-new-group")
    assert offsets_of(server, "raal-group") == {("typo", 0): 0}


def test_bad_time_is_a_short_error(server: BrokerProcess) -> None:
    result = kcoord(server, "offsets", "reset", "g", "--topic", "t", "--to-datetime", "noon", expect=2)
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and "bad time 'noon'" in lines[0]


def test_admin_changes_are_logged_by_the_broker(server: BrokerProcess) -> None:
    kcoord(server, "topics", "create", "audited", "--partitions", "2")
    kcoord(server, "produce", "audited", "--partition", "0", "--value", "a", "--value", "b")
    commit(server, "audit-g", {("audited", 0): 2})
    kcoord(server, "offsets", "reset", "audit-g", "--topic", "audited", "--to-earliest", "--execute")
    line = server.wait_for_log(r"admin: /127\.0\.0\.1 \(client kcoord-admin\) committed offsets of group audit-g")
    assert "audited-0 2 -> 0" in line and "audited-1 - -> 0" in line
    kcoord(server, "offsets", "delete", "audit-g", "--topic", "audited:1")
    assert "audited-1 0 -> -" in server.wait_for_log(r"deleted offsets of group audit-g")
    kcoord(server, "groups", "delete", "audit-g")
    deleted = server.wait_for_log(r"admin: .* deleted group audit-g with 1 committed offset: audited-0=0")
    assert "kcoord-admin" in deleted


def test_a_live_groups_commits_are_not_admin_changes(server: BrokerProcess) -> None:
    kcoord(server, "topics", "create", "busy-audit", "--partitions", "1")
    live = LiveConsumer(server, "busy-audit-g", "busy-audit", 1)
    try:
        live.commit("busy-audit", {0: 0})  # answered: anything it made the broker log is logged
    finally:
        live.close()
    assert not re.search(r"admin: .* group busy-audit-g", server.log())
