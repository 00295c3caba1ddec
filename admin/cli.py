"""``kcoord groups`` and ``kcoord offsets``: consumer-group administration over the Kafka protocol.

Modelled on Kafka's ``kafka-consumer-groups``; works against kcoord and Apache Kafka alike.
Exit codes (docs/cli.md): 0 ok, 1 the broker refused or failed the operation, 2 bad usage
or input, 3 no broker reachable, 4 the group is not in the state the operation needs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from admin import group_config_cli, security_cli
from admin.client import (
    LATEST_TIMESTAMP,
    AdminClient,
    CommittedOffset,
    TopicPartition,
)
from admin.errors import (
    EXIT_OK,
    AdminError,
    BrokerError,
    GroupStateError,
    UsageError,
)
from admin.inputs import (
    OffsetRow,
    TopicSpec,
    format_offsets,
    format_time,
    parse_duration,
    parse_state,
    parse_time,
    parse_topic_spec,
    read_offsets_file,
)
from admin.plan import (
    BY_DURATION,
    BY_TIME,
    CURRENT,
    EARLIEST,
    FROM_FILE,
    LATEST,
    NEAREST,
    SHIFT_BY,
    TO_DATETIME,
    TO_OFFSET,
    PlanRow,
    Strategy,
    plan_reset,
    plan_restore,
)
from admin.progress import Steps
from admin.render import (
    assigned_partitions,
    described_group,
    described_group_table,
    group_state,
    group_states_table,
    listed_groups,
    listed_groups_table,
    plan_document,
    plan_table,
    table,
    to_json,
)
from admin.security import client_security
from protocol.errors import ErrorCode

Command = Callable[[AdminClient, argparse.Namespace], int]

#: The environment variable that sets the default of ``--bootstrap-server``.
BOOTSTRAP_ENV = "KCOORD_BOOTSTRAP_SERVER"

EXIT_CODES = """exit codes:
  0  success
  1  the broker refused or failed the operation (the Kafka error is named)
  2  usage or input error (options, durations, times, offsets files, unknown topics)
  3  no broker reachable, or a broker stopped answering
  4  the group is not in the state the operation needs (e.g. it still has members)
"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the exit-code epilog's line breaks."""


#: States in which a group accepts an administrative commit (no members).
COMMITTABLE_STATES = ("Empty", "Dead")


# ---------------------------------------------------------------------- argument types


