"""``pytest --cpu-load=N``: keep N cores busy for the whole run.

A test that passes only on an idle machine is a bug; this makes the machine busy on
purpose. The busy loops are child processes started before the first test and stopped
when the session ends, however it ends (failure, ``-x``, Ctrl-C). Each loop also stops
by itself when pytest's process is gone, so a killed run leaves nothing spinning.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

# Spins, and checks every few million steps whether its parent (pytest) still exists.
_BUSY_LOOP = """
import os
parent = os.getppid()
while os.getppid() == parent:
    for _ in range(2_000_000):
        pass
"""

_KEY = pytest.StashKey[list[subprocess.Popen[bytes]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-load", type=int, default=0, metavar="N",
                     help="run N busy-loop processes for the duration of the test run")


def pytest_configure(config: pytest.Config) -> None:
    count: int = config.getoption("--cpu-load")
    if count < 0:
        raise pytest.UsageError("--cpu-load must be 0 or more")
    if hasattr(config, "workerinput"):
        return  # a pytest-xdist worker: the controlling process runs the loops, once
    config.stash[_KEY] = [
        subprocess.Popen([sys.executable, "-c", _BUSY_LOOP], stdin=subprocess.DEVNULL)
        for _ in range(count)
    ]


def pytest_report_header(config: pytest.Config) -> str | None:
    count: int = config.getoption("--cpu-load")
    return f"cpu load: {count} busy-loop process(es)" if count else None


def pytest_unconfigure(config: pytest.Config) -> None:
    """Called at the end of every session, also after Ctrl-C or an internal error."""
    for proc in config.stash.get(_KEY, []):
        proc.kill()
    for proc in config.stash.get(_KEY, []):
        proc.wait(10)
    config.stash[_KEY] = []
