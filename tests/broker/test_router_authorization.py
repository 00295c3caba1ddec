"""The router's authorization step, without sockets: rules run before handlers, replies
that wait are amended when they go out, and an API without a rule is never served."""

from __future__ import annotations

from typing import Any

import pytest

from broker.config import Config
from broker.context import BrokerContext
from broker.router import Authorization, Close, Router, Session
from broker.slots import Slot
from protocol.api_keys import ApiKey
from protocol.codec import decode_response, encode_request, encode_response
from security import access
from security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
)
from security.acl import ResourceType as R
from security.authorizer import Authorizer
from security.gate import NoTopics

CTX = BrokerContext(Config(), 0, "127.0.0.1", 9092, "c")
ALICE = Session("User:alice", "10.0.0.1")


def allow(rtype: R, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, PatternType.LITERAL),
                      AccessControlEntry("User:alice", "*", op, AclPermissionType.ALLOW))


def router(*bindings: AclBinding) -> tuple[Router, list[Any]]:
    denied: list[Any] = []
    auth = Authorization(Authorizer(bindings), NoTopics(), lambda *args: denied.append(args))
    return Router(CTX, authorization=auth), denied


def delete_groups(*names: str) -> bytes:
    return encode_request(ApiKey.DELETE_GROUPS, 2, 7, {"groups_names": list(names)})[4:]


def test_a_refused_request_never_reaches_its_handler() -> None:
    r, denied = router()
    calls: list[Any] = []
    r.register(ApiKey.DELETE_GROUPS, lambda request, peer: calls.append(request) or {})
    reply = r.route(delete_groups("g"), "10.0.0.1:5", ALICE)
    assert isinstance(reply, bytes) and calls == []
    _, body = decode_response(ApiKey.DELETE_GROUPS, 2, reply[4:])
    assert [(x.group_id, x.error_code) for x in body.results] == [("g", 30)]
    assert denied == [("DeleteGroups", "User:alice", "10.0.0.1", [(AclOperation.DELETE, R.GROUP, "g")])]


def test_a_narrowed_request_is_amended_when_its_slot_goes_out() -> None:
    r, _ = router(allow(R.GROUP, "g", AclOperation.DELETE))
    seen: list[list[str]] = []

    def handler(request: Any, peer: str) -> Slot:
        seen.append(list(request.body.groups_names))
        slot = Slot(ApiKey.DELETE_GROUPS, 2, 7)
        slot.fill(encode_response(ApiKey.DELETE_GROUPS, 2, 7, {"throttle_time_ms": 0, "results": [
            {"group_id": "g", "error_code": 0}]}))
        return slot

    r.register(ApiKey.DELETE_GROUPS, handler)
    slot = r.route(delete_groups("g", "h"), "10.0.0.1:5", ALICE)
    assert isinstance(slot, Slot) and slot.amend is not None and seen == [["g"]]
    assert slot.frame is not None
    _, body = decode_response(ApiKey.DELETE_GROUPS, 2, slot.amend(slot.frame)[4:])
    assert [(x.group_id, x.error_code) for x in body.results] == [("g", 0), ("h", 30)]


def test_an_api_without_a_rule_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    r, _ = router(allow(R.GROUP, "g", AclOperation.DELETE))
    r.register(ApiKey.DELETE_GROUPS, lambda request, peer: {"throttle_time_ms": 0, "results": []})
    monkeypatch.delitem(access.RULES, ApiKey.DELETE_GROUPS)
    outcome = r.route(delete_groups("g"), "10.0.0.1:5", ALICE)
    assert isinstance(outcome, Close) and "no authorization rule" in outcome.reason


def test_without_an_authorizer_nothing_is_checked() -> None:
    r = Router(CTX)
    r.register(ApiKey.DELETE_GROUPS, lambda request, peer: {"throttle_time_ms": 0, "results": [
        {"group_id": "g", "error_code": 0}]})
    reply = r.route(delete_groups("g"), "10.0.0.1:5", ALICE)
    assert isinstance(reply, bytes)
    assert decode_response(ApiKey.DELETE_GROUPS, 2, reply[4:])[1].results[0].error_code == 0


def test_a_narrowed_request_answered_at_once_is_amended_before_it_goes_out() -> None:
    """A handler may answer with the reply's frame (a coordinator request answered at
    once): the router amends it there and then, as it would a slot's frame later."""
    r, _ = router(allow(R.GROUP, "g", AclOperation.DELETE))

    def handler(request: Any, peer: str) -> bytes:
        assert list(request.body.groups_names) == ["g"]
        return encode_response(ApiKey.DELETE_GROUPS, 2, 7, {"throttle_time_ms": 0, "results": [
            {"group_id": "g", "error_code": 0}]})

    r.register(ApiKey.DELETE_GROUPS, handler)
    reply = r.route(delete_groups("g", "h"), "10.0.0.1:5", ALICE)
    assert isinstance(reply, bytes)
    _, body = decode_response(ApiKey.DELETE_GROUPS, 2, reply[4:])
    assert [(x.group_id, x.error_code) for x in body.results] == [("g", 0), ("h", 30)]
    assert r.api_stats[ApiKey.DELETE_GROUPS].latency.count == 1
