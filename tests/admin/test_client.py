"""The admin client against a scripted broker: version negotiation, retries, timeouts.

The fake answers with the project's own codecs, so these tests pin what goes over the
wire (which API, which version) without a real broker.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from admin.client import AdminClient, CommittedOffset
from admin.errors import BrokerError, GroupStateError, UnreachableError
from protocol.codec import decode_request, encode_response
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS

E = ErrorCode
Handler = Callable[[int, Any], dict[str, Any]]


class FakeBroker:
    """Answers requests from per-API handlers; advertises the API ranges it is given."""

    def __init__(self, ranges: dict[int, tuple[int, int]] | None = None, silent: bool = False) -> None:
        self.ranges = {k: (m.min_version, m.max_version) for k, m in REQUESTS.items()}
        self.ranges.update(ranges or {})
        self.handlers: dict[int, Handler] = {}
        self.seen: list[tuple[int, int]] = []  # (api_key, version) of every request
        self.silent = silent
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._stop.set()
        self.listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _recv(self, conn: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ConnectionError
            data += chunk
        return data

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                while True:
                    (size,) = struct.unpack(">i", self._recv(conn, 4))
                    request = decode_request(self._recv(conn, size))
                    key, version = request.header.api_key, request.header.api_version
                    self.seen.append((key, version))
                    if self.silent:
                        continue
                    if key == 18:
                        body, version = self._api_versions(version)
                    else:
                        body = self.handlers[key](version, request.body)
                    if body.get("close"):
                        return
                    conn.sendall(encode_response(key, version, request.header.correlation_id, body))
            except (ConnectionError, OSError):
                return

    def _api_versions(self, version: int) -> tuple[dict[str, Any], int]:
        low, high = self.ranges[18]
        keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in self.ranges.items()]
        if version > high:  # as Kafka: a v0 body saying UNSUPPORTED_VERSION
            return {"error_code": E.UNSUPPORTED_VERSION, "api_keys": [
                {"api_key": 18, "min_version": low, "max_version": high}]}, 0
        return {"error_code": 0, "api_keys": keys, "throttle_time_ms": 0}, version


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    broker = FakeBroker()
    yield broker
    broker.close()


def _coordinator_here(broker: FakeBroker, failures: list[int] | None = None) -> None:
    pending = list(failures or [])

    def find(version: int, body: Any) -> dict[str, Any]:
        code = pending.pop(0) if pending else 0
        if version >= 4:
            return {"coordinators": [{"key": k, "node_id": 1, "host": "127.0.0.1", "port": broker.port,
                                      "error_code": code, "error_message": None} for k in body.coordinator_keys]}
        return {"error_code": code, "error_message": None, "node_id": 1, "host": "127.0.0.1", "port": broker.port}

    broker.handlers[10] = find


def _offset_fetch(failures: list[int], offsets: dict[tuple[str, int], int]) -> Handler:
    pending = list(failures)

    def handle(version: int, body: Any) -> dict[str, Any]:
        code = pending.pop(0) if pending else 0
        topics = [{"name": t, "partitions": [{"partition_index": p, "committed_offset": o,
                                             "committed_leader_epoch": -1, "metadata": "", "error_code": 0}]}
                  for (t, p), o in offsets.items()] if code == 0 else []
        if version >= 8:
            return {"groups": [{"group_id": body.groups[0].group_id, "topics": topics, "error_code": code}]}
        return {"topics": topics, "error_code": code}

    return handle


def test_versions_are_the_highest_both_sides_speak(fake: FakeBroker) -> None:
    fake.ranges.update({9: (1, 7), 10: (0, 3), 18: (0, 2)})
    _coordinator_here(fake)
    fake.handlers[9] = _offset_fetch([], {("t", 0): 5})
    with AdminClient(fake.bootstrap, timeout=5) as client:
        assert client.fetch_offsets("g") == {("t", 0): CommittedOffset(5, -1, "")}
    # ApiVersions v3 refused (the fake knows 0-2) then v0; FindCoordinator v3, OffsetFetch v7
    assert fake.seen == [(18, 3), (18, 0), (10, 3), (9, 7)]


def test_newest_shapes_when_the_broker_speaks_them(fake: FakeBroker) -> None:
    _coordinator_here(fake)
    fake.handlers[9] = _offset_fetch([], {("t", 1): 9})
    with AdminClient(fake.bootstrap, timeout=5) as client:
        assert client.fetch_offsets("g") == {("t", 1): CommittedOffset(9, -1, "")}
    assert fake.seen == [(18, 3), (10, 4), (9, 9)]


def test_no_common_version_is_a_clear_error(fake: FakeBroker) -> None:
    fake.ranges[10] = (5, 6)
    with AdminClient(fake.bootstrap, timeout=5) as client, \
            pytest.raises(BrokerError, match=r"serves FindCoordinator v5-6, this client speaks v0-4"):
        client.find_coordinator("g")


def test_coordinator_errors_are_retried(fake: FakeBroker) -> None:
    _coordinator_here(fake, failures=[E.COORDINATOR_NOT_AVAILABLE])
    fake.handlers[9] = _offset_fetch([E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR], {("t", 0): 1})
    with AdminClient(fake.bootstrap, timeout=5, retry_backoff=0.01) as client:
        assert client.fetch_offsets("g") == {("t", 0): CommittedOffset(1, -1, "")}
    # FindCoordinator failed once; OffsetFetch failed twice, each time the coordinator is looked up again
    assert [k for k, _ in fake.seen if k != 18] == [10, 10, 9, 10, 9, 10, 9]


def test_retries_are_bounded_by_the_timeout(fake: FakeBroker) -> None:
    _coordinator_here(fake)
    fake.handlers[9] = _offset_fetch([E.COORDINATOR_LOAD_IN_PROGRESS] * 1000, {})
    with AdminClient(fake.bootstrap, timeout=0.5, retry_backoff=0.01) as client, \
            pytest.raises(BrokerError, match=r"COORDINATOR_LOAD_IN_PROGRESS \(14\)"):
        client.fetch_offsets("g")
    assert 2 < sum(1 for k, _ in fake.seen if k == 9) < 100


def test_admin_commit_refused_by_an_active_group(fake: FakeBroker) -> None:
    _coordinator_here(fake)
    sent: list[Any] = []

    def commit(version: int, body: Any) -> dict[str, Any]:
        sent.append(body)
        return {"topics": [{"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                            "error_code": E.UNKNOWN_MEMBER_ID}
                                                           for p in t.partitions]} for t in body.topics]}

    fake.handlers[8] = commit
    with AdminClient(fake.bootstrap, timeout=5) as client, \
            pytest.raises(GroupStateError, match=r"UNKNOWN_MEMBER_ID .* stop its consumers"):
        client.commit_offsets("g", {("t", 0): CommittedOffset(3, 2, "m")})
    (body,) = sent
    assert (body.generation_id_or_member_epoch, body.member_id, body.group_instance_id) == (-1, "", None)
    (topic,) = body.topics
    (part,) = topic.partitions
    assert (topic.name, part.partition_index, part.committed_offset, part.committed_leader_epoch,
            part.committed_metadata) == ("t", 0, 3, 2, "m")


def test_list_groups_filters_by_state_itself_before_listgroups_v4(fake: FakeBroker) -> None:
    fake.ranges[16] = (0, 3)
    _coordinator_here(fake)
    fake.handlers[3] = lambda v, body: {"brokers": [{"node_id": 1, "host": "127.0.0.1", "port": fake.port,
                                                     "rack": None}], "cluster_id": "c", "controller_id": 1,
                                        "topics": []}
    fake.handlers[16] = lambda v, body: {"error_code": 0, "groups": [
        {"group_id": "a", "protocol_type": "consumer"}, {"group_id": "b", "protocol_type": ""}]}
    states = {"a": "Stable", "b": "Empty"}
    fake.handlers[15] = lambda v, body: {"groups": [
        {"error_code": 0, "group_id": g, "group_state": states[g], "protocol_type": "", "protocol_data": "",
         "members": []} for g in body.groups]}
    with AdminClient(fake.bootstrap, timeout=5) as client:
        assert [(g.group_id, g.state) for g in client.list_groups(["Empty"])] == [("b", "Empty")]
        assert [(g.group_id, g.state) for g in client.list_groups()] == [("a", "Stable"), ("b", "Empty")]


def test_unreachable_broker() -> None:
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    client = AdminClient(f"127.0.0.1:{port}", timeout=2)
    with pytest.raises(UnreachableError, match=f"cannot reach 127.0.0.1:{port}: connection refused") as info:
        client.any_broker()
    assert info.value.exit_code == 3


def test_second_bootstrap_server_is_tried(fake: FakeBroker) -> None:
    probe = socket.create_server(("127.0.0.1", 0))
    dead = probe.getsockname()[1]
    probe.close()
    _coordinator_here(fake)
    with AdminClient(f"127.0.0.1:{dead},{fake.bootstrap}", timeout=2) as client:
        assert client.find_coordinator("g").port == fake.port


def test_a_broker_that_does_not_answer_times_out() -> None:
    silent = FakeBroker(silent=True)
    try:
        client = AdminClient(silent.bootstrap, timeout=0.3)
        with pytest.raises(UnreachableError, match=r"no answer from 127.0.0.1:\d+ within 0.3 s"):
            client.any_broker()
    finally:
        silent.close()


def test_a_dropped_connection_is_reported(fake: FakeBroker) -> None:
    fake.handlers[10] = lambda v, body: {"close": True}
    with AdminClient(fake.bootstrap, timeout=2) as client, \
            pytest.raises(UnreachableError, match=r"lost the connection to 127\.0\.0\.1:.*closed by the broker"):
        client.find_coordinator("g")
