"""Segment-file storage for kcoord: Kafka's on-disk layout, crash recovery, group commit, compaction.

Blocking file I/O throughout (every file operation through ``storage.fs``), except
``storage.group_commit`` and ``storage.maintenance``, which bridge the trio event loop to it.
Import what you need from its module (``storage.partition``, ``storage.coordinator_log``...);
this package re-exports nothing, so its modules can import each other without a cycle.
"""
