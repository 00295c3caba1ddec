"""``kcoord groups`` / ``kcoord offsets`` as a subprocess against the real broker process.

Every command is run the way an operator runs it; its output (table and JSON) and exit
code are checked, and its effect is checked through the Kafka protocol (OffsetFetch,
DescribeGroups) or a real kafka-python consumer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import REPO, BrokerProcess
from tests.support.clients import learn_partitions, wait_until
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

TP = tuple[str, int]
RECORDS = 20  # per partition of the reset topic: 10 two hours old, then 10 ten minutes old


# ---------------------------------------------------------------------- helpers


def kcoord(broker: BrokerProcess, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
    """Run ``kcoord ARGS --bootstrap-server <broker>`` and check its exit code."""
    proc = subprocess.run([sys.executable, "-m", "kcoord", *args, "--bootstrap-server", broker.bootstrap],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == expect, (
        f"kcoord {' '.join(args)} exited {proc.returncode}, expected {expect}\n"
        f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def kcoord_json(broker: BrokerProcess, *args: str) -> Any:
    return json.loads(kcoord(broker, *args, "--output", "json").stdout)


def rows(stdout: str, first: str) -> list[list[str]]:
    """Table rows (whitespace-split) whose first cell is ``first``."""
    return [line.split() for line in stdout.splitlines() if line.split()[:1] == [first]]


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    with WireClient(broker.host, broker.port) as client:
        body = client.request(19, 4, {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout_ms": 5000, "validate_only": False})
    assert [(t.name, t.error_code) for t in body.topics] == [(name, 0)]


def produce(broker: BrokerProcess, topic: str, per_partition: dict[int, list[int]]) -> None:
    """Records with the given timestamps (ms), per partition, through kafka-python."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    try:
        for partition, stamps in per_partition.items():
            for i, stamp in enumerate(stamps):
                producer.send(topic, value=f"{partition}-{i}".encode(), partition=partition, timestamp_ms=stamp)
        producer.flush(30)
    finally:
        producer.close()


def commit(broker: BrokerProcess, group: str, offsets: dict[TP, int], metadata: str = "") -> None:
    """An administrative OffsetCommit v8 (generation -1, no member) over the raw protocol."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                             "committed_leader_epoch": -1, "committed_metadata": metadata})
    with WireClient(broker.host, broker.port) as client:
        body = client.request(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                     "group_instance_id": None,
                                     "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    assert {p.error_code for t in body.topics for p in t.partitions} == {0}


def committed(broker: BrokerProcess, group: str) -> dict[TP, tuple[int, str]]:
    """The group's committed (offset, metadata) by partition, through OffsetFetch v8."""
    with WireClient(broker.host, broker.port) as client:
        body = client.request(9, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": False})
    (result,) = body.groups
    assert result.error_code == 0
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata)
            for t in result.topics for p in t.partitions if p.committed_offset >= 0}


def offsets_of(broker: BrokerProcess, group: str) -> dict[TP, int]:
    return {tp: offset for tp, (offset, _) in committed(broker, group).items()}


def group_state(broker: BrokerProcess, group: str) -> str:
    with WireClient(broker.host, broker.port) as client:
        state: str = client.request(15, 5, {"groups": [group]}).groups[0].group_state
    return state


class LiveConsumer:
    """A kafka-python consumer polled from the test's thread until it owns every partition.

    It does not commit by itself; its heartbeat thread keeps it in the group between polls.
    """

    def __init__(self, broker: BrokerProcess, group: str, topic: str, partitions: int) -> None:
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=group, client_id=f"{group}-client",
            enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=10000,
            heartbeat_interval_ms=500, max_poll_records=1)
        self.consumer.subscribe([topic])
        learn_partitions(self.consumer, [topic])
        self.polled: list[Any] = []

        def owns_all() -> bool:
            for records in self.consumer.poll(timeout_ms=100).values():
                self.polled.extend(records)
            return len(self.consumer.assignment()) == partitions

        wait_until(owns_all, 30, f"the consumer of {group} to own {partitions} partitions")

    def commit(self, topic: str, offsets: dict[int, int]) -> None:
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        self.consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})

    def close(self) -> None:
        self.consumer.close()


