"""ACLs as Kafka models them: resource patterns, access entries, bindings and filters.

The enum values are Kafka's wire codes (``ResourceType``, ``PatternType``, ``AclOperation``,
``AclPermissionType``). Matching follows Kafka's ``ResourcePatternFilter`` and
``AccessControlEntryFilter``: ANY matches anything of its kind, MATCH matches every
pattern that would apply to the named resource (the literal name, the literal wildcard
``*`` and every prefix).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


Op = AclOperation

#: The operations an ACL on each resource type can grant (Kafka's AclEntry.supportedOperations);
#: the authorized-operations bit fields of DescribeGroups, Metadata and DescribeCluster list these.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                         Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                           Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    ResourceType.DELEGATION_TOKEN: (Op.DESCRIBE,),
    ResourceType.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}


def bit_field(operations: list[AclOperation] | tuple[AclOperation, ...]) -> int:
    """Kafka's Utils.to32BitField: bit ``op`` set for each operation."""
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def matches_resource(self, name: str) -> bool:
        """Does this pattern apply to the resource called ``name``?"""
        if self.pattern_type is PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return False


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    principal: str  # "User:alice", or the wildcard "User:*"
    host: str  # an address, or "*"
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        p, e = self.pattern, self.entry
        return (f"(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
                f"permission={e.permission.name}) on {p.resource_type.name}:{p.pattern_type.name}:{p.name}")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select; None matches any name, principal or host."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType

    def matches(self, binding: AclBinding) -> bool:
        pattern, entry = binding.pattern, binding.entry
        if self.resource_type is not ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is not None:
            if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
                if self.name != pattern.name:
                    return False
            elif not pattern.matches_resource(self.name):
                return False
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation != entry.operation:
            return False
        return self.permission is AclPermissionType.ANY or self.permission == entry.permission

    def invalid(self) -> str | None:
        """Why Kafka would refuse this filter (UNKNOWN values), else None."""
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value == 0:
                return f"filter has an UNKNOWN {type(value).__name__}"
        return None


def validate_new_binding(binding: AclBinding) -> str | None:
    """Why CreateAcls refuses this binding (INVALID_REQUEST), as Kafka's AclControlManager; else None."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {pattern.resource_type.name}"
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {pattern.pattern_type.name}"
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {entry.operation.name}"
    if entry.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {entry.permission.name}"
    if not pattern.name:
        return "Resource name should not be empty"
    kind, sep, name = entry.principal.partition(":")
    if not sep or not kind or not name:
        return f"Could not parse principal from `{entry.principal}` (no colon is present)."
    if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    return None


def enum_or_unknown(kind: type[IntEnum], code: int) -> IntEnum:
    """A wire code as its enum member; codes Kafka does not define read as UNKNOWN (0)."""
    try:
        return kind(code)
    except ValueError:
        return kind(0)
