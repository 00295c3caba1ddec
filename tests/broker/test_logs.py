"""Log line formats: key=value and JSON lines, with the fields given through ``extra=``."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
from collections.abc import Iterator

import pytest

from broker.logs import JsonFormatter, KeyValueFormatter, configure, formatter, kv_value


def _record(msg: str = "closing connection %s: %s", args: tuple[object, ...] = ("1.2.3.4:5", "bad frame"),
            level: int = logging.WARNING, **extra: object) -> logging.LogRecord:
    record = logging.getLogger("kcoord.server").makeRecord(
        "kcoord.server", level, __file__, 1, msg, args, None, extra=extra or None)
    return record


def test_kv_line_keeps_the_established_shape() -> None:
    line = KeyValueFormatter().format(_record())
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} level=WARNING logger=kcoord.server "
        r"closing connection 1\.2\.3\.4:5: bad frame", line), line


def test_kv_appends_extra_fields_quoting_what_is_not_one_token() -> None:
    line = KeyValueFormatter().format(_record(
        "request", (), level=logging.INFO, peer="127.0.0.1:5000", client_id="my app", api="OffsetCommit",
        version=8, duration_ms=0.412, note=None, empty="", quote='a"b'))
    assert line.endswith(
        ' request peer=127.0.0.1:5000 client_id="my app" api=OffsetCommit version=8 duration_ms=0.412'
        ' note=null empty="" quote="a\\"b"')


@pytest.mark.parametrize(
    ("value", "text"),
    [(3, "3"), (1.5, "1.5"), (True, "true"), (None, "null"), ("plain", "plain"), ("two words", '"two words"'),
     ("k=v", '"k=v"'), ("tab\there", '"tab\\there"'), ("", '""')],
)
def test_kv_values(value: object, text: str) -> None:
    assert kv_value(value) == text


def test_json_line_parses_with_standard_and_extra_fields() -> None:
    line = JsonFormatter().format(_record(
        "request", (), level=logging.INFO, peer="127.0.0.1:5000", client_id=None, version=8, duration_ms=1.25))
    entry = json.loads(line)
    assert "\n" not in line
    assert entry["level"] == "INFO" and entry["logger"] == "kcoord.server" and entry["msg"] == "request"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["ts"])
    assert entry["peer"] == "127.0.0.1:5000" and entry["client_id"] is None
    assert entry["version"] == 8 and entry["duration_ms"] == 1.25


def test_json_message_is_formatted_and_exceptions_stay_on_one_line() -> None:
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        record = logging.getLogger("kcoord.router").makeRecord(
            "kcoord.router", logging.ERROR, __file__, 1, "handler for api_key=%d failed", (12,), sys.exc_info())
    line = JsonFormatter().format(record)
    assert len(line.splitlines()) == 1
    entry = json.loads(line)
    assert entry["msg"] == "handler for api_key=12 failed"
    assert "ValueError: boom" in entry["exc"]


def test_json_extra_fields_cannot_overwrite_the_standard_ones_and_odd_values_become_text() -> None:
    entry = json.loads(JsonFormatter().format(_record("m", (), level=logging.INFO, ts="x", obj=object(),
                                                      data=b"\x00")))
    assert entry["ts"] != "x" and entry["msg"] == "m"
    assert entry["obj"].startswith("<object") and entry["data"] == "b'\\x00'"


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError):
        formatter("xml")


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers.clear()
    yield
    root.handlers[:], level = saved
    root.setLevel(level)


@pytest.mark.usefixtures("root_logging")
def test_configure_writes_json_lines_to_the_stream() -> None:
    stream = io.StringIO()
    configure("INFO", "json", stream)
    logging.getLogger("kcoord.test").info("hello %s", "there", extra={"peer": "p:1"})
    logging.getLogger("kcoord.test").debug("not shown")
    lines = stream.getvalue().splitlines()
    assert [json.loads(line)["msg"] for line in lines] == ["hello there"]
    assert json.loads(lines[0])["peer"] == "p:1"
