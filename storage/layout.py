"""Names and paths inside a data directory: the one place that knows them.

Everything kcoord keeps on disk lives under one data directory (docs/storage.md draws it):

- ``.lock``: held with ``flock`` by the running broker;
- ``format.json``: the data directory's format version (``storage.data_dir``);
- ``__consumer_offsets.meta.json``: the coordinator log's partition count;
- ``__consumer_offsets.snapshot``: the coordinator's state as of some log offsets, so
  start-up replays only the log after them (``storage.coordinator_snapshot``; optional);
- ``__consumer_offsets-<p>/`` and ``<topic>-<p>/``: partition directories of segment files
  ``{base_offset:020d}.log`` (plus a clean's ``.log.cleaned`` / ``.log.swap`` for a moment);
- ``<topic>-<p>/log-start-offset``: a log start offset DeleteRecords moved inside a segment;
- ``<topic>-<p>/aborted.txnindex`` and ``producer-state.checkpoint``: the partition's aborted
  transactions and its producers as of an offset (``storage.producer_state``);
- ``__transaction_state.meta.json`` and ``__transaction_state-<p>/``: the transaction
  coordinator's log, laid out like the coordinator log;
- ``history/__consumer_offsets-<p>/``: segments the cleaner replaced, kept for the pipeline;
- ``topics.json`` and ``producer_ids.json``: the topic catalogue and the producer-id block;
- ``__kcoord_security-0/``: SCRAM credentials and ACLs, a compacted log of segment files;
- ``__kcoord_group_configs-0/``: the groups' own configs (GROUP config resources), likewise;
- ``replication-offset-checkpoint``: a cluster node's high watermark of each replicated
  partition it holds (``storage.hw_checkpoint``, Kafka's file of the same name).

The broker, the storage engine and the pipeline all build paths through these functions,
so a name changes here or nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = [
    "ABORTED_INDEX_FILE",
    "CLEANED_SUFFIX",
    "COORDINATOR_SNAPSHOT_FILE",
    "COORDINATOR_TOPIC",
    "FORMAT_FILE",
    "GROUP_CONFIGS_TOPIC",
    "HISTORY_DIR",
    "LOCK_FILE",
    "LOG_START_FILE",
    "PARTITION_COUNT_FILE",
    "PRODUCER_IDS_FILE",
    "PRODUCER_STATE_FILE",
    "REPLICATION_CHECKPOINT_FILE",
    "SECURITY_TOPIC",
    "SEGMENT_SUFFIX",
    "SWAP_SUFFIX",
    "TEMP_SUFFIX",
    "TOPICS_FILE",
    "TRANSACTION_TOPIC",
    "aborted_index_file",
    "coordinator_partition_dir",
    "coordinator_snapshot_file",
    "format_file",
    "group_configs_partition_dir",
    "history_copy_of",
    "history_dir",
    "history_folder",
    "journal_file",
    "lock_file",
    "log_start_file",
    "parse_partition_dir",
    "parse_segment_name",
    "parse_temp_name",
    "partition_count_file",
    "partition_dir",
    "producer_ids_file",
    "producer_state_file",
    "replication_checkpoint_file",
    "security_partition_dir",
    "segment_name",
    "temp_file",
    "topics_file",
]

LOCK_FILE = ".lock"
FORMAT_FILE = "format.json"
#: In a partition directory: the log start offset when it is above the first segment's base.
LOG_START_FILE = "log-start-offset"
COORDINATOR_TOPIC = "__consumer_offsets"
PARTITION_COUNT_FILE = f"{COORDINATOR_TOPIC}.meta.json"
COORDINATOR_SNAPSHOT_FILE = f"{COORDINATOR_TOPIC}.snapshot"
#: The transaction coordinator's log (Kafka's TransactionLog), partitioned like the coordinator log.
TRANSACTION_TOPIC = "__transaction_state"
#: In a partition directory: Kafka's AbortedTxn entries, appended as ABORT markers are.
ABORTED_INDEX_FILE = "aborted.txnindex"
#: In a partition directory: the producers (epochs, sequences, open transactions) as of an offset.
PRODUCER_STATE_FILE = "producer-state.checkpoint"
HISTORY_DIR = "history"
TOPICS_FILE = "topics.json"
PRODUCER_IDS_FILE = "producer_ids.json"
#: A cluster node's high watermarks (Kafka's ReplicaManager.HighWatermarkFilename).
REPLICATION_CHECKPOINT_FILE = "replication-offset-checkpoint"
#: The log of SCRAM credentials and ACLs (one partition).
SECURITY_TOPIC = "__kcoord_security"
GROUP_CONFIGS_TOPIC = "__kcoord_group_configs"
#: A JSON file is replaced by writing ``<name>.tmp`` first; a leftover one is stale.
TEMP_SUFFIX = ".tmp"

SEGMENT_SUFFIX = ".log"
#: Suffixes the cleaner appends to a segment name while it swaps segments (storage.cleaner).
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
_TEMP_NAME = re.compile(r"^(\d{20})\.log(\.cleaned|\.swap)$")
REPLICA_COPIES_DIR = "replica-copies"
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


# --- files of the data directory ---------------------------------------------------------


def lock_file(data_dir: Path) -> Path:
    return Path(data_dir) / LOCK_FILE


def format_file(data_dir: Path) -> Path:
    return Path(data_dir) / FORMAT_FILE


def partition_count_file(data_dir: Path, topic: str = COORDINATOR_TOPIC) -> Path:
    """Where a coordinator log (``__consumer_offsets``, ``__transaction_state``) records its partition count."""
    return Path(data_dir) / f"{topic}.meta.json"


def journal_file(data_dir: Path, topic: str = COORDINATOR_TOPIC) -> Path:
    """A coordinator log's journal (``storage.wal``): every batch since its last checkpoint."""
    return Path(data_dir) / f"{topic}.journal"


