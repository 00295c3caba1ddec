"""The pipeline's jobs as Spark DataFrame plans over the ``kcoord`` data sources.

Each function returns DataFrames (nothing is computed until they are written or
collected). The semantics are those of ``pipeline.history``, the plain-Python oracle, and
the tests hold the two equal on logs written by the real broker.

Every job counts a record from its ``visible_timestamp`` on, which the data source fills
in: a transactional commit from its COMMIT marker, never one aborted or still open
(``pipeline.transactions``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from pipeline.history import AS_OF_COLUMNS, LAG_COLUMNS, MINUTE_MS, STATS_TABLES
from pipeline.segments import topic_segments
from protocol.policy_marker import POLICY_PREFIX

__all__ = ["as_of", "as_of_many", "history", "lag", "records", "stats"]

_OFFSET_KINDS = ("commit", "tombstone")
_GROUP_KINDS = ("group_metadata", "group_tombstone")


def records(spark: SparkSession, data_dir: str, group: str | None = None) -> DataFrame:
    """Every record of the log and its history, once; ``group`` is pushed down to the reader.

    The jobs below take this DataFrame (or a filtered or cached one) rather than a path, so
    one read can feed several jobs; filters a job applies to it reach the reader.
    """
    df = spark.read.format("kcoord").option("path", str(data_dir)).load()
    if group is not None:
        df = df.filter(F.col("group") == group)
    return df


def _counted(records: DataFrame) -> DataFrame:
    """The records that took effect: not those of aborted or still open transactions."""
    return records.filter(F.col("visible_timestamp").isNotNull())


def history(records: DataFrame) -> DataFrame:
    """The ``history`` job: the full record history (every kind that took effect), for writing out."""
    return _counted(records)


def _after(a: Column, b: Column) -> Column:
    """Whether log position ``a`` (struct of coordinator_partition, log_offset) is after ``b``."""
    return (a["coordinator_partition"] > b["coordinator_partition"]) | (
        (a["coordinator_partition"] == b["coordinator_partition"]) & (a["log_offset"] > b["log_offset"])
    )


def _live_offsets(records: DataFrame, moments: list[int]) -> DataFrame:
    """Per (as_of, group, topic, partition) the commit holding the offset at each moment.

    Of the offset records that took effect at or before the moment, the last in log order
    wins (log order, not commit timestamp; a transactional commit keeps its own place in
    the log); it counts only if it is a commit and no group tombstone followed it. The
    moments are a small broadcast table joined to the records, so many moments cost one
    pass over the log.
    """
    written = records.filter(F.col("visible_timestamp") <= F.lit(max(moments)))
    if len(set(moments)) == 1:
        written = written.withColumn("as_of", F.lit(moments[0]).cast("long"))
    else:
        times = records.sparkSession.createDataFrame([(int(m),) for m in sorted(set(moments))], "as_of long")
        written = written.join(F.broadcast(times), F.col("visible_timestamp") <= F.col("as_of"))
    # One aggregation covers both kinds of record, so the log is scanned once: offset
    # records group by their partition, a group's tombstones by (group, null, null).
    latest = (
        written.filter(F.col("kind").isin(*_OFFSET_KINDS, "group_tombstone"))
        .groupBy("as_of", "group", "topic", "partition")
        .agg(F.max(F.struct(
            "coordinator_partition", "log_offset", "kind", "offset", "leader_epoch", "metadata",
            "commit_timestamp",
        )).alias("r"))
    )
    tombstone = F.when(F.col("r.kind") == "group_tombstone", F.struct(
        F.col("r.coordinator_partition").alias("coordinator_partition"),
        F.col("r.log_offset").alias("log_offset"),
    ))
    live = latest.withColumn("d", F.max(tombstone).over(Window.partitionBy("as_of", "group"))).filter(
        (F.col("r.kind") == "commit") & (F.col("d").isNull() | _after(F.col("r"), F.col("d")))
    )
    return live.select(
        "as_of", "group", "topic", "partition",
        *(F.col(f"r.{name}").alias(name) for name in ("offset", "leader_epoch", "metadata", "commit_timestamp")),
    )


def as_of(records: DataFrame, as_of_ms: int) -> DataFrame:
    """The ``as-of`` job: each group's committed offsets at ``as_of_ms``.

    A record that took effect by then was written by then: the filter on the record
    timestamp reaches the reader, which skips later segments and batches.
    """
    df = records.filter(F.col("record_timestamp") <= F.lit(as_of_ms))
    return _live_offsets(df, [as_of_ms]).select(*AS_OF_COLUMNS).orderBy("group", "topic", "partition")


def as_of_many(records: DataFrame, moments: list[int]) -> DataFrame:
    """``as-of`` at several moments in one pass: ``as_of`` followed by the as-of columns."""
    if not moments:
        raise ValueError("as_of_many needs at least one moment")
    return _live_offsets(records, moments).select("as_of", *AS_OF_COLUMNS).orderBy(
        "as_of", "group", "topic", "partition"
    )


def stats(records: DataFrame, now_ms: int, idle_minutes: float) -> dict[str, DataFrame]:
    """The ``stats`` job's tables, keyed as ``pipeline.history.STATS_TABLES``.

    The columns they need are read once and cached for the six tables.
    """
    df = _counted(records).select(
        "group", "topic", "partition", "offset", "kind", "generation", "protocol_type", "state",
        "subscribed_topics", "coordinator_partition", "log_offset", "visible_timestamp",
        "leader_epoch", "metadata", "commit_timestamp",
    ).cache()
    commits = df.filter(F.col("kind") == "commit")
    per_minute = (
        commits.withColumn("minute", F.floor(F.col("visible_timestamp") / MINUTE_MS).cast("long") * MINUTE_MS)
        .groupBy("group", "minute").agg(F.count(F.lit(1)).alias("commits"))
    )
    last_commit = commits.groupBy("group").agg(
        F.max("visible_timestamp").alias("last_commit"), F.count(F.lit(1)).alias("commits")
    )
    idle = (
        last_commit.withColumn("idle_ms", F.lit(now_ms) - F.col("last_commit"))
        .filter(F.col("idle_ms") > F.lit(idle_minutes * MINUTE_MS))
        .select("group", "last_commit", "idle_ms")
    )
    group_records = df.filter(F.col("kind").isin(*_GROUP_KINDS))
    order = Window.partitionBy("group").orderBy("coordinator_partition", "log_offset")
    rebalances = (
        group_records.withColumn("previous", F.lag("generation").over(order))
        .filter((F.col("kind") == "group_metadata") & (
            F.col("previous").isNull() | (F.col("previous") != F.col("generation"))
        ))
        .groupBy("group").agg(F.count(F.lit(1)).alias("rebalances"))
    )
    latest_group = (
        group_records.filter(F.col("visible_timestamp") <= F.lit(now_ms))
        .groupBy("group")
        .agg(F.max(F.struct(
            "coordinator_partition", "log_offset", "kind", "protocol_type", "state", "subscribed_topics",
        )).alias("g"))
        .filter((F.col("g.kind") == "group_metadata") & (F.col("g.protocol_type") == "consumer")
                & F.col("g.subscribed_topics").isNotNull())
    )
    unsubscribed = (
        _live_offsets(df, [now_ms]).join(latest_group, "group")
        .filter(~F.array_contains(F.col("g.subscribed_topics"), F.col("topic")))
        .select("group", F.col("g.state").alias("state"), "topic", "partition", "offset")
    )
    # Commits the broker made under a group's reset policy carry metadata "kcoord:<policy>".
    prefix = len(POLICY_PREFIX)
    policy_commits = (
        commits.filter(F.col("metadata").startswith(POLICY_PREFIX) & (F.length("metadata") > F.lit(prefix)))
        .withColumn("policy", F.expr(f"substring(metadata, {prefix + 1})"))
        .groupBy("group", "policy")
        .agg(F.count(F.lit(1)).alias("commits"), F.max("visible_timestamp").alias("last_commit"))
    )
    tables = {
        "commits_per_minute": per_minute,
        "last_commit": last_commit,
        "idle_groups": idle,
        "unsubscribed_offsets": unsubscribed,
        "rebalances": rebalances,
        "policy_commits": policy_commits,
    }
    return {name: table.select(*STATS_TABLES[name]).orderBy(*STATS_TABLES[name]) for name, table in tables.items()}


def lag(records: DataFrame, data_dir: str) -> DataFrame:
    """The ``lag`` job: each commit with the high watermark of its partition at commit time.

    The high watermark curve of a topic partition is the running maximum of
    ``last_offset + 1`` over its batches in timestamp order; commits are placed on that
    curve by one sort per topic partition (batches before commits at equal timestamps),
    not by a join of every commit with every batch. A partition that has local segments but
    no batch old enough has watermark 0; one without local data has none.
    """
    spark = records.sparkSession
    commits = _counted(records).filter(F.col("kind") == "commit").select(
        "group", "topic", "partition", "commit_timestamp", "offset",
        F.col("commit_timestamp").alias("ts"), F.lit(1).alias("order"), F.lit(None).cast("long").alias("end"),
    )
    batches = spark.read.format("kcoord_batches").option("path", str(data_dir)).load().select(
        F.lit(None).cast("string").alias("group"), "topic", "partition",
        F.lit(None).cast("long").alias("commit_timestamp"), F.lit(None).cast("long").alias("offset"),
        F.col("max_timestamp").alias("ts"), F.lit(0).alias("order"), (F.col("last_offset") + 1).alias("end"),
    )
    curve = Window.partitionBy("topic", "partition").orderBy("ts", "order").rowsBetween(
        Window.unboundedPreceding, Window.currentRow
    )
    placed = commits.unionByName(batches).withColumn("running_end", F.max("end").over(curve))
    local = _local_partitions(spark, data_dir)
    joined = placed.filter(F.col("order") == 1).join(local, ["topic", "partition"], "left")
    hw = F.when(F.col("local"), F.coalesce(F.col("running_end"), F.lit(0).cast("long")))
    return (
        joined.withColumn("high_watermark", hw)
        .withColumn("lag", F.col("high_watermark") - F.col("offset"))
        .select(*LAG_COLUMNS)
        .orderBy(*LAG_COLUMNS)
    )


def _local_partitions(spark: SparkSession, data_dir: str) -> DataFrame:
    """(topic, partition, local=True) for every topic partition directory with segments."""
    from pyspark.sql.types import BooleanType, IntegerType, StringType, StructField, StructType

    found = sorted({(s.topic, s.partition) for s in topic_segments(Path(data_dir))})
    schema = StructType([
        StructField("topic", StringType()), StructField("partition", IntegerType()),
        StructField("local", BooleanType()),
    ])
    rows: list[Any] = [(topic, partition, True) for topic, partition in found]
    return spark.createDataFrame(rows, schema)
