"""What a coordinator log's journal file (``storage.wal``) holds, read the way recovery reads it."""

from __future__ import annotations

from pathlib import Path

from storage.fs import REAL_FS
from storage.layout import journal_file
from storage.wal import WriteAheadJournal


def journal_entries(root: Path) -> list[tuple[int, bytes]]:
    """``(partition, batch)`` of every entry of the current generation in ``root``'s journal."""
    journal = WriteAheadJournal(REAL_FS, journal_file(root))
    got: list[tuple[int, bytes]] = []
    try:
        journal.read(lambda partition, batch: got.append((partition, bytes(batch))))
        return got
    finally:
        journal.close()