def _typed(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a parser raising UsageError (argparse then exits 2 with usage)."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    convert.__name__ = parse.__name__.removeprefix("parse_")
    return convert


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise UsageError("the timeout must be more than 0 seconds")
    return value


def _offset(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{text!r} is not an offset") from None
    if value < 0:
        raise UsageError(f"an offset cannot be negative ({value})")
    return value


def _shift(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{text!r} is not a whole number") from None


# ---------------------------------------------------------------------- parsers


def connection_options() -> argparse.ArgumentParser:
    """The options every command that talks to brokers shares (a parent parser)."""
    common = argparse.ArgumentParser(add_help=False)
    conn = common.add_argument_group("connection and output")
    conn.add_argument("--bootstrap-server", default=os.environ.get(BOOTSTRAP_ENV, "127.0.0.1:9092"),
                      metavar="HOST:PORT[,HOST:PORT]",
                      help=f"brokers to bootstrap from (default: ${BOOTSTRAP_ENV}, else 127.0.0.1:9092)")
    conn.add_argument("--output", choices=("table", "json"), default="table",
                      help="table (for people, the default) or json (stable keys, for programs)")
    conn.add_argument("--timeout", type=_typed(_seconds), default=10.0, metavar="SECONDS",
                      help="connect/request timeout and retry budget (default 10)")
    conn.add_argument("--command-config", type=Path, metavar="FILE",
                      help="client security settings with Kafka client property names (security.protocol, "
                           "sasl.mechanism, sasl.jaas.config, ssl.truststore.location, ...); docs/security.md")
    return common


def register(sub: Any) -> None:
    """Add ``groups`` and ``offsets`` to the ``kcoord`` parser."""
    common = connection_options()

    groups = sub.add_parser("groups", help="list, describe and delete consumer groups",
                            description="Consumer groups on any Kafka-compatible broker.")
    gsub = groups.add_subparsers(dest="groups_command", required=True, metavar="COMMAND")

    p = gsub.add_parser("list", parents=[common], epilog=EXIT_CODES, formatter_class=_Formatter, help="list groups",
                        description="List every group of every broker, with its state.")
    p.add_argument("--state", action="append", type=_typed(parse_state), default=[], dest="states", metavar="STATE",
                   help="only groups in this state (repeatable): Empty, Stable, PreparingRebalance, "
                        "CompletingRebalance, Dead")
    p.set_defaults(func=_command(groups_list))

    p = gsub.add_parser("describe", parents=[common], epilog=EXIT_CODES, formatter_class=_Formatter, help="a group's offsets, lag and members",
                        description="Groups' state, committed offsets with lag, and members.")
    _group_selection(p)
    p.add_argument("--members", action="store_true", help="list the members and their assignments")
    p.add_argument("--offsets", action="store_true", help="list offsets and lag (the default)")
    p.add_argument("--state", action="store_true",
                   help="one line per group: coordinator, assignment strategy, state, members")
    p.set_defaults(func=_command(groups_describe))

    p = gsub.add_parser("delete", parents=[common], epilog=EXIT_CODES, formatter_class=_Formatter, help="delete empty groups and their offsets",
                        description="Delete groups with no members, and their committed offsets.")
    _group_selection(p)
    p.add_argument("--yes", action="store_true", help="with --all-groups: do not ask for confirmation")
    p.set_defaults(func=_command(groups_delete))

    group_config_cli.register(gsub, common, EXIT_CODES, _Formatter, _command)

    offsets = sub.add_parser("offsets", help="reset, delete, export, import and restore committed offsets",
                             description="A group's committed offsets on any Kafka-compatible broker.")
    osub = offsets.add_subparsers(dest="offsets_command", required=True, metavar="COMMAND")

    p = osub.add_parser("reset", parents=[common], epilog=EXIT_CODES, formatter_class=_Formatter, help="move a group's committed offsets",
                        description="Plan (default) or commit new offsets for a group; the group must be "
                                    "Empty to commit.")
    p.add_argument("group")
    _scope_arguments(p, required=False)
    how = p.add_argument_group("strategy (exactly one)").add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", dest="strategy", action="store_const", const=EARLIEST,
                     help="the log start offset")
    how.add_argument("--to-latest", dest="strategy", action="store_const", const=LATEST,
                     help="the log end offset")
    how.add_argument("--to-current", dest="strategy", action="store_const", const=CURRENT,
                     help="the committed offset (log end where there is none)")
    how.add_argument("--to-offset", type=_typed(_offset), metavar="N",
                     help="offset N, clamped into [log start, log end]")
    how.add_argument("--shift-by", type=_typed(_shift), metavar="N",
                     help="the committed offset plus N (negative: back), clamped")
    how.add_argument("--to-datetime", type=_typed(parse_time), metavar="ISO8601",
                     help="the first offset at or after this time (log end when none)")
    how.add_argument("--by-duration", type=_typed(parse_duration), metavar="PnDTnHnMnS",
                     help="the first offset at or after now minus this duration")
    how.add_argument("--from-file", type=Path, metavar="FILE",
                     help="offsets from a CSV or JSON file (as written by offsets export)")
    how.add_argument("--to-nearest", dest="strategy", action="store_const", const=NEAREST,
                     help="the committed offset moved into [log start, log end] when out of range")
    _run_mode_arguments(p)
    p.set_defaults(func=_command(offsets_reset))

    p = osub.add_parser("delete", parents=[common], epilog=EXIT_CODES, formatter_class=_Formatter, help="delete a group's offsets for topics (KIP-496)",
                        description="Delete committed offsets; refused for topics the group subscribes to.")
    p.add_argument("group")
    _scope_arguments(p, required=True, all_topics=False)
    p.set_defaults(func=_command(offsets_delete))

    p = osub.add_parser("export", parents=[common], epilog=EXIT_CODES, formatter_class=_Formatter, help="write a group's committed offsets to a file",
                        description="Write committed offsets as CSV (topic,partition,offset,metadata) or JSON.")
    p.add_argument("group")
    p.add_argument("--format", choices=("csv", "json"), default="csv", help="file format (default csv)")
    p.add_argument("--file", type=Path, help="where to write (default: standard output)")
    p.set_defaults(func=_command(offsets_export))

    p = osub.add_parser("import", parents=[common], epilog=EXIT_CODES, formatter_class=_Formatter, help="commit offsets from a file",
                        description="Plan (default) or commit the offsets of a CSV or JSON file exactly.")
    p.add_argument("group")
    p.add_argument("--file", type=Path, required=True, help="a file written by offsets export")
    _run_mode_arguments(p)
    p.set_defaults(func=_command(offsets_import))

    p = osub.add_parser("restore", parents=[common], epilog=EXIT_CODES, formatter_class=_Formatter, help="commit the offsets a group had at a past time",
                        description="Plan (default) or commit the offsets a group had as of a time, "
                                    "from the coordinator log's history or from a file.")
    p.add_argument("--group", required=True)
    p.add_argument("--as-of", type=_typed(parse_time), metavar="TIME",
                   help="ISO-8601 time (UTC unless it carries an offset) or epoch ms; needs --data-dir")
    p.add_argument("--data-dir", type=Path, metavar="DIR", help="the broker's data directory (its log history)")
    p.add_argument("--from-file", type=Path, metavar="FILE", help="offsets from a CSV or JSON file instead")
    _run_mode_arguments(p)
    p.set_defaults(func=_command(offsets_restore))

    security_cli.register(sub, common, EXIT_CODES, _Formatter)


def _scope_arguments(p: argparse.ArgumentParser, required: bool, all_topics: bool = True) -> None:
    scope = p.add_argument_group("partitions")
    scope.add_argument("--topic", action="append", type=_typed(parse_topic_spec), default=[], dest="topics",
                       required=required, metavar="TOPIC[:P,P...]", help="a topic, or some of its partitions (repeatable)"
                       + ("" if required else "; required unless --all-topics or --from-file"))
    if all_topics:
        scope.add_argument("--all-topics", action="store_true",
                           help="every partition the group has a committed offset for")


def _run_mode_arguments(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", dest="execute", action="store_false",
                      help="print the plan, commit nothing (the default)")
    mode.add_argument("--execute", dest="execute", action="store_true", help="commit the plan")
    p.add_argument("--allow-new-group", action="store_true",
                   help="let --execute create the group when it does not exist yet (a mistyped name "
                        "is refused without it)")
    p.set_defaults(execute=False)


def _group_selection(p: argparse.ArgumentParser) -> None:
    """A group as kcoord users type it (positional) or as kafka-consumer-groups users do."""
    p.add_argument("group", nargs="?", help="the group (or give --group, repeatable, or --all-groups)")
    p.add_argument("--group", dest="group_options", action="append", default=[], metavar="GROUP",
                   help="a group, as kafka-consumer-groups spells it (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="every group of the cluster")


def _selected_groups(client: AdminClient, args: argparse.Namespace) -> list[str]:
    named = ([args.group] if args.group else []) + list(args.group_options)
    if args.all_groups and named:
        raise UsageError("give either group names or --all-groups, not both")
    if args.all_groups:
        return [g.group_id for g in client.list_groups()]
    if not named:
        raise UsageError("say which group: GROUP, --group GROUP (repeatable) or --all-groups")
    return list(dict.fromkeys(named))


def _command(run: Command) -> Callable[[argparse.Namespace], int]:
    """Wrap a command: one client for its duration, every AdminError as a message and exit code."""

    def func(args: argparse.Namespace) -> int:
        try:
            with AdminClient(args.bootstrap_server, args.timeout, security=client_security(args)) as client:
                return run(client, args)
        except AdminError as exc:
            print(f"kcoord: {exc.message}", file=sys.stderr)
            return exc.exit_code
        except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_OK

    func.__name__ = run.__name__
    return func


def _emit(args: argparse.Namespace, document: Any, text: str) -> None:
    print(to_json(document) if args.output == "json" else text)


# ---------------------------------------------------------------------- groups


def groups_list(client: AdminClient, args: argparse.Namespace) -> int:
    groups = client.list_groups(args.states or None)
    document = listed_groups(groups)
    _emit(args, document, listed_groups_table(document) if groups else "No groups.")
    return EXIT_OK


def groups_describe(client: AdminClient, args: argparse.Namespace) -> int:
    names = _selected_groups(client, args)
    documents = []
    for name in names:
        description = client.describe_group(name)
        committed = client.fetch_offsets(name)
        if description.state == "Dead" and not committed:
            if args.all_groups:
                continue  # deleted since it was listed
            raise BrokerError(f"group {name!r} does not exist", ErrorCode.GROUP_ID_NOT_FOUND)
        if args.state:
            documents.append(group_state(description))
            continue
        wanted = set(committed)
        for member in description.members:
            wanted.update(assigned_partitions(member, description.protocol_type) or [])
        existing = _existing_partitions(client, wanted)
        log_ends = client.list_offsets({tp: LATEST_TIMESTAMP for tp in existing})
        documents.append(described_group(description, committed, log_ends))
    if args.state:
        _emit(args, {"groups": documents}, group_states_table(documents) if documents else "No groups.")
        return EXIT_OK
    show_offsets = args.offsets or not args.members
    text = "\n\n".join(described_group_table(d, members=args.members, offsets=show_offsets) for d in documents)
    single = len(names) == 1 and not args.all_groups
    _emit(args, documents[0] if single else {"groups": documents}, text or "No groups.")
    return EXIT_OK


def groups_delete(client: AdminClient, args: argparse.Namespace) -> int:
    names = _selected_groups(client, args)
    if args.all_groups:
        if not names:
            _emit(args, {"deleted": [], "failed": []}, "No groups.")
            return EXIT_OK
        _confirm(f"Delete all {len(names)} group{'s' if len(names) != 1 else ''} of the cluster "
                 f"({_listed(names)}) and their committed offsets?", args.yes)
    if len(names) == 1 and not args.all_groups:
        client.delete_group(names[0])
        _emit(args, {"group": names[0], "deleted": True}, f"Deleted group {names[0]!r} and its offsets.")
        return EXIT_OK
    deleted: list[str] = []
    failed: list[tuple[str, AdminError]] = []
    for name in names:
        try:
            client.delete_group(name)
        except (BrokerError, GroupStateError) as exc:
            failed.append((name, exc))
        else:
            deleted.append(name)
    document = {"deleted": deleted, "failed": [{"group": g, "error": e.message} for g, e in failed]}
    rows = [(g, "deleted") for g in deleted] + [(g, e.message) for g, e in failed]
    _emit(args, document, table(("GROUP", "RESULT"), rows))
    if failed:
        raise type(failed[0][1])(f"{len(failed)} of {len(names)} groups were not deleted (see above)")
    return EXIT_OK


def _confirm(question: str, assume_yes: bool) -> None:
    """Ask on the terminal; without one, ``--yes`` is the only way to say yes."""
    if assume_yes:
        return
    if not sys.stdin.isatty():
        raise UsageError(f"{question.rstrip('?')}: add --yes to confirm (there is no terminal to ask on)")
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise UsageError("not confirmed: nothing was deleted")


def _listed(names: list[str], limit: int = 5) -> str:
    return ", ".join(names[:limit]) + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


# ---------------------------------------------------------------------- partition scope


def _existing_partitions(client: AdminClient, partitions: set[TopicPartition]) -> set[TopicPartition]:
    if not partitions:
        return set()
    cluster = client.metadata(sorted({t for t, _ in partitions}))
    return {tp for tp in partitions if tp[1] in cluster.leaders.get(tp[0], {})}


def _check_partitions_exist(client: AdminClient, partitions: set[TopicPartition], what: str) -> None:
    """A usage error naming every partition (of ``what``) that the cluster does not have."""
    known = client.partitions_of({t for t, _ in partitions})
    missing = sorted(tp for tp in partitions if tp[1] not in known[tp[0]])
    if missing:
        listed = ", ".join(f"{t}-{p} (topic has {len(known[t])} partitions)" for t, p in missing)
        raise UsageError(f"{what} names partitions that do not exist: {listed}")


def _resolve_specs(client: AdminClient, specs: list[TopicSpec]) -> set[TopicPartition]:
    """``--topic`` options as partitions; every one must exist."""
    known = client.partitions_of({s.topic for s in specs})
    chosen: set[TopicPartition] = set()
    for spec in specs:
        partitions = known[spec.topic] if spec.partitions is None else list(spec.partitions)
        missing = [p for p in partitions if p not in known[spec.topic]]
        if missing:
            raise UsageError(f"topic {spec.topic!r} has partitions 0-{len(known[spec.topic]) - 1}; "
                             f"no partition {', '.join(map(str, missing))}")
        chosen.update((spec.topic, p) for p in partitions)
    return chosen


def _in_specs(tp: TopicPartition, specs: list[TopicSpec]) -> bool:
    return any(s.topic == tp[0] and (s.partitions is None or tp[1] in s.partitions) for s in specs)


# ---------------------------------------------------------------------- executing a plan


def _require_committable(client: AdminClient, group: str) -> None:
    """Refuse (exit 4) unless the group has no members: the broker would refuse the commit."""
    description = client.describe_group(group)
    if description.state not in COMMITTABLE_STATES:
        count = len(description.members)
        raise GroupStateError(
            f"group {group!r} is {description.state} with {count} member{'s' if count != 1 else ''}; "
            "offsets can only be changed while it is Empty: stop its consumers first (wait for their "
            "session timeout if they did not leave cleanly), then run this again")


def _warn_if_active(client: AdminClient, group: str) -> None:
    description = client.describe_group(group)
    if description.state not in COMMITTABLE_STATES:
        print(f"note: group {group!r} is {description.state}; --execute will be refused until its "
              "consumers are stopped and it is Empty", file=sys.stderr)


def _log_range(client: AdminClient, partitions: set[TopicPartition] | dict[TopicPartition, Any],
               steps: Steps) -> dict[TopicPartition, tuple[int, int]]:
    """Each partition's log start and end, asked in chunks so a bar can follow."""
    ranges: dict[TopicPartition, tuple[int, int]] = {}
    steps.chunked("reading log start and end offsets", sorted(partitions),
                  lambda chunk: ranges.update(client.log_range(chunk)))
    return ranges


def _group_exists(client: AdminClient, group: str) -> bool:
    """A group exists when it has members or committed offsets (an unknown one is described as Dead)."""
    return client.describe_group(group).state != "Dead" or bool(client.fetch_offsets(group))


def _finish_plan(client: AdminClient, args: argparse.Namespace, group: str, action: str,
                 rows: list[PlanRow], steps: Steps | None = None) -> int:
    if not _group_exists(client, group):
        if args.execute and not args.allow_new_group:
            raise UsageError(f"group {group!r} does not exist; committing would create it. Check the name "
                             "(kcoord groups list), or add --allow-new-group to create it")
        if not args.execute:
            print(f"note: group {group!r} does not exist; --execute would create it and needs "
                  "--allow-new-group", file=sys.stderr)
    if args.execute:
        _require_committable(client, group)
        offsets = {(r.topic, r.partition): CommittedOffset(r.new, r.leader_epoch, r.metadata)
                   for r in rows if r.new is not None}
        # One OffsetCommit per chunk of partitions, so a bar can follow a large restore.
        (steps or Steps(enabled=False)).chunked(
            f"committing offsets of group {group!r}", sorted(offsets.items()),
            lambda chunk: client.commit_offsets(group, dict(chunk)))
        if steps is not None:
            steps.close()
    else:
        _warn_if_active(client, group)
    document = plan_document(group, action, rows, executed=bool(args.execute))
    _emit(args, document, plan_table(document))
    return EXIT_OK


# ---------------------------------------------------------------------- offsets


def _strategy(args: argparse.Namespace) -> Strategy:
    if args.to_offset is not None:
        return Strategy(TO_OFFSET, args.to_offset)
    if args.shift_by is not None:
        return Strategy(SHIFT_BY, args.shift_by)
    if args.to_datetime is not None:
        return Strategy(TO_DATETIME, args.to_datetime)
    if args.by_duration is not None:
        return Strategy(BY_DURATION, int(time.time() * 1000) - args.by_duration)
    if args.from_file is not None:
        return Strategy(FROM_FILE)
    return Strategy(args.strategy)


def offsets_reset(client: AdminClient, args: argparse.Namespace) -> int:
    strategy = _strategy(args)
    if args.topics and args.all_topics:
        raise UsageError("give either --topic or --all-topics, not both")
    if strategy.name != FROM_FILE and not args.topics and not args.all_topics:
        raise UsageError("say which partitions to reset: --topic TOPIC[:P,...] (repeatable) or --all-topics")
    file_rows: dict[TopicPartition, OffsetRow] | None = None
    committed_all = {tp: c.offset for tp, c in client.fetch_offsets(args.group).items()}
    if strategy.name == FROM_FILE:
        rows = read_offsets_file(args.from_file)
        file_rows = {(r.topic, r.partition): r for r in rows
                     if not args.topics or _in_specs((r.topic, r.partition), args.topics)}
        partitions = set(file_rows)
        _check_partitions_exist(client, partitions, str(args.from_file))
    elif args.all_topics:
        partitions = _existing_partitions(client, set(committed_all))
        gone = sorted(set(committed_all) - partitions)
        if gone:
            print(f"note: skipping {len(gone)} committed partition{'s' if len(gone) != 1 else ''} whose topic "
                  "or partition no longer exists: " + ", ".join(f"{t}-{p}" for t, p in gone[:10])
                  + (" ..." if len(gone) > 10 else ""), file=sys.stderr)
    else:
        partitions = _resolve_specs(client, args.topics)
    with Steps() as steps:
        ranges = _log_range(client, partitions, steps)
    found = None
    if strategy.name in BY_TIME:
        found = client.list_offsets({tp: strategy.value for tp in partitions})
    plan = plan_reset(strategy, sorted(partitions), committed_all, ranges, found, file_rows)
    action = f"reset {strategy.name}"
    if strategy.name in BY_TIME:
        action += f" {format_time(strategy.value)}"
    elif strategy.name in (TO_OFFSET, SHIFT_BY):
        action += f" {strategy.value}"
    return _finish_plan(client, args, args.group, action, plan)


def offsets_delete(client: AdminClient, args: argparse.Namespace) -> int:
    """OffsetDelete; a named partition the topic does not have is a usage error (exit 2), as for reset."""
    committed = client.fetch_offsets(args.group)
    cluster = client.metadata(sorted({s.topic for s in args.topics}))
    chosen: set[TopicPartition] = set()
    for spec in args.topics:
        known = sorted(cluster.leaders.get(spec.topic, {}))
        from_group = {tp for tp in committed if tp[0] == spec.topic}
        if spec.partitions is not None:
            missing = [p for p in spec.partitions if p not in known and (spec.topic, p) not in committed]
            if missing and not known and not from_group:
                raise UsageError(f"topic {spec.topic!r} does not exist and group {args.group!r} has no offsets for it")
            if missing:
                raise UsageError(f"topic {spec.topic!r} has partitions 0-{len(known) - 1}; "
                                 f"no partition {', '.join(map(str, missing))}")
            chosen.update((spec.topic, p) for p in spec.partitions)
            continue
        # every partition of the topic, and any committed for a topic that no longer exists
        from_topic = {(spec.topic, p) for p in known}
        if not from_topic and not from_group:
            raise UsageError(f"topic {spec.topic!r} does not exist and group {args.group!r} has no offsets for it")
        chosen |= from_topic | from_group
    client.delete_offsets(args.group, chosen)
    rows = sorted(chosen)
    deleted = [(t, p, committed[(t, p)].offset if (t, p) in committed else None) for t, p in rows]
    document = {"group": args.group,
                "deleted": [{"topic": t, "partition": p, "had_offset": offset is not None, "offset": offset}
                            for t, p, offset in deleted]}
    text = table(("GROUP", "TOPIC", "PARTITION", "DELETED-OFFSET"), [(args.group, *row) for row in deleted])
    _emit(args, document, text + f"\n\nDeleted the offsets of {len(rows)} partition"
                                 f"{'s' if len(rows) != 1 else ''} for group {args.group!r}.")
    return EXIT_OK


def offsets_export(client: AdminClient, args: argparse.Namespace) -> int:
    with Steps() as steps:
        committed = steps.wait(f"fetching the committed offsets of group {args.group!r}",
                               lambda: client.fetch_offsets(args.group))
    rows = [OffsetRow(t, p, c.offset, c.metadata, c.leader_epoch) for (t, p), c in committed.items()]
    if not rows:
        print(f"note: group {args.group!r} has no committed offsets", file=sys.stderr)
    text = format_offsets(rows, args.format)
    if args.file is None:
        sys.stdout.write(text)
        return EXIT_OK
    try:
        args.file.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {args.file}: {(exc.strerror or str(exc)).lower()}") from None
    document = {"group": args.group, "file": str(args.file), "format": args.format, "offsets": len(rows)}
    _emit(args, document, f"Exported {len(rows)} offset{'s' if len(rows) != 1 else ''} of group "
                          f"{args.group!r} to {args.file} ({args.format}).")
    return EXIT_OK


def _exact_plan(client: AdminClient, group: str, restored: dict[TopicPartition, OffsetRow],
                what: str, steps: Steps) -> list[PlanRow]:
    _check_partitions_exist(client, set(restored), what)
    committed = {tp: c.offset for tp, c in client.fetch_offsets(group).items()}
    untouched = sorted(set(committed) - set(restored))
    if untouched:
        print(f"note: {len(untouched)} partition{'s' if len(untouched) != 1 else ''} with committed offsets "
              f"{'are' if len(untouched) != 1 else 'is'} not in {what} and stay as they are: "
              + ", ".join(f"{t}-{p}" for t, p in untouched[:10]) + (" ..." if len(untouched) > 10 else ""),
              file=sys.stderr)
    return plan_restore(restored, committed, _log_range(client, restored, steps))


def offsets_import(client: AdminClient, args: argparse.Namespace) -> int:
    rows = read_offsets_file(args.file)
    restored = {(r.topic, r.partition): r for r in rows}
    with Steps() as steps:
        plan = _exact_plan(client, args.group, restored, str(args.file), steps)
        return _finish_plan(client, args, args.group, "import", plan, steps)


def _history_offsets(data_dir: Path, as_of_ms: int, group: str) -> dict[TopicPartition, OffsetRow]:
    """The group's live commits as of ``as_of_ms``, read from the broker log's history."""
    if not data_dir.is_dir():
        raise UsageError(f"--data-dir {data_dir} is not a directory")
    try:
        from pipeline.history import offsets_as_of
    except ImportError as exc:
        raise UsageError(f"restoring --as-of needs the offset history reader (pipeline.history): {exc}; "
                         "run `make pipeline` in the kcoord clone, or restore --from-file") from None
    try:
        history = offsets_as_of(data_dir, as_of_ms, group)
    except (OSError, ValueError) as exc:
        raise BrokerError(f"reading the offset history in {data_dir} failed: {exc}") from None
    found: dict[tuple[str, int], dict[str, Any]] = history.get(group, {})
    return {
        (topic, partition): OffsetRow(topic, partition, int(entry["offset"]), str(entry.get("metadata") or ""),
                                      int(entry.get("leader_epoch", -1)))
        for (topic, partition), entry in found.items()
    }


def offsets_restore(client: AdminClient, args: argparse.Namespace) -> int:
    if (args.as_of is None) == (args.from_file is None):
        raise UsageError("give exactly one of --as-of TIME (with --data-dir) or --from-file FILE")
    if args.as_of is not None:
        if args.data_dir is None:
            raise UsageError("--as-of needs --data-dir, the broker data directory whose history to read")
        data_dir, as_of = args.data_dir, args.as_of
        with Steps() as steps:
            restored = steps.wait(f"reading the offset history in {data_dir}",
                                  lambda: _history_offsets(data_dir, as_of, args.group))
        source = f"the history as of {format_time(args.as_of)}"
        if not restored:
            print(f"note: group {args.group!r} had no committed offsets as of {format_time(args.as_of)}",
                  file=sys.stderr)
    else:
        rows = read_offsets_file(args.from_file)
        restored = {(r.topic, r.partition): r for r in rows}
        source = str(args.from_file)
    action = "restore" + (f" as of {format_time(args.as_of)}" if args.as_of is not None else f" from {source}")
    with Steps() as steps:
        plan = _exact_plan(client, args.group, restored, source, steps)
        return _finish_plan(client, args, args.group, action, plan, steps)
