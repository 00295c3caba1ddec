"""``kcoord serve`` names the cause of every start-up failure, in one line, with the right exit code.

Configuration the operator must change exits 2; a failure to run (the data directory is in
use, the address is busy) exits 1. None of these starts a broker: each fails before it
would listen, so the tests are quick.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import ConfigError, load_config, parse_host_port
from storage.data_dir import FORMAT_VERSION, DataDirError, check_format, prepare
from storage.layout import format_file, lock_file
from tests.support.broker_process import REPO


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kcoord", "serve", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


# ---------------------------------------------------------------------- the data directory


def test_data_dir_that_is_a_file_is_named_as_such(tmp_path: Path) -> None:
    target = tmp_path / "afile"
    target.write_text("x")
    result = serve("--listen", "127.0.0.1:0", "--data-dir", str(target))
    assert result.returncode == 2
    line = one_line(result)
    assert f"data directory {target} is a file, not a directory" in line
    assert "listen" not in line


def test_data_dir_under_a_file_names_the_file(tmp_path: Path) -> None:
    target = tmp_path / "afile"
    target.write_text("x")
    result = serve("--listen", "127.0.0.1:0", "--data-dir", str(target / "data"))
    assert result.returncode == 2
    line = one_line(result)
    assert f"{target} is a file, not a directory" in line
    assert "listen" not in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_read_only_data_dir_is_named(tmp_path: Path) -> None:
    target = tmp_path / "ro"
    target.mkdir()
    target.chmod(0o500)
    try:
        result = serve("--listen", "127.0.0.1:0", "--data-dir", str(target))
    finally:
        target.chmod(0o700)
    assert result.returncode == 2
    assert "is not writable" in one_line(result)


def test_data_dir_in_use_names_the_lock(tmp_path: Path) -> None:
    prepare(tmp_path)
    fd = os.open(lock_file(tmp_path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = serve("--listen", "127.0.0.1:0", "--data-dir", str(tmp_path))
    finally:
        os.close(fd)
    assert result.returncode == 1
    assert f"data directory {tmp_path} is in use by another kcoord" in one_line(result)


def test_newer_data_format_is_refused(tmp_path: Path) -> None:
    format_file(tmp_path).write_text(json.dumps({"format_version": FORMAT_VERSION + 1}))
    result = serve("--listen", "127.0.0.1:0", "--data-dir", str(tmp_path))
    assert result.returncode == 2
    line = one_line(result)
    assert f"holds data format {FORMAT_VERSION + 1}, written by a newer kcoord" in line
    assert "CHANGELOG.md" in line


def test_format_file_is_written_once_and_read_back(tmp_path: Path) -> None:
    assert check_format(tmp_path) == FORMAT_VERSION
    assert json.loads(format_file(tmp_path).read_text()) == {"format_version": FORMAT_VERSION}
    assert check_format(tmp_path) == FORMAT_VERSION


def test_unreadable_format_file_is_refused(tmp_path: Path) -> None:
    format_file(tmp_path).write_text("{}")
    with pytest.raises(DataDirError, match="not a kcoord format file"):
        check_format(tmp_path)


# ---------------------------------------------------------------------- addresses


@pytest.mark.parametrize("option, named", [("--listen", "--listen"), ("--http-listen", "--http-listen"),
                                           ("--metrics-listen", "--http-listen")])  # the older name of the option
@pytest.mark.parametrize("port", ["99999", "65536"])
def test_ports_above_65535_are_refused(tmp_path: Path, option: str, named: str, port: str) -> None:
    args = ["--listen", "127.0.0.1:0", "--data-dir", str(tmp_path)]
    args += [option, f"127.0.0.1:{port}"]
    result = serve(*args)
    assert result.returncode == 2
    assert f"{named} '127.0.0.1:{port}': port {port} is not between 0 and 65535" in one_line(result)


def test_host_port_parsing() -> None:
    assert parse_host_port("127.0.0.1:0", "--listen") == ("127.0.0.1", 0)
    assert parse_host_port("[::1]:9092", "--listen") == ("::1", 9092)
    for bad in ("nohost", ":9092", "h:", "h:x", "h:-1", "h:65536"):
        with pytest.raises(ConfigError):
            parse_host_port(bad, "--listen")
    with pytest.raises(ConfigError, match="not between 1 and 65535"):
        parse_host_port("h:0", "advertised.listeners", allow_any_port=False)


@pytest.mark.parametrize("value", ["notaurl", "PLAINTEXT://host", "PLAINTEXT://host:99999", "://h:1",
                                   "PLAINTEXT://h:1,junk"])
def test_bad_advertised_listeners_exit_2_naming_the_key(tmp_path: Path, value: str) -> None:
    result = serve("--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), "--set", f"advertised.listeners={value}")
    assert result.returncode == 2
    line = one_line(result)
    assert "advertised.listeners" in line
    assert "--listen" not in line


def test_good_advertised_listeners_are_accepted() -> None:
    config = load_config(sets=["advertised.listeners=PLAINTEXT://kcoord:9092,SASL_SSL://[::1]:9093"])
    assert config["advertised.listeners"].startswith("PLAINTEXT://")


def test_address_that_is_not_local_is_a_configuration_error(tmp_path: Path) -> None:
    # 192.0.2.0/24 is TEST-NET-1: never assigned to a local interface.
    result = serve("--listen", "192.0.2.1:0", "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert "cannot listen on 192.0.2.1:0" in one_line(result)


def test_busy_address_names_the_address(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve("--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path))
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in one_line(result)
