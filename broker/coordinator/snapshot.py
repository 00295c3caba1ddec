"""The coordinator's state as a snapshot payload, and back: sans-IO.

A snapshot (``storage.coordinator_snapshot``) holds what replaying the log up to its
covered offsets builds, in two sections:

- the latest record of every group key (classic groups, and each record kind of a
  consumer group), in the order those records stand in the log: what a compacted log
  keeps of them, tombstones aside. Loading replays them through the shard's own
  ``replay_bytes``, so groups load exactly as from the log;
- the committed offsets as columns (``OffsetStore.dump``, ``offset_columns``), adopted
  whole by the store, each group taken out of them on first use: that is where a large
  state is, and where replay record by record is slow.

The shell keeps the latest group records as it appends them (``records.encode_all``) and
as it replays them at load (``track_group_record``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from broker.coordinator.shard import GroupCoordinatorShard
from protocol.consumer_offsets import is_offset_key

__all__ = ["payload", "restore", "track_group_record"]

_COUNT = struct.Struct("<I")
_RECORD = struct.Struct("<II")  # key length, value length


def track_group_record(latest: dict[bytes, bytes], key: bytes, value: bytes | None) -> None:
    """Keep ``latest`` the compacted view of the group records: last write per key, in log order."""
    if is_offset_key(key):
        return
    latest.pop(key, None)
    if value is not None:
        latest[key] = value


def payload(shard: GroupCoordinatorShard, group_records: list[tuple[bytes, bytes]],
            groups_per_part: int = 1000) -> Iterator[list[bytes]]:
    """The payload in parts; between parts the caller may let the shard change (see ``OffsetStore.dump``)."""
    part = [_COUNT.pack(len(group_records))]
    for key, value in group_records:
        part += (_RECORD.pack(len(key), len(value)), key, value)
    yield part
    yield from shard.offsets.dump(groups_per_part)


def restore(shard: GroupCoordinatorShard, data: memoryview) -> list[tuple[bytes, bytes]]:
    """Load a payload into a shard that has loaded nothing yet; returns its group records.

    Raises ``ValueError`` (or ``struct.error``, ``UnicodeDecodeError``, the codecs'
    ``ProtocolError``) when the payload is not one this module wrote.
    """
    (count,) = _COUNT.unpack_from(data, 0)
    pos = _COUNT.size
    records: list[tuple[bytes, bytes]] = []
    for _ in range(count):
        key_length, value_length = _RECORD.unpack_from(data, pos)
        pos += _RECORD.size
        key = bytes(data[pos : pos + key_length])
        pos += key_length
        value = bytes(data[pos : pos + value_length])
        pos += value_length
        if len(value) != value_length or is_offset_key(key):
            raise ValueError("group records section is damaged")
        records.append((key, value))
    for key, value in records:
        shard.replay_bytes(key, value)
    end = shard.offsets.restore(data, pos)
    if end != len(data):
        raise ValueError(f"{len(data) - end} bytes after the offsets section")
    return records
