"""Numbered appends over a set of logs, and the blocking sync that makes a prefix durable.

Group commit (``storage.group_commit``) needs two numbers: how many appends were made
(``written_seq``) and how many of them are known durable (``durable_seq``). A ``Journal``
keeps both for any set of logs that can ``flush()`` (fsync what they wrote): the coordinator
log's partitions, or the topic partitions of the data path. ``mark`` is called after each
append and is cheap; ``sync`` runs in a worker thread, fsyncs every log marked since the
last sync, and reports the sequence number that is now durable.

Thread safety: ``mark`` from the event loop and ``sync`` from a worker thread may overlap.
The target sequence number and the dirty set are taken together, under the lock, before
any fsync, so an append that races with a sync is simply left for the next one. Syncs run
one at a time, so a sync that finds nothing dirty cannot report a number that an earlier,
still running sync has not made durable yet.
"""

from __future__ import annotations

import threading
from typing import Protocol

__all__ = ["Flushable", "Journal"]


class Flushable(Protocol):
    def flush(self) -> None:
        """fsync everything written so far (blocking); ValueError once closed."""

    @property
    def closed(self) -> bool: ...


class Journal:
    """Sequence numbers for appends to a set of ``Flushable`` logs, and their sync."""

    __slots__ = ("_dirty", "_durable", "_lock", "_sync_lock", "_written")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._dirty: dict[Flushable, None] = {}  # a set that keeps the order logs were written in
        self._written = 0
        self._durable = 0

    @property
    def written_seq(self) -> int:
        """Number of appends so far; ``sync`` makes a prefix of them durable."""
        return self._written

    @property
    def durable_seq(self) -> int:
        """Every append numbered up to this one is fsynced."""
        return self._durable

    def mark(self, log: Flushable) -> int:
        """Record one append to ``log`` (already written); returns its sequence number."""
        with self._lock:
            self._dirty[log] = None
            self._written += 1
            return self._written

    def sync(self) -> int:
        """fsync every log marked since the last sync; returns the durable sequence number.

        If a flush fails, the logs stay marked and the error propagates: nothing after the
        last successful sync may be called durable (and the broker stops on it).
        """
        with self._sync_lock:
            with self._lock:
                target = self._written
                dirty = list(self._dirty)
                self._dirty.clear()
            try:
                for log in dirty:
                    try:
                        log.flush()
                    except ValueError:
                        if not log.closed:
                            raise
                        # Closed since it was written (its topic was deleted): nothing to sync.
            except BaseException:
                with self._lock:
                    for log in dirty:
                        self._dirty[log] = None
                raise
            if target > self._durable:
                self._durable = target
            return self._durable
