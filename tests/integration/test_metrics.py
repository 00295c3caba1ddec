"""Metrics and logs of the real broker process under real clients.

``--metrics-listen`` (the older name of ``--http-listen``) serves Prometheus text at /metrics
and a health check at /healthz;
the figures move as the load moves. ``--log-format json`` writes one JSON object per
line, and ``--request-log`` adds one line per request.
"""

from __future__ import annotations

import errno
import json
import re
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import REPO, BrokerProcess
from tests.support.clients import KafkaPythonConsumer, create_topic, wait_until
from tests.support.prometheus import Exposition, fetch, scrape
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

HEARTBEAT, OFFSET_COMMIT, API_VERSIONS = 12, 8, 18


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    """One broker with metrics, JSON logs and the request log; it must stop cleanly."""
    proc = BrokerProcess(
        tmp_path_factory.mktemp("metrics"), sets={"group.initial.rebalance.delay.ms": 0},
        extra_args=["--metrics-listen", "127.0.0.1:0", "--log-format", "json", "--request-log"],
    ).start()
    try:
        url = proc.http_url()
        yield proc, url
    finally:
        assert proc.stop() == 0, proc.log()


def _sum(exposition: Exposition, name: str, **labels: str) -> float:
    """A family's samples added up over the labels not given (e.g. every version of an API)."""
    wanted = set(labels.items())
    return sum(v for series, v in exposition.series(name).items() if wanted <= set(series))


def _requests(exposition: Exposition, api: str) -> float:
    return _sum(exposition, "kcoord_requests_total", api=api)


