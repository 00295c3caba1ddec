"""The Arrow types of the record columns (``pipeline.segments.COLUMNS``), shared by both engines.

The Spark data source hands Spark Arrow batches of these types, and the plain-Python
engine writes parquet with them, so the files of either engine read back alike. Only
pyarrow is needed here, not pyspark.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["ARROW_ASSIGNMENT", "ARROW_MEMBER", "ARROW_TYPES"]

ARROW_MEMBER = pa.struct([
    ("member_id", pa.string()), ("group_instance_id", pa.string()), ("client_id", pa.string()),
    ("client_host", pa.string()), ("subscribed_topics", pa.list_(pa.string())),
])
#: A KIP-848 assignment: partitions by topic id.
ARROW_ASSIGNMENT = pa.list_(pa.struct([("topic_id", pa.string()), ("partitions", pa.list_(pa.int32()))]))
ARROW_TYPES: dict[str, pa.DataType] = {
    "group": pa.string(), "topic": pa.string(), "partition": pa.int32(), "offset": pa.int64(),
    "leader_epoch": pa.int32(), "metadata": pa.string(), "commit_timestamp": pa.int64(),
    "expire_timestamp": pa.int64(), "kind": pa.string(), "generation": pa.int32(),
    "protocol_type": pa.string(), "protocol": pa.string(), "leader": pa.string(),
    "state": pa.string(), "member_count": pa.int32(), "members": pa.list_(ARROW_MEMBER),
    "subscribed_topics": pa.list_(pa.string()), "member_id": pa.string(), "assignment": ARROW_ASSIGNMENT,
    "log_offset": pa.int64(),
    "coordinator_partition": pa.int32(), "segment": pa.string(), "record_timestamp": pa.int64(),
    "producer_id": pa.int64(), "transaction": pa.string(), "marker_offset": pa.int64(),
    "visible_timestamp": pa.int64(),
}
