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

A sync can also be split, for logs whose fsync is run elsewhere (``storage.aio``):
``start_sync`` takes the target and the dirty logs and holds the sync lock, the caller
writes and fsyncs them, and ``finish_sync`` records the outcome and lets the next sync run.
A blocking ``sync`` meanwhile (in a worker thread) waits for ``finish_sync``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = ["Flushable", "Journal", "PendingSync"]


class Flushable(Protocol):
    def flush(self) -> None:
        """fsync everything written so far (blocking); ValueError once closed."""

    @property
    def closed(self) -> bool: ...


@dataclass(slots=True)
class PendingSync:
    """A split sync under way (``CoordinatorLog.sync_start``): everything numbered up to
    ``target`` is written, and durable once each of ``fds`` (the files at ``paths``) is
    fdatasynced."""

    target: int
    dirty: list[Flushable]
    fds: list[int]
    paths: list[Path]


class Journal:
    """Sequence numbers for appends to a set of ``Flushable`` logs, and their sync."""

    __slots__ = ("_dirty", "_durable", "_lock", "_split_thread", "_sync_lock", "_written")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._dirty: dict[Flushable, None] = {}  # a set that keeps the order logs were written in
        self._written = 0
        self._durable = 0
        self._split_thread: int | None = None  # the thread between start_sync and finish_sync

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

    def start_sync(self) -> tuple[int, list[Flushable]] | None:
        """The first half of a split sync: the target number and the logs to fsync for it,
        with the sync lock held until ``finish_sync``. None if a ``sync`` is running."""
        if not self._sync_lock.acquire(blocking=False):
            return None
        self._split_thread = threading.get_ident()
        with self._lock:
            target = self._written
            dirty = list(self._dirty)
            self._dirty.clear()
        return target, dirty

    def finish_sync(self, target: int, dirty: list[Flushable], synced: bool) -> int:
        """The second half: every log of ``start_sync`` was fsynced (``synced``), or not (they
        stay marked); returns the durable number. Releases the sync lock."""
        try:
            if synced:
                if target > self._durable:
                    self._durable = target
            else:
                with self._lock:
                    for log in dirty:
                        self._dirty[log] = None
        finally:
            self._split_thread = None
            self._sync_lock.release()
        return self._durable

    def sync(self) -> int:
        """fsync every log marked since the last sync; returns the durable sequence number.

        If a flush fails, the logs stay marked and the error propagates: nothing after the
        last successful sync may be called durable (and the broker stops on it).
        ``RuntimeError`` on the thread that holds a split sync: it would wait for itself.
        """
        if self._split_thread == threading.get_ident():
            raise RuntimeError("a blocking sync on the thread holding a split one would never end")
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