def coordinator_snapshot_file(data_dir: Path) -> Path:
    return Path(data_dir) / COORDINATOR_SNAPSHOT_FILE


def topics_file(data_dir: Path) -> Path:
    return Path(data_dir) / TOPICS_FILE


def producer_ids_file(data_dir: Path) -> Path:
    return Path(data_dir) / PRODUCER_IDS_FILE


def replication_checkpoint_file(data_dir: Path) -> Path:
    """Where a cluster node saves the high watermark of every replicated partition it holds."""
    return Path(data_dir) / REPLICATION_CHECKPOINT_FILE


def temp_file(path: Path) -> Path:
    """Where a file is written before it atomically replaces ``path``."""
    return path.with_name(path.name + TEMP_SUFFIX)


# --- partition directories ------------------------------------------------------------------


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    """``<data-dir>/<topic>-<partition>``, for topics and the coordinator log alike."""
    return Path(data_dir) / f"{topic}-{partition}"


def aborted_index_file(partition_directory: Path) -> Path:
    """A partition's aborted transactions (``storage.producer_state``)."""
    return Path(partition_directory) / ABORTED_INDEX_FILE


def producer_state_file(partition_directory: Path) -> Path:
    """A partition's producer state checkpoint (``storage.producer_state``)."""
    return Path(partition_directory) / PRODUCER_STATE_FILE


def log_start_file(partition_directory: Path) -> Path:
    """Where a partition keeps a log start offset that DeleteRecords moved (one decimal line)."""
    return Path(partition_directory) / LOG_START_FILE


def coordinator_partition_dir(data_dir: Path, partition: int) -> Path:
    return partition_dir(data_dir, COORDINATOR_TOPIC, partition)


def security_partition_dir(data_dir: Path) -> Path:
    return partition_dir(data_dir, SECURITY_TOPIC, 0)


def group_configs_partition_dir(data_dir: Path) -> Path:
    return partition_dir(data_dir, GROUP_CONFIGS_TOPIC, 0)


def replica_copy_dir(data_dir: Path, topic: str, partition: int) -> Path:
    """Where a cluster node copies a partition's log from its leader before taking it over."""
    return Path(data_dir) / REPLICA_COPIES_DIR / f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` of a partition directory name, else None."""
    match = _PARTITION_DIR.match(name)
    return (match.group(1), int(match.group(2))) if match else None


# --- history --------------------------------------------------------------------------------


def history_dir(data_dir: Path) -> Path:
    """Where the cleaner keeps the segments it replaced (when history is on)."""
    return Path(data_dir) / HISTORY_DIR


def history_folder(history: Path, partition_directory: Path) -> Path:
    """A partition's folder in the history directory: named like its live directory."""
    return Path(history) / Path(partition_directory).name


def history_copy_of(segment: Path) -> Path:
    """Where a live segment of ``<data-dir>/<partition>/`` lands once the cleaner retires it."""
    segment = Path(segment)
    return history_folder(history_dir(segment.parent.parent), segment.parent) / segment.name


# --- segment files --------------------------------------------------------------------------


def segment_name(base_offset: int) -> str:
    """Kafka's file name for a segment: zero padded so names sort like offsets."""
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """Base offset encoded in a segment file name, or None for any other file."""
    match = _SEGMENT_NAME.match(name)
    return int(match.group(1)) if match else None


def parse_temp_name(name: str) -> tuple[int, str] | None:
    """``(base_offset, suffix)`` of a cleaner's ``.log.cleaned`` or ``.log.swap`` file, else None."""
    match = _TEMP_NAME.match(name)
    return (int(match.group(1)), match.group(2)) if match else None