# ---------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the whole module; each test uses its own groups and topics."""
    broker = BrokerProcess(tmp_path_factory.mktemp("admin-cli"), {"group.initial.rebalance.delay.ms": 300}).start()
    yield broker
    assert broker.stop() == 0, broker.log()
    assert "Traceback" not in broker.log()


@pytest.fixture(scope="module")
def reset_topic(shared: BrokerProcess) -> str:
    """Topic ``r``: 2 partitions of 20 records; offsets 0-9 are 2 h old, 10-19 are 10 min old."""
    now = int(time.time() * 1000)
    stamps = [now - 7_200_000] * 10 + [now - 600_000] * 10
    create_topic(shared, "r", 2)
    produce(shared, "r", {0: stamps, 1: stamps})
    return "r"


# ---------------------------------------------------------------------- groups


def test_describe_and_list_a_live_group_with_lag(shared: BrokerProcess) -> None:
    create_topic(shared, "lag", 3)
    produce(shared, "lag", {p: [int(time.time() * 1000)] * 10 for p in range(3)})
    commit(shared, "idle-group", {("lag", 0): 1})
    live = LiveConsumer(shared, "lag-group", "lag", 3)
    try:
        live.commit("lag", {0: 4, 1: 7})  # 10 records each; partition 2 never committed

        described = kcoord(shared, "groups", "describe", "lag-group")
        assert described.stdout.startswith("Group 'lag-group': state Stable, type classic, protocol consumer/range, 1 member,")
        table = rows(described.stdout, "lag-group")
        assert [r[:6] for r in table] == [
            ["lag-group", "lag", "0", "4", "10", "6"],
            ["lag-group", "lag", "1", "7", "10", "3"],
            ["lag-group", "lag", "2", "-", "10", "-"],
        ]
        for r in table:  # CONSUMER-ID, HOST, CLIENT-ID of the one member
            assert r[6].startswith("lag-group-client-") and "127.0.0.1" in r[7] and r[8] == "lag-group-client"

        document = kcoord_json(shared, "groups", "describe", "lag-group")
        assert (document["group"], document["state"], document["protocol_type"], document["protocol"]) == (
            "lag-group", "Stable", "consumer", "range")
        assert document["coordinator"]["port"] == shared.port
        assert [(o["partition"], o["current_offset"], o["log_end_offset"], o["lag"]) for o in document["offsets"]] == [
            (0, 4, 10, 6), (1, 7, 10, 3), (2, None, 10, None)]
        (member,) = document["members"]
        assert member["client_id"] == "lag-group-client" and member["subscription"] == ["lag"]
        assert member["assignment"] == [{"topic": "lag", "partition": p} for p in range(3)]

        members = kcoord(shared, "groups", "describe", "lag-group", "--members")
        (row,) = rows(members.stdout, "lag-group")
        assert row[1] == member["member_id"] and row[2] == "-" and row[4:] == ["lag-group-client", "3", "lag(0,1,2)"]
        assert "LOG-END-OFFSET" not in members.stdout

        listed = kcoord(shared, "groups", "list")
        assert ["lag-group", "classic", "Stable", "consumer"] in rows(listed.stdout, "lag-group")
        assert ["idle-group", "classic", "Empty", "-"] in rows(listed.stdout, "idle-group")
        stable = kcoord_json(shared, "groups", "list", "--state", "stable")["groups"]
        assert {"group": "lag-group", "type": "classic", "state": "Stable", "protocol_type": "consumer"} in stable
        assert all(g["state"] == "Stable" for g in stable)
        empty = kcoord(shared, "groups", "list", "--state", "Empty", "--state", "Dead").stdout
        assert rows(empty, "idle-group") and not rows(empty, "lag-group")
    finally:
        live.close()


def test_describe_unknown_group_fails(shared: BrokerProcess) -> None:
    result = kcoord(shared, "groups", "describe", "no-such-group", expect=1)
    assert result.stderr == "kcoord: group 'no-such-group' does not exist: GROUP_ID_NOT_FOUND (69)\n"


