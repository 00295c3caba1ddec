"""The command line itself: options, usage errors and exit codes that need no broker."""

from __future__ import annotations

import socket
import sys
import types
from pathlib import Path

import pytest

from admin import cli as admin_cli
from admin.errors import UsageError
from admin.inputs import OffsetRow
from admin.plan import BY_DURATION, CURRENT, FROM_FILE, NEAREST, SHIFT_BY, TO_DATETIME, TO_OFFSET
from kcoord.cli import build_parser, main


def _closed_port() -> str:
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return f"127.0.0.1:{port}"


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2
    return capsys.readouterr().err


def test_every_command_is_registered_with_a_function() -> None:
    parser = build_parser()
    for argv in (["groups", "list"], ["groups", "describe", "g"], ["groups", "delete", "g"],
                 ["offsets", "reset", "g", "--all-topics", "--to-earliest"],
                 ["offsets", "delete", "g", "--topic", "t"], ["offsets", "export", "g"],
                 ["offsets", "import", "g", "--file", "f"], ["offsets", "restore", "--group", "g", "--from-file", "f"]):
        args = parser.parse_args(argv)
        assert callable(args.func)
        assert (args.bootstrap_server, args.output, args.timeout) == ("127.0.0.1:9092", "table", 10.0)


def test_global_options() -> None:
    args = build_parser().parse_args(["groups", "list", "--bootstrap-server", "a:1,b:2", "--output", "json",
                                      "--timeout", "2.5", "--state", "stable", "--state", "EMPTY"])
    assert (args.bootstrap_server, args.output, args.timeout, args.states) == ("a:1,b:2", "json", 2.5,
                                                                               ["Stable", "Empty"])


@pytest.mark.parametrize(("argv", "message"), [
    (["offsets", "reset", "g", "--topic", "t"], "one of the arguments --to-earliest"),
    (["offsets", "reset", "g", "--topic", "t", "--to-earliest", "--to-latest"], "not allowed with argument"),
    (["offsets", "reset", "g", "--topic", "t", "--to-earliest", "--dry-run", "--execute"], "not allowed with"),
    (["offsets", "reset", "g", "--topic", "t", "--by-duration", "1h"], "bad duration '1h'"),
    (["offsets", "reset", "g", "--topic", "t", "--to-datetime", "noon"], "bad time 'noon'"),
    (["offsets", "reset", "g", "--topic", "t", "--to-offset", "-3"], "an offset cannot be negative"),
    (["offsets", "reset", "g", "--topic", "t:x", "--to-earliest"], "partition 'x' is not a number"),
    (["groups", "list", "--state", "running"], "unknown group state 'running'"),
    (["groups", "list", "--timeout", "0"], "more than 0 seconds"),
    (["groups", "list", "--output", "xml"], "invalid choice: 'xml'"),
    (["offsets", "delete", "g"], "the following arguments are required: --topic"),
    (["offsets", "restore", "--from-file", "f"], "the following arguments are required: --group"),
])
def test_usage_errors_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert message in _usage_error(argv, capsys)


@pytest.mark.parametrize(("option", "strategy", "value"), [
    (["--to-offset", "7"], TO_OFFSET, 7),
    (["--shift-by", "-5"], SHIFT_BY, -5),
    (["--shift-by", "5"], SHIFT_BY, 5),
    (["--to-datetime", "2024-05-01T12:00:00Z"], TO_DATETIME, 1714564800000),
    (["--to-current"], CURRENT, 0),
    (["--to-nearest"], NEAREST, 0),
    (["--from-file", "x.csv"], FROM_FILE, 0),
])
def test_strategy_options(option: list[str], strategy: str, value: int) -> None:
    args = build_parser().parse_args(["offsets", "reset", "g", "--all-topics", *option])
    assert admin_cli._strategy(args) == admin_cli.Strategy(strategy, value)
    assert args.execute is False


def test_by_duration_counts_back_from_now() -> None:
    args = build_parser().parse_args(["offsets", "reset", "g", "--all-topics", "--by-duration", "PT1H", "--execute"])
    import time

    before = int(time.time() * 1000)
    strategy = admin_cli._strategy(args)
    after = int(time.time() * 1000)
    assert strategy.name == BY_DURATION
    assert before - 3_600_000 <= strategy.value <= after - 3_600_000
    assert args.execute is True


@pytest.mark.parametrize(("argv", "message"), [
    (["offsets", "reset", "g", "--to-earliest"], "say which partitions to reset"),
    (["offsets", "reset", "g", "--to-earliest", "--all-topics", "--topic", "t"], "either --topic or --all-topics"),
    (["offsets", "restore", "--group", "g"], "exactly one of --as-of TIME"),
    (["offsets", "restore", "--group", "g", "--as-of", "2024-01-01", "--from-file", "f"], "exactly one of"),
    (["offsets", "restore", "--group", "g", "--as-of", "2024-01-01"], "--as-of needs --data-dir"),
    (["offsets", "restore", "--group", "g", "--as-of", "2024-01-01", "--data-dir", "/no/such/dir"],
     "is not a directory"),
])
def test_input_errors_found_before_connecting_exit_2(argv: list[str], message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # the bootstrap server is unreachable: these must fail on their own, before any connection
    assert main([*argv, "--bootstrap-server", _closed_port()]) == 2
    assert message in capsys.readouterr().err


def test_unreachable_broker_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    address = _closed_port()
    assert main(["groups", "list", "--bootstrap-server", address]) == 3
    assert capsys.readouterr().err == f"kcoord: cannot reach {address}: connection refused\n"


def test_bad_bootstrap_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["groups", "list", "--bootstrap-server", "nowhere"]) == 2
    assert "'nowhere' is not HOST:PORT" in capsys.readouterr().err


def test_history_offsets_come_from_pipeline_history(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = []

    def offsets_as_of(data_dir: Path, as_of_ms: int, group: str | None = None) -> dict[str, object]:
        calls.append((data_dir, as_of_ms, group))
        return {"g": {("t", 1): {"offset": 42, "leader_epoch": 3, "metadata": "m", "commit_timestamp": 5}}}

    module = types.ModuleType("pipeline.history")
    module.offsets_as_of = offsets_as_of  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pipeline.history", module)
    assert admin_cli._history_offsets(tmp_path, 1000, "g") == {("t", 1): OffsetRow("t", 1, 42, "m", 3)}
    assert calls == [(tmp_path, 1000, "g")]


def test_history_reader_missing_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pipeline.history", None)  # import fails
    with pytest.raises(UsageError, match="needs the offset history reader"):
        admin_cli._history_offsets(tmp_path, 1000, "g")
