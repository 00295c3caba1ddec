"""The authorization decision: a pure function of the ACLs, the principal and the action.

Kafka's StandardAuthorizer, rule for rule:

- a super user (``super.users``) may do anything;
- the ACLs considered are those whose pattern applies to the resource (the literal name,
  the literal wildcard ``*``, any prefix) and whose principal is the caller or ``User:*``
  and whose host is the caller's address or ``*``;
- any matching DENY wins over every ALLOW; a DENY names one operation (or ALL);
- an ALLOW for READ, WRITE, DELETE or ALTER implies DESCRIBE, and ALTER_CONFIGS implies
  DESCRIBE_CONFIGS (implication applies to ALLOW only);
- when no ACL at all exists for the resource, ``allow.everyone.if.no.acl.found`` decides.

Decisions are cached per (principal, host, operation, resource) until the ACLs change.
"""

from __future__ import annotations

from collections.abc import Iterable

from security.acl import (
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    bit_field,
)

Op = AclOperation
_IMPLIES_DESCRIBE = frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS})


def _entry_result(binding: AclBinding, principals: tuple[str, str], host: str, op: AclOperation) -> bool | None:
    """True (allow), False (deny) or None (does not apply), as Kafka's findResult."""
    entry = binding.entry
    if entry.principal not in principals:
        return None
    if entry.host != WILDCARD and entry.host != host:
        return None
    if entry.operation is not Op.ALL:
        if entry.permission is AclPermissionType.ALLOW:
            if op is Op.DESCRIBE:
                if entry.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif op is Op.DESCRIBE_CONFIGS:
                if entry.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif entry.operation is not op:
                return None
        elif entry.operation is not op:
            return None
    return entry.permission is AclPermissionType.ALLOW


class Authorizer:
    """Decides over a set of ACL bindings; ``replace`` swaps the set (and drops the cache)."""

    def __init__(self, bindings: Iterable[AclBinding] = (), super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self._by_type: dict[ResourceType, list[AclBinding]] = {}
        self._cache: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}
        self.replace(bindings)

    def replace(self, bindings: Iterable[AclBinding]) -> None:
        by_type: dict[ResourceType, list[AclBinding]] = {}
        for binding in bindings:
            by_type.setdefault(binding.pattern.resource_type, []).append(binding)
        self._by_type = by_type
        self._cache = {}

    def authorize(self, principal: str, host: str, op: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        key = (principal, host, op, resource_type, name)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        if len(self._cache) > 100_000:
            self._cache = {}
        decided = self._cache[key] = self._decide(principal, host, op, resource_type, name)
        return decided

    def _decide(self, principal: str, host: str, op: AclOperation, resource_type: ResourceType,
                name: str) -> bool:
        if principal in self.super_users:
            return True
        principals = (principal, WILDCARD_PRINCIPAL)
        found_any = allowed = False
        for binding in self._by_type.get(resource_type, ()):
            if not binding.pattern.matches_resource(name):
                continue
            found_any = True
            result = _entry_result(binding, principals, host, op)
            if result is False:
                return False
            if result:
                allowed = True
        if allowed:
            return True
        return self.allow_if_no_acl if not found_any else False

    def authorize_by_resource_type(self, principal: str, host: str, op: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """May the principal do ``op`` on at least one resource of this type?

        Kafka's Authorizer.authorizeByResourceType (used by InitProducerId for idempotent
        producers): an ALLOW pattern counts unless a DENY covers it (the same literal, or a
        prefix of it); a literal wildcard DENY denies all.
        """
        if self._decide(principal, host, op, resource_type, "hardcode"):
            return True
        principals = (principal, WILDCARD_PRINCIPAL)
        deny: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allow: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        for binding in self._by_type.get(resource_type, ()):
            entry = binding.entry
            if entry.principal not in principals or entry.host not in (WILDCARD, host):
                continue
            if entry.operation not in (op, Op.ALL):
                continue
            target = allow if entry.permission is AclPermissionType.ALLOW else deny
            target[binding.pattern.pattern_type].add(binding.pattern.name)
        if WILDCARD in deny[PatternType.LITERAL]:
            return False
        if WILDCARD in allow[PatternType.LITERAL]:
            return True
        for pattern_type, names in allow.items():
            for name in names:
                if pattern_type is PatternType.LITERAL and name in deny[PatternType.LITERAL]:
                    continue
                if not any(name[:i] in deny[PatternType.PREFIXED] for i in range(1, len(name) + 1)):
                    return True
        return False

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """The bit field of supported operations allowed on the resource (Kafka's AuthHelper)."""
        return bit_field([op for op in SUPPORTED_OPERATIONS[resource_type]
                          if self.authorize(principal, host, op, resource_type, name)])


def all_operations(resource_type: ResourceType) -> int:
    """The bit field Kafka reports when no authorizer is configured: every supported operation."""
    return bit_field(SUPPORTED_OPERATIONS[resource_type])