def _commit(client: WireClient, group: str, topic: str, partitions: int, offset: int) -> None:
    body = client.request(OFFSET_COMMIT, 8, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": None} for p in range(partitions)]}]})
    assert [p.error_code for t in body.topics for p in t.partitions] == [0] * partitions


def _heartbeat(client: WireClient) -> int:
    body = client.request(HEARTBEAT, 4, {"group_id": "nobody-here", "generation_id": 1, "member_id": "m",
                                         "group_instance_id": None})
    return int(body.error_code)


def test_metrics_follow_a_consumer_group_and_a_producer(metered: tuple[BrokerProcess, str]) -> None:
    proc, base = metered
    assert fetch(base + "/healthz")[::2] == (200, b"ok\n")
    before = scrape(base)
    assert before.get("kcoord_serving") == 1
    assert before.get("kcoord_groups", state="Stable") == 0

    create_topic(proc.bootstrap, "metered", 2)
    # Exactly known traffic on the raw wire: 5 OffsetCommit v8 of 2 partitions, 5 Heartbeats.
    with WireClient(proc.host, proc.port) as client:
        for i in range(5):
            _commit(client, "raw-committer", "metered", 2, 10 + i)
        assert all(_heartbeat(client) != 0 for _ in range(5))  # no such group: an error, still a request
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=proc.bootstrap, acks="all")
    try:
        for i in range(20):
            producer.send("metered", value=b"record-%d" % i, partition=i % 2)
        producer.flush(10)
    finally:
        producer.close(5)

    consumer = KafkaPythonConsumer(proc.bootstrap, "metered-group", "metered", auto_commit_interval_ms=100)
    consumer.start()
    try:
        wait_until(lambda: len(consumer.messages) >= 20, 20, "the consumer to read every record")

        def stable() -> bool:
            now = scrape(base)
            return (now.get("kcoord_groups", state="Stable") == 1 and now.get("kcoord_group_members") == 1
                    and now.get("kcoord_offsets_committed_total") >= before.get("kcoord_offsets_committed_total")
                    + 12 and _requests(now, "Heartbeat") >= _requests(before, "Heartbeat") + 6)

        wait_until(stable, 20, "one Stable group with one member that heartbeats and commits")
    finally:
        consumer.stop()

    def left() -> bool:
        now = scrape(base)
        return now.get("kcoord_groups", state="Stable") == 0 and now.get("kcoord_groups", state="Empty") == 2

    wait_until(left, 10, "the group to become Empty after its only member left")
    after = scrape(base)

    def grew(name: str, by: float = 1, **labels: str) -> None:
        assert _sum(after, name, **labels) - _sum(before, name, **labels) >= by, (name, labels)

    grew("kcoord_requests_total", 5, api="OffsetCommit", version="8")
    grew("kcoord_requests_total", 6, api="OffsetCommit")  # the consumer's commits on top
    grew("kcoord_requests_total", 6, api="Heartbeat")
    grew("kcoord_requests_total", 1, api="Produce")
    grew("kcoord_requests_total", 1, api="JoinGroup")
    grew("kcoord_requests_total", 1, api="SyncGroup")
    grew("kcoord_requests_total", 1, api="LeaveGroup")
    grew("kcoord_requests_total", 1, api="Fetch")
    # Each request is timed once: the histogram counts at least what the counter counted.
    for api in ("OffsetCommit", "Heartbeat", "Produce", "JoinGroup"):
        count = after.get("kcoord_request_duration_seconds_count", api=api)
        assert count >= _requests(after, api) - 1, api  # one may be in flight (a parked poll)
        assert after.get("kcoord_request_duration_seconds_bucket", api=api, le="+Inf") == count
    grew("kcoord_offsets_committed_total", 12)
    grew("kcoord_rebalances_total", 2)  # the join, then the leave of the only member
    grew("kcoord_produced_records_total", 20)
    grew("kcoord_produced_bytes_total", 20 * len(b"record-00"))
    grew("kcoord_fetched_bytes_total", 20 * len(b"record-00"))
    grew("kcoord_coordinator_log_bytes", 100)
    grew("kcoord_coordinator_log_records_appended_total", 12)
    grew("kcoord_coordinator_log_fsyncs_total", 3)
    grew("kcoord_coordinator_log_fsync_duration_seconds_count", 3)
    grew("kcoord_connections_accepted_total", 3)
    grew("kcoord_received_bytes_total", 1000)
    grew("kcoord_sent_bytes_total", 1000)
    assert after.get("kcoord_offsets") >= 4  # raw-committer's 2 and metered-group's 2
    # The consumer long-polled: its waits are apart from the time spent serving.
    grew("kcoord_fetch_wait_duration_seconds_count", 1)
    grew("kcoord_fetch_serve_duration_seconds_count", 1)
    assert after.get("kcoord_fetch_serve_duration_seconds_count") >= \
        after.get("kcoord_fetch_wait_duration_seconds_count")
    assert after.get("kcoord_fetch_serve_duration_seconds_sum") < \
        after.get("kcoord_fetch_wait_duration_seconds_sum")  # idle polls wait, they barely serve
    # Lag per group and topic: the consumer read everything; raw-committer is ahead of the log.
    assert after.get("kcoord_group_topic_lag", group="metered-group", topic="metered") == 0
    assert after.get("kcoord_group_topic_offset_sum", group="metered-group", topic="metered") == 20
    assert after.get("kcoord_group_topic_offset_sum", group="raw-committer", topic="metered") == 28
    producer = KafkaProducer(bootstrap_servers=proc.bootstrap, acks="all")
    try:
        for i in range(3):
            producer.send("metered", value=b"late-%d" % i, partition=0)
        producer.flush(10)
    finally:
        producer.close(5)
    lagging = scrape(base)
    assert lagging.get("kcoord_group_topic_lag", group="metered-group", topic="metered") == 3
    assert lagging.get("kcoord_group_topic_lag_series_omitted") == 0
    for name in ("process_resident_memory_bytes", "process_open_fds", "process_cpu_seconds_total"):
        assert lagging.get(name) > 0, name
    assert after.get("kcoord_topics") >= 1 and after.get("kcoord_partitions") >= 2
    assert after.get("kcoord_coordinator_log_segments") >= 1
    assert sum(after.series("kcoord_groups").values()) == 2