def test_an_active_group_refuses_changes_until_its_consumers_stop(shared: BrokerProcess) -> None:
    create_topic(shared, "busy", 2)
    produce(shared, "busy", {0: [int(time.time() * 1000)] * 5, 1: [int(time.time() * 1000)] * 5})
    live = LiveConsumer(shared, "busy-group", "busy", 2)
    try:
        live.commit("busy", {0: 2, 1: 3})
        refused = kcoord(shared, "offsets", "reset", "busy-group", "--topic", "busy", "--to-earliest",
                         "--execute", expect=4)
        assert "group 'busy-group' is Stable with 1 member" in refused.stderr
        assert "stop its consumers first" in refused.stderr
        dry = kcoord(shared, "offsets", "reset", "busy-group", "--topic", "busy", "--to-earliest")
        assert [r[3:5] for r in rows(dry.stdout, "busy-group")] == [["2", "0"], ["3", "0"]]
        assert "--execute will be refused" in dry.stderr

        deleted = kcoord(shared, "groups", "delete", "busy-group", expect=4)
        assert "NON_EMPTY_GROUP (68)" in deleted.stderr and "stop its consumers" in deleted.stderr
        subscribed = kcoord(shared, "offsets", "delete", "busy-group", "--topic", "busy", expect=4)
        assert "still subscribes to busy (GROUP_SUBSCRIBED_TO_TOPIC (86))" in subscribed.stderr
        assert offsets_of(shared, "busy-group") == {("busy", 0): 2, ("busy", 1): 3}
    finally:
        live.close()
    wait_until(lambda: group_state(shared, "busy-group") == "Empty", 15, "the group to be Empty")

    removed = kcoord_json(shared, "offsets", "delete", "busy-group", "--topic", "busy:1")
    assert removed == {"group": "busy-group",
                       "deleted": [{"topic": "busy", "partition": 1, "had_offset": True, "offset": 3}]}
    assert offsets_of(shared, "busy-group") == {("busy", 0): 2}
    text = kcoord(shared, "offsets", "delete", "busy-group", "--topic", "busy").stdout
    assert rows(text, "busy-group") == [["busy-group", "busy", "0", "2"], ["busy-group", "busy", "1", "-"]]
    assert offsets_of(shared, "busy-group") == {}

    assert kcoord(shared, "groups", "delete", "busy-group").stdout == "Deleted group 'busy-group' and its offsets.\n"
    assert group_state(shared, "busy-group") == "Dead"
    assert not rows(kcoord(shared, "groups", "list").stdout, "busy-group")
    again = kcoord(shared, "groups", "delete", "busy-group", expect=1)
    assert "GROUP_ID_NOT_FOUND (69)" in again.stderr


# ---------------------------------------------------------------------- reset strategies


def _iso(delta: timedelta) -> str:
    return (datetime.now(UTC) + delta).isoformat(timespec="seconds").replace("+00:00", "Z")


RESETS: list[tuple[str, list[str], dict[int, int], dict[int, int]]] = [
    # id, options, committed before (r-0, r-1), committed after
    ("earliest", ["--topic", "r", "--to-earliest"], {0: 5, 1: 15}, {0: 0, 1: 0}),
    ("latest", ["--topic", "r", "--to-latest"], {0: 5, 1: 15}, {0: 20, 1: 20}),
    ("current", ["--all-topics", "--to-current"], {0: 5, 1: 15}, {0: 5, 1: 15}),
    ("offset-clamped", ["--topic", "r", "--to-offset", "1000"], {0: 5, 1: 15}, {0: 20, 1: 20}),
    ("shift-back-clamped", ["--topic", "r", "--shift-by", "-10"], {0: 5, 1: 15}, {0: 0, 1: 5}),
    ("one-partition", ["--topic", "r:1", "--to-earliest"], {0: 5, 1: 15}, {0: 5, 1: 0}),
    ("datetime", ["--topic", "r", "--to-datetime", "<1h ago>"], {0: 5, 1: 15}, {0: 10, 1: 10}),
    ("datetime-future", ["--topic", "r", "--to-datetime", "<in 1h>"], {0: 5, 1: 15}, {0: 20, 1: 20}),
    ("duration", ["--topic", "r", "--by-duration", "PT1H"], {0: 5, 1: 15}, {0: 10, 1: 10}),
    ("from-file", ["--from-file", "<file>"], {0: 5, 1: 15}, {0: 3, 1: 17}),
    ("nearest", ["--topic", "r", "--to-nearest"], {0: 21, 1: 7}, {0: 20, 1: 7}),
]


