"""The ACL and SCRAM admin APIs as pure functions: a request body and the state in, the
records to write, the reply body and the audit lines out.

Validation and error codes are Kafka's (AclControlManager, ScramControlManager):
CreateAcls refuses a malformed binding with INVALID_REQUEST; AlterUserScramCredentials
answers per user, and any error for a user (empty name, unknown mechanism, iterations
outside 4096-16384, a credential altered twice, deleting one that does not exist) leaves
all of that user's changes unapplied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from protocol.errors import ErrorCode
from security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    enum_or_unknown,
    validate_new_binding,
)
from security.records import Record, acl_record, credential_record, credential_tombstone
from security.scram import (
    MAX_ITERATIONS,
    MECHANISM_CODES,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    credential_from_password,
    credential_from_salted_password,
)
from security.state import SecurityState

E = ErrorCode


@dataclass
class Outcome:
    """What one admin request does: ``records`` to write, then ``body`` to answer."""

    body: dict[str, Any]
    records: list[Record] = field(default_factory=list)
    audit: list[str] = field(default_factory=list)


def _pattern_type(body_item: Any, key: str) -> PatternType:
    return enum_or_unknown(PatternType, body_item.get(key, int(PatternType.LITERAL)))  # type: ignore[return-value]


def binding_of(item: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(enum_or_unknown(ResourceType, item.resource_type),  # type: ignore[arg-type]
                        item.resource_name, _pattern_type(item, "resource_pattern_type")),
        AccessControlEntry(item.principal, item.host,
                           enum_or_unknown(AclOperation, item.operation),  # type: ignore[arg-type]
                           enum_or_unknown(AclPermissionType, item.permission_type)))  # type: ignore[arg-type]


def filter_of(item: Any) -> AclBindingFilter:
    return AclBindingFilter(
        enum_or_unknown(ResourceType, item.resource_type_filter),  # type: ignore[arg-type]
        item.resource_name_filter, _pattern_type(item, "pattern_type_filter"),
        item.principal_filter, item.host_filter,
        enum_or_unknown(AclOperation, item.operation),  # type: ignore[arg-type]
        enum_or_unknown(AclPermissionType, item.permission_type))  # type: ignore[arg-type]


def create_acls(state: SecurityState, body: Any, principal: str) -> Outcome:
    results = []
    out = Outcome({})
    for item in body.creations:
        binding = binding_of(item)
        problem = validate_new_binding(binding)
        if problem is not None:
            results.append({"error_code": int(E.INVALID_REQUEST), "error_message": problem})
            continue
        results.append({"error_code": 0, "error_message": None})
        if binding not in state.acls:
            out.records.append(acl_record(binding))
            out.audit.append(f"ACL added by {principal}: {binding}")
    out.body = {"throttle_time_ms": 0, "results": results}
    return out


def describe_acls(state: SecurityState, body: Any) -> dict[str, Any]:
    selector = filter_of(body)
    problem = selector.invalid()
    if problem is not None:
        return {"throttle_time_ms": 0, "error_code": int(E.INVALID_REQUEST), "error_message": problem,
                "resources": []}
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in sorted(state.acls):
        if selector.matches(binding):
            grouped.setdefault(binding.pattern, []).append(binding.entry)
    return {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None,
        "resources": [
            {"resource_type": int(p.resource_type), "resource_name": p.name, "pattern_type": int(p.pattern_type),
             "acls": [{"principal": e.principal, "host": e.host, "operation": int(e.operation),
                       "permission_type": int(e.permission)} for e in entries]}
            for p, entries in grouped.items()
        ],
    }


def delete_acls(state: SecurityState, body: Any, principal: str) -> Outcome:
    out = Outcome({})
    removed: set[AclBinding] = set()
    results = []
    for item in body.filters:
        selector = filter_of(item)
        problem = selector.invalid()
        if problem is not None:
            results.append({"error_code": int(E.INVALID_REQUEST), "error_message": problem, "matching_acls": []})
            continue
        matching = [b for b in sorted(state.acls) if selector.matches(b)]
        for binding in matching:
            if binding not in removed:
                removed.add(binding)
                out.records.append(acl_record(binding, present=False))
                out.audit.append(f"ACL removed by {principal}: {binding}")
        results.append({"error_code": 0, "error_message": None, "matching_acls": [
            {"error_code": 0, "error_message": None, "resource_type": int(b.pattern.resource_type),
             "resource_name": b.pattern.name, "pattern_type": int(b.pattern.pattern_type),
             "principal": b.entry.principal, "host": b.entry.host, "operation": int(b.entry.operation),
             "permission_type": int(b.entry.permission)} for b in matching]})
    out.body = {"throttle_time_ms": 0, "filter_results": results}
    return out


def describe_user_scram_credentials(state: SecurityState, body: Any) -> dict[str, Any]:
    users = body.users
    names = sorted(state.credentials) if not users else [u.name for u in users]
    results: list[dict[str, Any]] = []
    for name in dict.fromkeys(names):
        if names.count(name) > 1:
            results.append({"user": name, "error_code": int(E.DUPLICATE_RESOURCE),
                            "error_message": "Cannot describe SCRAM credentials for the same user twice in a "
                                             "single request", "credential_infos": []})
            continue
        credentials = state.credentials.get(name)
        if not credentials:
            results.append({"user": name, "error_code": int(E.RESOURCE_NOT_FOUND),
                            "error_message": "Attempt to describe a user credential that does not exist",
                            "credential_infos": []})
            continue
        results.append({"user": name, "error_code": 0, "error_message": None, "credential_infos": [
            {"mechanism": MECHANISM_CODES[mech], "iterations": cred.iterations}
            for mech, cred in sorted(credentials.items())]})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}


def alter_user_scram_credentials(state: SecurityState, body: Any, principal: str) -> Outcome:
    out = Outcome({})
    changes: dict[str, list[tuple[str, Any]]] = {}  # user -> [(kind, item)]
    for item in body.deletions:
        changes.setdefault(item.name, []).append(("delete", item))
    for item in body.upsertions:
        changes.setdefault(item.name, []).append(("upsert", item))
    results = []
    for user, items in changes.items():
        error, message = _scram_error(state, user, items)
        results.append({"user": user, "error_code": int(error), "error_message": message})
        if error is not E.NONE:
            continue
        for kind, item in items:
            mechanism = MECHANISM_NAMES[item.mechanism]
            if kind == "delete":
                out.records.append(credential_tombstone(user, mechanism))
                out.audit.append(f"SCRAM credential deleted by {principal}: user={user} mechanism={mechanism}")
            else:
                credential = credential_from_salted_password(mechanism, bytes(item.salt), bytes(item.salted_password),
                                                             item.iterations)
                out.records.append(credential_record(user, credential))
                out.audit.append(f"SCRAM credential set by {principal}: user={user} mechanism={mechanism} "
                                 f"iterations={item.iterations}")
    out.body = {"throttle_time_ms": 0, "results": results}
    return out


def _scram_error(state: SecurityState, user: str, items: list[tuple[str, Any]]) -> tuple[ErrorCode, str | None]:
    if not user:
        return E.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    seen: set[int] = set()
    for kind, item in items:
        if item.mechanism not in MECHANISM_NAMES:
            return E.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
        if item.mechanism in seen:
            return E.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"
        seen.add(item.mechanism)
        if kind == "delete":
            if state.credential(user, MECHANISM_NAMES[item.mechanism]) is None:
                return E.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
            continue
        if item.iterations < MIN_ITERATIONS:
            return E.UNACCEPTABLE_CREDENTIAL, f"Too few iterations (minimum {MIN_ITERATIONS})"
        if item.iterations > MAX_ITERATIONS:
            return E.UNACCEPTABLE_CREDENTIAL, f"Too many iterations (maximum {MAX_ITERATIONS})"
        if not item.salt or not item.salted_password:
            return E.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return E.NONE, None


def bootstrap_credentials(state: SecurityState, text: str) -> tuple[list[Record], list[str]]:
    """Records for each ``MECHANISM=[name=USER,password=PASSWORD]`` line whose user lacks that
    credential (kafka-storage's --add-scram syntax; ``iterations=N`` may follow)."""
    records: list[Record] = []
    users: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        mechanism, sep, rest = line.partition("=")
        mechanism = mechanism.strip()
        if not sep or mechanism not in MECHANISM_CODES or not (rest.startswith("[") and rest.endswith("]")):
            raise ValueError(f"line {number}: expected SCRAM-SHA-256|SCRAM-SHA-512=[name=...,password=...]")
        fields: dict[str, str] = {}
        for part in rest[1:-1].split(","):
            key, eq, value = part.partition("=")
            if not eq:
                raise ValueError(f"line {number}: {part!r} is not key=value")
            fields[key.strip()] = value.strip().strip('"')
        name, password = fields.get("name"), fields.get("password")
        if not name or not password:
            raise ValueError(f"line {number}: name and password are required")
        iterations = int(fields.get("iterations", MIN_ITERATIONS))
        if state.credential(name, mechanism) is None:
            records.append(credential_record(name, credential_from_password(mechanism, password, iterations)))
            users.append(f"{name} ({mechanism})")
    return records, users
