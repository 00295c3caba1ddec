"""Log line formats: ``kv`` (``key=value``, the default) and ``json`` (one object per line).

Fields passed with ``extra=`` (the request log's peer, api, duration_ms, ...) become
``key=value`` pairs after the message in ``kv`` and keys of the object in ``json``.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

FORMATS = ("kv", "json")

KV_FORMAT = "%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"

# Attributes every LogRecord has; anything else on a record came in through ``extra=``.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message", "asctime", "taskName",
}
_RESERVED = frozenset({"ts", "level", "logger", "msg", "exc"})


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a record was given with ``extra=``, in the order they were given."""
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


def kv_value(value: Any) -> str:
    """A value for ``key=value``: bare when it is one plain token, JSON-quoted otherwise."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return str(value)
    text = str(value)
    if text and all(c.isprintable() and not c.isspace() and c not in '"=\\' for c in text):
        return text
    return json.dumps(text, ensure_ascii=False)


class KeyValueFormatter(logging.Formatter):
    """``<time> level=INFO logger=kcoord.server <message> key=value ...``."""

    def __init__(self) -> None:
        super().__init__(KV_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = extra_fields(record)
        if not extras:
            return line
        pairs = " ".join(f"{key}={kv_value(value)}" for key, value in extras.items())
        head, newline, rest = line.partition("\n")  # keep a traceback below the fields
        return f"{head} {pairs}{newline}{rest}"


class JsonFormatter(logging.Formatter):
    """``{"ts": ..., "level": ..., "logger": ..., "msg": ..., <extra fields>, "exc": ...}``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            if key not in _RESERVED:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def formatter(name: str) -> logging.Formatter:
    if name == "json":
        return JsonFormatter()
    if name == "kv":
        return KeyValueFormatter()
    raise ValueError(f"unknown log format {name!r}: expected one of {', '.join(FORMATS)}")


def configure(level: str, log_format: str = "kv", stream: TextIO | None = None) -> None:
    """Send every log line to ``stream`` (standard error) in the chosen format."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
