"""What an authorization rule may ask, and what it may decide.

A ``Gate`` is one request's view of the authorizer: the caller's principal and address,
the topics (to resolve topic ids and to know whether a topic exists), and a record of
what was denied (for the audit log and the denial metrics). Checks that Kafka makes with
``logIfDenied = false`` (the silent filters of ListGroups and Metadata) pass ``quiet``.

A rule decides one of:

- ``None``: the request goes to its handler unchanged;
- ``Refuse(body)``: the handler never runs; ``body`` is the reply;
- ``Narrow(body, amend)``: the handler runs on ``body`` (the request without what was
  denied), and ``amend`` turns its reply body into the one sent (denied items added back
  with their error, silent filtering, authorized-operation bit fields);
- ``Drop(reason)``: the connection closes (a denied acks=0 Produce, as Kafka does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from construct import Container

from protocol.messages import RESPONSES
from protocol.schema import Array, Message, Struct, default_struct
from security.acl import AclOperation, ResourceType
from security.authorizer import Authorizer

Body = Any


class TopicDirectory(Protocol):
    """The topics as the rules need them."""

    def topic_exists(self, name: str) -> bool: ...

    def topic_name(self, topic_id: Any) -> str | None: ...


class NoTopics:
    def topic_exists(self, name: str) -> bool:
        return False

    def topic_name(self, topic_id: Any) -> str | None:
        return None


@dataclass(frozen=True, slots=True)
class Refuse:
    body: Any


@dataclass(frozen=True, slots=True)
class Narrow:
    body: Body
    amend: Callable[[Body], Body] | None = None


@dataclass(frozen=True, slots=True)
class Drop:
    reason: str


Decision = Refuse | Narrow | Drop | None


class Gate:
    __slots__ = ("authorizer", "auto_create", "denied", "host", "principal", "topics")

    def __init__(self, authorizer: Authorizer, principal: str, host: str, topics: TopicDirectory,
                 auto_create: bool = True) -> None:
        self.authorizer = authorizer
        self.principal = principal
        self.host = host
        self.topics = topics
        self.auto_create = auto_create
        self.denied: list[tuple[AclOperation, ResourceType, str]] = []

    def allowed(self, op: AclOperation, resource_type: ResourceType, name: str, *, quiet: bool = False) -> bool:
        ok = self.authorizer.authorize(self.principal, self.host, op, resource_type, name)
        if not ok and not quiet:
            self.denied.append((op, resource_type, name))
        return ok

    def allowed_on_any(self, op: AclOperation, resource_type: ResourceType) -> bool:
        return self.authorizer.authorize_by_resource_type(self.principal, self.host, op, resource_type)

    def operations(self, resource_type: ResourceType, name: str) -> int:
        return self.authorizer.authorized_operations(self.principal, self.host, resource_type, name)


# ---------------------------------------------------------------------- reply bodies


def _struct_at(message: Message, path: tuple[str, ...]) -> tuple[Any, ...] | None:
    fields = message.fields
    for name in path:
        field = next((f for f in fields if f.name == name), None)
        if field is None:
            return None
        kind = field.type.of if isinstance(field.type, Array) else field.type
        if not isinstance(kind, Struct):
            return None
        fields = kind.fields
    return fields


def reply(api_key: int, version: int, *path: str, **values: Any) -> Container:
    """A response body (or, with ``path``, one nested item) at ``version``: every field at
    its default, then ``values``. Without a declaration for the API, just ``values``."""
    message = RESPONSES.get(api_key)
    out = Container()
    if message is not None:
        fields = message.fields if not path else _struct_at(message, path)
        if fields is not None:
            out = default_struct(tuple(fields), version)
    out.update(values)
    return out


def copy_with(body: Body, **changes: Any) -> Container:
    """A shallow copy of a decoded body with some fields replaced."""
    out = Container(body)
    out.update(changes)
    return out
