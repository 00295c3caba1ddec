"""Spark Python data sources over a kcoord data directory.

``spark.read.format("kcoord").option("path", DATA_DIR).load()`` gives one row per
``__consumer_offsets`` record, from the live log and the history directory together, each
record once (see ``pipeline.segments`` for which copy is read). One input partition per
segment file; rows arrive as Arrow batches. Filters pushed down and applied exactly in the
reader:

- ``group = x`` / ``group IN (...)``: only the coordinator partitions those groups hash to
  are planned (from ``__consumer_offsets.meta.json``), and other groups' values are never
  decoded;
- comparisons of ``record_timestamp`` with a number: whole segments and batches outside
  the bounds are skipped from their headers, without decoding a record;
- comparisons of ``commit_timestamp`` with a number: rows are dropped as they are decoded.

``spark.read.format("kcoord_batches")`` gives one row per record batch of the local topic
partitions (``DATA_DIR/<topic>-<p>/``), from the batch headers: the input of the lag job.

Reading needs ``spark.sql.python.filterPushdown.enabled=true``; ``register`` sets it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from pipeline.arrow_types import ARROW_TYPES
from pipeline.segments import (
    COLUMNS,
    SegmentFile,
    TimeBounds,
    coordinator_segments,
    decode_segment,
    partitions_of_groups,
    read_batch_headers,
    topic_segments,
)

__all__ = ["BATCH_SCHEMA", "RECORD_SCHEMA", "BatchSource", "RecordSource", "register"]

_MEMBER = StructType([
    StructField("member_id", StringType()),
    StructField("group_instance_id", StringType()),
    StructField("client_id", StringType()),
    StructField("client_host", StringType()),
    StructField("subscribed_topics", ArrayType(StringType())),
])
_ASSIGNMENT = ArrayType(StructType([
    StructField("topic_id", StringType()),
    StructField("partitions", ArrayType(IntegerType())),
]))
_TYPES: dict[str, Any] = {
    "group": StringType(), "topic": StringType(), "partition": IntegerType(), "offset": LongType(),
    "leader_epoch": IntegerType(), "metadata": StringType(), "commit_timestamp": LongType(),
    "expire_timestamp": LongType(), "kind": StringType(), "generation": IntegerType(),
    "protocol_type": StringType(), "protocol": StringType(), "leader": StringType(),
    "state": StringType(), "member_count": IntegerType(), "members": ArrayType(_MEMBER),
    "subscribed_topics": ArrayType(StringType()), "member_id": StringType(), "assignment": _ASSIGNMENT,
    "log_offset": LongType(),
    "coordinator_partition": IntegerType(), "segment": StringType(), "record_timestamp": LongType(),
    "producer_id": LongType(), "transaction": StringType(), "marker_offset": LongType(),
    "visible_timestamp": LongType(),
}
RECORD_SCHEMA = StructType([StructField(name, _TYPES[name]) for name in COLUMNS])
BATCH_SCHEMA = StructType([
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("base_offset", LongType()),
    StructField("last_offset", LongType()),
    StructField("base_timestamp", LongType()),
    StructField("max_timestamp", LongType()),
    StructField("records", IntegerType()),
    StructField("segment", StringType()),
])

_ARROW_RECORD_SCHEMA = pa.schema([(name, ARROW_TYPES[name]) for name in COLUMNS])
_ARROW_BATCH_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("base_offset", pa.int64()),
    ("last_offset", pa.int64()), ("base_timestamp", pa.int64()), ("max_timestamp", pa.int64()),
    ("records", pa.int32()), ("segment", pa.string()),
])
#: Rows per Arrow batch handed to Spark.
ROWS_PER_BATCH = 65_536
_COMMIT_TS = COLUMNS.index("commit_timestamp")


def _path_option(options: Any) -> str:
    path = options.get("path")
    if not path:
        raise ValueError("the kcoord data source needs .option('path', DATA_DIR) or .load(DATA_DIR)")
    return str(path)


class SegmentPartition(InputPartition):
    """One segment file to read."""

    def __init__(self, segment: SegmentFile | None) -> None:
        super().__init__(segment)
        self.segment = segment


# --- records --------------------------------------------------------------------------------


class _Bounds:
    """Inclusive integer bounds collected from pushed comparisons."""

    def __init__(self) -> None:
        self.low: int | None = None
        self.high: int | None = None

    def take(self, flt: Filter) -> bool:
        value = getattr(flt, "value", None)
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        if isinstance(flt, EqualTo):
            self._raise_low(value)
            self._lower_high(value)
        elif isinstance(flt, GreaterThan):
            self._raise_low(value + 1)
        elif isinstance(flt, GreaterThanOrEqual):
            self._raise_low(value)
        elif isinstance(flt, LessThan):
            self._lower_high(value - 1)
        elif isinstance(flt, LessThanOrEqual):
            self._lower_high(value)
        else:
            return False
        return True

    def _raise_low(self, value: int) -> None:
        self.low = value if self.low is None else max(self.low, value)

    def _lower_high(self, value: int) -> None:
        self.high = value if self.high is None else min(self.high, value)

    @property
    def active(self) -> bool:
        return self.low is not None or self.high is not None

    def admits(self, value: int | None) -> bool:
        if value is None:
            return False  # SQL: a comparison with null is not true
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)


class RecordReader(DataSourceReader):
    """Plans one partition per segment file and decodes records into Arrow batches."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.groups: frozenset[str] | None = None
        self.record_time = _Bounds()
        self.commit_time = _Bounds()

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        for flt in filters:
            column = flt.attribute if hasattr(flt, "attribute") else None
            if column == ("group",) and isinstance(flt, EqualTo) and isinstance(flt.value, str):
                self._only_groups({flt.value})
            elif column == ("group",) and isinstance(flt, In) and all(isinstance(v, str) for v in flt.value):
                self._only_groups(set(flt.value))
            elif column == ("record_timestamp",) and self.record_time.take(flt):
                pass
            elif column == ("commit_timestamp",) and self.commit_time.take(flt):
                pass
            else:
                yield flt

    def _only_groups(self, groups: set[str]) -> None:
        self.groups = frozenset(groups) if self.groups is None else self.groups & groups

    def _times(self) -> TimeBounds | None:
        if not self.record_time.active:
            return None
        return TimeBounds(self.record_time.low, self.record_time.high)

    def partitions(self) -> Sequence[InputPartition]:
        wanted = partitions_of_groups(Path(self.path), set(self.groups)) if self.groups is not None else None
        segments = coordinator_segments(Path(self.path), wanted)
        times = self._times()
        if times is not None:
            segments = [s for s in segments if _may_hold(s, times)]
        if self.groups is not None and not self.groups:
            segments = []
        return [SegmentPartition(s) for s in segments] or [SegmentPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        segment: SegmentFile | None = getattr(partition, "segment", None)
        if segment is None:
            return
        check_commit = self.commit_time.active
        rows: list[tuple[Any, ...]] = []
        for row in decode_segment(segment, groups=self.groups, times=self._times()):
            if check_commit and not self.commit_time.admits(row[_COMMIT_TS]):
                continue
            rows.append(row)
            if len(rows) == ROWS_PER_BATCH:
                yield _record_batch(rows)
                rows = []
        if rows:
            yield _record_batch(rows)


def _may_hold(segment: SegmentFile, times: TimeBounds) -> bool:
    """Whether a planned segment can hold records inside the time bounds.

    A sealed or history file is judged by its batch headers. The active segment keeps
    growing with later timestamps, so it is skipped only when even its oldest batch is
    newer than the upper bound.
    """
    if segment.end is not None:
        return times.may_hold(segment.min_timestamp, segment.max_timestamp)
    return times.high is None or segment.min_timestamp is None or segment.min_timestamp <= times.high


def _record_batch(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    """Rows to one Arrow batch: transposed in C by ``zip``, one typed array per column."""
    columns = zip(*rows, strict=True)
    arrays = [pa.array(values, type=field.type) for values, field in zip(columns, _ARROW_RECORD_SCHEMA, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=_ARROW_RECORD_SCHEMA)


class RecordSource(DataSource):
    """``format("kcoord")``: the records of the coordinator log and its history."""

    @classmethod
    def name(cls) -> str:
        return "kcoord"

    def schema(self) -> StructType:
        return RECORD_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return RecordReader(_path_option(self.options))


# --- topic batches --------------------------------------------------------------------------


class BatchReader(DataSourceReader):
    """One row per batch header of the local topic partitions."""

    def __init__(self, path: str) -> None:
        self.path = path

    def partitions(self) -> Sequence[InputPartition]:
        segments = topic_segments(Path(self.path))
        return [SegmentPartition(s) for s in segments] or [SegmentPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        segment: SegmentFile | None = getattr(partition, "segment", None)
        if segment is None:
            return
        try:
            headers = read_batch_headers(Path(segment.path))
        except FileNotFoundError:
            return  # removed by retention since planning
        if not headers:
            return
        n = len(headers)
        yield pa.RecordBatch.from_arrays([
            pa.array([segment.topic] * n, pa.string()),
            pa.array([segment.partition] * n, pa.int32()),
            pa.array([h.base_offset for _, h in headers], pa.int64()),
            pa.array([h.last_offset for _, h in headers], pa.int64()),
            pa.array([h.base_timestamp for _, h in headers], pa.int64()),
            pa.array([h.max_timestamp for _, h in headers], pa.int64()),
            pa.array([h.records_count for _, h in headers], pa.int32()),
            pa.array([segment.path] * n, pa.string()),
        ], schema=_ARROW_BATCH_SCHEMA)


class BatchSource(DataSource):
    """``format("kcoord_batches")``: batch headers of the local topic partitions."""

    @classmethod
    def name(cls) -> str:
        return "kcoord_batches"

    def schema(self) -> StructType:
        return BATCH_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(_path_option(self.options))


def register(spark: Any) -> None:
    """Register both data sources with a session and enable filter pushdown for them."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(RecordSource)
    spark.dataSource.register(BatchSource)
