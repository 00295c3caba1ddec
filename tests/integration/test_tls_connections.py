"""TLS connections on the broker's raw read/write path, against real clients and raw records.

The broker decrypts each socket read whole and encrypts each batch of replies in one go
(``broker.tls``), so what must hold: a request cut into many TLS records, many requests in
one record, a reply far larger than a record, a client that closes in the middle of a
record or of its handshake, a login and its first request in one record (each frame still
checked by the SASL rules), close_notify, re-authentication over SASL_SSL, and failed
handshakes that never disturb the other connections.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import struct
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from protocol.api_keys import ApiKey
from protocol.codec import decode_response, encode_request
from protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess
from tests.support.security import (
    ALICE,
    ALICE_PASSWORD,
    Certificates,
    client_tls,
    make_certificates,
    secure_settings,
    users_file,
)
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration

E = ErrorCode
BIG = 900_000  # one value near message.max.bytes: some 55 TLS records each way


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Certificates]]:
    tmp = tmp_path_factory.mktemp("tls")
    certs = make_certificates(tmp / "certs")
    settings = secure_settings(certs, users_file(tmp))
    settings.update({"ssl.client.auth": "required", "connections.max.reauth.ms": 1500})
    broker = BrokerProcess(tmp / "data", settings, extra_args=["--http-listen", "127.0.0.1:0"]).start()
    try:
        yield broker, certs
    finally:
        broker.stop()


class RecordClient:
    """A TLS client that decides where its records begin and end (``ssl.SSLObject`` over a socket)."""

    def __init__(self, address: str, context: ssl.SSLContext, first: bytes = b"", tamper: bool = False) -> None:
        """Connect and handshake; ``first`` goes out in the same send as the client's last
        handshake message (TLS 1.3 lets a client do that), its last byte flipped if ``tamper``."""
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname=host)
        self.plain = bytearray()
        self.correlation_id = 0
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                self._fill()
        if first:
            self.tls.write(first)
        last = bytearray(self.outgoing.read())
        if tamper:
            last[-1] ^= 1
        self.sock.sendall(last)

    def _flush(self) -> None:
        self.sock.sendall(self.outgoing.read())

    def _fill(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("closed by the broker")
        self.incoming.write(data)

    def records(self, payload: bytes, size: int) -> bytes:
        """``payload`` as TLS records of at most ``size`` plaintext bytes each."""
        for start in range(0, len(payload), size):
            self.tls.write(payload[start:start + size])
        return self.outgoing.read()

    def frame(self, api_key: int, version: int, body: dict[str, Any]) -> bytes:
        self.correlation_id += 1
        return encode_request(api_key, version, self.correlation_id, body, "kcoord-test")

    def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        """The next response: (correlation id, body)."""
        while True:
            if len(self.plain) >= 4:
                size = struct.unpack_from(">i", self.plain)[0]
                if len(self.plain) >= 4 + size:
                    frame = bytes(self.plain[4:4 + size])
                    del self.plain[:4 + size]
                    return decode_response(api_key, version, frame)
            try:
                self.plain += self.tls.read(1 << 20)
            except ssl.SSLWantReadError:
                self._fill()

    def closed_by_peer(self) -> bool:
        """True once the broker has ended the connection (close_notify or the socket's end)
        without sending anything more; False if it answers."""
        try:
            while True:
                try:
                    return not self.tls.read(1 << 16)
                except ssl.SSLWantReadError:
                    data = self.sock.recv(1 << 16)
                    if not data:
                        return True
                    self.incoming.write(data)
        except (ssl.SSLError, ConnectionResetError):
            return True

    def close(self) -> None:
        self.sock.close()


def _metric(broker: BrokerProcess, pattern: str) -> float:
    line = broker.wait_for_log(r"kcoord http on")
    address = re.search(r"http on ([\d.]+:\d+)", line)
    assert address
    with urllib.request.urlopen(f"http://{address.group(1)}/metrics", timeout=10) as response:
        match = re.search("^" + pattern + r" (\S+)$", response.read().decode(), re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def _serves(broker: BrokerProcess, certs: Certificates) -> None:
    with WireClient(*_split(broker.address("SSL")), tls=client_tls(certs, with_cert=True)) as client:
        assert client.request(ApiKey.METADATA, 1, {"topics": None}).brokers


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["TLSv1.2", "TLSv1.3"])
def test_a_request_in_many_records_and_many_requests_in_one(secure: tuple[BrokerProcess, Certificates],
                                                              version: ssl.TLSVersion) -> None:
    broker, certs = secure
    context = client_tls(certs, with_cert=True)
    context.minimum_version = context.maximum_version = version
    client = RecordClient(broker.address("SSL"), context)
    try:
        assert client.tls.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
        # One request, one byte per record, each record in its own send.
        for record in _each_record(client, client.frame(ApiKey.API_VERSIONS, 3, {
                "client_software_name": "kcoord-test", "client_software_version": "1"}), 1):
            client.sock.sendall(record)
        cid, reply = client.receive(ApiKey.API_VERSIONS, 3)
        assert (cid, reply.error_code) == (1, 0)
        # Fifty requests in a single record and a single send: fifty replies, in order.
        batch = b"".join(client.frame(ApiKey.METADATA, 1, {"topics": None}) for _ in range(50))
        client.sock.sendall(client.records(batch, len(batch)))
        assert [client.receive(ApiKey.METADATA, 1)[0] for _ in range(50)] == list(range(2, 52))
    finally:
        client.close()


def _each_record(client: RecordClient, payload: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(payload), size):
        yield client.records(payload[start:start + size], size)


def test_a_request_in_the_same_send_as_the_handshakes_end_is_answered(
        secure: tuple[BrokerProcess, Certificates]) -> None:
    broker, certs = secure
    context = client_tls(certs, with_cert=True)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    request = encode_request(ApiKey.METADATA, 1, 7, {"topics": None}, "kcoord-test")
    for _ in range(5):
        client = RecordClient(broker.address("SSL"), context, first=request)
        try:
            cid, reply = client.receive(ApiKey.METADATA, 1)
            assert cid == 7 and reply.brokers
        finally:
            client.close()


def test_a_bad_record_behind_the_handshakes_end_closes_only_that_connection(
        secure: tuple[BrokerProcess, Certificates]) -> None:
    broker, certs = secure
    context = client_tls(certs, with_cert=True)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    request = encode_request(ApiKey.METADATA, 1, 7, {"topics": None}, "kcoord-test")
    with WireClient(*_split(broker.address("SSL")), tls=context) as bystander:
        for _ in range(3):
            client = RecordClient(broker.address("SSL"), context, first=request, tamper=True)
            try:
                assert client.closed_by_peer()
            finally:
                client.close()
        assert bystander.request(ApiKey.METADATA, 1, {"topics": None}).brokers
    _serves(broker, certs)


def test_a_login_and_its_first_request_in_one_record_are_each_checked(
        secure: tuple[BrokerProcess, Certificates]) -> None:
    broker, certs = secure
    client = RecordClient(broker.address("SASL_SSL"), client_tls(certs))
    try:
        frames = (client.frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
                  + client.frame(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{ALICE}\0{ALICE_PASSWORD}".encode()})
                  + client.frame(ApiKey.METADATA, 1, {"topics": None}))
        client.sock.sendall(client.records(frames, len(frames)))
        assert client.receive(ApiKey.SASL_HANDSHAKE, 1)[1].error_code == 0
        assert client.receive(ApiKey.SASL_AUTHENTICATE, 2)[1].error_code == 0
        assert client.receive(ApiKey.METADATA, 1)[1].brokers
    finally:
        client.close()
    client = RecordClient(broker.address("SASL_SSL"), client_tls(certs))
    try:  # the same, but the request comes before the login: refused, and nothing after it is served
        frames = (client.frame(ApiKey.FIND_COORDINATOR, 1, {"key": "g", "key_type": 0})
                  + client.frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
        client.sock.sendall(client.records(frames, len(frames)))
        cid, reply = client.receive(ApiKey.FIND_COORDINATOR, 1)
        assert (cid, reply.error_code) == (1, E.ILLEGAL_SASL_STATE)
        assert client.closed_by_peer()
    finally:
        client.close()


def test_a_client_that_closes_mid_record_ends_only_its_connection(
        secure: tuple[BrokerProcess, Certificates]) -> None:
    broker, certs = secure
    context = client_tls(certs, with_cert=True)
    with WireClient(*_split(broker.address("SSL")), tls=context) as bystander:
        assert bystander.request(ApiKey.METADATA, 1, {"topics": None}).brokers
        for cut in (3, 40, 5000):  # inside the record header, inside a small record, inside a big one
            client = RecordClient(broker.address("SSL"), context)
            frame = client.frame(ApiKey.METADATA, 1, {"topics": [{"name": "t" * 8000}]})
            record = client.records(frame, len(frame))
            client.sock.sendall(record[:cut])
            client.close()
        assert bystander.request(ApiKey.METADATA, 1, {"topics": None}).brokers
    assert "Traceback" not in broker.log()


def test_close_notify_is_answered(secure: tuple[BrokerProcess, Certificates]) -> None:
    broker, certs = secure
    with WireClient(*_split(broker.address("SSL")), tls=client_tls(certs, with_cert=True)) as client:
        assert client.request(ApiKey.METADATA, 1, {"topics": None}).brokers
        assert isinstance(client.sock, ssl.SSLSocket)
        client.sock = client.sock.unwrap()  # sends close_notify, returns once the broker's arrives


def test_failed_handshakes_leave_the_other_connections_serving(secure: tuple[BrokerProcess, Certificates]) -> None:
    broker, certs = secure
    failures = 'kcoord_tls_handshake_failures_total'
    before = _metric(broker, failures)
    context = client_tls(certs, with_cert=True)
    with WireClient(*_split(broker.address("SSL")), tls=context) as bystander:
        pending = [bystander.send(ApiKey.METADATA, 1, {"topics": None}) for _ in range(3)]
        attempts = 0
        for listener in ("SSL", "SASL_SSL"):
            with socket.create_connection(_split(broker.address(listener)), timeout=10) as raw:  # not TLS at all
                raw.sendall(encode_request(ApiKey.API_VERSIONS, 0, 1, {}, "plain"))
                _drain(raw)
            attempts += 1
            with socket.create_connection(_split(broker.address(listener)), timeout=10) as raw:  # half a hello
                hello = _client_hello(context)
                raw.sendall(hello[:len(hello) // 2])
                raw.shutdown(socket.SHUT_WR)
                _drain(raw)
            attempts += 1
        try:  # no client certificate where one is required
            with WireClient(*_split(broker.address("SSL")), tls=client_tls(certs)) as refused:
                refused.is_closed_by_peer()
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            pass
        attempts += 1
        for cid in pending:
            assert bystander.receive(ApiKey.METADATA, 1, cid).brokers
        assert bystander.request(ApiKey.METADATA, 1, {"topics": None}).brokers
    deadline = time.monotonic() + 10
    while _metric(broker, failures) < before + attempts and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _metric(broker, failures) == before + attempts
    _serves(broker, certs)


def _client_hello(context: ssl.SSLContext) -> bytes:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def _drain(sock: socket.socket) -> bytes:
    """Everything until the broker closes (at most a TLS alert, never a Kafka reply)."""
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except OSError:
        pass
    assert received == b"" or received[0] == 21, received[:16]
    return received


def test_values_larger_than_a_record_round_trip_with_real_clients(
        secure: tuple[BrokerProcess, Certificates]) -> None:
    from confluent_kafka import Consumer, Producer
    from kafka import KafkaConsumer, KafkaProducer

    broker, certs = secure
    values = [os.urandom(BIG), b"small", os.urandom(40_000)]
    kafka_python = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                    "sasl_plain_username": ALICE, "sasl_plain_password": ALICE_PASSWORD, "ssl_cafile": str(certs.ca)}
    producer = KafkaProducer(bootstrap_servers=broker.address("SASL_SSL"), max_request_size=2 * BIG, **kafka_python)
    for value in values:
        producer.send("tls-big", value, partition=0).get(timeout=20)
    producer.close()
    confluent = {"bootstrap.servers": broker.address("SSL"), "security.protocol": "SSL",
                 "ssl.ca.location": str(certs.ca), "ssl.certificate.location": str(certs.client_cert),
                 "ssl.key.location": str(certs.client_key)}
    consumer = Consumer({**confluent, "group.id": "tls-big", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(["tls-big"])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(bytes(message.value() or b""))
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == values
    producer_c = Producer(confluent)
    producer_c.produce("tls-big", values[0], partition=0)
    assert producer_c.flush(20) == 0
    consumer_k = KafkaConsumer("tls-big", bootstrap_servers=broker.address("SASL_SSL"), group_id="tls-big-kp",
                               auto_offset_reset="earliest", enable_auto_commit=False,
                               max_partition_fetch_bytes=4 * BIG, **kafka_python)
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < len(values) + 1 and time.monotonic() < deadline:
        for records in consumer_k.poll(timeout_ms=500).values():
            seen += [r.value for r in records]
    consumer_k.commit()
    consumer_k.close()
    assert seen == [*values, values[0]]


def test_reauthentication_over_sasl_ssl_keeps_a_real_client_connected(
        secure: tuple[BrokerProcess, Certificates]) -> None:
    """connections.max.reauth.ms=1500: librdkafka logs in again on the same TLS connection (KIP-368)."""
    from confluent_kafka import Producer

    broker, certs = secure
    logins = re.escape('kcoord_authentications_total{mechanism="SCRAM-SHA-512",result="success"}')
    accepted = "kcoord_connections_accepted_total"
    logins_before, accepted_before = _metric(broker, logins), _metric(broker, accepted)
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": broker.address("SASL_SSL"), "security.protocol": "SASL_SSL",
                         "ssl.ca.location": str(certs.ca), "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.username": ALICE, "sasl.password": ALICE_PASSWORD, "error_cb": errors.append})

    def relogins() -> float:
        """Logins beyond one per new connection: those made on a connection already open."""
        return (_metric(broker, logins) - logins_before) - (_metric(broker, accepted) - accepted_before)

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and relogins() < 3:
        producer.produce("tls-reauth", os.urandom(30_000),
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
        producer.flush(10)
        time.sleep(0.2)
    assert relogins() >= 3, broker.log()[-3000:]
    assert producer.flush(10) == 0
    assert not [e for e in errors if e is not None], errors
    assert "session expired" not in broker.log()
