"""Security rows of ``make bench``: what TLS and SASL cost.

One kcoord with a PLAINTEXT and a SASL_SSL listener (SCRAM-SHA-512, TLS 1.3, a test
certificate made with trustme) and a SASL_PLAINTEXT one. Measured side by side:

- OffsetCommit requests/s (8 connections, 1 partition per request, pipeline depth 8) over
  PLAINTEXT and over SASL_SSL;
- Fetch MB/s of a whole topic from offset 0 (1 connection) over PLAINTEXT and SASL_SSL;
- new connections per second that log in with SCRAM-SHA-512 (4 at a time), over
  SASL_PLAINTEXT and SASL_SSL (TLS handshake included).

The goal is that TLS costs at most 30 % of plaintext throughput. The load generator's TLS
is ``bench.tls_client`` (every record of a read decrypted at once, as a C client does), so
the rows measure the broker's TLS, not trio's per-record stream on the client side.
``python -m bench.security_bench`` prints the rows alone.
"""

from __future__ import annotations

import argparse
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

import trio
import trustme
from scramp import ScramClient

from bench import loadgen
from bench.brokers import REPO, Broker, _drain, _wait_listening, free_port
from bench.tls_client import TlsClientStream
from protocol.codec import decode_response, encode_request

USER, PASSWORD = "bench", "bench-secret"
MECHANISM = "SCRAM-SHA-512"


def start(workdir: Path) -> tuple[Broker, dict[str, tuple[str, int]], ssl.SSLContext]:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    server.private_key_and_cert_chain_pem.write_to_path(str(workdir / "broker.pem"))
    client = ssl.create_default_context()
    ca.configure_trust(client)
    users = workdir / "users.txt"
    users.write_text(f"{MECHANISM}=[name={USER},password={PASSWORD}]\n")
    ports = {name: free_port() for name in ("PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT")}
    settings = {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "ssl.keystore.location": workdir / "broker.pem",
        "sasl.enabled.mechanisms": MECHANISM,
        "scram.credentials.bootstrap.file": users,
        "group.initial.rebalance.delay.ms": 0,
        "log.flush.policy": "durable",
    }
    args = [sys.executable, "-m", "broker", "serve", "--data-dir", str(workdir / "data"), "--log-level", "WARNING"]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    broker = Broker("kcoord", ports["PLAINTEXT"], proc, workdir)
    threading.Thread(target=_drain, args=(proc, broker.lines), daemon=True).start()
    _wait_listening(ports["PLAINTEXT"], proc)
    return broker, {name: ("127.0.0.1", port) for name, port in ports.items()}, client


async def _request(stream: trio.abc.Stream, buffer: bytearray, api_key: int, version: int, body: dict[str, object],
                   correlation_id: int) -> object:
    await stream.send_all(encode_request(api_key, version, correlation_id, body, "kcoord-bench"))
    return decode_response(api_key, version, await loadgen.read_frame(stream, buffer))[1]


async def open_sasl(address: tuple[str, int], tls: ssl.SSLContext | None) -> trio.abc.Stream:
    """A connection logged in with SCRAM-SHA-512 (over TLS when ``tls`` is given)."""
    stream: trio.abc.Stream = await trio.open_tcp_stream(*address)
    if tls is not None:
        assert isinstance(stream, trio.SocketStream)
        secure = TlsClientStream(stream, tls, server_hostname=address[0])
        await secure.do_handshake()
        stream = secure
    buffer = bytearray()
    reply = await _request(stream, buffer, 17, 1, {"mechanism": MECHANISM}, 1)
    assert reply.error_code == 0, reply  # type: ignore[attr-defined]
    scram = ScramClient([MECHANISM], USER, PASSWORD)
    first = await _request(stream, buffer, 36, 1, {"auth_bytes": scram.get_client_first().encode()}, 2)
    scram.set_server_first(bytes(first.auth_bytes).decode())  # type: ignore[attr-defined]
    final = await _request(stream, buffer, 36, 1, {"auth_bytes": scram.get_client_final().encode()}, 3)
    assert final.error_code == 0, final  # type: ignore[attr-defined]
    scram.set_server_final(bytes(final.auth_bytes).decode())  # type: ignore[attr-defined]
    assert not buffer
    return stream


async def connections_per_second(address: tuple[str, int], tls: ssl.SSLContext | None, seconds: float,
                                 parallel: int = 4) -> float:
    count = 0
    deadline = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal count
        while time.perf_counter() < deadline:
            stream = await open_sasl(address, tls)
            await stream.aclose()
            count += 1

    begin = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(parallel):
            nursery.start_soon(loop)
    return count / (time.perf_counter() - begin)


def run(seconds: float = 3.0) -> list[str]:
    """The rows, as markdown lines for docs/benchmarks.md."""
    workdir = Path(tempfile.mkdtemp(prefix="kcoord-bench-security-"))
    broker, addresses, tls = start(workdir)
    rows: list[tuple[str, float, float]] = []
    try:
        plain = addresses["PLAINTEXT"]
        secure = addresses["SASL_SSL"]
        secure_opener = partial(open_sasl, tls=tls)
        trio.run(loadgen.create_topic, plain, "bench-sec", 1)
        commit: dict[str, float] = {}
        for name, address, opener in (("PLAINTEXT", plain, loadgen.open_plain),
                                      ("SASL_SSL", secure, secure_opener)):
            factories = [loadgen.commit_factory(f"bench-sec-{name}-{i}", "bench-sec", 1) for i in range(8)]
            result = trio.run(partial(loadgen.run_connections, address, factories, seconds, 8, opener=opener))
            commit[name] = result.requests / result.seconds
        rows.append(("OffsetCommit requests/s (8 conn, 1 part/req, depth 8)", commit["PLAINTEXT"],
                     commit["SASL_SSL"]))
        trio.run(loadgen.create_topic, plain, "bench-sec-data", 4)
        producers = [loadgen.produce_factory("bench-sec-data", p % 4, 100, 1024) for p in range(4)]
        trio.run(loadgen.run_connections, plain, producers, seconds, 4)
        fetch: dict[str, float] = {}
        for name, address, opener in (("PLAINTEXT", plain, loadgen.open_plain),
                                      ("SASL_SSL", secure, secure_opener)):
            size, _, took = trio.run(partial(loadgen.fetch_everything, address, "bench-sec-data", 4, opener=opener))
            fetch[name] = size / took / 1e6
        rows.append(("Fetch MB/s (1 conn, whole topic from offset 0)", fetch["PLAINTEXT"], fetch["SASL_SSL"]))
        sasl_plain = trio.run(connections_per_second, addresses["SASL_PLAINTEXT"], None, seconds)
        sasl_ssl = trio.run(connections_per_second, secure, tls, seconds)
        rows.append(("New connections/s with a SCRAM-SHA-512 login (4 at a time)", sasl_plain, sasl_ssl))
    finally:
        broker.stop()
    lines = [
        "## Security",
        "",
        "`bench/security_bench.py`: one kcoord with PLAINTEXT, SASL_PLAINTEXT and SASL_SSL listeners",
        "(SCRAM-SHA-512, TLS 1.3, ECDSA test certificate). The last row's first column is",
        "SASL_PLAINTEXT (SCRAM alone), its second SASL_SSL (TLS handshake and SCRAM).",
        "",
        "| workload | PLAINTEXT | SASL_SSL | SASL_SSL / PLAINTEXT |",
        "|---|---|---|---|",
    ]
    for name, first, second in rows:
        lines.append(f"| {name} | {first:,.1f} | {second:,.1f} | {second / first:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    print("\n".join(run(args.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