@pytest.mark.parametrize(("name", "options", "before", "after"), RESETS, ids=[r[0] for r in RESETS])
def test_reset_strategy_dry_run_then_execute(shared: BrokerProcess, reset_topic: str, tmp_path: Path, name: str,
                                             options: list[str], before: dict[int, int],
                                             after: dict[int, int]) -> None:
    group = f"reset-{name}"
    plan_file = tmp_path / "plan.csv"
    plan_file.write_text("topic,partition,offset\nr,0,3\nr,1,17\n", encoding="utf-8")
    substitutes = {"<1h ago>": _iso(timedelta(hours=-1)), "<in 1h>": _iso(timedelta(hours=1)),
                   "<file>": str(plan_file)}
    options = [substitutes.get(o, o) for o in options]
    commit(shared, group, {(reset_topic, p): o for p, o in before.items()})
    start = {(reset_topic, p): o for p, o in before.items()}

    plan = kcoord_json(shared, "offsets", "reset", group, *options)
    assert plan["executed"] is False and plan["group"] == group
    assert {p["partition"]: p["new_offset"] for p in plan["partitions"]} == {
        p: after[p] for p in after if "r:1" not in options or p == 1}
    assert all((p["log_start_offset"], p["log_end_offset"]) == (0, RECORDS) for p in plan["partitions"])
    assert offsets_of(shared, group) == start  # a dry run commits nothing

    done = kcoord(shared, "offsets", "reset", group, *options, "--execute")
    table = rows(done.stdout, group)
    assert [(int(r[2]), r[4]) for r in table] == [(p["partition"], str(p["new_offset"])) for p in plan["partitions"]]
    assert "Committed" in done.stdout
    assert offsets_of(shared, group) == {(reset_topic, p): o for p, o in after.items()}


def test_shift_by_needs_a_committed_offset(shared: BrokerProcess, reset_topic: str) -> None:
    commit(shared, "shift-sparse", {(reset_topic, 0): 4})
    result = kcoord(shared, "offsets", "reset", "shift-sparse", "--topic", "r", "--shift-by", "1", expect=2)
    assert "cannot shift r-1: the group has no committed offset there" in result.stderr
    assert offsets_of(shared, "shift-sparse") == {(reset_topic, 0): 4}


def test_reset_names_unknown_topics_and_partitions(shared: BrokerProcess, reset_topic: str) -> None:
    unknown = kcoord(shared, "offsets", "reset", "g", "--topic", "nope", "--to-earliest", expect=2)
    assert unknown.stderr == "kcoord: topic 'nope' does not exist\n"
    partition = kcoord(shared, "offsets", "reset", "g", "--topic", "r:0,5", "--to-earliest", expect=2)
    assert partition.stderr == "kcoord: topic 'r' has partitions 0-1; no partition 5\n"


