"""``kcoord groups config get|set``: a group's own configs (KIP-848's GROUP config resource).

Modelled on ``kafka-configs --entity-type groups``: DescribeConfigs and
IncrementalAlterConfigs on resource type GROUP, so it works against kcoord and Kafka 4
alike. ``set`` is a dry run by default, as offset resets are: the broker validates the change
(``validate_only``) and the plan is printed; ``--execute`` makes it. The configs are Kafka 4's
``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms`` and, on kcoord, the
offset reset policies ``kcoord.offset.out.of.range`` and ``kcoord.initial.offset``
(docs/cli.md).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from admin.client import RESOURCE_GROUP, AdminClient
from admin.errors import EXIT_OK, UsageError
from admin.render import table, to_json

Command = Callable[[AdminClient, argparse.Namespace], int]

#: What the NEW column shows for a config set back to the broker's value.
DEFAULT = "(broker default)"


def _config_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"bad --config {text!r}: expected NAME=VALUE")
    return name.strip(), value.strip()


def register(gsub: Any, common: argparse.ArgumentParser, epilog: str, formatter: Any,
             command: Callable[[Command], Callable[[argparse.Namespace], int]]) -> None:
    """Add ``config get`` and ``config set`` under ``kcoord groups``."""
    config = gsub.add_parser("config", help="a group's own configs: session, heartbeat, offset reset policies",
                             description="A group's configs (GROUP config resources, Kafka 4 and kcoord).")
    csub = config.add_subparsers(dest="config_command", required=True, metavar="COMMAND")

    p = csub.add_parser("get", parents=[common], epilog=epilog, formatter_class=formatter,
                        help="every config of a group, with its value and where it comes from",
                        description="Every config of a group: its value and source (GROUP_CONFIG when the group "
                                    "has its own, else the broker's STATIC_BROKER_CONFIG or DEFAULT_CONFIG).")
    p.add_argument("group")
    p.set_defaults(func=command(config_get))

    p = csub.add_parser("set", parents=[common], epilog=epilog, formatter_class=formatter,
                        help="change a group's configs (a dry run unless --execute)",
                        description="Plan (default) or make changes to a group's configs. The broker checks "
                                    "the change either way; the group need not exist yet.")
    p.add_argument("group")
    p.add_argument("--config", dest="configs", action="append", default=[], type=_config_pair,
                   metavar="NAME=VALUE", help="set a config (repeatable), e.g. kcoord.offset.out.of.range=nearest")
    p.add_argument("--delete-config", dest="deleted", action="append", default=[], metavar="NAME",
                   help="remove the group's own value: back to the broker's (repeatable)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", dest="execute", action="store_false",
                      help="print the plan, change nothing (the default)")
    mode.add_argument("--execute", dest="execute", action="store_true", help="make the change")
    p.set_defaults(func=command(config_set), execute=False)


def _emit(args: argparse.Namespace, document: Any, text: str) -> None:
    print(to_json(document) if args.output == "json" else text)


def config_get(client: AdminClient, args: argparse.Namespace) -> int:
    configs = client.describe_configs(RESOURCE_GROUP, args.group)
    document = {"group": args.group, "configs": [
        {"name": c.name, "value": c.value, "source": c.source} for c in configs]}
    _emit(args, document, table(("CONFIG", "VALUE", "SOURCE"), [(c.name, c.value, c.source) for c in configs]))
    return EXIT_OK


def config_set(client: AdminClient, args: argparse.Namespace) -> int:
    changes = dict(args.configs)
    if not changes and not args.deleted:
        raise UsageError("say what to change: --config NAME=VALUE or --delete-config NAME")
    both = sorted(set(changes) & set(args.deleted))
    if both:
        raise UsageError(f"{', '.join(both)}: given to both --config and --delete-config")
    current = {c.name: c for c in client.describe_configs(RESOURCE_GROUP, args.group)}
    # The broker validates either way; only --execute keeps the change.
    client.alter_configs(RESOURCE_GROUP, args.group, changes, list(args.deleted), validate_only=not args.execute)
    rows = []
    for name in sorted(set(changes) | set(args.deleted)):
        before = current.get(name)
        rows.append({"config": name, "current": before.value if before else None,
                     "source": before.source if before else None,
                     "new": changes.get(name)})
    document = {"group": args.group, "executed": bool(args.execute), "changes": rows}
    text = table(("GROUP", "CONFIG", "CURRENT", "SOURCE", "NEW"),
                 [(args.group, r["config"], r["current"], r["source"], DEFAULT if r["new"] is None else r["new"])
                  for r in rows])
    if args.execute:
        text += f"\n\nChanged {len(rows)} config{'s' if len(rows) != 1 else ''} of group {args.group!r}."
    else:
        text += "\n\nDry run: nothing changed. Add --execute to make these changes."
    _emit(args, document, text)
    return EXIT_OK
