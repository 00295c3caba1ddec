"""The authorizer decides as Kafka's StandardAuthorizer does."""

from __future__ import annotations

from security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    bit_field,
    validate_new_binding,
)
from security.authorizer import Authorizer, all_operations

Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def acl(rtype: ResourceType, name: str, op: AclOperation, permission: AclPermissionType = ALLOW,
        principal: str = "User:alice", host: str = "*", pattern: PatternType = LITERAL) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, permission))


def test_an_allow_grants_only_its_operation_on_its_resource() -> None:
    authz = Authorizer([acl(TOPIC, "orders", Op.READ)])
    assert authz.authorize("User:alice", "10.0.0.1", Op.READ, TOPIC, "orders")
    assert not authz.authorize("User:alice", "10.0.0.1", Op.WRITE, TOPIC, "orders")
    assert not authz.authorize("User:bob", "10.0.0.1", Op.READ, TOPIC, "orders")
    assert not authz.authorize("User:alice", "10.0.0.1", Op.READ, TOPIC, "payments")


def test_read_write_delete_alter_imply_describe_but_deny_read_does_not_deny_describe() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert Authorizer([acl(TOPIC, "t", op)]).authorize("User:alice", "h", Op.DESCRIBE, TOPIC, "t")
    assert not Authorizer([acl(TOPIC, "t", Op.CREATE)]).authorize("User:alice", "h", Op.DESCRIBE, TOPIC, "t")
    assert Authorizer([acl(TOPIC, "t", Op.ALTER_CONFIGS)]).authorize("User:alice", "h", Op.DESCRIBE_CONFIGS,
                                                                      TOPIC, "t")
    both = Authorizer([acl(TOPIC, "t", Op.DESCRIBE), acl(TOPIC, "t", Op.READ, DENY)])
    assert both.authorize("User:alice", "h", Op.DESCRIBE, TOPIC, "t")
    assert not both.authorize("User:alice", "h", Op.READ, TOPIC, "t")


def test_deny_wins_over_any_allow_including_wildcards_and_prefixes() -> None:
    authz = Authorizer([
        acl(TOPIC, "*", Op.ALL),
        acl(TOPIC, "secret-", Op.READ, DENY, pattern=PREFIXED),
    ])
    assert authz.authorize("User:alice", "h", Op.READ, TOPIC, "public")
    assert not authz.authorize("User:alice", "h", Op.READ, TOPIC, "secret-plans")
    assert authz.authorize("User:alice", "h", Op.WRITE, TOPIC, "secret-plans")
    assert not Authorizer([acl(GROUP, "g", Op.ALL), acl(GROUP, "g", Op.ALL, DENY, principal="User:*")]).authorize(
        "User:alice", "h", Op.READ, GROUP, "g")


def test_prefixed_literal_wildcard_principal_and_host_matching() -> None:
    authz = Authorizer([
        acl(GROUP, "team-", Op.READ, pattern=PREFIXED),
        acl(TOPIC, "t", Op.READ, principal="User:*", host="10.0.0.9"),
    ])
    assert authz.authorize("User:alice", "h", Op.READ, GROUP, "team-a")
    assert not authz.authorize("User:alice", "h", Op.READ, GROUP, "team")
    assert authz.authorize("User:carol", "10.0.0.9", Op.READ, TOPIC, "t")
    assert not authz.authorize("User:carol", "10.0.0.8", Op.READ, TOPIC, "t")


def test_super_users_and_allow_everyone_if_no_acl_found() -> None:
    authz = Authorizer([acl(TOPIC, "t", Op.ALL, DENY, principal="User:*")], super_users=["User:admin"])
    assert authz.authorize("User:admin", "h", Op.READ, TOPIC, "t")
    open_by_default = Authorizer([acl(TOPIC, "guarded", Op.READ)], allow_everyone_if_no_acl_found=True)
    assert open_by_default.authorize("User:bob", "h", Op.READ, TOPIC, "unguarded")
    assert not open_by_default.authorize("User:bob", "h", Op.READ, TOPIC, "guarded")
    assert not Authorizer().authorize("User:bob", "h", Op.READ, TOPIC, "unguarded")


def test_decisions_follow_replaced_acls() -> None:
    authz = Authorizer()
    assert not authz.authorize("User:alice", "h", Op.READ, TOPIC, "t")
    authz.replace([acl(TOPIC, "t", Op.READ)])
    assert authz.authorize("User:alice", "h", Op.READ, TOPIC, "t")


def test_authorize_by_resource_type() -> None:
    assert Authorizer([acl(TOPIC, "x", Op.WRITE)]).authorize_by_resource_type("User:alice", "h", Op.WRITE, TOPIC)
    assert not Authorizer([acl(TOPIC, "x", Op.WRITE), acl(TOPIC, "x", Op.WRITE, DENY)]).authorize_by_resource_type(
        "User:alice", "h", Op.WRITE, TOPIC)
    assert not Authorizer([acl(TOPIC, "abc", Op.WRITE), acl(TOPIC, "a", Op.WRITE, DENY, pattern=PREFIXED)]
                          ).authorize_by_resource_type("User:alice", "h", Op.WRITE, TOPIC)
    assert not Authorizer([acl(TOPIC, "x", Op.READ)]).authorize_by_resource_type("User:alice", "h", Op.WRITE, TOPIC)


def test_authorized_operations_bit_field() -> None:
    authz = Authorizer([acl(GROUP, "g", Op.READ)])
    assert authz.authorized_operations("User:alice", "h", GROUP, "g") == bit_field([Op.READ, Op.DESCRIBE])
    assert all_operations(GROUP) == (1 << 3) | (1 << 6) | (1 << 8)


def test_filters_match_as_kafka_resource_pattern_filters() -> None:
    literal = acl(TOPIC, "orders", Op.READ)
    wildcard = acl(TOPIC, "*", Op.READ)
    prefixed = acl(TOPIC, "ord", Op.READ, pattern=PREFIXED)
    bindings = [literal, wildcard, prefixed, acl(GROUP, "orders", Op.READ)]

    def select(name: str | None, pattern: PatternType, rtype: ResourceType = TOPIC) -> list[AclBinding]:
        f = AclBindingFilter(rtype, name, pattern, None, None, Op.ANY, AclPermissionType.ANY)
        return [b for b in bindings if f.matches(b)]

    assert select("orders", PatternType.MATCH) == [literal, wildcard, prefixed]
    assert select("orders", PatternType.ANY) == [literal]
    assert select("ord", PatternType.PREFIXED) == [prefixed]
    assert select(None, PatternType.ANY) == [literal, wildcard, prefixed]
    assert len(select(None, PatternType.ANY, ResourceType.ANY)) == 4


def test_new_bindings_are_validated() -> None:
    assert validate_new_binding(acl(TOPIC, "t", Op.READ)) is None
    assert validate_new_binding(acl(ResourceType.ANY, "t", Op.READ)) is not None
    assert validate_new_binding(acl(TOPIC, "t", Op.ANY)) is not None
    assert validate_new_binding(acl(TOPIC, "", Op.READ)) is not None
    assert validate_new_binding(acl(TOPIC, "t", Op.READ, principal="alice")) is not None
    assert validate_new_binding(acl(CLUSTER, "other", Op.ALTER)) is not None
