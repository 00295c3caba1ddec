"""Credentials and ACLs as log records: the one place their bytes are written and read.

Each change is one record whose key names what it is about; the last record per key
wins and a null value (a tombstone) removes it, so the log compacts like any
Kafka-compacted topic and replays to the current state.

- ``["scram", user, mechanism]`` -> ``{"salt", "stored_key", "server_key", "iterations"}``
  (base64; the password itself is never written);
- ``["acl", resource_type, pattern_type, name, principal, host, operation, permission]``
  -> ``{}`` while the binding exists.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from security.scram import ScramCredential

Record = tuple[bytes, bytes | None]


class BadRecord(ValueError):
    """A record this version cannot read (a corrupt or foreign log)."""


@dataclass(frozen=True, slots=True)
class CredentialKey:
    user: str
    mechanism: str


def _key(parts: list[Any]) -> bytes:
    return json.dumps(parts, separators=(",", ":")).encode()


def credential_record(user: str, credential: ScramCredential) -> Record:
    value = {
        "salt": base64.b64encode(credential.salt).decode(),
        "stored_key": base64.b64encode(credential.stored_key).decode(),
        "server_key": base64.b64encode(credential.server_key).decode(),
        "iterations": credential.iterations,
    }
    return _key(["scram", user, credential.mechanism]), json.dumps(value, separators=(",", ":")).encode()


def credential_tombstone(user: str, mechanism: str) -> Record:
    return _key(["scram", user, mechanism]), None


def acl_record(binding: AclBinding, present: bool = True) -> Record:
    p, e = binding.pattern, binding.entry
    key = _key(["acl", int(p.resource_type), int(p.pattern_type), p.name, e.principal, e.host,
                int(e.operation), int(e.permission)])
    return key, (b"{}" if present else None)


def decode(key: bytes, value: bytes | None) -> tuple[CredentialKey, ScramCredential | None] | tuple[
        AclBinding, bool]:
    """``(CredentialKey, credential or None)`` or ``(AclBinding, present)``."""
    try:
        parts = json.loads(key)
        kind = parts[0]
        if kind == "scram":
            user, mechanism = str(parts[1]), str(parts[2])
            if value is None:
                return CredentialKey(user, mechanism), None
            fields = json.loads(value)
            return CredentialKey(user, mechanism), ScramCredential(
                mechanism, base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                base64.b64decode(fields["server_key"]), int(fields["iterations"]))
        if kind == "acl":
            rtype, ptype, name, principal, host, op, perm = parts[1:8]
            binding = AclBinding(
                ResourcePattern(ResourceType(rtype), str(name), PatternType(ptype)),
                AccessControlEntry(str(principal), str(host), AclOperation(op), AclPermissionType(perm)))
            return binding, value is not None
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise BadRecord(f"unreadable security record: {exc}") from None
    raise BadRecord(f"unknown security record kind {kind!r}")
