"""``kcoord topics``, ``produce`` and ``consume`` without a broker: options, partitioning, input files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from admin.errors import UsageError
from admin.records import murmur2, partition_for_key
from admin.topics_cli import _read_offset_file
from kcoord.cli import build_parser, main


# a new random key every run, under a name that stays the same (pytest-xdist's workers must
# collect the same tests)
@pytest.mark.parametrize("key", [b"", b"a", b"ab", b"abc", b"abcd", b"order-17",
                                 pytest.param(os.urandom(37), id="random-37-bytes"), b"\xff" * 9])
def test_murmur2_is_kafkas(key: bytes) -> None:
    expected = kafka_python_murmur2(bytearray(key))
    assert murmur2(key) & 0xFFFFFFFF == expected & 0xFFFFFFFF


def test_known_partitions_of_the_java_client() -> None:
    # The values Kafka's UtilsTest.testMurmur2 pins.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert partition_for_key(b"21", 10) == (-973932308 & 0x7FFFFFFF) % 10


def test_every_topic_command_parses() -> None:
    parser = build_parser()
    for argv in (["topics", "list"], ["topics", "describe", "t"], ["topics", "create", "t", "--partitions", "3",
                 "--config", "cleanup.policy=compact"], ["topics", "delete", "t"],
                 ["topics", "alter", "t", "--partitions", "4"], ["topics", "delete-records", "t", "--offset", "5"],
                 ["produce", "t", "--value", "x"], ["consume", "t", "--count", "1"]):
        args = parser.parse_args(argv)
        assert callable(args.func)


def test_create_collects_configs() -> None:
    args = build_parser().parse_args(["topics", "create", "t", "--config", "a=1", "--config", "b=x=y"])
    assert args.configs == [("a", "1"), ("b", "x=y")]


@pytest.mark.parametrize(("argv", "complaint"), [
    (["topics", "create", "t", "--config", "novalue"], "expected NAME=VALUE"),
    (["topics", "create", "t", "--partitions", "0"], "expected at least 1"),
    (["consume", "t", "--partition", "x"], "is not a partition number"),
    (["produce", "t", "--acks", "2"], "invalid choice"),
])
def test_usage_errors_are_two_lines(argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and complaint in lines[0]
    assert lines[1].startswith("Run 'kcoord ") and lines[1].endswith(" --help' for usage.")


def test_offset_json_file_of_kafka_delete_records(tmp_path: Path) -> None:
    path = tmp_path / "offsets.json"
    path.write_text(json.dumps({"partitions": [{"topic": "t", "partition": 0, "offset": 5},
                                               {"topic": "t", "partition": 1, "offset": -1}], "version": 1}))
    assert _read_offset_file(path) == {("t", 0): 5, ("t", 1): -1}
    path.write_text(json.dumps({"partitions": [{"topic": "t", "partition": "0", "offset": 5}]}))
    with pytest.raises(UsageError, match="entry 1 needs"):
        _read_offset_file(path)
