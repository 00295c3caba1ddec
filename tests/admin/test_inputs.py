"""What operators type and hand over: durations, times, partition lists, offset files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from admin.client import parse_bootstrap
from admin.errors import UsageError
from admin.inputs import (
    OffsetRow,
    TopicSpec,
    format_offsets,
    format_time,
    parse_duration,
    parse_offsets,
    parse_state,
    parse_time,
    parse_topic_spec,
    read_offsets_file,
)

SECOND = 1000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR


@pytest.mark.parametrize(("text", "ms"), [
    ("PT15M", 15 * MINUTE),
    ("P1D", DAY),
    ("P1DT12H", DAY + 12 * HOUR),
    ("PT1H30M5S", HOUR + 30 * MINUTE + 5 * SECOND),
    ("PT0.5S", 500),
    ("pt2h", 2 * HOUR),
    ("P0D", 0),
    ("P2DT3H4M5.250S", 2 * DAY + 3 * HOUR + 4 * MINUTE + 5250),
])
def test_durations_in_milliseconds(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "P1DT", "1H", "PT1X", "P1W", "P-1D", "PT1H 2M", "15m"])
def test_bad_durations_say_the_expected_form(text: str) -> None:
    with pytest.raises(UsageError, match="PnDTnHnMnS"):
        parse_duration(text)


@pytest.mark.parametrize(("text", "ms"), [
    ("2024-05-01T12:00:00Z", 1714564800000),
    ("2024-05-01T12:00:00", 1714564800000),  # no offset: UTC
    ("2024-05-01T14:00:00+02:00", 1714564800000),
    ("2024-05-01T12:00:00.250Z", 1714564800250),
    ("2024-05-01", 1714521600000),
    ("1714564800000", 1714564800000),  # epoch milliseconds
])
def test_times_in_epoch_milliseconds(text: str, ms: int) -> None:
    assert parse_time(text) == ms


@pytest.mark.parametrize("text", ["yesterday", "2024-13-01", "12:00", "2024-05-01T25:00:00Z", ""])
def test_bad_times_say_the_expected_form(text: str) -> None:
    with pytest.raises(UsageError, match="ISO-8601"):
        parse_time(text)


def test_times_print_as_iso_utc() -> None:
    assert format_time(1714564800250) == "2024-05-01T12:00:00.250Z"
    assert format_time(None) == "-"
    assert format_time(-1) == "-"
    assert parse_time(format_time(1714564800250)) == 1714564800250


def test_topic_specs() -> None:
    assert parse_topic_spec("orders") == TopicSpec("orders", None)
    assert parse_topic_spec("orders:2") == TopicSpec("orders", (2,))
    assert parse_topic_spec("orders:3,0,3, 1") == TopicSpec("orders", (0, 1, 3))
    assert parse_topic_spec("a.b-c_d:0") == TopicSpec("a.b-c_d", (0,))


@pytest.mark.parametrize("text", [":0", "orders:", "orders:x", "orders:1,-2", "orders:1,,2"])
def test_bad_topic_specs(text: str) -> None:
    with pytest.raises(UsageError, match="TOPIC:PARTITION"):
        parse_topic_spec(text)


def test_states_any_case_as_kafka_spells_them() -> None:
    assert parse_state("stable") == "Stable"
    assert parse_state("PREPARINGREBALANCE") == "PreparingRebalance"
    with pytest.raises(UsageError, match="one of Empty, PreparingRebalance"):
        parse_state("running")


def test_bootstrap_lists() -> None:
    assert parse_bootstrap("127.0.0.1:9092") == [("127.0.0.1", 9092)]
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap("[::1]:9092") == [("::1", 9092)]
    for bad in ("localhost", "a:b", ":9092", "a:0", "a:70000", "a:1,"):
        with pytest.raises(UsageError, match="HOST:PORT"):
            parse_bootstrap(bad)


# ---------------------------------------------------------------------- offset files


def test_csv_without_header_with_optional_metadata() -> None:
    rows = parse_offsets("t,0,5\nt,1,7,hello\n\nu,0,0,\n", "f.csv")
    assert rows == [OffsetRow("t", 0, 5), OffsetRow("t", 1, 7, "hello"), OffsetRow("u", 0, 0)]


def test_csv_with_header_in_any_column_order() -> None:
    rows = parse_offsets("offset,topic,partition,leader_epoch\n10,t,2,4\n", "f.csv")
    assert rows == [OffsetRow("t", 2, 10, "", 4)]


def test_csv_metadata_with_commas_and_quotes_round_trips() -> None:
    rows = [OffsetRow("t", 0, 1, 'a,b "c"'), OffsetRow("t", 1, 2, "naïve ☃"), OffsetRow("s", 0, 3)]
    for fmt in ("csv", "json"):
        text = format_offsets(rows, fmt)
        assert parse_offsets(text, "x") == sorted(rows, key=lambda r: (r.topic, r.partition))


def test_export_formats() -> None:
    rows = [OffsetRow("t", 1, 7, "m"), OffsetRow("t", 0, 5)]
    assert format_offsets(rows, "csv") == "topic,partition,offset,metadata\nt,0,5,\nt,1,7,m\n"
    assert json.loads(format_offsets(rows, "json")) == [
        {"topic": "t", "partition": 0, "offset": 5, "metadata": ""},
        {"topic": "t", "partition": 1, "offset": 7, "metadata": "m"},
    ]


def test_json_list_metadata_optional() -> None:
    text = '[{"topic": "t", "partition": 0, "offset": 5}, {"topic": "t", "partition": 1, "offset": "6",' \
           ' "metadata": "m", "leader_epoch": 3}]'
    assert parse_offsets(text, "f.json") == [OffsetRow("t", 0, 5), OffsetRow("t", 1, 6, "m", 3)]


@pytest.mark.parametrize(("text", "message"), [
    ("t,0\n", "line 1: expected topic,partition,offset,metadata; got 2 fields"),
    ("t,0,1,m,extra\n", "line 1: expected"),
    ("t,0,5\nt,x,5\n", "line 2: partition must be an integer"),
    ("t,0,-1\n", "line 1: offset must be at least 0"),
    ("t,-1,3\n", "line 1: partition must be at least 0"),
    (",0,3\n", "line 1: missing topic"),
    ("topic,offset\nt,3\n", "header lacks partition"),
    ("t,0,1\nt,0,2\n", "t-0 is listed twice"),
    ("[1, 2]", "entry 1: expected an object"),
    ('[{"topic": "t", "partition": 0}]', "entry 1: each entry needs topic, partition and offset"),
    ('[{"topic": "t", "partition": 0, "offset": 1.5}]', "offset must be an integer"),
    ('[{"topic": "t", "partition": true, "offset": 1}]', "partition must be an integer"),
    ('[{"topic": "t", "partition": 0, "offset": 1, "metadata": 5}]', "metadata must be a string"),
    ("[{", "not valid JSON"),
])
def test_bad_files_name_the_place_and_the_problem(text: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_offsets(text, "offs.txt")
    assert info.value.message.startswith("offs.txt")
    assert message in info.value.message


def test_json_object_instead_of_list() -> None:
    with pytest.raises(UsageError, match="expected a JSON list"):
        parse_offsets('  {"topic": "t", "partition": 0, "offset": 1}', "f.json")


def test_reading_files(tmp_path: Path) -> None:
    path = tmp_path / "o.csv"
    path.write_text("t,0,5\n", encoding="utf-8")
    assert read_offsets_file(path) == [OffsetRow("t", 0, 5)]
    with pytest.raises(UsageError, match=r"cannot read .*no such file"):
        read_offsets_file(tmp_path / "missing.csv")
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe\x00t,0,1")
    with pytest.raises(UsageError, match="not UTF-8"):
        read_offsets_file(binary)
