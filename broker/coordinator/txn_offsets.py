"""Offsets committed inside transactions, pending until their marker (Kafka's pendingTransactionalOffsets).

TxnOffsetCommit writes ordinary offset records, but in a transactional batch carrying the
producer id. Replay keeps them here, by producer, invisible to OffsetFetch, until the
producer's marker reaches the group's ``__consumer_offsets`` partition: COMMIT moves them
into the offset store, ABORT drops them. This structure sits beside the compact offset
store (``offset_store``), which it never reshapes; it holds only what is in flight.

"Newer in the log" decides between a committed transaction and plain commits of the same
partition (Kafka's OffsetMetadataManager.replayEndTransactionMarker): a pending offset
becomes the committed one only if no offset for that partition was written after it. The
store keeps no log positions, so this module numbers what it sees in replay order
(replay follows the log, and a group's records all live in one partition): every pending
offset, and every plain commit of a partition that has pending offsets (the only ones
that need comparing). A tombstone drops every pending offset of its partition, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from protocol.consumer_offsets import OffsetValue

Key = tuple[str, str, int]  # group, topic, partition

__all__ = ["Key", "PendingTransactionalOffsets"]


class PendingTransactionalOffsets:
    """Pending offsets by producer id, and which producers have some for each group."""

    __slots__ = ("_by_producer", "_clock", "_committed_at", "_open_by_group")

    def __init__(self) -> None:
        #: producer id -> key -> (value, position of its record).
        self._by_producer: dict[int, dict[Key, tuple[OffsetValue, int]]] = {}
        #: group -> producers with an open transaction that wrote offsets for it.
        self._open_by_group: dict[str, set[int]] = {}
        #: For keys with pending offsets: the position of the value the offset store holds.
        self._committed_at: dict[Key, int] = {}
        self._clock = 0

    # ------------------------------------------------------------------ questions

    def has_pending(self, group: str, topic: str, partition: int) -> bool:
        """Whether any open transaction holds an offset for this partition (UNSTABLE_OFFSET_COMMIT)."""
        producers = self._open_by_group.get(group)
        if not producers:
            return False
        key = (group, topic, partition)
        return any(key in self._by_producer.get(pid, ()) for pid in producers)

    def any_open(self) -> bool:
        """Whether any transaction that wrote offsets is still open (not yet marked)."""
        return bool(self._open_by_group)

    def has_open_transactions(self, group: str) -> bool:
        """Kafka keeps a group while a transaction that wrote offsets for it is open."""
        return group in self._open_by_group

    def group_ids(self) -> list[str]:
        return list(self._open_by_group)

    def producers_of(self, group: str) -> set[int]:
        return set(self._open_by_group.get(group, ()))

    def pending_of(self, group: str) -> Iterator[tuple[int, Key, OffsetValue]]:
        """(producer id, key, value) of every pending offset of ``group``."""
        for pid in sorted(self._open_by_group.get(group, ())):
            for key, (value, _) in self._by_producer.get(pid, {}).items():
                if key[0] == group:
                    yield pid, key, value

    def count(self) -> int:
        return sum(len(offsets) for offsets in self._by_producer.values())

    def snapshot(self) -> dict[int, dict[Key, OffsetValue]]:
        """Pending offsets without positions, for comparing live state with a replay."""
        return {pid: {k: v for k, (v, _) in offsets.items()} for pid, offsets in self._by_producer.items()}

    # ------------------------------------------------------------------ replay

    def put(self, producer_id: int, key: Key, value: OffsetValue) -> None:
        """A TxnOffsetCommit record was replayed."""
        self._clock += 1
        self._by_producer.setdefault(producer_id, {})[key] = (value, self._clock)
        self._open_by_group.setdefault(key[0], set()).add(producer_id)

    def committed(self, group: str, topic: str, partition: int) -> None:
        """A plain offset record was replayed: it is newer than every pending offset of its key.

        The hot path of every commit: one dict lookup unless the group has open transactions.
        """
        if group in self._open_by_group:
            key = (group, topic, partition)
            if self._pending_anywhere(key):
                self._clock += 1
                self._committed_at[key] = self._clock

    def tombstoned(self, key: Key) -> None:
        """A tombstone drops the partition's pending offsets too (Kafka's replay of a null value)."""
        producers = self._open_by_group.get(key[0])
        if not producers:
            return
        for pid in producers:
            offsets = self._by_producer.get(pid)
            if offsets is not None:
                offsets.pop(key, None)
        self._committed_at.pop(key, None)

    def complete(self, producer_id: int, commit: bool, in_partition: Callable[[str], bool],
                 current: Callable[[Key], OffsetValue | None]) -> list[tuple[Key, OffsetValue]]:
        """The producer's marker reached a partition: the offsets COMMIT makes visible there.

        Only groups of that partition (``in_partition``) are settled; the producer's
        pending offsets of other partitions wait for their own markers. A pending offset
        is returned only if it is newer in the log than the value the store holds.
        """
        offsets = self._by_producer.get(producer_id)
        if offsets is None:
            return []
        settled = [key for key in offsets if in_partition(key[0])]
        groups = {key[0] for key in settled}
        groups.update(g for g, producers in self._open_by_group.items() if producer_id in producers
                      and in_partition(g))
        visible: list[tuple[Key, OffsetValue]] = []
        for key in settled:
            value, position = offsets.pop(key)
            if commit and (current(key) is None or position > self._committed_at.get(key, -1)):
                visible.append((key, value))
                if self._pending_anywhere(key):
                    self._committed_at[key] = position
            if not self._pending_anywhere(key):
                self._committed_at.pop(key, None)
        if not offsets:
            del self._by_producer[producer_id]
        for group in groups:
            producers = self._open_by_group.get(group)
            if producers is not None:
                producers.discard(producer_id)
                if not producers:
                    del self._open_by_group[group]
        return visible

    def _pending_anywhere(self, key: Key) -> bool:
        return any(key in self._by_producer.get(pid, ()) for pid in self._open_by_group.get(key[0], ()))
