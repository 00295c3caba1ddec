"""How kcoord marks the offset commits it makes itself: the commit's metadata is ``kcoord:<policy>``.

The broker commits offsets for a group when one of its reset policies applies
(docs/coordinator-rules.md#policy-commits): ``nearest``, ``earliest_on_start``,
``latest_on_start``, and ``new_partitions`` for the partition-expansion guard. The records
are ordinary OffsetCommit values, so Kafka's tools read them; the metadata string (which
OffsetFetch returns to clients, and which clients overwrite with their next commit) says why
the offset moved. The coordinator writes the marker; ``kcoord groups describe`` and the
pipeline read it back.
"""

from __future__ import annotations

__all__ = ["POLICY_PREFIX", "marker", "policy_of"]

POLICY_PREFIX = "kcoord:"


def marker(policy: str) -> str:
    """The metadata of a commit made by ``policy``."""
    return POLICY_PREFIX + policy


def policy_of(metadata: str | None) -> str | None:
    """The policy a commit's metadata names (``nearest``...), or None for a client's own commit."""
    if metadata and metadata.startswith(POLICY_PREFIX) and len(metadata) > len(POLICY_PREFIX):
        return metadata[len(POLICY_PREFIX):]
    return None
