"""Fixtures shared by every test layer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess

pytest_plugins = ["tests.support.cpu_load"]

#: the test files that run containers: one podman session at a time uses the state directory
CONTAINER_FILES = frozenset({"test_topology.py", "test_topology_sasl.py", "test_cluster_topology.py"})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``pytest -n N --dist loadfile`` (``make test``) each test file runs whole on one
    worker, so its module fixtures start once; the container topologies run together on one
    worker, one after another, as if they were one file."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ContainersTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if Path(nodeid.split("::", 1)[0]).name in CONTAINER_FILES:
                return "containers"
            return str(super()._split_scope(nodeid))

    return ContainersTogether(config, log)


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[object]:
    """Start real broker processes; all are stopped (and must exit 0) at teardown."""
    started: list[BrokerProcess] = []

    def start(sets: dict[str, object] | None = None, data_dir: Path | None = None,
              extra_args: list[str] | None = None) -> BrokerProcess:
        proc = BrokerProcess(data_dir or tmp_path / f"data{len(started)}", sets, extra_args=extra_args).start()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.proc is not None and proc.proc.poll() is None:
            code = proc.stop()
            assert code == 0, f"broker exited with {code}:\n{proc.log()}"


@pytest.fixture
def broker(broker_factory: object) -> BrokerProcess:
    """One real broker process on a free loopback port, with a fresh data directory."""
    return broker_factory()  # type: ignore[operator, no-any-return]
