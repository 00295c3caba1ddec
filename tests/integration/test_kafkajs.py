"""kafkajs (Node) against the real broker process: groups, admin, restarts, mixed groups.

Each scenario is a small script in tests/js/ that prints JSON lines; the last line is
{"result": ...} or {"error": ...}. kafkajs is installed from tests/js/package-lock.json
(``npm ci``) the first time it is missing; without node or npm on PATH these tests skip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.support.broker_process import REPO, BrokerProcess
from tests.support.clients import KafkaPythonConsumer, create_topic, wait_until
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

JS = REPO / "tests" / "js"
FAST = {"group.initial.rebalance.delay.ms": 1000}
NO_DELAY = {"group.initial.rebalance.delay.ms": 0}
GROUP_ID_NOT_FOUND = 69


@pytest.fixture(scope="session")
def node() -> str:
    """The node binary, with kafkajs installed in tests/js."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("the kafkajs tests need node and npm on PATH")
    if not (JS / "node_modules" / "kafkajs" / "package.json").exists():
        try:
            installed = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=JS, capture_output=True,
                                       text=True, timeout=180)
        except subprocess.TimeoutExpired:
            pytest.fail("npm ci in tests/js took longer than 180 s")
        assert installed.returncode == 0, f"npm ci in tests/js failed:\n{installed.stdout}\n{installed.stderr}"
    return node


