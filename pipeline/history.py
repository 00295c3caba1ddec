"""The pipeline's jobs in plain Python, without Spark: the test oracle and a library.

``kcoord offsets restore --as-of`` calls ``offsets_as_of``; the Spark jobs
(``pipeline.jobs``) must produce exactly what the functions here produce from the same
files. They are written the simple way on purpose: every segment file is read whole,
the copies of a record are de-duplicated with a dictionary, and each job is a loop over
rows in log order. Only segment framing and record decoding are shared with the Spark
data source (``pipeline.segments``); the de-duplication here is independent of the data
source's offset-range planning, so the two check each other.

Times are milliseconds since the epoch. "Log order" is (coordinator partition, log
offset): a group lives in one partition, so within a group it is the order of writes.

Transactions are settled here the simple way too: the rows and markers of a partition
are walked in log order, a transactional record waits with its producer's others until
that producer's next marker, and the marker settles them all (``pipeline.transactions``
says what each outcome means). The data source instead looks each batch's marker up in
an index built while planning; the two check each other. Jobs count a record only from
its ``visible_timestamp`` on: a transactional commit from its COMMIT marker, never if
aborted or still open.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pipeline.segments import (
    COLUMNS,
    SegmentReadError,
    TimeBounds,
    partitions_of_groups,
    read_batch_headers,
    record_row,
    topic_segments,
)
from pipeline.transactions import OUTCOME_COLUMNS, Marker, markers_of_batch, outcome
from protocol.policy_marker import policy_of
from protocol.records import RecordBatchError, iter_records
from storage.layout import (
    COORDINATOR_TOPIC,
    history_copy_of,
    history_dir,
    parse_partition_dir,
    parse_segment_name,
)

__all__ = [
    "AS_OF_COLUMNS",
    "LAG_COLUMNS",
    "STATS_TABLES",
    "as_of_rows",
    "history_rows",
    "lag_rows",
    "offsets_as_of",
    "read_rows",
    "stats",
]

Row = dict[str, Any]
AS_OF_COLUMNS = ("group", "topic", "partition", "offset", "leader_epoch", "metadata", "commit_timestamp")
LAG_COLUMNS = ("group", "topic", "partition", "commit_timestamp", "offset", "high_watermark", "lag")
STATS_TABLES: dict[str, tuple[str, ...]] = {
    "commits_per_minute": ("group", "minute", "commits"),
    "last_commit": ("group", "last_commit", "commits"),
    "idle_groups": ("group", "last_commit", "idle_ms"),
    "unsubscribed_offsets": ("group", "state", "topic", "partition", "offset"),
    "rebalances": ("group", "rebalances"),
    "policy_commits": ("group", "policy", "commits", "last_commit"),
}
MINUTE_MS = 60_000
_OPEN_END = 2**63


# --- rows -----------------------------------------------------------------------------------


def _coordinator_files(root: Path, history: bool, partitions: set[int] | None) -> list[tuple[int, bool, Path]]:
    found: list[tuple[int, bool, Path]] = []
    if not root.is_dir():
        return found
    for directory in root.iterdir():
        parsed = parse_partition_dir(directory.name)
        if parsed is None or parsed[0] != COORDINATOR_TOPIC or not directory.is_dir():
            continue
        partition = parsed[1]
        if partitions is not None and partition not in partitions:
            continue
        for path in sorted(directory.iterdir()):
            if parse_segment_name(path.name) is not None:
                found.append((partition, history, path))
    return found


def _history_files_after(data_dir: Path, live: list[tuple[int, bool, Path]],
                         partitions: set[int] | None) -> Iterator[tuple[int, bool, Path]]:
    """The live files, then the history files, listed only once the live ones were read.

    A broker may be cleaning meanwhile: a live file it replaces after we listed it is
    moved into history, and listing history last finds it there.
    """
    yield from live
    yield from _coordinator_files(history_dir(data_dir), True, partitions)


def _read(path: Path, history: bool) -> tuple[Path, bytes] | None:
    """The file's bytes, or (for a live file the cleaner moved) its history copy's."""
    candidates = [path] if history else [path, history_copy_of(path)]
    for candidate in candidates:
        try:
            return candidate, candidate.read_bytes()
        except FileNotFoundError:
            continue
    return None  # pruned, or merged into a file read elsewhere


def read_rows(data_dir: Path, group: str | None = None, until: int | None = None) -> list[Row]:
    """Every record of the coordinator log and its history, once, in log order.

    Each file is read whole. Of several copies of one (coordinator partition, log offset),
    the copy from the file with the narrowest offset range wins (the oldest, fullest
    version of that range), and on equal ranges the history copy. ``group`` and ``until``
    (largest record timestamp wanted) only narrow the result; markers are read whatever
    their time, so a record's outcome does not depend on them.
    """
    data_dir = Path(data_dir)
    groups = frozenset([group]) if group is not None else None
    partitions = partitions_of_groups(data_dir, set(groups)) if groups is not None else None
    live = _coordinator_files(data_dir, False, partitions)
    last_live: dict[int, Path] = {}
    for partition, _, path in live:
        last_live[partition] = max(last_live.get(partition, path), path)
    best: dict[tuple[int, int], tuple[tuple[int, bool], Row]] = {}
    markers: dict[tuple[int, int], Marker] = {}
    times = TimeBounds(high=until) if until is not None else None
    for partition, history, path in _history_files_after(data_dir, live, partitions):
        found = _read(path, history)
        if found is None:
            continue
        path, data = found
        headers = read_batch_headers(path, data)
        if not headers:
            continue
        start = min(headers[0][1].base_offset, parse_segment_name(path.name) or 0)
        end = _OPEN_END if last_live.get(partition) == path else headers[-1][1].next_offset
        rank = (end - start, not history)
        for pos, header in headers:
            raw = memoryview(data)[pos : pos + header.size]
            if header.is_control:
                try:
                    markers.update(((partition, m.offset), m) for m in markers_of_batch(header, raw))
                except RecordBatchError as exc:
                    raise SegmentReadError(f"{path}: control batch at byte {pos}: {exc}") from None
                continue
            producer_id = header.producer_id if header.is_transactional else None
            for log_offset, timestamp, key, value in iter_records(raw, verify_crc=False):
                if key is None or (times is not None and not times.admits(timestamp)):
                    continue
                decoded = record_row(key, value, groups)
                if decoded is None:
                    continue
                slot = (partition, log_offset)
                if slot in best and best[slot][0] <= rank:
                    continue
                # as for a plain record; ``_settle`` fills in a transactional one's outcome
                row = dict(zip(COLUMNS, (*decoded, log_offset, partition, str(path), timestamp,
                                         producer_id, None, None, timestamp), strict=True))
                best[slot] = (rank, row)
    rows = [best[slot][1] for slot in sorted(best)]
    _settle(rows, markers)
    return rows


def _settle(rows: list[Row], markers: dict[tuple[int, int], Marker]) -> None:
    """Fill in the outcome of every transactional row, walking those rows and the markers in log order.

    Plain rows need nothing: ``read_rows`` gave them their outcome as it read them.
    """
    pending: dict[tuple[int, int], list[Row]] = {}
    events: list[tuple[int, int, Row | Marker]] = [
        (row["coordinator_partition"], row["log_offset"], row) for row in rows if row["producer_id"] is not None]
    if not events:
        return
    events += [(partition, offset, marker) for (partition, offset), marker in markers.items()]
    events.sort(key=lambda event: event[:2])
    for partition, _, event in events:
        if isinstance(event, Marker):
            for row in pending.pop((partition, event.producer_id), []):
                _settle_row(row, event)
        else:
            pending.setdefault((partition, event["producer_id"]), []).append(event)
    for waiting in pending.values():
        for row in waiting:
            _settle_row(row, None)


def _settle_row(row: Row, marker: Marker | None) -> None:
    for column, value in zip(OUTCOME_COLUMNS, outcome(row["kind"], row["record_timestamp"], row["producer_id"],
                                                      marker), strict=True):
        row[column] = value


def history_rows(data_dir: Path, group: str | None = None) -> list[Row]:
    """The ``history`` job: every record that took effect, as rows of ``pipeline.segments.COLUMNS``.

    Records of aborted and still open transactions are left out (``read_rows`` has them).
    """
    return [row for row in read_rows(data_dir, group) if row["visible_timestamp"] is not None]


# --- as-of ----------------------------------------------------------------------------------


def _live_offsets(rows: Iterable[Row], as_of_ms: int) -> dict[tuple[str, str, int], Row]:
    """The commit rows that hold each group's offsets at ``as_of_ms`` (rows in log order).

    Per (group, topic, partition) the last record in log order of those that took effect
    at or before the time counts; an offset tombstone, or a group tombstone written after
    the commit, means no offset. A transactional commit takes effect at its COMMIT marker,
    but keeps its own place in the log (Kafka's "newer in the log" rule).
    """
    latest: dict[tuple[str, str, int], Row] = {}
    deleted: dict[str, tuple[int, int]] = {}
    for row in rows:
        visible = row["visible_timestamp"]
        if visible is None or visible > as_of_ms:
            continue
        kind = row["kind"]
        if kind in ("commit", "tombstone"):
            latest[(row["group"], row["topic"], row["partition"])] = row
        elif kind == "group_tombstone":
            deleted[row["group"]] = (row["coordinator_partition"], row["log_offset"])
    live = {}
    for key, row in latest.items():
        gone = deleted.get(key[0])
        if row["kind"] == "commit" and (gone is None or (row["coordinator_partition"], row["log_offset"]) > gone):
            live[key] = row
    return live


def offsets_as_of(
    data_dir: Path, as_of_ms: int, group: str | None = None
) -> dict[str, dict[tuple[str, int], dict[str, Any]]]:
    """The committed offsets of each group (or of ``group``) at ``as_of_ms``.

    ``{group: {(topic, partition): {"offset", "leader_epoch", "metadata",
    "commit_timestamp"}}}``; a partition with no live commit at that time is absent, and
    so is a group with none at all.
    """
    result: dict[str, dict[tuple[str, int], dict[str, Any]]] = {}
    for (name, topic, partition), row in _live_offsets(read_rows(data_dir, group, until=as_of_ms), as_of_ms).items():
        result.setdefault(name, {})[(topic, partition)] = {
            "offset": row["offset"],
            "leader_epoch": row["leader_epoch"],
            "metadata": row["metadata"],
            "commit_timestamp": row["commit_timestamp"],
        }
    return result


def as_of_rows(data_dir: Path, as_of_ms: int, group: str | None = None) -> list[Row]:
    """The ``as-of`` job's table: ``AS_OF_COLUMNS``, sorted by group, topic, partition."""
    live = _live_offsets(read_rows(data_dir, group, until=as_of_ms), as_of_ms)
    return [{column: live[key][column] for column in AS_OF_COLUMNS} for key in sorted(live)]


# --- stats ----------------------------------------------------------------------------------


def stats(data_dir: Path, now_ms: int, idle_minutes: float, group: str | None = None) -> dict[str, list[Row]]:
    """The ``stats`` job's tables (``STATS_TABLES``), each sorted by its columns.

    - commits_per_minute: commit records per group per minute of the time they took effect
      (``visible_timestamp``: the record timestamp, or a transaction's COMMIT marker's);
    - last_commit: each group's newest such time and its number of commits;
    - idle_groups: groups whose last commit is more than ``idle_minutes`` before ``now_ms``;
    - unsubscribed_offsets: offsets live at ``now_ms`` for topics that no member of the
      group's latest group metadata (protocol type "consumer") subscribes to;
    - rebalances: group metadata records that carry a new generation (the first one of a
      group, or of a group re-created after a group tombstone, counts);
    - policy_commits: commits the broker made under a group's offset reset policy (metadata
      ``kcoord:<policy>``, docs/coordinator-rules.md#policy-commits), per group and policy,
      with the newest one's time.

    Records of aborted or still open transactions count nowhere.
    """
    rows = read_rows(data_dir, group)
    per_minute: dict[tuple[str, int], int] = defaultdict(int)
    last: dict[str, int] = {}
    commits: dict[str, int] = defaultdict(int)
    rebalances: dict[str, int] = defaultdict(int)
    previous_generation: dict[str, int | None] = {}
    latest_group: dict[str, Row] = {}
    policies: dict[tuple[str, str], tuple[int, int]] = {}  # (group, policy) -> (commits, last)
    for row in rows:
        ts = row["visible_timestamp"]
        if ts is None:
            continue  # an aborted or open transaction's record
        name = row["group"]
        kind = row["kind"]
        if kind == "commit":
            per_minute[(name, ts // MINUTE_MS * MINUTE_MS)] += 1
            last[name] = max(last.get(name, ts), ts)
            commits[name] += 1
            policy = policy_of(row["metadata"])
            if policy is not None:
                count, newest = policies.get((name, policy), (0, ts))
                policies[(name, policy)] = (count + 1, max(newest, ts))
        elif kind == "group_metadata":
            if name not in previous_generation or previous_generation[name] != row["generation"]:
                rebalances[name] += 1
            previous_generation[name] = row["generation"]
        elif kind == "group_tombstone":
            previous_generation[name] = None
        if kind in ("group_metadata", "group_tombstone") and ts <= now_ms:
            latest_group[name] = row
    idle_ms = idle_minutes * MINUTE_MS
    unsubscribed = []
    for (name, topic, partition), row in _live_offsets(rows, now_ms).items():
        meta = latest_group.get(name)
        if meta is None or meta["kind"] != "group_metadata" or meta["protocol_type"] != "consumer":
            continue
        if meta["subscribed_topics"] is None or topic in meta["subscribed_topics"]:
            continue
        unsubscribed.append({"group": name, "state": meta["state"], "topic": topic, "partition": partition,
                             "offset": row["offset"]})
    tables = {
        "commits_per_minute": [{"group": g, "minute": m, "commits": n} for (g, m), n in per_minute.items()],
        "last_commit": [{"group": g, "last_commit": ts, "commits": commits[g]} for g, ts in last.items()],
        "idle_groups": [{"group": g, "last_commit": ts, "idle_ms": now_ms - ts}
                        for g, ts in last.items() if now_ms - ts > idle_ms],
        "unsubscribed_offsets": unsubscribed,
        "rebalances": [{"group": g, "rebalances": n} for g, n in rebalances.items()],
        "policy_commits": [{"group": g, "policy": p, "commits": n, "last_commit": ts}
                           for (g, p), (n, ts) in policies.items()],
    }
    return {name: sort_rows(table, STATS_TABLES[name]) for name, table in tables.items()}


# --- lag ------------------------------------------------------------------------------------


def topic_batches(data_dir: Path) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """``(max_timestamp, last_offset)`` of every batch of every local topic partition."""
    batches: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for segment in topic_segments(Path(data_dir)):
        found = batches.setdefault((segment.topic, segment.partition), [])
        try:
            headers = read_batch_headers(Path(segment.path))
        except FileNotFoundError:
            continue
        found.extend((header.max_timestamp, header.last_offset) for _, header in headers)
    return batches


def high_watermark(batches: list[tuple[int, int]] | None, at_ms: int) -> int | None:
    """1 + the largest offset in a batch whose timestamp is at or before ``at_ms``.

    0 when no batch is that old; None when the topic partition has no local data.
    """
    if batches is None:
        return None
    return max((last + 1 for ts, last in batches if ts <= at_ms), default=0)


def lag_rows(data_dir: Path, group: str | None = None) -> list[Row]:
    """The ``lag`` job: every commit record with the high watermark at its commit time."""
    batches = topic_batches(data_dir)
    out = []
    for row in read_rows(data_dir, group):
        if row["kind"] != "commit" or row["visible_timestamp"] is None:
            continue
        hw = high_watermark(batches.get((row["topic"], row["partition"])), row["commit_timestamp"])
        out.append({
            "group": row["group"], "topic": row["topic"], "partition": row["partition"],
            "commit_timestamp": row["commit_timestamp"], "offset": row["offset"],
            "high_watermark": hw, "lag": None if hw is None else hw - row["offset"],
        })
    return sort_rows(out, LAG_COLUMNS)


# --- helpers --------------------------------------------------------------------------------


def sort_rows(rows: list[Row], columns: Iterable[str]) -> list[Row]:
    """Rows in a canonical order (None sorts first), for comparing result sets."""
    names = tuple(columns)
    return sorted(rows, key=lambda row: tuple((row[c] is not None, row[c]) for c in names))
