"""The broker's TLS session, bytes in and bytes out, against the stdlib's client.

A real ``ssl`` client over memory buffers talks to ``broker.tls.TlsSession``: whole
reads decrypt at once, partial records wait, big payloads span records both ways, a
tampered record and a failed handshake raise, close_notify ends the session.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator

import pytest
import trustme

from broker.tls import TlsSession


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def server_context(ca: trustme.CA, client_auth: bool = False) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    ca.issue_cert("127.0.0.1").configure_cert(context)
    if client_auth:
        ca.configure_trust(context)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class Client:
    """The stdlib's TLS client over memory buffers: what a Kafka client's TLS sends."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="127.0.0.1")

    def handshake(self, server: TlsSession) -> None:
        """Run both sides until the client's handshake is done and the server has answered."""
        server_done = False
        for _ in range(10):
            try:
                self.tls.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                done = False
            sent = self.outgoing.read()
            if sent:
                server_done = server.handshake(sent)
                self.incoming.write(server.take_output())
            if done and server_done:
                return
        raise AssertionError("the handshake did not finish")

    def send(self, payload: bytes) -> bytes:
        self.tls.write(payload)
        return self.outgoing.read()

    def receive(self, ciphertext: bytes) -> bytes:
        self.incoming.write(ciphertext)
        chunks: list[bytes] = []
        while True:
            try:
                chunk = self.tls.read(1 << 20)
            except ssl.SSLWantReadError:
                return b"".join(chunks)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def client_context(ca: trustme.CA, version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3,
                   certificate: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    context.minimum_version = context.maximum_version = version
    if certificate:
        ca.issue_cert(common_name="alice-cert", organization_name="kcoord tests").configure_cert(context)
    return context


@pytest.fixture(params=[ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["TLSv1.2", "TLSv1.3"])
def connected(request: pytest.FixtureRequest, ca: trustme.CA) -> Iterator[tuple[Client, TlsSession]]:
    server = TlsSession(server_context(ca))
    client = Client(client_context(ca, request.param))
    client.handshake(server)
    yield client, server


def test_the_handshake_negotiates_the_clients_version(ca: trustme.CA) -> None:
    for version, name in ((ssl.TLSVersion.TLSv1_2, "TLSv1.2"), (ssl.TLSVersion.TLSv1_3, "TLSv1.3")):
        server = TlsSession(server_context(ca))
        Client(client_context(ca, version)).handshake(server)
        assert server.version == name


def test_a_request_behind_the_clients_last_handshake_message_is_kept(ca: trustme.CA) -> None:
    server = TlsSession(server_context(ca))
    client = Client(client_context(ca))
    with pytest.raises(ssl.SSLWantReadError):
        client.tls.do_handshake()
    assert not server.handshake(client.outgoing.read())
    client.incoming.write(server.take_output())
    client.tls.do_handshake()  # TLS 1.3: the client is done and may send at once
    assert server.handshake(client.outgoing.read() + client.send(b"first request"))
    plain = server.decrypt(b"")
    assert plain is not None and bytes(plain) == b"first request"


def test_every_whole_record_of_one_read_decrypts_at_once(connected: tuple[Client, TlsSession]) -> None:
    client, server = connected
    frames = [os.urandom(100 + i) for i in range(8)]
    received = b"".join(client.send(frame) for frame in frames)  # one record per frame, one read
    plain = server.decrypt(received)
    assert plain is not None and bytes(plain) == b"".join(frames)


def test_a_partial_record_waits_for_the_rest(connected: tuple[Client, TlsSession]) -> None:
    client, server = connected
    payload = os.urandom(3000)
    received = client.send(payload)
    out = bytearray()
    for i in range(0, len(received), 7):
        plain = server.decrypt(received[i:i + 7])
        assert plain is not None
        out += plain
        if i + 7 < len(received):
            assert not out  # nothing until the record is whole
    assert out == payload


def test_a_frame_larger_than_a_record_spans_records_both_ways(connected: tuple[Client, TlsSession]) -> None:
    client, server = connected
    payload = os.urandom(5 * 16384 + 123)  # several records, the last one partial
    received = client.send(payload)
    half = len(received) // 2 + 5  # a read that ends inside a record
    first, second = server.decrypt(received[:half]), server.decrypt(received[half:])
    assert first is not None and second is not None
    assert bytes(first) + bytes(second) == payload
    reply = os.urandom(3 * 1024 * 1024 + 1)
    assert client.receive(server.encrypt(reply)) == reply


def test_a_read_of_many_full_records_decrypts_them_all(connected: tuple[Client, TlsSession]) -> None:
    client, server = connected
    payload = os.urandom(1024 * 1024)
    plain = server.decrypt(client.send(payload))
    assert plain is not None and bytes(plain) == payload


def test_a_tampered_record_is_an_error(connected: tuple[Client, TlsSession]) -> None:
    client, server = connected
    record = bytearray(client.send(b"x" * 64))
    record[-1] ^= 1
    with pytest.raises(ssl.SSLError):
        server.decrypt(bytes(record))


def test_close_notify_ends_the_session(connected: tuple[Client, TlsSession]) -> None:
    client, server = connected
    last = client.send(b"last words")
    try:
        client.tls.unwrap()
    except ssl.SSLWantReadError:
        pass
    plain = server.decrypt(last + client.outgoing.read())
    assert plain is not None and bytes(plain) == b"last words"  # data before the alert still counts
    assert server.closed and server.decrypt(b"") is None
    assert server.close()  # the broker answers with its own close_notify


def test_a_plaintext_client_fails_the_handshake_with_an_alert(ca: trustme.CA) -> None:
    server = TlsSession(server_context(ca))
    with pytest.raises(ssl.SSLError):
        server.handshake(b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x01\x00\x04test")
    server.close()  # a broken session closes without an error


def test_a_peer_that_closes_mid_handshake_fails_it(ca: trustme.CA) -> None:
    server = TlsSession(server_context(ca))
    client = Client(client_context(ca))
    with pytest.raises(ssl.SSLWantReadError):
        client.tls.do_handshake()
    hello = client.outgoing.read()
    assert not server.handshake(hello[: len(hello) // 2])
    with pytest.raises(ssl.SSLError):
        server.handshake(b"")


def test_mutual_tls_gives_the_client_certificate(ca: trustme.CA) -> None:
    server = TlsSession(server_context(ca, client_auth=True))
    Client(client_context(ca, certificate=True)).handshake(server)
    cert = server.peer_certificate()
    assert cert is not None
    assert ((("commonName", "alice-cert"),) in cert["subject"])


def test_mutual_tls_without_a_certificate_is_refused(ca: trustme.CA) -> None:
    server = TlsSession(server_context(ca, client_auth=True))
    client = Client(client_context(ca, ssl.TLSVersion.TLSv1_2))
    with pytest.raises(ssl.SSLError):
        client.handshake(server)
    assert server.take_output()[:1] == b"\x15"  # the alert that tells the client why


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_tls_below_1_2_is_refused(ca: trustme.CA) -> None:
    server = TlsSession(server_context(ca))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_1
        context.set_ciphers("ALL:@SECLEVEL=0")
    except (ValueError, ssl.SSLError):
        pytest.skip("this OpenSSL cannot even offer TLS 1.1")
    client = Client(context)
    with pytest.raises(ssl.SSLError):
        client.handshake(server)
