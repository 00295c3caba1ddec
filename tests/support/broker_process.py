"""Start the real ``kcoord serve`` process on a free loopback port, and stop it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

_LISTENING = re.compile(r"kcoord listening on ([\d.]+):(\d+)(?:.*listener=(\w+))?")
REPO = Path(__file__).resolve().parents[2]


class BrokerProcess:
    """A broker child process; its stderr is collected line by line for assertions."""

    def __init__(self, data_dir: Path, sets: dict[str, object] | None = None,
                 listen: str = "127.0.0.1:0", extra_args: list[str] | None = None,
                 command: str = "broker") -> None:
        self.data_dir = data_dir
        #: ``broker`` runs ``python -m broker serve`` (the broker alone); ``kcoord`` runs
        #: ``kcoord serve``, whose HTTP surface adds the console.
        self.command = command
        self.extra_args = list(extra_args or [])
        self.sets = dict(sets or {})
        self.listen = listen
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self.host = "127.0.0.1"
        self.port = 0
        #: listener name -> (host, port) bound, from the start-up log (several with ``listeners``).
        self.listeners: dict[str, tuple[str, int]] = {}
        self._listening = threading.Event()
        self._lock = threading.Lock()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def address(self, listener: str) -> str:
        """host:port of a named listener (wait until every listener has logged its address)."""
        deadline = time.monotonic() + 10
        while listener not in self.listeners:
            if time.monotonic() > deadline:
                raise AssertionError(f"no listener {listener} in the log:\n{self.log()}")
            time.sleep(0.02)
        host, port = self.listeners[listener]
        return f"{host}:{port}"

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        args = [sys.executable, "-m", self.command, "serve", "--listen", self.listen,
                "--data-dir", str(self.data_dir)]
        args += self.extra_args
        for name, value in self.sets.items():
            args += ["--set", f"{name}={value}"]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._listening.clear()
        self.listeners = {}
        self.proc = subprocess.Popen(args, cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True, env=env)
        threading.Thread(target=self._pump, args=(self.proc,), daemon=True).start()
        deadline = time.monotonic() + timeout
        while not self._listening.wait(0.05):
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode} before listening:\n{self.log()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("broker did not start listening:\n" + self.log())
        return self

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            with self._lock:
                self.lines.append(line.rstrip("\n"))
            match = _LISTENING.search(line)
            if match:
                address = (match.group(1), int(match.group(2)))
                if match.group(3):
                    self.listeners[match.group(3)] = address
                if not self._listening.is_set():
                    self.host, self.port = address
                    self._listening.set()

    def log(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def http_url(self) -> str:
        """``http://host:port`` of the HTTP listener (``--http-listen`` or ``--metrics-listen``), from its log line."""
        line = self.wait_for_log(r"kcoord http on 127\.0\.0\.1:\d+")
        match = re.search(r"kcoord http on (127\.0\.0\.1:\d+)", line)
        assert match is not None
        return f"http://{match.group(1)}"

    def wait_for_log(self, pattern: str, timeout: float = 10.0) -> str:
        """Wait (bounded) for a log line matching ``pattern``; return it."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                for line in self.lines:
                    if regex.search(line):
                        return line
            time.sleep(0.02)
        raise AssertionError(f"no log line matching {pattern!r} within {timeout}s:\n{self.log()}")

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError("broker did not stop within the grace period:\n" + self.log()) from None

    def kill(self) -> None:
        """SIGKILL: a crash, as far as the data directory can tell."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> BrokerProcess:
        """Stop gracefully and start again on the same port and data directory."""
        self.stop()
        self.listen = f"{self.host}:{self.port}"
        return self.start()
