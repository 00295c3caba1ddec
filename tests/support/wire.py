"""A blocking raw-protocol client for tests: speaks frames, not a client library."""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

from protocol.codec import decode_response, encode_request


class WireClient:
    def __init__(self, host: str, port: int, timeout: float = 10.0, tls: ssl.SSLContext | None = None) -> None:
        sock = socket.create_connection((host, port), timeout=timeout)
        self.sock = sock if tls is None else tls.wrap_socket(sock, server_hostname=host)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exactly(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks += chunk
        return bytes(chunks)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exactly(4))
        return self.recv_exactly(size)

    def is_closed_by_peer(self) -> bool:
        """True once the broker has closed this connection (waits up to the socket timeout)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError):
            return True

    def send(self, api_key: int, version: int, body: Any, client_id: str | None = "kcoord-test") -> int:
        self.correlation_id += 1
        self.send_raw(encode_request(api_key, version, self.correlation_id, body, client_id))
        return self.correlation_id

    def receive(self, api_key: int, version: int, correlation_id: int) -> Any:
        got, body = decode_response(api_key, version, self.recv_frame())
        assert got == correlation_id, f"correlation id {got}, expected {correlation_id}"
        return body

    def request(self, api_key: int, version: int, body: Any) -> Any:
        return self.receive(api_key, version, self.send(api_key, version, body))