def _parse(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def run_script(node: str, script: str, broker: BrokerProcess, timeout: float = 30, **options: Any) -> Any:
    """Run tests/js/<script> to completion; returns its result (fails with its stderr otherwise)."""
    options.update(bootstrap=broker.bootstrap, timeoutMs=int((timeout - 3) * 1000))
    try:
        done = subprocess.run([node, script, json.dumps(options)], cwd=JS, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{script} ran past {timeout}s:\n{exc.stderr!r}\nbroker log:\n{broker.log()}") from None
    lines = _parse(done.stdout)
    last = lines[-1] if lines else {}
    if done.returncode != 0 or "result" not in last:
        raise AssertionError(f"{script} exited {done.returncode}: {last.get('error', done.stdout)}\n"
                             f"stderr:\n{done.stderr[-4000:]}\nbroker log:\n{broker.log()[-4000:]}")
    return last["result"]


class StreamingScript:
    """A long-running script whose JSON lines are collected as they arrive; closing its
    stdin asks it to leave the group and exit."""

    def __init__(self, node: str, script: str, broker: BrokerProcess, timeout: float = 60, **options: Any) -> None:
        options.update(bootstrap=broker.bootstrap, timeoutMs=int(timeout * 1000))
        self.script = script
        self.lines: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self.proc = subprocess.Popen([node, script, json.dumps(options)], cwd=JS, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.append(json.loads(line))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [line for line in list(self.lines) if line.get("event") == kind]

    def failed(self) -> str | None:
        errors = [line["error"] for line in list(self.lines) if "error" in line]
        return errors[0] if errors else None

    def stop(self, timeout: float = 20) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(f"{self.script} did not leave within {timeout}s") from None
        last = self.lines[-1] if self.lines else {}
        assert "result" in last, f"{self.script}: {last}\n{''.join(self.stderr)[-4000:]}"
        return last["result"]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


@contextmanager
def _explained(broker: BrokerProcess, what: Any) -> Iterator[None]:
    """A failed assertion carries the script's output and the broker's log."""
    try:
        yield
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nscript output: {what}\nbroker log:\n{broker.log()[-6000:]}") from exc


def _committed(broker: BrokerProcess, group: str) -> dict[tuple[str, int], int]:
    with WireClient(broker.host, broker.port) as client:
        topics = client.request(9, 7, {"group_id": group, "topics": None, "require_stable": False}).topics
    return {(t.name, p.partition_index): p.committed_offset for t in topics for p in t.partitions}


def test_group_of_two_kafkajs_consumers_reads_each_message_once_and_commits(
    broker_factory: Any, node: str
) -> None:
    broker: BrokerProcess = broker_factory(FAST)
    create_topic(broker.bootstrap, "js-orders", 4)
    result = run_script(node, "group.js", broker, 45, topic="js-orders", group="js-app", partitions=4, count=40)

    with _explained(broker, result):
        first, second = result["consumers"]
        assert first["assignment"] and second["assignment"]
        assert sorted(first["assignment"] + second["assignment"]) == [0, 1, 2, 3]
        values: list[str] = []
        for consumer in (first, second):
            assert {p for p, _, _ in consumer["messages"]} <= set(consumer["assignment"])
            values += [v for _, _, v in consumer["messages"]]
        assert sorted(values) == sorted(f"m-{n}" for n in range(40))  # every message, exactly once
        assert result["committed"] == [{"partition": p, "offset": "10"} for p in range(4)]
        assert _committed(broker, "js-app") == {("js-orders", p): 10 for p in range(4)}


def test_kafkajs_admin_lists_describes_fetches_sets_resets_and_deletes(broker_factory: Any, node: str) -> None:
    broker: BrokerProcess = broker_factory(NO_DELAY)
    create_topic(broker.bootstrap, "js-admin-topic", 2)
    run_script(node, "produce.js", broker, topic="js-admin-topic", partitions=2, count=10)
    consumed = run_script(node, "consume.js", broker, topic="js-admin-topic", group="js-admin", want=10)
    assert consumed["committed"] == [{"partition": 0, "offset": 5}, {"partition": 1, "offset": 5}]

    steps = run_script(node, "admin.js", broker, 45, topic="js-admin-topic", group="js-admin")

    assert {"groupId": "js-admin", "protocolType": "consumer"} in steps["listed"]
    assert steps["described"] == [
        {"groupId": "js-admin", "state": "Empty", "protocolType": "consumer", "members": 0},
        {"groupId": "no-such-group", "state": "Dead", "protocolType": "", "members": 0},
    ]
    assert steps["fetched"] == [[0, "5"], [1, "5"]]
    assert steps["afterSet"] == [[0, "1"], [1, "5"]]
    # kafkajs commits Kafka's "earliest" sentinel (-2) and resolves it when it next consumes.
    assert steps["afterReset"] == [[0, "-2"], [1, "-2"]]
    assert steps["deleted"] == [{"groupId": "js-admin", "errorCode": 0}]
    assert "js-admin" not in steps["listedAfterDelete"]
    assert steps["deleteUnknown"] == {"name": "KafkaJSDeleteGroupsError",
                                      "groups": [["no-such-group", GROUP_ID_NOT_FOUND]]}
    assert _committed(broker, "js-admin") == {}
    assert steps["created"] is True
    assert steps["createdPartitions"] == [0, 1, 2]
    assert steps["topicsAfterDelete"] == ["js-admin-topic"]


def test_kafkajs_consumer_resumes_from_committed_offsets_after_broker_restart(
    broker_factory: Any, node: str
) -> None:
    broker: BrokerProcess = broker_factory(NO_DELAY)
    create_topic(broker.bootstrap, "js-resume", 2)
    run_script(node, "produce.js", broker, topic="js-resume", partitions=2, count=20)
    first = run_script(node, "consume.js", broker, topic="js-resume", group="js-resumer", want=20)
    assert sorted(v for _, _, v in first["messages"]) == sorted(f"m-{n}" for n in range(20))

    broker.restart()
    assert _committed(broker, "js-resumer") == {("js-resume", 0): 10, ("js-resume", 1): 10}
    run_script(node, "produce.js", broker, topic="js-resume", partitions=2, start=20, count=10)
    second = run_script(node, "consume.js", broker, topic="js-resume", group="js-resumer", want=10)

    assert sorted(v for _, _, v in second["messages"]) == sorted(f"m-{n}" for n in range(20, 30))
    assert {(p, o) for p, o, _ in second["messages"]} == {(p, o) for p in (0, 1) for o in range(10, 15)}
    assert second["committed"] == [{"partition": 0, "offset": 15}, {"partition": 1, "offset": 15}]


def test_kafkajs_and_kafka_python_share_a_group_through_roundrobin(broker_factory: Any, node: str) -> None:
    """kafkajs's own assigners use their own protocol names ("RoundRobinAssigner"), which no
    other client offers; tests/js/lib.js gives kafkajs an assigner under Kafka's "roundrobin"."""
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    broker: BrokerProcess = broker_factory(FAST)
    create_topic(broker.bootstrap, "js-mixed", 6)
    python = KafkaPythonConsumer(broker.bootstrap, "js-mixed-group", "js-mixed",
                                 partition_assignment_strategy=[RoundRobinPartitionAssignor]).start()
    js = StreamingScript(node, "mixed.js", broker, 60, topic="js-mixed", group="js-mixed-group")
    try:
        def split() -> bool:
            assert js.failed() is None, js.failed()
            joins = js.events("joined")
            if not joins or len(python.assignment) != 3:
                return False
            mine = set(joins[-1]["assignment"])
            return len(mine) == 3 and mine | python.assignment == set(range(6))

        wait_until(split, 40, "kafkajs and kafka-python to get three partitions each")
        assert js.events("joined")[-1]["protocol"] == "roundrobin"
        with WireClient(broker.host, broker.port) as client:
            described = client.request(15, 5, {"groups": ["js-mixed-group"]}).groups[0]
        assert (described.group_state, described.protocol_type, described.protocol_data) == (
            "Stable", "consumer", "roundrobin")
        assert len(described.members) == 2
        assert "kcoord-js-mixed" in {m.client_id for m in described.members}

        run_script(node, "produce.js", broker, topic="js-mixed", partitions=6, count=60)

        def everything_read() -> bool:
            return len(js.events("message")) + len(python.messages) >= 60

        wait_until(everything_read, 20, "all 60 messages between the two consumers")
        from_js = [(m["partition"], m["value"]) for m in js.events("message")]
        from_python = [(p, v.decode()) for p, _, v in python.messages]
        assert {p for p, _ in from_js} == set(js.events("joined")[-1]["assignment"])
        assert {p for p, _ in from_python} == python.assignment
        assert sorted(v for _, v in from_js + from_python) == sorted(f"m-{n}" for n in range(60))
        assert js.stop()["read"] == len(from_js)
    finally:
        js.kill()
        python.stop()