def test_bad_http_input_is_refused_and_kafka_clients_carry_on(metered: tuple[BrokerProcess, str]) -> None:
    proc, base = metered
    host, port = base.removeprefix("http://").split(":")
    with WireClient(proc.host, proc.port) as kafka:  # a Kafka client connected throughout
        assert _heartbeat(kafka) != 0

        def http(data: bytes) -> bytes:
            """The reply, or b"" when the server closed before the client finished sending
            (it may answer and close while a large request is still arriving; the kernel
            then resets the connection, and the reply may be lost with it)."""
            reply = b""
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                try:
                    sock.sendall(data)
                    sock.shutdown(socket.SHUT_WR)
                    while chunk := sock.recv(65536):
                        reply += chunk
                except OSError as exc:
                    if exc.errno not in (errno.ENOTCONN, errno.EPIPE, errno.ECONNRESET):
                        raise
            return reply

        assert http(b"\x16\x03\x01 not http at all\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        # An oversized head is refused: 431, or the connection closed under the sender.
        oversized = http(b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"p" * 200_000 + b"\r\n\r\n")
        assert oversized == b"" or oversized.startswith(b"HTTP/1.1 431 "), oversized[:80]
        assert http(b"DELETE /metrics HTTP/1.1\r\nHost: k\r\n\r\n").startswith(b"HTTP/1.1 405 ")
        assert http(b"GET /admin HTTP/1.1\r\nHost: k\r\n\r\n").startswith(b"HTTP/1.1 404 ")
        assert http(b"GET /metr").startswith(b"HTTP/1.1 400 ")  # gave up half way
        assert fetch(base + "/metrics", method="POST")[0] == 405

        # Slowloris: a request head that never ends is dropped; meanwhile everything works.
        with socket.create_connection((host, int(port)), timeout=15) as slow:
            slow.sendall(b"GET /metrics HTTP/1.1\r\nX-A: 1\r\n")
            assert _heartbeat(kafka) != 0
            assert fetch(base + "/healthz")[::2] == (200, b"ok\n")
            started = time.monotonic()
            assert slow.recv(65536) == b""  # closed by the server, without a reply
            assert time.monotonic() - started < 14

        assert _heartbeat(kafka) != 0  # the same Kafka connection is still served
    # A Kafka client sending a bad frame is counted and dropped; others are unaffected.
    before = scrape(base)
    with WireClient(proc.host, proc.port) as bad:
        bad.send_raw(struct.pack(">i", -5))
        assert bad.is_closed_by_peer()
    wait_until(lambda: scrape(base).get("kcoord_request_errors_total", reason="frame")
               > before.get("kcoord_request_errors_total", reason="frame"), 5, "the bad frame to be counted")
    with WireClient(proc.host, proc.port) as kafka:
        assert _heartbeat(kafka) != 0
    assert fetch(base + "/healthz")[::2] == (200, b"ok\n")


def test_json_log_lines_and_the_request_log(metered: tuple[BrokerProcess, str]) -> None:
    proc, _ = metered
    create_topic(proc.bootstrap, "metered-logs", 1)
    with WireClient(proc.host, proc.port) as client:
        cid = client.send(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"},
                          client_id="metrics-test")
        client.receive(API_VERSIONS, 3, cid)
        commit_cid = client.correlation_id + 1
        _commit(client, "logged-group", "metered-logs", 1, 1)  # durable wait: timed when sent

    def entries() -> list[dict[str, Any]]:
        return [json.loads(line) for line in proc.log().splitlines()]

    def request_line(api: str, correlation_id: int) -> dict[str, Any] | None:
        for entry in entries():
            if entry.get("logger") == "kcoord.requests" and entry.get("api") == api \
                    and entry.get("correlation_id") == correlation_id and entry.get("client_id") in (
                        "metrics-test", "kcoord-test"):
                return entry
        return None

    wait_until(lambda: request_line("OffsetCommit", commit_cid) is not None, 5, "the request log lines")
    every = entries()  # each line parsed as JSON, or this raised
    assert all({"ts", "level", "logger", "msg"} <= set(e) for e in every)
    assert any(e["msg"].startswith("kcoord listening on") for e in every)
    api_versions = request_line("ApiVersions", cid)
    assert api_versions is not None
    assert api_versions["msg"] == "request" and api_versions["level"] == "INFO"
    assert api_versions["client_id"] == "metrics-test" and api_versions["version"] == 3
    assert api_versions["peer"].startswith("127.0.0.1:")
    assert api_versions["reply_bytes"] > 20 and api_versions["duration_ms"] >= 0
    commit = request_line("OffsetCommit", commit_cid)
    assert commit is not None and commit["version"] == 8 and commit["reply_bytes"] > 0


def test_kv_request_log_by_default_format(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data", extra_args=["--request-log"]).start()
    try:
        with WireClient(proc.host, proc.port) as client:
            cid = client.send(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"},
                              client_id="kv client")
            client.receive(API_VERSIONS, 3, cid)
        line = proc.wait_for_log(r"logger=kcoord\.requests request ")
        assert re.search(rf'peer=127\.0\.0\.1:\d+ client_id="kv client" api=ApiVersions version=3 '
                         rf"correlation_id={cid} duration_ms=[\d.]+ reply_bytes=\d+$", line), line
    finally:
        assert proc.stop() == 0


def test_no_request_log_unless_asked(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        with WireClient(proc.host, proc.port) as client:
            client.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    finally:
        assert proc.stop() == 0
    assert "kcoord.requests" not in proc.log()


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", "serve", "--listen", "127.0.0.1:0", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=30)


def test_bad_metrics_address_is_a_configuration_error(tmp_path: Path) -> None:
    result = _serve("--data-dir", str(tmp_path), "--metrics-listen", "nowhere")
    assert result.returncode == 2
    assert "--http-listen 'nowhere': expected HOST:PORT" in result.stderr


def test_metrics_address_in_use_stops_the_start(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve("--data-dir", str(tmp_path), "--metrics-listen", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port} for HTTP" in result.stderr
