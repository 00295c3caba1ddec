"""Is the broker serving? Exit 0 if it answers ApiVersions and serves the group APIs.

The container healthcheck of the kcoord image. It speaks the wire protocol itself (with
kcoord's own codec), so it needs nothing but the installed package: a TCP connect, one
ApiVersions request, and a check that the answer carries no error and lists the APIs a
consumer group needs. Exit codes: 0 healthy, 1 unhealthy (the reason on stderr), 2 usage.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys

from protocol.codec import decode_response, encode_request
from protocol.errors import ProtocolError

API_VERSIONS = 18
API_VERSIONS_VERSION = 3
# What a consumer group needs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
# OffsetCommit, OffsetFetch.
GROUP_APIS = {10: "FindCoordinator", 11: "JoinGroup", 14: "SyncGroup", 12: "Heartbeat",
              8: "OffsetCommit", 9: "OffsetFetch"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Exit 0 if a kcoord broker answers ApiVersions.")
    parser.add_argument("--bootstrap-server", default="127.0.0.1:9092", metavar="HOST:PORT",
                        help="the broker to ask (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                        help="connect and read timeout (default: %(default)s)")
    return parser


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return bytes(data)


def check(host: str, port: int, timeout: float) -> str | None:
    """None if the broker is healthy, else why not."""
    body = {"client_software_name": "kcoord-healthcheck", "client_software_version": "1"}
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(encode_request(API_VERSIONS, API_VERSIONS_VERSION, 1, body, "kcoord-healthcheck"))
        (size,) = struct.unpack(">i", _read_exactly(sock, 4))
        correlation_id, response = decode_response(API_VERSIONS, API_VERSIONS_VERSION, _read_exactly(sock, size))
    if correlation_id != 1:
        return f"answer to correlation id {correlation_id}, expected 1"
    if response.error_code != 0:
        return f"ApiVersions error code {response.error_code}"
    served = {entry.api_key for entry in response.api_keys}
    missing = sorted(name for key, name in GROUP_APIS.items() if key not in served)
    if missing:
        return "group APIs not served: " + ", ".join(missing)
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    host, _, port = args.bootstrap_server.rpartition(":")
    if not host or not port.isdigit():
        print(f"healthcheck: --bootstrap-server {args.bootstrap_server!r}: expected HOST:PORT", file=sys.stderr)
        return 2
    try:
        problem = check(host.strip("[]"), int(port), args.timeout)
    except (OSError, ProtocolError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    if problem is not None:
        print(f"healthcheck: {args.bootstrap_server} unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
