"""Administrative changes to committed offsets and groups, logged with who, what, before and after.

Offset resets, imports and restores arrive as administrative OffsetCommits (no member,
generation -1, as ``kafka-consumer-groups`` and ``kcoord offsets`` send them); offsets
are removed with OffsetDelete and groups with DeleteGroups. Each one that changes
something gets one INFO line on the ``kcoord.admin`` logger naming the client (host and
client id), the group, and every partition's offset before and after, e.g.::

    admin: /10.0.0.7 (client kcoord-admin) committed offsets of group billing: orders-0 17 -> 0, orders-1 - -> 0

The snapshot is taken from the coordinator's offset store just before the request is
handled and compared just after (handlers apply their records at once), so a partition
the coordinator refused does not appear. Commits by members of a group are consumers at
work, not administration, and are not logged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from broker.coordinator.offset_store import OffsetStore
from broker.coordinator.requests import ClientInfo, OffsetCommitRequest
from protocol.api_keys import ApiKey
from protocol.codec import Request

log = logging.getLogger("kcoord.admin")

TopicPartition = tuple[str, int]
AUDITED = frozenset({ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_DELETE, ApiKey.DELETE_GROUPS})
#: Partitions named in one line before the rest are only counted.
SHOWN = 20


@dataclass
class Snapshot:
    """The offsets a request may change, as they were before it ran."""

    api_key: int
    groups: dict[str, dict[TopicPartition, int]]


def snapshot(api_key: int, request: Request, typed: Any, offsets: OffsetStore) -> Snapshot | None:
    """What an administrative request may change; None for anything else (a member's commit).

    ``typed``: the request as the coordinator takes it (an OffsetCommit is read from it, not
    from the generic body, which an OffsetCommit read straight from its frame does not decode).
    None too when the ``kcoord.admin`` logger would drop the INFO line anyway.
    """
    if not log.isEnabledFor(logging.INFO):
        return None
    if api_key == ApiKey.OFFSET_COMMIT:
        commit: OffsetCommitRequest = typed
        if commit.member_id or commit.generation_id_or_member_epoch >= 0:
            return None
        wanted = [(t.name, p.partition) for t in commit.topics for p in t.partitions]
        return Snapshot(api_key, {commit.group_id: _offsets(offsets, commit.group_id, wanted)})
    body = request.body
    if api_key == ApiKey.OFFSET_DELETE:
        wanted = [(t.name, int(p.partition_index)) for t in body.topics for p in t.partitions]
        return Snapshot(api_key, {body.group_id: _offsets(offsets, body.group_id, wanted)})
    if api_key == ApiKey.DELETE_GROUPS:
        return Snapshot(api_key, {group: {tp: value.offset for tp, value in offsets.items_of(group)}
                                  for group in body.groups_names})
    return None


def log_changes(before: Snapshot, offsets: OffsetStore, groups: Any, client: ClientInfo) -> None:
    """One INFO line per group the request changed."""
    who = f"{client.client_host or '-'} (client {client.client_id or '-'})"
    for group, old in before.groups.items():
        if before.api_key == ApiKey.DELETE_GROUPS:
            if group not in groups and not offsets.has_group(group):
                log.info("admin: %s deleted group %s with %d committed offset%s%s", who, group, len(old),
                         "" if len(old) == 1 else "s", (": " + _listed(old.items())) if old else "")
            continue
        new = _offsets(offsets, group, list(old))
        changed = [(tp, old.get(tp), new.get(tp)) for tp in old if old.get(tp) != new.get(tp)]
        if not changed:
            continue
        verb = "committed offsets of" if before.api_key == ApiKey.OFFSET_COMMIT else "deleted offsets of"
        shown = ", ".join(f"{t}-{p} {_value(a)} -> {_value(b)}" for (t, p), a, b in sorted(changed)[:SHOWN])
        more = f" and {len(changed) - SHOWN} more" if len(changed) > SHOWN else ""
        log.info("admin: %s %s group %s: %s%s", who, verb, group, shown, more)


def _offsets(offsets: OffsetStore, group: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    offset_of = offsets.offset_of
    return {(topic, partition): offset_of(group, topic, partition) for topic, partition in partitions}


def _value(offset: int | None) -> str:
    return "-" if offset is None or offset < 0 else str(offset)


def _listed(items: Iterable[tuple[TopicPartition, int]]) -> str:
    ordered = sorted(items)
    text = ", ".join(f"{t}-{p}={o}" for (t, p), o in ordered[:SHOWN])
    return text + (f" and {len(ordered) - SHOWN} more" if len(ordered) > SHOWN else "")
