"""The live broker, driven frame by frame: versions, coordinator lookup, bad input."""

from __future__ import annotations

import select
import socket
import struct
import uuid

import pytest

from protocol.codec import encode_request
from protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration


def _healthy(broker: BrokerProcess, client: WireClient) -> None:
    body = client.request(3, 1, {"topics": []})
    assert body.brokers[0].port == broker.port


def test_api_versions_advertises_what_is_served(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as client:
        body = client.request(18, 3, {"client_software_name": "kcoord-test",
                                      "client_software_version": "1.0"})
    assert body.error_code == 0
    ranges = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert ranges[18] == (0, 3)
    assert ranges[3] == (0, 12)
    assert ranges[10] == (0, 4)


def test_unsupported_api_versions_version_gets_v0_reply_with_range(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as client:
        # ApiVersions v9 does not exist: the broker answers in v0 so the client can step down.
        client.send_raw(struct.pack(">ihhih", 10, 18, 9, 77, -1))
        frame = client.recv_frame()
        correlation_id, error_code, count = struct.unpack(">ihi", frame[:10])
        assert (correlation_id, error_code, count) == (77, ErrorCode.UNSUPPORTED_VERSION, 1)
        assert struct.unpack(">hhh", frame[10:16]) == (18, 0, 3)
        _healthy(broker, client)  # the connection stays open


def test_invalid_client_software_name_is_invalid_request(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as client:
        body = client.request(18, 3, {"client_software_name": "-bad name-",
                                      "client_software_version": "1"})
    assert body.error_code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("version", range(0, 4))
def test_find_coordinator_single_key(broker: BrokerProcess, version: int) -> None:
    with WireClient(broker.host, broker.port) as client:
        body = client.request(10, version, {"key": "orders", "key_type": 0})
    assert (body.error_code, body.node_id, body.host, body.port) == (0, 0, "127.0.0.1", broker.port)


def test_find_coordinator_batched_v4(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as client:
        body = client.request(10, 4, {"key_type": 0, "coordinator_keys": ["a", "b", "c"]})
    assert [(c.key, c.error_code, c.node_id, c.port) for c in body.coordinators] == [
        ("a", 0, 0, broker.port), ("b", 0, 0, broker.port), ("c", 0, 0, broker.port)
    ]


def test_find_coordinator_for_a_transactional_id_names_this_broker(broker: BrokerProcess) -> None:
    """A single broker is the transaction coordinator of every transactional id (docs/transactions.md)."""
    with WireClient(broker.host, broker.port) as client:
        body = client.request(10, 3, {"key": "txn-1", "key_type": 1})
        unknown = client.request(10, 3, {"key": "k", "key_type": 7})
    assert body.error_code == ErrorCode.NONE
    assert (body.node_id, body.port) == (0, broker.port)
    assert unknown.error_code == ErrorCode.INVALID_REQUEST and "key type" in unknown.error_message


def _topic(name: str, version: int) -> dict[str, object]:
    return {"name": name, "topic_id": uuid.UUID(int=0)} if version >= 10 else {"name": name}


@pytest.mark.parametrize("version", [0, 1, 4, 9, 10, 12])
def test_metadata_auto_creates_unknown_topics(broker: BrokerProcess, version: int) -> None:
    with WireClient(broker.host, broker.port) as client:
        body = client.request(3, version, {"topics": [_topic(f"auto-{version}", version)]})
        (topic,) = body.topics
        assert (topic.name, topic.error_code) == (f"auto-{version}", 0)
        assert [(p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes))
                for p in topic.partitions] == [(0, 0, [0], [0])]  # num.partitions defaults to 1
        listed = client.request(3, max(version, 1), {"topics": None})
        assert f"auto-{version}" in [t.name for t in listed.topics]


@pytest.mark.parametrize("version", [4, 9, 12])
def test_metadata_without_auto_create_reports_unknown_topic(broker: BrokerProcess, version: int) -> None:
    with WireClient(broker.host, broker.port) as client:
        body = client.request(3, version, {"topics": [_topic("missing", version)],
                                           "allow_auto_topic_creation": False})
    assert [(t.name, t.error_code) for t in body.topics] == [("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]


def test_metadata_with_auto_create_disabled_by_config(broker_factory: object) -> None:
    broker = broker_factory({"auto.create.topics.enable": "false"})  # type: ignore[operator]
    with WireClient(broker.host, broker.port) as client:
        body = client.request(3, 9, {"topics": [{"name": "missing"}], "allow_auto_topic_creation": True})
        invalid = client.request(3, 9, {"topics": [{"name": "bad/name"}]})
    assert [(t.name, t.error_code) for t in body.topics] == [("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert [t.error_code for t in invalid.topics] == [ErrorCode.INVALID_TOPIC_EXCEPTION]


def test_pipelined_requests_are_answered_in_order(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as client:
        sent = []
        burst = b""
        for i in range(200):
            api = (18, 3, {}) if i % 3 == 0 else (10, 3, {"key": f"g{i}"}) if i % 3 == 1 else (3, 9, {"topics": []})
            client.correlation_id += 1
            sent.append((api[0], api[1], client.correlation_id))
            burst += encode_request(api[0], api[1], client.correlation_id, api[2])
        client.send_raw(burst)  # one write: many requests in flight at once
        for api_key, version, correlation_id in sent:
            client.receive(api_key, version, correlation_id)


# --- bad input: each case closes only its own connection -------------------------------

def _bad_inputs() -> dict[str, bytes]:
    valid_header = struct.pack(">hhih", 3, 1, 5, 4) + b"test"
    return {
        "2GiB size prefix": struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 16,
        "negative size prefix": struct.pack(">i", -5),
        "garbage after a valid header": struct.pack(">i", len(valid_header) + 6)
        + valid_header + b"\x7f\xff\xff\xf0\x01\x02",
        "unknown api key": struct.pack(">i", 10) + struct.pack(">hhih", 999, 0, 1, -1),
        "unsupported version of a served api": struct.pack(">i", 10) + struct.pack(">hhih", 3, 99, 1, -1),
        "header cut short": struct.pack(">i", 10) + struct.pack(">hhi", 3, 1, 1) + b"\x00\x09",
    }


@pytest.mark.parametrize("case", list(_bad_inputs()))
def test_bad_input_closes_only_that_connection(broker: BrokerProcess, case: str) -> None:
    healthy = WireClient(broker.host, broker.port)
    bad = WireClient(broker.host, broker.port, timeout=10)
    try:
        _healthy(broker, healthy)
        bad.send_raw(_bad_inputs()[case])
        assert bad.is_closed_by_peer(), f"{case}: connection left open"
        broker.wait_for_log("closing connection")
        _healthy(broker, healthy)  # the other client, connected all along, still works
        with WireClient(broker.host, broker.port) as fresh:  # and new clients are served
            _healthy(broker, fresh)
    finally:
        healthy.close()
        bad.close()


def test_truncated_frame_then_disconnect_leaves_server_healthy(broker: BrokerProcess) -> None:
    healthy = WireClient(broker.host, broker.port)
    try:
        sock = socket.create_connection((broker.host, broker.port), timeout=5)
        sock.sendall(struct.pack(">i", 1000) + b"\x00\x03\x00\x01")  # promises 1000 bytes, sends 4
        sock.close()
        broker.wait_for_log("closed mid-frame")
        _healthy(broker, healthy)
    finally:
        healthy.close()


def test_truncated_frame_waits_for_the_rest(broker: BrokerProcess) -> None:
    """A frame arriving in pieces is a slow client, not an error."""
    with WireClient(broker.host, broker.port) as client:
        frame = encode_request(10, 3, 41, {"key": "slow"})
        for i in range(len(frame)):
            client.send_raw(frame[i : i + 1])
        body = client.receive(10, 3, 41)
        assert body.error_code == 0


def test_client_vanishing_with_replies_in_flight_leaves_server_healthy(broker: BrokerProcess) -> None:
    """A peer that sends a burst and disconnects before reading must not hurt anyone else."""
    healthy = WireClient(broker.host, broker.port)
    try:
        for _ in range(5):
            sock = socket.create_connection((broker.host, broker.port), timeout=5)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            burst = b"".join(encode_request(3, 9, i, {"topics": None}) for i in range(2000))
            sock.sendall(burst)
            sock.close()  # RST: the broker's writes now fail with a broken pipe / reset
        _healthy(broker, healthy)
        with WireClient(broker.host, broker.port) as fresh:
            _healthy(broker, fresh)
        assert "Traceback" not in broker.log()
    finally:
        healthy.close()


def test_replies_the_socket_cannot_take_at_once_keep_their_order(broker: BrokerProcess) -> None:
    """Megabytes of replies behind one that waits for durability, to a client that reads
    nothing until it has sent everything: the broker's socket fills, the rest of the replies
    wait for it, and requests read meanwhile are answered after them, in order, whole."""
    topic = f"wide-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.host, broker.port, timeout=60) as client:
        created = client.request(19, 4, {"topics": [{"name": topic, "num_partitions": 3000, "replication_factor": 1,
                                                      "assignments": [], "configs": []}],
                                         "timeout_ms": 10000, "validate_only": False})
        assert created.topics[0].error_code == 0
        wide = client.request(3, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        assert len(wide.topics[0].partitions) == 3000
        commit = {"group_id": f"g-{topic}", "generation_id_or_member_epoch": -1, "member_id": "",
                  "group_instance_id": None, "retention_time_ms": -1,
                  "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                             "committed_leader_epoch": -1,
                                                             "committed_metadata": ""}]}]}
        metadata = {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
        sent: list[tuple[int, int, int]] = []

        def burst(requests: list[tuple[int, int, dict[str, object]]]) -> bytes:
            frames = b""
            for api_key, version, body in requests:
                client.correlation_id += 1
                sent.append((api_key, version, client.correlation_id))
                frames += encode_request(api_key, version, client.correlation_id, body)
            return frames

        # More than the socket buffers hold (about 8 MB of Metadata replies), behind a commit.
        client.send_raw(burst([(8, 8, commit)] + [(3, 9, metadata)] * 70))
        # Once the first bytes arrive, the broker has written what its socket took and holds the rest.
        readable, _, _ = select.select([client.sock], [], [], 30)
        assert readable, "no reply within 30 s"
        # Read by the broker while those replies still wait for the socket: answered at once,
        # yet sent only after them.
        client.send_raw(burst([(18, 3, {})] * 5 + [(3, 9, metadata)] * 2))
        for api_key, version, correlation_id in sent:
            body = client.receive(api_key, version, correlation_id)
            if api_key == 3:
                assert len(body.topics[0].partitions) == 3000
            elif api_key == 8:
                assert body.topics[0].partitions[0].error_code == 0


def test_a_connection_with_too_many_replies_waiting_is_read_again_once_they_go(broker: BrokerProcess) -> None:
    """Thousands of pipelined commits, each waiting for its fsync: the broker stops reading
    the connection while too many replies wait, reads on as they go, and answers all, in order."""
    with WireClient(broker.host, broker.port, timeout=60) as client:
        group = f"pipelined-{uuid.uuid4().hex[:8]}"
        created = client.request(19, 4, {"topics": [{"name": group, "num_partitions": 1, "replication_factor": 1,
                                                      "assignments": [], "configs": []}],
                                         "timeout_ms": 10000, "validate_only": False})
        assert created.topics[0].error_code == 0
        sent = []
        burst = b""
        for i in range(3000):
            client.correlation_id += 1
            sent.append(client.correlation_id)
            burst += encode_request(8, 8, client.correlation_id, {
                "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                "retention_time_ms": -1, "topics": [{"name": group, "partitions": [
                    {"partition_index": 0, "committed_offset": i, "committed_leader_epoch": -1,
                     "committed_metadata": ""}]}]})
        client.send_raw(burst)
        for correlation_id in sent:
            body = client.receive(8, 8, correlation_id)
            assert body.topics[0].partitions[0].error_code == 0
        fetched = client.request(9, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": False})
        partitions = [p for t in fetched.groups[0].topics for p in t.partitions]
        assert [p.committed_offset for p in partitions] == [2999]