# ---------------------------------------------------------------------- files


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_export_then_import_round_trip(shared: BrokerProcess, reset_topic: str, tmp_path: Path, fmt: str) -> None:
    group = f"export-{fmt}"
    commit(shared, group, {(reset_topic, 0): 6, (reset_topic, 1): 11}, metadata='note, "quoted" ☃')
    original = committed(shared, group)

    to_stdout = kcoord(shared, "offsets", "export", group, "--format", fmt).stdout
    path = tmp_path / f"offsets.{fmt}"
    summary = kcoord_json(shared, "offsets", "export", group, "--format", fmt, "--file", str(path))
    assert summary == {"group": group, "file": str(path), "format": fmt, "offsets": 2}
    assert path.read_text(encoding="utf-8") == to_stdout
    if fmt == "csv":
        assert to_stdout.splitlines()[:2] == ["topic,partition,offset,metadata", 'r,0,6,"note, ""quoted"" ☃"']
    else:
        assert json.loads(to_stdout)[1] == {"topic": "r", "partition": 1, "offset": 11, "metadata": 'note, "quoted" ☃'}

    kcoord(shared, "groups", "delete", group)
    assert committed(shared, group) == {}
    dry = kcoord(shared, "offsets", "import", group, "--file", str(path))
    assert [r[2:5] for r in rows(dry.stdout, group)] == [["0", "-", "6"], ["1", "-", "11"]]
    assert f"group '{group}' does not exist; --execute would create it" in dry.stderr
    assert committed(shared, group) == {}
    # the group was deleted: bringing it back is creating a group, which must be asked for
    refused = kcoord(shared, "offsets", "import", group, "--file", str(path), "--execute", expect=2)
    assert "--allow-new-group" in refused.stderr
    assert committed(shared, group) == {}
    kcoord(shared, "offsets", "import", group, "--file", str(path), "--execute", "--allow-new-group")
    assert committed(shared, group) == original


def test_bad_import_file_exits_2(shared: BrokerProcess, tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("r,0,5\nr,zero,5\n", encoding="utf-8")
    result = kcoord(shared, "offsets", "import", "g", "--file", str(path), expect=2)
    assert result.stderr == f"kcoord: {path}: line 2: partition must be an integer, not 'zero'\n"
    missing = kcoord(shared, "offsets", "import", "g", "--file", str(tmp_path / "none.csv"), expect=2)
    assert "cannot read" in missing.stderr and "no such file" in missing.stderr


def test_restore_from_file_then_a_consumer_resumes_there(shared: BrokerProcess, tmp_path: Path) -> None:
    create_topic(shared, "resume", 2)
    produce(shared, "resume", {0: [int(time.time() * 1000)] * 10, 1: [int(time.time() * 1000)] * 10})
    commit(shared, "resume-group", {("resume", 0): 9, ("resume", 1): 9})
    path = tmp_path / "restore.json"
    path.write_text(json.dumps([{"topic": "resume", "partition": 0, "offset": 3, "metadata": "restored"},
                                {"topic": "resume", "partition": 1, "offset": 6}]), encoding="utf-8")

    plan = kcoord_json(shared, "offsets", "restore", "--group", "resume-group", "--from-file", str(path))
    assert [(p["partition"], p["current_offset"], p["new_offset"]) for p in plan["partitions"]] == [(0, 9, 3), (1, 9, 6)]
    assert offsets_of(shared, "resume-group") == {("resume", 0): 9, ("resume", 1): 9}
    kcoord(shared, "offsets", "restore", "--group", "resume-group", "--from-file", str(path), "--execute")
    assert committed(shared, "resume-group") == {("resume", 0): (3, "restored"), ("resume", 1): (6, "")}

    live = LiveConsumer(shared, "resume-group", "resume", 2)
    try:
        def has_read_both() -> bool:
            for records in live.consumer.poll(timeout_ms=100).values():
                live.polled.extend(records)
            return {r.partition for r in live.polled} == {0, 1}

        wait_until(has_read_both, 15, "records from both partitions")
        first = {p: min(r.offset for r in live.polled if r.partition == p) for p in (0, 1)}
        assert first == {0: 3, 1: 6}
        refused = kcoord(shared, "offsets", "restore", "--group", "resume-group", "--from-file", str(path),
                         "--execute", expect=4)
        assert "stop its consumers first" in refused.stderr
    finally:
        live.close()


def test_unreachable_broker_exits_3(tmp_path: Path) -> None:
    import socket

    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    proc = subprocess.run([sys.executable, "-m", "kcoord", "groups", "list", "--bootstrap-server",
                           f"127.0.0.1:{port}", "--timeout", "2"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 3
    assert proc.stderr == f"kcoord: cannot reach 127.0.0.1:{port}: connection refused\n"
    assert proc.stdout == ""
