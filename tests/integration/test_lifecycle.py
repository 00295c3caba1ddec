"""Start-up, configuration errors and graceful shutdown of the real process."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.codec import encode_request
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration


def _kcoord(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kcoord", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def test_version() -> None:
    result = _kcoord("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("kcoord ")


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("no.such.key=1", "no.such.key: unknown configuration key"),
        ("group.max.size=lots", "group.max.size: expected an integer"),
        ("group.max.size=0", "group.max.size: 0 is out of range"),
        ("auto.create.topics.enable=maybe", "auto.create.topics.enable: expected true or false"),
        ("log.flush.policy=never", "log.flush.policy: 'never' is out of range"),
        ("group.min.session.timeout.ms=9000000", "group.min.session.timeout.ms: 9000000 is above"),
        ("novalue", "expected name=value"),
    ],
)
def test_bad_config_is_refused_at_start_naming_the_key(tmp_path: Path, setting: str, complaint: str) -> None:
    result = _kcoord("serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), "--set", setting)
    assert result.returncode == 2
    assert complaint in result.stderr


def test_bad_config_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "kcoord.toml"
    config.write_text('"group.max.size" = "x"\n')
    result = _kcoord("serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"),
                     "--config", str(config))
    assert result.returncode == 2
    assert "group.max.size: expected an integer" in result.stderr
    config.write_text("this is not toml\n")
    result = _kcoord("serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"),
                     "--config", str(config))
    assert result.returncode == 2
    assert "not valid TOML" in result.stderr


def test_config_file_and_set_are_applied(tmp_path: Path) -> None:
    config = tmp_path / "kcoord.toml"
    config.write_text('"node.id" = 7\n"cluster.id" = "from-file"\n')
    proc = BrokerProcess(tmp_path / "data", {"cluster.id": "from-set"},
                         extra_args=["--config", str(config)]).start()
    try:
        with WireClient(proc.host, proc.port) as client:
            body = client.request(3, 9, {"topics": []})
        assert body.cluster_id == "from-set"  # --set wins over the file
        assert [b.node_id for b in body.brokers] == [7]  # the file applies
    finally:
        assert proc.stop() == 0


def test_second_broker_on_the_same_data_dir_is_refused(broker: BrokerProcess) -> None:
    result = _kcoord("serve", "--listen", "127.0.0.1:0", "--data-dir", str(broker.data_dir))
    assert result.returncode == 1
    assert "in use by another kcoord" in result.stderr


def test_port_in_use_is_a_clear_error(broker: BrokerProcess, tmp_path: Path) -> None:
    result = _kcoord("serve", "--listen", broker.bootstrap, "--data-dir", str(tmp_path / "other"))
    assert result.returncode == 1
    assert f"cannot listen on {broker.bootstrap}" in result.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_graceful_shutdown_answers_in_flight_requests_then_exits_0(
    broker: BrokerProcess, signum: signal.Signals
) -> None:
    with WireClient(broker.host, broker.port) as client:
        burst = b"".join(encode_request(10, 3, i, {"key": f"g{i}"}) for i in range(1, 101))
        client.send_raw(burst)
        client.receive(10, 3, 1)  # the burst has reached the broker
        assert broker.proc is not None
        broker.proc.send_signal(signum)
        for i in range(2, 101):
            assert client.receive(10, 3, i).error_code == 0
        assert client.is_closed_by_peer()
    assert broker.proc.wait(15) == 0
    assert "shutting down" in broker.log()
    assert "kcoord stopped" in broker.log()
