"""``kcoord pipeline --engine python``: the jobs without Spark, for logs a laptop reads in a blink.

The plain-Python jobs of ``pipeline.history`` (the oracle the Spark jobs are tested
against) give the same rows as the Spark jobs; this module runs them for the command line
and writes their results the way the Spark jobs do: a table on standard output, or files
under ``--output`` in Spark's layout (``part-00000.<format>`` files in a directory, one
``group=<name>`` directory per group for ``history``). JSON lines leave out null fields
(nested ones too) and CSV writes arrays and structs as JSON text, as Spark's writers do. Parquet needs
pyarrow (the pipeline extra); JSON and CSV need nothing beyond kcoord.

Spark earns its start-up time on large logs and clusters; below ``AUTO_MAX_BYTES`` of
coordinator-log segments ``--engine auto`` (the default) picks this engine.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pipeline import history
from pipeline.segments import COLUMNS

__all__ = ["AUTO_MAX_BYTES", "coordinator_log_bytes", "run", "write_rows"]

#: Below this many bytes of coordinator-log segments (live and history), ``--engine auto``
#: reads the log in this process: the plain reader handles a few MB per second, while a
#: Spark session takes 15-20 s to start.
AUTO_MAX_BYTES = 32 * 1024 * 1024

#: Job columns that are text (the record columns' types are the data source's, ``pipeline.arrow_types``).
_STRINGS = frozenset({"group", "topic", "metadata", "state", "kind"})

Row = dict[str, Any]


def coordinator_log_bytes(data_dir: Path) -> int:
    """Bytes of coordinator-log segment files, live and kept in history."""
    total = 0
    for pattern in ("__consumer_offsets-*/*.log", "history/__consumer_offsets-*/*.log"):
        for path in data_dir.glob(pattern):
            try:
                total += path.stat().st_size
            except FileNotFoundError:
                continue
    return total


def run(job: str, data_dir: Path, group: str | None, *, time_ms: int | None = None, now_ms: int = 0,
        idle_minutes: float = 60.0) -> dict[str, tuple[Sequence[str], list[Row]]]:
    """One job's tables: name -> (columns, rows), each table in the Spark job's order."""
    if job == "history":
        return {"history": (COLUMNS, history.history_rows(data_dir, group))}
    if job == "as-of":
        assert time_ms is not None
        return {"as-of": (history.AS_OF_COLUMNS, history.as_of_rows(data_dir, time_ms, group))}
    if job == "lag":
        return {"lag": (history.LAG_COLUMNS, history.lag_rows(data_dir, group))}
    if job == "stats":
        tables = history.stats(data_dir, now_ms, idle_minutes, group)
        return {name: (history.STATS_TABLES[name], tables[name]) for name in history.STATS_TABLES}
    raise ValueError(f"unknown job {job!r}")


def write_rows(columns: Sequence[str], rows: list[Row], path: Path, fmt: str,
               partition_by: str | None = None) -> None:
    """Write ``rows`` under ``path`` (replacing it) as Spark writes a DataFrame there."""
    _replace_dir(path)
    if partition_by is None:
        _write_part(columns, rows, path, fmt)
        return
    parts: dict[Any, list[Row]] = {}
    for row in rows:
        parts.setdefault(row[partition_by], []).append(row)
    rest = [c for c in columns if c != partition_by]
    for value, part in parts.items():
        directory = path / f"{partition_by}={'__HIVE_DEFAULT_PARTITION__' if value is None else value}"
        directory.mkdir(parents=True)
        _write_part(rest, [{c: r[c] for c in rest} for r in part], directory, fmt)


def _replace_dir(path: Path) -> None:
    import shutil

    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    path.mkdir(parents=True)


def _write_part(columns: Sequence[str], rows: list[Row], directory: Path, fmt: str) -> None:
    target = directory / f"part-00000.{fmt}"
    if fmt == "json":
        target.write_text("".join(json.dumps(_without_nulls({c: r[c] for c in columns}), ensure_ascii=False)
                                  + "\n" for r in rows), encoding="utf-8")
    elif fmt == "csv":
        lines = [",".join(_csv_field(c) for c in columns)]
        lines += [",".join(_csv_cell(r[c]) for c in columns) for r in rows]
        target.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    elif fmt == "parquet":
        _write_parquet(columns, rows, target)
    else:
        raise ValueError(f"unknown output format {fmt!r}")
    (directory / "_SUCCESS").touch()


def _without_nulls(value: Any) -> Any:
    """As Spark's ``to_json``: struct fields that are null are left out."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _csv_cell(value: Any) -> str:
    """One CSV field as Spark writes it: null empty, an empty string quoted, nested values as JSON."""
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return _csv_field(json.dumps(_without_nulls(value), ensure_ascii=False, separators=(",", ":")))
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return '""'
    return _csv_field(str(value))


def _csv_field(text: str) -> str:
    """Quoted when it holds a comma, quote or line break; quotes escaped with a backslash, as Spark does."""
    if any(ch in text for ch in ',"\n\r'):
        return '"' + text.replace('"', '\\"') + '"'
    return text


def _write_parquet(columns: Sequence[str], rows: list[Row], target: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from pipeline.arrow_types import ARROW_TYPES
    except ImportError:
        raise RuntimeError("writing parquet needs pyarrow: install the pipeline extra (make pipeline), "
                           "or use --output-format json or csv") from None
    arrays = [pa.array([r[c] for r in rows], type=ARROW_TYPES.get(c, pa.int64() if c not in _STRINGS else None))
              for c in columns]
    pq.write_table(pa.Table.from_arrays(arrays, names=list(columns)), target)


def table_rows(columns: Sequence[str], rows: Iterable[Row]) -> list[tuple[Any, ...]]:
    """Rows as tuples in column order, for ``pipeline.cli.format_table``."""
    return [tuple(row[c] for c in columns) for row in rows]
