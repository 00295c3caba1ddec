"""Group and offset APIs: every one goes to the group service, which goes to the coordinator."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from broker.coordinator.api import BINDINGS, CHECKED_ELSEWHERE, CONSUMER_PROTOCOL_APIS
from broker.coordinator.requests import ClientInfo
from broker.group_service import GroupService
from broker.slots import Slot
from protocol.codec import Request


def client_host(peer: str) -> str:
    """Kafka reports a member's host as Java's InetAddress.toString(): "/127.0.0.1"."""
    host = peer.rsplit(":", 1)[0]
    return "/" + host.strip("[]")


@lru_cache(maxsize=4096)
def client_info(client_id: str | None, peer: str) -> ClientInfo:
    return ClientInfo(client_id or "", client_host(peer))


def register(router: Any, service: GroupService) -> None:
    def submit(request: Request, peer: str) -> Slot | bytes:
        return service.submit(request, client_info(request.header.client_id, peer))

    consumer_protocol = "consumer" in service.coordinator.config.rebalance_protocols
    for api_key in BINDINGS:
        if (api_key in CONSUMER_PROTOCOL_APIS and not consumer_protocol) or api_key in CHECKED_ELSEWHERE:
            continue
        router.register(api_key, submit, BINDINGS[api_key].read)
