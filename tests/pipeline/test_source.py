"""The data source's reader without a JVM: filter pushdown, segment skipping, Arrow batches."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThan, In, LessThanOrEqual

from pipeline import history
from pipeline.segments import SegmentFile
from pipeline.source import RECORD_SCHEMA, RecordReader, RecordSource, SegmentPartition
from protocol.consumer_offsets import partition_for
from tests.pipeline.logs import T0, LogWriter


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    w = LogWriter(tmp_path, partitions=4, segment_bytes=600)
    for i in range(200):
        w.commit(f"g{i % 8}", {("t", i % 3): i}, T0 + i * 1000)
        if i % 50 == 49:
            w.compact(T0 + i * 1000)
    w.close()
    return tmp_path


def read_all(reader: RecordReader) -> list[dict[str, object]]:
    rows = []
    for partition in reader.partitions():
        for batch in reader.read(partition):
            assert batch.schema.names == RECORD_SCHEMA.names
            rows.extend(batch.to_pylist())
    return sorted(rows, key=lambda r: (r["coordinator_partition"], r["log_offset"]))


def segments_of(reader: RecordReader) -> list[SegmentFile]:
    return [p.segment for p in reader.partitions() if isinstance(p, SegmentPartition) and p.segment]


def test_without_filters_the_reader_reads_what_the_oracle_reads(data_dir: Path) -> None:
    reader = RecordSource({"path": str(data_dir)}).reader(RECORD_SCHEMA)
    assert isinstance(reader, RecordReader)
    assert list(reader.pushFilters([])) == []
    assert read_all(reader) == history.read_rows(data_dir)


def test_group_and_time_filters_are_applied_in_the_reader(data_dir: Path) -> None:
    reader = RecordReader(str(data_dir))
    kind = EqualTo(("kind",), "commit")
    group = EqualTo(("group",), "g3")
    upto = LessThanOrEqual(("record_timestamp",), T0 + 99_000)
    after = GreaterThan(("commit_timestamp",), T0 + 20_000)
    left = list(reader.pushFilters([group, upto, after, kind]))
    assert left == [kind]  # the rest is handled exactly by the reader

    planned = segments_of(reader)
    everything = segments_of(RecordReader(str(data_dir)))
    # only g3's coordinator partition, and none of the segments written after the bound
    assert {s.partition for s in planned} == {partition_for("g3", 4)}
    assert all(s.min_timestamp is not None and s.min_timestamp <= T0 + 99_000 for s in planned)
    assert len(planned) < len([s for s in everything if s.partition == partition_for("g3", 4)])

    rows = read_all(reader)
    expected = [r for r in history.read_rows(data_dir, "g3")
                if r["record_timestamp"] <= T0 + 99_000 and r["commit_timestamp"] > T0 + 20_000]
    assert rows == expected and rows


def test_in_filters_intersect(data_dir: Path) -> None:
    reader = RecordReader(str(data_dir))
    assert list(reader.pushFilters([In(("group",), ("g1", "g2")), EqualTo(("group",), "g2")])) == []
    assert {r["group"] for r in read_all(reader)} == {"g2"}
    nothing = RecordReader(str(data_dir))
    list(nothing.pushFilters([EqualTo(("group",), "g1"), EqualTo(("group",), "g2")]))
    assert read_all(nothing) == []
