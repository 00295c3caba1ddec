"""The README's commands run as written, from what a fresh clone has after ``make run``.

Every ``sh`` block of README.md carries a marker on the line before it:

- ``<!-- readme-test: run -->``: run with ``bash -e``, in order, after the background ones;
- ``<!-- readme-test: background -->``: a command that runs until stopped (the broker):
  started first, and waited for until it listens;
- ``<!-- readme-test: skip: REASON -->``: not run here, for the reason given (``make run``
  itself, Docker).

The blocks run in a scratch directory laid out like the clone: the repository's files are
linked in, and ``.venv`` holds what ``make run`` would have put there (``activate`` and a
``kcoord`` command), running this checkout's code. The broker listens on a free port
instead of 9092; the README's own address is replaced by it, and commands that use the
default bootstrap server find it through ``KCOORD_BOOTSTRAP_SERVER``, so nothing here can
collide with a broker already on 9092.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
BLOCK = re.compile(r"(?:<!-- readme-test: (?P<marker>[^>]*?) -->\n)?```sh\n(?P<body>.*?)```", re.S)
README_ADDRESS = "127.0.0.1:9092"


def blocks() -> list[tuple[str, str]]:
    """(marker, commands) of every sh block, in order."""
    return [((m.group("marker") or "").strip(), m.group("body")) for m in BLOCK.finditer(README.read_text())]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def fake_clone(root: Path) -> dict[str, str]:
    """A directory like the clone after ``make run``, and the environment to run commands in."""
    for entry in REPO.iterdir():
        if entry.name not in (".venv", "data", ".git"):
            (root / entry.name).symlink_to(entry)
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    command = bin_dir / "kcoord"
    command.write_text(f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m kcoord \"$@\"\n")
    command.chmod(0o755)
    (bin_dir / "activate").write_text(f'PATH="{bin_dir}:$PATH"\nexport PATH\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCOORD_")}
    env["PATH"] = "/usr/bin:/bin"  # no kcoord on PATH until the README activates .venv
    return env


def test_every_shell_block_is_marked() -> None:
    found = blocks()
    assert found, "README.md has no sh blocks"
    for marker, body in found:
        assert marker in ("run", "background") or marker.startswith("skip: "), f"unmarked block:\n{body}"
    assert [m for m, _ in found].count("background") == 1


def test_readme_commands_run_as_written(tmp_path: Path) -> None:
    root = tmp_path / "kcoord"
    root.mkdir()
    env = fake_clone(root)
    port = free_port()
    address = f"127.0.0.1:{port}"
    env["KCOORD_BOOTSTRAP_SERVER"] = address
    background = [body for marker, body in blocks() if marker == "background"]
    to_run = [body for marker, body in blocks() if marker == "run"]
    assert README_ADDRESS in background[0]
    broker = subprocess.Popen(["bash", "-c", "exec " + background[0].replace(README_ADDRESS, address).strip()],
                              cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        _wait_listening(broker, port)
        for body in to_run:
            done = subprocess.run(["bash", "-e", "-c", body.replace(README_ADDRESS, address)], cwd=root, env=env,
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, f"README block failed:\n{body}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
            if "kcoord consume" in body:
                assert 'customer-7\t{"order": 1}' in done.stdout
    finally:
        os.killpg(broker.pid, signal.SIGTERM)
        code = broker.wait(30)
        log = broker.stderr.read() if broker.stderr else ""
    assert code == 0, log
    assert (root / "data" / "topics.json").is_file()


def _wait_listening(broker: subprocess.Popen[str], port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if broker.poll() is not None:
            raise AssertionError(f"the README's broker exited {broker.returncode}:\n{broker.stderr.read()}")  # type: ignore[union-attr]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("the README's broker did not listen within 60 s")


def test_make_run_takes_listen_and_data_dir(tmp_path: Path) -> None:
    """``make -n`` prints what ``make run`` would do with the overrides, running nothing."""
    done = subprocess.run(["make", "-n", "-C", str(REPO), "run", "LISTEN=0.0.0.0:9999", f"DATA_DIR={tmp_path}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f".venv/bin/kcoord serve --listen 0.0.0.0:9999 --data-dir {tmp_path}" in done.stdout


def test_docs_give_install_commands_that_work_from_a_clone() -> None:
    """kcoord is not on the package index: no document may tell anyone to pip install it by name."""
    for path in [README, REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = path.read_text()
        assert not re.search(r"pip install (-U |--upgrade )?'?kcoord\b", text), path.name
