"""What operators type and the files they hand over: durations, times, partition lists, offset files.

Every function here is pure (files aside) and raises ``UsageError`` with a message that
names the bad input and the expected form.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from admin.errors import UsageError

#: Classic group states as Kafka spells them on the wire.
GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")

_DURATION = re.compile(
    r"P(?:(?P<days>\d+)D)?(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d{1,3})?)S)?)?",
    re.IGNORECASE,
)


def parse_state(text: str) -> str:
    """A group state name, any case, as Kafka spells it."""
    for state in GROUP_STATES:
        if text.strip().lower() == state.lower():
            return state
    raise UsageError(f"unknown group state {text!r}; one of {', '.join(GROUP_STATES)}")


def parse_duration(text: str) -> int:
    """An ISO-8601 duration ``PnDTnHnMnS`` (any part optional, seconds may have a fraction) in ms."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.groupdict().values()) or text.strip().upper().endswith("T"):
        raise UsageError(f"bad duration {text!r}: expected ISO-8601 PnDTnHnMnS, e.g. PT15M, P1DT12H, PT0.5S")
    parts = match.groupdict()
    days, hours, minutes = (int(parts[k] or 0) for k in ("days", "hours", "minutes"))
    seconds_ms = round(float(parts["seconds"] or 0) * 1000)
    return ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds_ms


def parse_time(text: str) -> int:
    """An ISO-8601 date or date-time (UTC unless it carries an offset), or epoch milliseconds."""
    raw = text.strip()
    if re.fullmatch(r"\d{10,}", raw):
        return int(raw)
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise UsageError(f"bad time {text!r}: expected ISO-8601 such as 2024-05-01T12:00:00Z, "
                         "2024-05-01T14:00:00+02:00 or 2024-05-01, or epoch milliseconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


def format_time(epoch_ms: int | None) -> str:
    """ISO-8601 in UTC with milliseconds, ``-`` for none."""
    if epoch_ms is None or epoch_ms < 0:
        return "-"
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class TopicSpec:
    """``--topic T`` (every partition: ``partitions`` None) or ``--topic T:0,2``."""

    topic: str
    partitions: tuple[int, ...] | None


def parse_topic_spec(text: str) -> TopicSpec:
    topic, sep, rest = text.partition(":")
    topic = topic.strip()
    if not topic:
        raise UsageError(f"bad --topic {text!r}: expected TOPIC or TOPIC:PARTITION[,PARTITION...]")
    if not sep:
        return TopicSpec(topic, None)
    partitions = []
    for item in rest.split(","):
        item = item.strip()
        if not item.isdigit():
            raise UsageError(f"bad --topic {text!r}: partition {item!r} is not a number "
                             "(expected TOPIC:PARTITION[,PARTITION...])")
        partitions.append(int(item))
    return TopicSpec(topic, tuple(sorted(set(partitions))))


# ---------------------------------------------------------------------- offset files


@dataclass(frozen=True)
class OffsetRow:
    """One line of an offsets file: where a group should resume on one partition."""

    topic: str
    partition: int
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


def _integer(value: Any, what: str, where: str, minimum: int) -> int:
    if isinstance(value, bool):
        raise UsageError(f"{where}: {what} must be an integer, not {value!r}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        number = int(value)
    else:
        raise UsageError(f"{where}: {what} must be an integer, not {value!r}")
    if number < minimum:
        raise UsageError(f"{where}: {what} must be at least {minimum}, not {number}")
    return number


def _row(fields: dict[str, Any], where: str) -> OffsetRow:
    topic = fields.get("topic")
    if not isinstance(topic, str) or not topic.strip():
        raise UsageError(f"{where}: missing topic")
    if fields.get("partition") in (None, "") or fields.get("offset") in (None, ""):
        raise UsageError(f"{where}: each entry needs topic, partition and offset")
    metadata = fields.get("metadata")
    if metadata is not None and not isinstance(metadata, str):
        raise UsageError(f"{where}: metadata must be a string")
    epoch = fields.get("leader_epoch")
    return OffsetRow(
        topic.strip(),
        _integer(fields["partition"], "partition", where, 0),
        _integer(fields["offset"], "offset", where, 0),
        metadata or "",
        -1 if epoch in (None, "") else _integer(epoch, "leader_epoch", where, -1),
    )


def parse_offsets(text: str, source: str) -> list[OffsetRow]:
    """Rows from CSV (``topic,partition,offset[,metadata]``, header optional) or a JSON list.

    The format is JSON when the text starts with ``[`` (or ``{``, to say it is not a list). A partition listed twice is an
    error: the file would not say where the group should resume.
    """
    stripped = text.lstrip()
    rows = _parse_json(stripped, source) if stripped[:1] in ("[", "{") else _parse_csv(text, source)
    seen: dict[tuple[str, int], int] = {}
    for index, row in enumerate(rows):
        key = (row.topic, row.partition)
        if key in seen:
            raise UsageError(f"{source}: {row.topic}-{row.partition} is listed twice")
        seen[key] = index
    return rows


def _parse_json(text: str, source: str) -> list[OffsetRow]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, list):
        raise UsageError(f"{source}: expected a JSON list of {{topic, partition, offset, metadata}} objects")
    rows = []
    for index, item in enumerate(data):
        where = f"{source}: entry {index + 1}"
        if not isinstance(item, dict):
            raise UsageError(f"{where}: expected an object with topic, partition and offset")
        rows.append(_row(item, where))
    return rows


_CSV_COLUMNS = ("topic", "partition", "offset", "metadata")
_KNOWN_COLUMNS = frozenset((*_CSV_COLUMNS, "leader_epoch"))


def _parse_csv(text: str, source: str) -> list[OffsetRow]:
    reader = csv.reader(io.StringIO(text))
    columns: tuple[str, ...] = _CSV_COLUMNS
    rows = []
    for line_no, record in enumerate(reader, start=1):
        if not record or all(not cell.strip() for cell in record):
            continue
        names = tuple(cell.strip().lower() for cell in record)
        if line_no == 1 and "topic" in names and set(names) <= _KNOWN_COLUMNS:
            columns = names
            missing = {"topic", "partition", "offset"} - set(columns)
            if missing:
                raise UsageError(f"{source}: header lacks {', '.join(sorted(missing))}")
            continue
        where = f"{source}: line {line_no}"
        if len(record) < 3 or len(record) > len(columns):
            raise UsageError(f"{where}: expected {','.join(columns)}; got {len(record)} fields")
        rows.append(_row(dict(zip(columns, record, strict=False)), where))
    return rows


def read_offsets_file(path: Path) -> list[OffsetRow]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {(exc.strerror or str(exc)).lower()}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    return parse_offsets(text, str(path))


def format_offsets(rows: list[OffsetRow], fmt: str) -> str:
    """The export file: CSV with a header line, or a JSON list; both read back by ``parse_offsets``."""
    ordered = sorted(rows, key=lambda r: (r.topic, r.partition))
    if fmt == "json":
        items = [{"topic": r.topic, "partition": r.partition, "offset": r.offset, "metadata": r.metadata}
                 for r in ordered]
        return json.dumps(items, indent=2, ensure_ascii=False) + "\n"
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_CSV_COLUMNS)
    for r in ordered:
        writer.writerow((r.topic, r.partition, r.offset, r.metadata))
    return out.getvalue()
