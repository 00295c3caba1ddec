"""ApiVersions, FindCoordinator, DescribeCluster: how a client finds its way around."""

from __future__ import annotations

import re
from typing import Any

from broker.context import BrokerContext
from protocol.api_keys import ApiKey
from protocol.codec import Request
from protocol.errors import ErrorCode
from protocol.schema import Message
from security.acl import ResourceType
from security.authorizer import all_operations

INT32_MIN = -2147483648
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1

# KIP-511: software name and version must look like this, or the request is invalid.
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def api_versions_body(served: dict[int, Message], error: ErrorCode = ErrorCode.NONE) -> dict[str, Any]:
    return {
        "error_code": int(error),
        "api_keys": [
            {"api_key": key, "min_version": m.min_version, "max_version": m.max_version}
            for key, m in sorted(served.items())
        ],
        "throttle_time_ms": 0,
    }


def unsupported_api_versions_body(served: dict[int, Message]) -> dict[str, Any]:
    """The v0 reply to an ApiVersions version we do not serve: our range, so the client steps down."""
    own = served[18]
    return {
        "error_code": int(ErrorCode.UNSUPPORTED_VERSION),
        "api_keys": [{"api_key": 18, "min_version": own.min_version, "max_version": own.max_version}],
    }


def handle_api_versions(
    ctx: BrokerContext, request: Request, served: dict[int, Message]
) -> dict[str, Any]:
    body = request.body
    if request.header.api_version >= 3:
        name = body.client_software_name
        version = body.client_software_version
        if not (_SOFTWARE.fullmatch(name) and _SOFTWARE.fullmatch(version)):
            return {"error_code": int(ErrorCode.INVALID_REQUEST), "api_keys": [], "throttle_time_ms": 0}
    return api_versions_body(served)


def _coordinator(ctx: BrokerContext, key: str, key_type: int) -> dict[str, Any]:
    """A group's coordinator is the leader of its ``__consumer_offsets`` partition, a
    transactional id's the leader of its ``__transaction_state`` partition (this broker
    when it is the whole cluster)."""
    if key_type in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        if key_type == KEY_TYPE_GROUP:
            found = ctx.placement.group_coordinator(key, ctx.listener, ctx.me)
        else:
            found = ctx.placement.transaction_coordinator(key, ctx.listener, ctx.me)
        if found.endpoint is None:
            return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": int(found.error),
                    "error_message": None}
        return {
            "key": key,
            "node_id": found.endpoint.node_id,
            "host": found.endpoint.host,
            "port": found.endpoint.port,
            "error_code": 0,
            "error_message": None,
        }
    message = f"unknown coordinator key type {key_type}"
    return {
        "key": key,
        "node_id": -1,
        "host": "",
        "port": -1,
        "error_code": int(ErrorCode.INVALID_REQUEST),
        "error_message": message,
    }


def handle_find_coordinator(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    key_type = body.get("key_type", KEY_TYPE_GROUP)
    if request.header.api_version >= 4:
        return {
            "throttle_time_ms": 0,
            "coordinators": [_coordinator(ctx, key, key_type) for key in body.coordinator_keys],
        }
    answer = _coordinator(ctx, body.key, key_type)
    del answer["key"]
    answer["throttle_time_ms"] = 0
    return answer


def handle_describe_cluster(ctx: BrokerContext, request: Request, authorizer_enabled: bool) -> dict[str, Any]:
    """KIP-700: this broker, on the listener the client used. A broker serves endpoint type 1."""
    body = request.body
    version = request.header.api_version
    answer: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
                              "cluster_id": ctx.cluster_id, "controller_id": ctx.placement.controller_id(ctx.me),
                              "brokers": [{"broker_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                                          for b in ctx.placement.brokers(ctx.listener, ctx.me)],
                              "cluster_authorized_operations": INT32_MIN}
    endpoint_type = body.get("endpoint_type", 1)
    if endpoint_type != 1:
        if version == 0:
            error = ErrorCode.INVALID_REQUEST
        else:
            error = ErrorCode.MISMATCHED_ENDPOINT_TYPE if endpoint_type == 2 else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        return {**answer, "error_code": int(error), "error_message": f"Unsupported endpoint type {endpoint_type}",
                "cluster_id": "", "controller_id": -1, "brokers": []}
    if body.include_cluster_authorized_operations and not authorizer_enabled:
        # As Kafka without an authorizer: every operation the cluster resource supports.
        answer["cluster_authorized_operations"] = all_operations(ResourceType.CLUSTER)
    return answer


def handle_sasl_outside_sasl(request: Request) -> dict[str, Any]:
    """SaslHandshake or SaslAuthenticate where no SASL exchange is going on (a PLAINTEXT or
    SSL listener, or an already authenticated connection): ILLEGAL_SASL_STATE, as Kafka."""
    error = int(ErrorCode.ILLEGAL_SASL_STATE)
    if request.header.api_key == ApiKey.SASL_HANDSHAKE:
        return {"error_code": error, "mechanisms": []}
    return {"error_code": error, "error_message": "Unexpected SASL request: this connection is not authenticating",
            "auth_bytes": b"", "session_lifetime_ms": 0}
