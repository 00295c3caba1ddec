"""``kcoord pipeline``: the offset-history jobs over a data directory, from the command line.

Two engines give the same results: Spark (``pipeline.jobs``, for large logs and clusters)
and plain Python (``pipeline.python_engine``, for logs small enough to read in-process,
where Spark's start-up would dominate). ``--engine auto`` picks by the size of the log.
Spark's own logging goes to a file unless ``--verbose``; the job's result is all that is
printed.

``kcoord.cli`` imports this module for every ``kcoord`` command, so nothing here imports
pyspark or pyarrow until a pipeline job actually runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["format_table", "parse_time", "register"]

FORMATS = ("parquet", "json", "csv")
#: Columns holding milliseconds since the epoch; tables on stdout show them as UTC times.
TIME_COLUMNS = frozenset({"record_timestamp", "commit_timestamp", "expire_timestamp", "minute", "last_commit"})


def parse_time(text: str) -> int:
    """Milliseconds since the epoch from digits (already ms) or ISO-8601 (UTC if no zone)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither epoch milliseconds nor an ISO-8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _show(column: str, value: Any) -> str:
    if value is None:
        return ""
    if column in TIME_COLUMNS and isinstance(value, int) and value >= 0:
        return datetime.fromtimestamp(value / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table."""
    cells = [[_show(c, v) for c, v in zip(columns, row, strict=True)] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def register(sub: Any) -> None:
    """Add ``kcoord pipeline <job>`` to the ``kcoord`` parser."""
    pipeline = sub.add_parser(
        "pipeline", help="offset history and analytics on Spark",
        description="Spark jobs over a kcoord data directory (live log + history). Needs Java 17+ and pyarrow.",
    )
    jobs = pipeline.add_subparsers(dest="job", required=True)

    def job(name: str, help_text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = jobs.add_parser(name, help=help_text, description=help_text)
        parser.add_argument("--data-dir", type=Path, default=Path("./data"), help="the broker's data directory")
        parser.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
        parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                            help="a Spark setting; repeatable; wins over the defaults")
        parser.add_argument("--group", help="only this consumer group")
        parser.add_argument("--output", type=Path, help="write the result here instead of printing a table")
        parser.add_argument("--output-format", choices=FORMATS, default="parquet",
                            help="format of --output (default parquet)")
        parser.add_argument("--engine", choices=("auto", "python", "spark"), default="auto",
                            help="spark, python (in this process, no Java), or auto (the default): python "
                                 "for logs under 32 MB, else spark; both give the same results")
        parser.add_argument("--verbose", action="store_true",
                            help="show Spark's own log on standard error (default: kept in a file)")
        parser.set_defaults(func=run_job)
        return parser

    job("history", "the full record history, as files partitioned by group (needs --output)")
    as_of = job("as-of", "the committed offsets of each group at a point in time")
    as_of.add_argument("--time", required=True, type=parse_time, help="ISO-8601 (UTC if no zone) or epoch ms")
    stats = job("stats", "commit rates, last commits, idle groups, unsubscribed offsets, rebalances")
    stats.add_argument("--idle-minutes", type=float, default=60.0,
                       help="a group is idle when its last commit is older than this (default 60)")
    stats.add_argument("--now", type=parse_time, default=None, help="the time idleness is measured from (default: now)")
    job("lag", "committed offset against the high watermark at each commit (local topic data)")


def _fail(message: str, code: int = 2) -> int:
    print(f"kcoord pipeline: {message}", file=sys.stderr)
    return code


def has_coordinator_log(data_dir: Path) -> bool:
    """Whether a broker has used ``data_dir``: a coordinator log (even an empty one) is there."""
    from storage.layout import COORDINATOR_TOPIC, PARTITION_COUNT_FILE, history_dir

    if (data_dir / PARTITION_COUNT_FILE).is_file():
        return True
    return any(data_dir.glob(f"{COORDINATOR_TOPIC}-*")) or any(history_dir(data_dir).glob(f"{COORDINATOR_TOPIC}-*"))


def run_job(args: argparse.Namespace) -> int:
    """Check the data directory, choose an engine, run the job, write or print the result."""
    from pipeline.python_engine import AUTO_MAX_BYTES, coordinator_log_bytes

    data_dir: Path = args.data_dir
    if not data_dir.is_dir():
        return _fail(f"{data_dir} is not a directory (give the broker's --data-dir)")
    if args.job == "history" and args.output is None:
        return _fail("history writes files: give --output PATH (and --output-format, default parquet)")
    if not has_coordinator_log(data_dir):
        return _fail(f"{data_dir} holds no kcoord log (no __consumer_offsets partitions): give the "
                     "broker's --data-dir")
    engine = args.engine
    if engine == "auto":
        engine = "python" if coordinator_log_bytes(data_dir) < AUTO_MAX_BYTES else "spark"
    if engine == "python":
        return _run_python(args)
    return _run_spark(args)


def _run_python(args: argparse.Namespace) -> int:
    from pipeline import python_engine

    began = time.monotonic()
    now = args.now if getattr(args, "now", None) is not None else int(time.time() * 1000)
    try:
        tables = python_engine.run(args.job, args.data_dir, args.group, time_ms=getattr(args, "time", None),
                                   now_ms=now, idle_minutes=getattr(args, "idle_minutes", 60.0))
        for name, (columns, rows) in tables.items():
            if args.output is not None:
                target = args.output / name if args.job == "stats" else args.output
                python_engine.write_rows(columns, rows, target, args.output_format,
                                         partition_by="group" if args.job == "history" else None)
                _progress(f"wrote {args.output_format} to {target}")
            elif args.job == "stats":
                print(f"== {name} ==")
                print(format_table(columns, python_engine.table_rows(columns, rows)))
                print()
            else:
                print(format_table(columns, python_engine.table_rows(columns, rows)))
    except (OSError, ValueError, RuntimeError) as exc:
        return _fail(str(exc), code=1)
    if args.verbose:
        _progress(f"{args.job} over {_describe(args.data_dir)} done in {time.monotonic() - began:.2f}s "
                  "(python engine)")
    return 0


def _run_spark(args: argparse.Namespace) -> int:
    """Check requirements, start (or reuse) Spark, run the job, write or print the result."""
    from pipeline.spark import RequirementError, check_requirements, parse_conf

    data_dir: Path = args.data_dir
    try:
        conf = parse_conf(args.spark_conf)
        check_requirements()
    except (ValueError, RequirementError) as exc:
        return _fail(str(exc))
    from pyspark.sql import SparkSession

    from pipeline.spark import build_session

    owned = SparkSession.getActiveSession() is None
    began = time.monotonic()
    _progress(f"{args.job} over {_describe(data_dir)}; starting Spark ({args.master})")
    spark = build_session(args.master, conf, quiet=not args.verbose)
    try:
        _run(spark, args)
    finally:
        if owned:
            spark.stop()
    _progress(f"{args.job} done in {time.monotonic() - began:.1f}s")
    return 0


def _progress(line: str) -> None:
    print(f"kcoord pipeline: {line}", file=sys.stderr, flush=True)


def _describe(data_dir: Path) -> str:
    """A one-line size of what will be read (file listing only; the planner reads headers)."""
    live = list(data_dir.glob("__consumer_offsets-*/*.log"))
    kept = list(data_dir.glob("history/__consumer_offsets-*/*.log"))
    size = 0
    for path in live + kept:
        try:
            size += path.stat().st_size
        except FileNotFoundError:
            continue
    return f"{data_dir}: {len(live)} live and {len(kept)} history segment files, {size / 1e6:.1f} MB"


def _run(spark: Any, args: argparse.Namespace) -> None:
    from pipeline import jobs

    data_dir = str(args.data_dir)
    records = jobs.records(spark, data_dir, args.group)
    if args.job == "history":
        _write(jobs.history(records), args.output, args.output_format, partition_by="group")
    elif args.job == "as-of":
        _emit(jobs.as_of(records, args.time), args)
    elif args.job == "lag":
        _emit(jobs.lag(records, data_dir), args)
    elif args.job == "stats":
        now = args.now if args.now is not None else int(time.time() * 1000)
        tables = jobs.stats(records, now, args.idle_minutes)
        for name, table in tables.items():
            if args.output is not None:
                _write(table, args.output / name, args.output_format)
            else:
                print(f"== {name} ==")
                _print(table)
                print()


def _emit(df: Any, args: argparse.Namespace) -> None:
    if args.output is not None:
        _write(df, args.output, args.output_format)
    else:
        _print(df)


def _print(df: Any) -> None:
    rows = df.collect()
    print(format_table(df.columns, [tuple(row) for row in rows]))


def _write(df: Any, path: Path, fmt: str, partition_by: str | None = None) -> None:
    """Write ``df`` (overwriting ``path``); CSV cannot hold arrays or structs, so those go as JSON text."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    if fmt == "csv":
        nested = (ArrayType, MapType, StructType)
        df = df.select(*(
            F.to_json(F.col(f.name)).alias(f.name) if isinstance(f.dataType, nested) else F.col(f.name)
            for f in df.schema.fields
        ))
    writer = df.write.mode("overwrite")
    if partition_by is not None:
        writer = writer.partitionBy(partition_by)
    if fmt == "csv":
        writer = writer.option("header", "true")
    writer.format(fmt).save(str(path))
    _progress(f"wrote {fmt} to {path}")
