"""Progress bars of the admin commands: drawn on a terminal, absent when piped."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from admin.progress import Steps, chunks
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.clients import create_topic


def test_work_is_done_in_chunks_and_counted() -> None:
    out = io.StringIO()
    seen: list[int] = []
    with Steps(out, enabled=True) as steps:
        steps.chunked("committing offsets", list(range(2500)), lambda chunk: seen.append(len(chunk)))
        assert steps.wait("reading the history", lambda: 42) == 42
    assert seen == [1000, 1000, 500]
    drawn = out.getvalue()
    assert "committing offsets" in drawn and "2500/2500" in drawn and "reading the history" in drawn


def test_nothing_is_drawn_when_the_stream_is_not_a_terminal() -> None:
    out = io.StringIO()  # isatty() is False, as for a pipe or a file
    seen: list[int] = []
    with Steps(out) as steps:
        assert not steps.enabled
        steps.chunked("committing offsets", list(range(10)), lambda chunk: seen.append(len(chunk)), size=4)
    assert seen == [4, 4, 2] and out.getvalue() == ""


def test_chunks() -> None:
    assert list(chunks(range(5), 2)) == [[0, 1], [2, 3], [4]]
    assert list(chunks([], 2)) == []


# --- the real command, on a terminal and piped -------------------------------------------------


@pytest.fixture(scope="module")
def offsets_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[BrokerProcess, Path]:
    root = tmp_path_factory.mktemp("progress")
    proc = BrokerProcess(root / "data").start()
    create_topic(proc.bootstrap, "wide", 40)
    path = root / "offsets.csv"
    path.write_text("topic,partition,offset,metadata\n" + "".join(f"wide,{p},0,\n" for p in range(40)))
    yield proc, path
    assert proc.stop() == 0


def _import(proc: BrokerProcess, path: Path, group: str, tty: bool) -> tuple[int, str, str]:
    args = [sys.executable, "-m", "kcoord", "offsets", "import", group, "--file", str(path), "--execute",
            "--allow-new-group", "--bootstrap-server", proc.bootstrap]
    env = dict(os.environ, COLUMNS="100", TERM="xterm")
    if not tty:
        done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=60, env=env)
        return done.returncode, done.stdout, done.stderr
    master, slave = pty.openpty()
    child = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=slave, text=True, env=env)
    os.close(slave)
    drawn = bytearray()
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            child.kill()
            raise AssertionError("the command wrote nothing for 60 s")
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        drawn += chunk
    os.close(master)
    assert child.stdout is not None
    stdout = child.stdout.read()
    return child.wait(30), stdout, drawn.decode(errors="replace")


@pytest.mark.integration
def test_a_long_import_shows_a_bar_on_a_terminal_and_none_when_piped(
        offsets_file: tuple[BrokerProcess, Path]) -> None:
    proc, path = offsets_file
    code, stdout, terminal = _import(proc, path, "on-a-terminal", tty=True)
    assert code == 0, terminal
    assert "committing offsets of group 'on-a-terminal'" in terminal and "40/40" in terminal
    assert "Committed 40 offsets" in stdout  # the result itself stays on standard output

    code, piped_stdout, stderr = _import(proc, path, "piped", tty=False)
    assert code == 0, stderr
    assert stderr == "" and "Committed 40 offsets" in piped_stdout
