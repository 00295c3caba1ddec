"""``kcoord acls`` and ``kcoord users``: ACLs and SCRAM users over the Kafka protocol.

Modelled on ``kafka-acls.sh`` and ``kafka-configs.sh --entity-type users``; both speak
CreateAcls/DescribeAcls/DeleteAcls and Describe/AlterUserScramCredentials, so they work
against kcoord and Apache Kafka alike. Passwords are salted here (the broker receives only
the salted password, KIP-554). ``kcoord users add --data-dir DIR`` writes a user straight
into a stopped broker's data directory, to bootstrap the first super user.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path
from typing import Any

from admin.client import AdminClient
from admin.errors import EXIT_OK, AdminError, BrokerError, UsageError
from admin.render import table, to_json
from admin.security import client_security
from protocol.errors import ErrorCode
from security.acl import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from security.scram import MAX_ITERATIONS, MECHANISM_CODES, MECHANISM_NAMES, MIN_ITERATIONS, salted_password

CREATE_ACLS, DESCRIBE_ACLS, DELETE_ACLS = 30, 29, 31
DESCRIBE_SCRAM, ALTER_SCRAM = 50, 51

_OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation
               if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}


def _operation(text: str) -> AclOperation:
    op = _OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
    if op is None:
        raise argparse.ArgumentTypeError(f"unknown operation {text!r}; one of "
                                         + ", ".join(o.name.title().replace("_", "") for o in _OPERATIONS.values()))
    return op


def _mechanism(text: str) -> str:
    if text.upper() not in MECHANISM_CODES:
        raise argparse.ArgumentTypeError(f"{text!r} is not SCRAM-SHA-256 or SCRAM-SHA-512")
    return text.upper()


def _iterations(text: str) -> int:
    if not text.isdigit() or not MIN_ITERATIONS <= int(text) <= MAX_ITERATIONS:
        raise argparse.ArgumentTypeError(f"iterations must be {MIN_ITERATIONS}-{MAX_ITERATIONS}")
    return int(text)


def register(sub: Any, common: argparse.ArgumentParser, epilog: str, formatter: Any) -> None:
    """Add ``acls`` and ``users`` to the ``kcoord`` parser (``common``: the connection options)."""
    acls = sub.add_parser("acls", help="add, list and remove ACLs",
                          description="ACLs on any Kafka broker with an authorizer (kafka-acls.sh).")
    asub = acls.add_subparsers(dest="acls_command", required=True, metavar="COMMAND")
    for name, help_text in (("add", "add ACLs"), ("list", "list ACLs (all, or those on a resource)"),
                            ("remove", "remove ACLs")):
        p = asub.add_parser(name, parents=[common], epilog=epilog, formatter_class=formatter, help=help_text,
                            description=help_text[0].upper() + help_text[1:] + ".")
        resource = p.add_argument_group("resource")
        resource.add_argument("--topic", action="append", default=[], help="a topic (repeatable; '*' for all)")
        resource.add_argument("--group", action="append", default=[], help="a consumer group (repeatable)")
        resource.add_argument("--transactional-id", action="append", default=[], help="a transactional id")
        resource.add_argument("--cluster", action="store_true", help="the cluster")
        resource.add_argument("--resource-pattern-type", default="literal" if name == "add" else None,
                              choices=("literal", "prefixed") + (("any", "match") if name != "add" else ()),
                              help="literal (default for add), prefixed; list/remove also any, match")
        who = p.add_argument_group("principals and hosts")
        if name == "list":
            who.add_argument("--principal", help="only ACLs of this principal (User:name)")
        else:
            who.add_argument("--allow-principal", action="append", default=[], help="User:name to allow")
            who.add_argument("--deny-principal", action="append", default=[], help="User:name to deny")
            who.add_argument("--allow-host", action="append", default=[], help="allowed host (default *)")
            who.add_argument("--deny-host", action="append", default=[], help="denied host (default *)")
            who.add_argument("--operation", action="append", type=_operation, default=[],
                             help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                                  "AlterConfigs, IdempotentWrite, All (repeatable)")
            who.add_argument("--consumer", action="store_true",
                             help="shortcut: Read and Describe on the topics, Read on the groups")
            who.add_argument("--producer", action="store_true",
                             help="shortcut: Write, Describe and Create on the topics (IdempotentWrite on the cluster "
                                  "with --idempotent)")
            who.add_argument("--idempotent", action="store_true", help="with --producer")
        if name == "remove":
            p.add_argument("--force", action="store_true", help="accepted for kafka-acls.sh compatibility")
        p.set_defaults(func=_command({"add": acls_add, "list": acls_list, "remove": acls_remove}[name]))

    users = sub.add_parser("users", help="add, list and remove SCRAM users",
                           description="SCRAM credentials on any Kafka broker (kafka-configs.sh --entity-type users).")
    usub = users.add_subparsers(dest="users_command", required=True, metavar="COMMAND")
    p = usub.add_parser("add", parents=[common], epilog=epilog, formatter_class=formatter,
                        help="add a user or change its password",
                        description="Set a user's SCRAM credential (the password is salted here). With --data-dir, "
                                    "write it into a stopped broker's data directory instead.")
    p.add_argument("user")
    p.add_argument("--mechanism", action="append", type=_mechanism, default=[],
                   help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default SCRAM-SHA-512)")
    p.add_argument("--iterations", type=_iterations, default=MIN_ITERATIONS,
                   help=f"{MIN_ITERATIONS}-{MAX_ITERATIONS} (default {MIN_ITERATIONS})")
    p.add_argument("--password", help="the password (visible to other local users; prefer --password-file or "
                                      "the prompt)")
    p.add_argument("--password-file", type=Path, help="read the password from the first line of this file")
    p.add_argument("--data-dir", type=Path, help="a stopped broker's data directory: bootstrap the user offline")
    p.set_defaults(func=users_add)
    p = usub.add_parser("list", parents=[common], epilog=epilog, formatter_class=formatter,
                        help="list users and their mechanisms", description="Users with SCRAM credentials.")
    p.add_argument("user", nargs="*")
    p.set_defaults(func=_command(users_list))
    p = usub.add_parser("remove", parents=[common], epilog=epilog, formatter_class=formatter,
                        help="remove a user's credentials", description="Delete a user's SCRAM credentials.")
    p.add_argument("user")
    p.add_argument("--mechanism", action="append", type=_mechanism, default=[],
                   help="only this mechanism (repeatable; default: every mechanism the user has)")
    p.set_defaults(func=_command(users_remove))


def _command(run: Any) -> Any:
    def func(args: argparse.Namespace) -> int:
        try:
            with AdminClient(args.bootstrap_server, args.timeout, security=client_security(args)) as client:
                result: int = run(client, args)
                return result
        except AdminError as exc:
            print(f"kcoord: {exc.message}", file=sys.stderr)
            return exc.exit_code
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_OK
    func.__name__ = run.__name__
    return func


# ---------------------------------------------------------------------- ACLs


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _entries(args: argparse.Namespace) -> list[tuple[ResourceType, str, str, str, AclOperation, AclPermissionType]]:
    """(resource type, name, principal, host, operation, permission) for add and remove."""
    resources = _resources(args)
    if not resources:
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not args.allow_principal and not args.deny_principal:
        raise UsageError("name a principal: --allow-principal or --deny-principal")
    out = []
    for rtype, name in resources:
        ops = list(args.operation)
        if args.consumer:
            ops += [AclOperation.READ, AclOperation.DESCRIBE] if rtype is ResourceType.TOPIC else (
                [AclOperation.READ] if rtype is ResourceType.GROUP else [])
        if args.producer:
            if rtype is ResourceType.TOPIC:
                ops += [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]
            elif rtype is ResourceType.TRANSACTIONAL_ID:
                ops += [AclOperation.WRITE, AclOperation.DESCRIBE]
        if not ops:
            continue
        for permission, principals, hosts in (
                (AclPermissionType.ALLOW, args.allow_principal, args.allow_host or ["*"]),
                (AclPermissionType.DENY, args.deny_principal, args.deny_host or ["*"])):
            for principal in principals:
                if ":" not in principal:
                    raise UsageError(f"principal {principal!r} is not Type:name (User:alice)")
                for host in hosts:
                    for op in dict.fromkeys(ops):
                        out.append((rtype, name, principal, host, op, permission))
    if args.producer and args.idempotent:
        for principal in args.allow_principal:
            out.append((ResourceType.CLUSTER, CLUSTER_NAME, principal, "*", AclOperation.IDEMPOTENT_WRITE,
                        AclPermissionType.ALLOW))
    if not out:
        raise UsageError("name an operation: --operation, --consumer or --producer")
    return out


def _pattern(args: argparse.Namespace) -> PatternType:
    return PatternType[(args.resource_pattern_type or "literal").upper()]


def _check(errors: list[tuple[int, str | None]], what: str) -> None:
    failed = [(code, message) for code, message in errors if code != ErrorCode.NONE]
    if failed:
        code, message = failed[0]
        raise BrokerError(f"{what} failed: {message or ErrorCode(code).name}", code)


def acls_add(client: AdminClient, args: argparse.Namespace) -> int:
    entries = _entries(args)
    pattern = _pattern(args)
    creations = [{"resource_type": int(rtype), "resource_name": name, "resource_pattern_type": int(pattern),
                  "principal": principal, "host": host, "operation": int(op), "permission_type": int(perm)}
                 for rtype, name, principal, host, op, perm in entries]
    _, reply = client.any_broker().request(CREATE_ACLS, {"creations": creations})
    _check([(r.error_code, r.error_message) for r in reply.results], "CreateAcls")
    for rtype, name, principal, host, op, perm in entries:
        print(f"added {perm.name} {principal} {op.name} on {rtype.name}:{pattern.name}:{name} from host {host}")
    return EXIT_OK


def _filter(rtype: ResourceType, name: str | None, pattern: PatternType, principal: str | None = None,
            host: str | None = None, op: AclOperation = AclOperation.ANY,
            permission: AclPermissionType = AclPermissionType.ANY) -> dict[str, Any]:
    return {"resource_type_filter": int(rtype), "resource_name_filter": name, "pattern_type_filter": int(pattern),
            "principal_filter": principal, "host_filter": host, "operation": int(op), "permission_type": int(permission)}


def acls_list(client: AdminClient, args: argparse.Namespace) -> int:
    resources = _resources(args)
    pattern = PatternType[(args.resource_pattern_type or "any").upper()]
    filters = [_filter(rtype, name, pattern, args.principal) for rtype, name in resources] or [
        _filter(ResourceType.ANY, None, PatternType.ANY, args.principal)]
    rows = []
    conn = client.any_broker()
    for body in filters:
        _, reply = conn.request(DESCRIBE_ACLS, body)
        _check([(reply.error_code, reply.error_message)], "DescribeAcls")
        for resource in reply.resources:
            for acl in resource.acls:
                rows.append({"resource_type": ResourceType(resource.resource_type).name,
                             "pattern_type": PatternType(resource.get("pattern_type", 3)).name,
                             "resource_name": resource.resource_name, "principal": acl.principal, "host": acl.host,
                             "operation": AclOperation(acl.operation).name,
                             "permission": AclPermissionType(acl.permission_type).name})
    if args.output == "json":
        print(to_json({"acls": rows}))
    else:
        columns = ["resource_type", "pattern_type", "resource_name", "principal", "host", "operation", "permission"]
        print(table([c.upper() for c in columns], [[r[c] for c in columns] for r in rows]))
    return EXIT_OK


def acls_remove(client: AdminClient, args: argparse.Namespace) -> int:
    entries = _entries(args)
    pattern = _pattern(args)
    filters = [_filter(rtype, name, pattern, principal, host, op, perm)
               for rtype, name, principal, host, op, perm in entries]
    _, reply = client.any_broker().request(DELETE_ACLS, {"filters": filters})
    _check([(r.error_code, r.error_message) for r in reply.filter_results], "DeleteAcls")
    removed = 0
    for result in reply.filter_results:
        for acl in result.matching_acls:
            removed += 1
            print(f"removed {AclPermissionType(acl.permission_type).name} {acl.principal} "
                  f"{AclOperation(acl.operation).name} on {ResourceType(acl.resource_type).name}:"
                  f"{PatternType(acl.get('pattern_type', 3)).name}:{acl.resource_name} from host {acl.host}")
    if not removed:
        print("no ACL matched")
    return EXIT_OK


# ---------------------------------------------------------------------- users


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return str(args.password)
    if args.password_file is not None:
        try:
            return str(args.password_file.read_text().splitlines()[0])
        except (OSError, IndexError) as exc:
            raise UsageError(f"--password-file {args.password_file}: cannot read a password ({exc})") from None
    if not sys.stdin.isatty():
        raise UsageError("give --password-file (or --password), or run on a terminal to be prompted")
    first = getpass.getpass(f"password for {args.user}: ")
    if first != getpass.getpass("again: "):
        raise UsageError("the passwords differ")
    return first


def users_add(args: argparse.Namespace) -> int:
    try:
        password = _password(args)
        if not args.user:
            raise UsageError("the user name must not be empty")
        mechanisms = args.mechanism or ["SCRAM-SHA-512"]
        if args.data_dir is not None:
            return _users_add_offline(args.data_dir, args.user, password, mechanisms, args.iterations)
        return _command(lambda client, a: _users_add(client, a, password, mechanisms))(args)  # type: ignore[no-any-return]
    except AdminError as exc:
        print(f"kcoord: {exc.message}", file=sys.stderr)
        return exc.exit_code


def _users_add(client: AdminClient, args: argparse.Namespace, password: str, mechanisms: list[str]) -> int:
    upsertions = []
    for mechanism in mechanisms:
        salt = os.urandom(32)
        upsertions.append({"name": args.user, "mechanism": MECHANISM_CODES[mechanism], "iterations": args.iterations,
                           "salt": salt, "salted_password": salted_password(mechanism, password, salt,
                                                                            args.iterations)})
    _, reply = client.any_broker().request(ALTER_SCRAM, {"deletions": [], "upsertions": upsertions})
    _check([(r.error_code, r.error_message) for r in reply.results], "AlterUserScramCredentials")
    print(f"user {args.user}: {', '.join(mechanisms)} set ({args.iterations} iterations)")
    return EXIT_OK


def _users_add_offline(data_dir: Path, user: str, password: str, mechanisms: list[str], iterations: int) -> int:
    import fcntl
    import time

    from security.records import credential_record
    from security.scram import credential_from_password
    from storage.layout import lock_file
    from storage.security_log import SecurityLog

    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file(data_dir), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"{data_dir} is in use by a running kcoord: add the user with --bootstrap-server "
                             "instead") from None
        log = SecurityLog(data_dir)
        try:
            log.append([credential_record(user, credential_from_password(m, password, iterations))
                        for m in mechanisms], int(time.time() * 1000))
            log.flush()
        finally:
            log.close()
    finally:
        os.close(fd)
    print(f"user {user}: {', '.join(mechanisms)} written to {data_dir} ({iterations} iterations)")
    return EXIT_OK


def _describe_users(client: AdminClient, users: list[str]) -> Any:
    body = {"users": [{"name": u} for u in users] if users else None}
    _, reply = client.any_broker().request(DESCRIBE_SCRAM, body)
    _check([(reply.error_code, reply.error_message)], "DescribeUserScramCredentials")
    return reply


def users_list(client: AdminClient, args: argparse.Namespace) -> int:
    reply = _describe_users(client, list(args.user))
    rows = []
    for result in reply.results:
        if result.error_code != ErrorCode.NONE:
            raise BrokerError(f"user {result.user}: {result.error_message}", result.error_code)
        rows.append({"user": result.user, "credentials": [
            {"mechanism": MECHANISM_NAMES.get(c.mechanism, str(c.mechanism)), "iterations": c.iterations}
            for c in result.credential_infos]})
    if args.output == "json":
        print(to_json({"users": rows}))
    else:
        print(table(["USER", "MECHANISM", "ITERATIONS"],
                    [[r["user"], c["mechanism"], c["iterations"]] for r in rows for c in r["credentials"]]))
    return EXIT_OK


def users_remove(client: AdminClient, args: argparse.Namespace) -> int:
    mechanisms = list(args.mechanism)
    if not mechanisms:
        reply = _describe_users(client, [args.user])
        result = reply.results[0]
        if result.error_code != ErrorCode.NONE:
            raise BrokerError(f"user {args.user}: {result.error_message}", result.error_code)
        mechanisms = [MECHANISM_NAMES[c.mechanism] for c in result.credential_infos]
    deletions = [{"name": args.user, "mechanism": MECHANISM_CODES[m]} for m in mechanisms]
    _, reply = client.any_broker().request(ALTER_SCRAM, {"deletions": deletions, "upsertions": []})
    _check([(r.error_code, r.error_message) for r in reply.results], "AlterUserScramCredentials")
    print(f"user {args.user}: {', '.join(mechanisms)} removed")
    return EXIT_OK
