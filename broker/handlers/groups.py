"""Group and offset APIs: thin adapters from requests to the group service."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.group_service import GroupService
from broker.slots import Slot
from protocol.codec import Request


def client_host(peer: str) -> str:
    """Kafka reports a member's host as Java's InetAddress.toString(): "/127.0.0.1"."""
    host = peer.rsplit(":", 1)[0]
    return "/" + host.strip("[]")


def register(router: Any, service: GroupService,
             partition_exists: Callable[[str, int], bool] | None = None) -> None:
    c = service.coordinator

    def join(request: Request, peer: str) -> Slot:
        return service.submit(c.join_group, request, request.header.client_id or "", client_host(peer))

    def commit(request: Request, peer: str) -> Slot:
        return service.submit(c.offset_commit, request, partition_exists)

    def delete_offsets(request: Request, peer: str) -> Slot:
        return service.submit(c.offset_delete, request, partition_exists)

    def plain(method: Callable[..., Any]) -> Callable[[Request, str], Slot]:
        return lambda request, peer: service.submit(method, request)

    router.register(11, join)
    router.register(14, plain(c.sync_group))
    router.register(12, plain(c.heartbeat))
    router.register(13, plain(c.leave_group))
    router.register(8, commit)
    router.register(9, plain(c.offset_fetch))
    router.register(15, plain(c.describe_groups))
    router.register(16, plain(c.list_groups))
    router.register(42, plain(c.delete_groups))
    router.register(47, delete_offsets)
