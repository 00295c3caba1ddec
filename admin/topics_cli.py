"""``kcoord topics``, ``kcoord produce`` and ``kcoord consume``: topics and records over the Kafka protocol.

Modelled on ``kafka-topics``, ``kafka-configs --entity-type topics``,
``kafka-delete-records``, and kcat's / rpk's produce and consume. Like ``kcoord groups``
they use only the Kafka protocol (through ``admin.client``), so they work against kcoord
and Apache Kafka alike, with the same options and exit codes (docs/cli.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from admin.cli import EXIT_CODES, _command, _emit, _Formatter, _typed, connection_options
from admin.client import RESOURCE_TOPIC, AdminClient, ConfigValue, TopicResult
from admin.errors import EXIT_OK, BrokerError, UsageError, error_name
from admin.records import CODECS, InRecord, OutRecord, consume, produce, start_offsets
from admin.render import table
from protocol.errors import ErrorCode

E = ErrorCode


# ---------------------------------------------------------------------- argument types


def _config_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise UsageError(f"bad --config {text!r}: expected NAME=VALUE")
    return name.strip(), value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise UsageError(f"expected at least 1, not {value}")
    return value


def _partition(text: str) -> int:
    if not text.isdigit():
        raise UsageError(f"{text!r} is not a partition number")
    return int(text)


def _header(text: str) -> tuple[str, bytes]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise UsageError(f"bad --header {text!r}: expected NAME=VALUE")
    return name, value.encode()


# ---------------------------------------------------------------------- parsers


def register(sub: Any) -> None:
    """Add ``topics``, ``produce`` and ``consume`` to the ``kcoord`` parser."""
    common = connection_options()
    topics = sub.add_parser("topics", help="list, describe, create, delete and alter topics",
                            description="Topics on any Kafka-compatible broker.")
    tsub = topics.add_subparsers(dest="topics_command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, description: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = tsub.add_parser(
            name, parents=[common], epilog=EXIT_CODES, formatter_class=_Formatter, help=help_text,
            description=description)
        return parser

    p = command("list", "list topics", "Every topic, with its partition count and replication factor.")
    p.add_argument("--internal", action="store_true", help="include internal topics (__consumer_offsets)")
    p.set_defaults(func=_command(topics_list))

    p = command("describe", "partitions, offsets and configs of topics",
                "Each topic's partitions (leader, replicas, in-sync replicas, log start and end offsets) "
                "and its configs: overrides only, or every config with --all-configs.")
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    p.add_argument("--all-configs", action="store_true", help="every config with its source, not only overrides")
    p.set_defaults(func=_command(topics_describe))

    p = command("create", "create a topic", "Create a topic (CreateTopics).")
    p.add_argument("topic")
    p.add_argument("--partitions", type=_typed(_positive), default=-1, metavar="N",
                   help="partitions (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=_typed(_positive), default=-1, metavar="N",
                   help="replicas of each partition (default: the broker's default)")
    p.add_argument("--config", dest="configs", action="append", default=[], type=_typed(_config_pair),
                   metavar="NAME=VALUE", help="a topic config (repeatable), e.g. cleanup.policy=compact")
    p.add_argument("--if-not-exists", action="store_true", help="succeed if the topic already exists")
    p.add_argument("--validate-only", action="store_true", help="check the request; create nothing")
    p.set_defaults(func=_command(topics_create))

    p = command("delete", "delete topics and their data", "Delete topics (DeleteTopics) and all their records.")
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    p.add_argument("--if-exists", action="store_true", help="succeed for topics that do not exist")
    p.set_defaults(func=_command(topics_delete))

    p = command("alter", "change partitions or configs of a topic",
                "Add partitions (CreatePartitions) or set and remove config overrides (IncrementalAlterConfigs), "
                "as kafka-topics --alter and kafka-configs --alter do.")
    p.add_argument("topic")
    p.add_argument("--partitions", type=_typed(_positive), metavar="N", help="grow the topic to N partitions")
    p.add_argument("--config", dest="configs", action="append", default=[], type=_typed(_config_pair),
                   metavar="NAME=VALUE", help="set a config override (repeatable)")
    p.add_argument("--delete-config", dest="deleted", action="append", default=[], metavar="NAME",
                   help="remove a config override, back to the broker default (repeatable)")
    p.add_argument("--validate-only", action="store_true", help="check the request; change nothing")
    p.set_defaults(func=_command(topics_alter))

    p = command("delete-records", "delete the records of partitions below an offset",
                "Move partitions' log start offsets (DeleteRecords), as kafka-delete-records does: "
                "records below the offset are gone for every consumer.")
    p.add_argument("topic", nargs="?", help="the topic (with --partition and --offset)")
    p.add_argument("--partition", action="append", type=_typed(_partition), default=[], dest="partitions",
                   metavar="P", help="a partition (repeatable; default: every partition)")
    p.add_argument("--offset", type=int, metavar="N", help="delete records below N (-1: every record)")
    p.add_argument("--offset-json-file", type=Path, metavar="FILE",
                   help='kafka-delete-records\'s file: {"partitions": [{"topic", "partition", "offset"}, ...]}')
    p.set_defaults(func=_command(topics_delete_records))

    p = sub.add_parser("produce", parents=[common], epilog=EXIT_CODES, formatter_class=_Formatter,
                       help="write records to a topic",
                       description="Write records to a topic: one per --value, or one per line of standard "
                                   "input. Keys choose partitions as Kafka's Java client does.")
    p.add_argument("topic")
    p.add_argument("--value", dest="values", action="append", default=[], metavar="TEXT",
                   help="a record value (repeatable); without it, each line of standard input is a record")
    p.add_argument("--key", help="the key of every record")
    p.add_argument("--key-separator", metavar="SEP",
                   help="split each input line at the first SEP into key and value (as kcat -K)")
    p.add_argument("--partition", type=_typed(_partition), metavar="P", help="write to this partition only")
    p.add_argument("--header", dest="headers", action="append", default=[], type=_typed(_header),
                   metavar="NAME=VALUE", help="a header on every record (repeatable)")
    p.add_argument("--acks", type=int, choices=(-1, 0, 1), default=-1, help="-1 (all, the default), 1 or 0")
    p.add_argument("--compression", choices=tuple(CODECS), default="none", help="batch codec (default none)")
    p.set_defaults(func=_command(produce_command))

    p = sub.add_parser("consume", parents=[common], epilog=EXIT_CODES, formatter_class=_Formatter,
                       help="read records from a topic",
                       description="Read records from a topic's partitions without a consumer group: values "
                                   "one per line, or JSON lines with --output json.")
    p.add_argument("topic")
    p.add_argument("--partition", action="append", type=_typed(_partition), default=[], dest="partitions",
                   metavar="P", help="read this partition (repeatable; default: every partition)")
    p.add_argument("--offset", default="beginning", metavar="beginning|end|N|-N",
                   help="where to start: the log start (default), the end, offset N, or N before the end")
    p.add_argument("--count", type=_typed(_positive), metavar="N", help="stop after N records")
    p.add_argument("--follow", action="store_true",
                   help="keep waiting for new records (default: stop at the end of each partition)")
    p.add_argument("--print-key", action="store_true", help="print KEY<TAB>VALUE")
    p.set_defaults(func=_command(consume_command))


# ---------------------------------------------------------------------- topics


def topics_list(client: AdminClient, args: argparse.Namespace) -> int:
    cluster = client.metadata(None)
    rows = []
    for name in sorted(cluster.partitions):
        if name in cluster.internal and not args.internal:
            continue
        partitions = cluster.partitions[name]
        replication = max((len(p.replicas) for p in partitions), default=0)
        rows.append({"topic": name, "partitions": len(partitions), "replication_factor": replication,
                     "internal": name in cluster.internal})
    text = table(("TOPIC", "PARTITIONS", "REPLICAS"), [(r["topic"], r["partitions"], r["replication_factor"])
                                                        for r in rows]) if rows else "No topics."
    _emit(args, {"topics": rows}, text)
    return EXIT_OK


def topics_describe(client: AdminClient, args: argparse.Namespace) -> int:
    names = list(dict.fromkeys(args.topics))
    partitions = client.partitions_of(names)  # an unknown topic is a usage error
    cluster = client.metadata(names)
    ranges = client.log_range([(t, p) for t in names for p in partitions[t]])
    documents = []
    for name in names:
        configs = client.describe_configs(RESOURCE_TOPIC, name)
        shown = configs if args.all_configs else [c for c in configs if c.source == "TOPIC_CONFIG"]
        documents.append({
            "topic": name,
            "topic_id": cluster.topic_ids.get(name),
            "partitions": [{
                "partition": p.partition, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isr),
                "log_start_offset": ranges[(name, p.partition)][0], "log_end_offset": ranges[(name, p.partition)][1],
            } for p in cluster.partitions[name]],
            "configs": [_config_document(c) for c in shown],
        })
    _emit(args, documents[0] if len(documents) == 1 else {"topics": documents},
          "\n\n".join(_topic_text(d) for d in documents))
    return EXIT_OK


def _config_document(config: ConfigValue) -> dict[str, Any]:
    return {"name": config.name, "value": config.value, "source": config.source, "read_only": config.read_only,
            "sensitive": config.sensitive}


def _topic_text(document: dict[str, Any]) -> str:
    parts = document["partitions"]
    head = (f"Topic {document['topic']!r}: {len(parts)} partition{'s' if len(parts) != 1 else ''}, "
            f"replication factor {max((len(p['replicas']) for p in parts), default=0)}, id {document['topic_id']}")
    partitions = table(("PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START-OFFSET", "LOG-END-OFFSET"), [
        (p["partition"], p["leader"], ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])),
         p["log_start_offset"], p["log_end_offset"]) for p in parts])
    configs = document["configs"]
    if configs:
        config_text = table(("CONFIG", "VALUE", "SOURCE"), [(c["name"], c["value"], c["source"]) for c in configs])
    else:
        config_text = "No config overrides (--all-configs shows every config and where its value comes from)."
    return "\n\n".join((head, partitions, config_text))


def topics_create(client: AdminClient, args: argparse.Namespace) -> int:
    configs = dict(args.configs)
    (result,) = client.create_topics([(args.topic, args.partitions, args.replication_factor, configs)],
                                     validate_only=args.validate_only)
    if result.error == E.TOPIC_ALREADY_EXISTS and args.if_not_exists:
        _emit(args, {"topic": args.topic, "created": False}, f"Topic {args.topic!r} already exists.")
        return EXIT_OK
    _raise_topic_error(result, "create")
    verb = "would be created (validate only)" if args.validate_only else "created"
    _emit(args, {"topic": args.topic, "created": not args.validate_only}, f"Topic {args.topic!r} {verb}.")
    return EXIT_OK


def topics_delete(client: AdminClient, args: argparse.Namespace) -> int:
    names = list(dict.fromkeys(args.topics))
    results = client.delete_topics(names)
    deleted, missing = [], []
    for result in results:
        if result.error == E.UNKNOWN_TOPIC_OR_PARTITION and args.if_exists:
            missing.append(result.name)
            continue
        _raise_topic_error(result, "delete")
        deleted.append(result.name)
    text = "\n".join([f"Deleted topic {n!r}." for n in deleted] + [f"Topic {n!r} does not exist." for n in missing])
    _emit(args, {"deleted": deleted, "missing": missing}, text)
    return EXIT_OK


def topics_alter(client: AdminClient, args: argparse.Namespace) -> int:
    if args.partitions is None and not args.configs and not args.deleted:
        raise UsageError("say what to change: --partitions N, --config NAME=VALUE or --delete-config NAME")
    client.partitions_of([args.topic])  # an unknown topic is a usage error
    changes: list[str] = []
    if args.configs or args.deleted:
        configs = dict(args.configs)
        client.alter_configs(RESOURCE_TOPIC, args.topic, configs, list(args.deleted), args.validate_only)
        changes += [f"{k}={v}" for k, v in configs.items()] + [f"{k} removed" for k in args.deleted]
    if args.partitions is not None:
        (result,) = client.create_partitions({args.topic: args.partitions}, args.validate_only)
        _raise_topic_error(result, "add partitions to")
        changes.append(f"{args.partitions} partitions")
    verb = "would change (validate only)" if args.validate_only else "changed"
    _emit(args, {"topic": args.topic, "changed": not args.validate_only, "changes": changes},
          f"Topic {args.topic!r} {verb}: {', '.join(changes)}.")
    return EXIT_OK


def _raise_topic_error(result: TopicResult, action: str) -> None:
    if result.error == E.NONE:
        return
    detail = f": {result.message}" if result.message else ""
    what = f"cannot {action} topic {result.name!r}{detail} ({error_name(result.error)})"
    if result.error in (E.TOPIC_ALREADY_EXISTS, E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_CONFIG,
                        E.INVALID_PARTITIONS, E.INVALID_REPLICATION_FACTOR, E.INVALID_TOPIC_EXCEPTION,
                        E.INVALID_REPLICA_ASSIGNMENT, E.INVALID_REQUEST):
        raise UsageError(what)
    raise BrokerError(what)


def topics_delete_records(client: AdminClient, args: argparse.Namespace) -> int:
    if (args.offset_json_file is None) == (args.topic is None):
        raise UsageError("give a TOPIC with --offset N (and --partition P), or --offset-json-file FILE")
    if args.offset_json_file is not None:
        wanted = _read_offset_file(args.offset_json_file)
    else:
        if args.offset is None:
            raise UsageError("--offset N is required with a TOPIC (-1 deletes every record)")
        partitions = args.partitions or client.partitions_of([args.topic])[args.topic]
        wanted = {(args.topic, p): args.offset for p in partitions}
    results = client.delete_records(wanted)
    rows = []
    failures = []
    for (topic, partition), (code, low) in sorted(results.items()):
        rows.append({"topic": topic, "partition": partition, "low_watermark": low if code == E.NONE else None,
                     "error": None if code == E.NONE else error_name(code)})
        if code != E.NONE:
            failures.append(f"{topic}-{partition}: {error_name(code)}")
    _emit(args, {"partitions": rows}, table(("TOPIC", "PARTITION", "LOW-WATERMARK", "ERROR"), [
        (r["topic"], r["partition"], r["low_watermark"], r["error"]) for r in rows]))
    if failures:
        raise BrokerError("DeleteRecords failed for " + "; ".join(failures))
    return EXIT_OK


def _read_offset_file(path: Path) -> dict[tuple[str, int], int]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {(exc.strerror or str(exc)).lower()}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise UsageError(f'{path}: expected {{"partitions": [{{"topic": T, "partition": P, "offset": N}}, ...]}}')
    wanted: dict[tuple[str, int], int] = {}
    for index, entry in enumerate(entries, start=1):
        if not (isinstance(entry, dict) and isinstance(entry.get("topic"), str)
                and isinstance(entry.get("partition"), int) and isinstance(entry.get("offset"), int)):
            raise UsageError(f"{path}: entry {index} needs a topic (string), a partition and an offset (integers)")
        key = (entry["topic"], entry["partition"])
        if key in wanted:
            raise UsageError(f"{path}: {key[0]}-{key[1]} is listed twice")
        wanted[key] = entry["offset"]
    return wanted


# ---------------------------------------------------------------------- produce and consume


def _input_records(args: argparse.Namespace) -> Iterator[OutRecord]:
    headers = tuple(args.headers)
    key = args.key.encode() if args.key is not None else None
    lines = args.values if args.values else (line.rstrip("\n") for line in sys.stdin)
    for line in lines:
        if args.key_separator is not None and not args.values:
            if args.key_separator not in line:
                raise UsageError(f"input line has no key separator {args.key_separator!r}: {line[:60]!r}")
            line_key, line = line.split(args.key_separator, 1)
            yield OutRecord(line_key.encode(), line.encode(), headers)
        else:
            yield OutRecord(key, line.encode(), headers)


def produce_command(client: AdminClient, args: argparse.Namespace) -> int:
    records = list(_input_records(args))
    if not records:
        raise UsageError("nothing to produce: give --value TEXT or lines on standard input")
    results = produce(client, args.topic, records, partition=args.partition, acks=args.acks,
                      compression=args.compression, timeout_ms=int(args.timeout * 1000))
    document = {"topic": args.topic, "records": len(records), "partitions": [
        {"partition": r.partition, "base_offset": r.base_offset if r.base_offset >= 0 else None, "count": r.count}
        for r in results]}
    where = ", ".join(f"partition {r.partition} at offset {r.base_offset}" if r.base_offset >= 0
                      else f"partition {r.partition}" for r in results)
    _emit(args, document, f"Produced {len(records)} record{'s' if len(records) != 1 else ''} to "
                          f"{args.topic!r} ({where}).")
    return EXIT_OK


def consume_command(client: AdminClient, args: argparse.Namespace) -> int:
    known = client.partitions_of([args.topic])[args.topic]
    missing = [p for p in args.partitions if p not in known]
    if missing:
        raise UsageError(f"topic {args.topic!r} has partitions 0-{len(known) - 1}; "
                         f"no partition {', '.join(map(str, missing))}")
    partitions = args.partitions or known
    positions = start_offsets(client, args.topic, partitions, args.offset)
    try:
        for record in consume(client, args.topic, positions, count=args.count, follow=args.follow):
            print(_record_line(record, args), flush=args.follow)
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def _record_line(record: InRecord, args: argparse.Namespace) -> str:
    if args.output == "json":
        return json.dumps({
            "topic": record.topic, "partition": record.partition, "offset": record.offset,
            "timestamp": record.timestamp, "key": _text(record.key), "value": _text(record.value),
            "headers": [{"key": k, "value": _text(v)} for k, v in record.headers],
        }, ensure_ascii=False)
    value = _text(record.value) or ""
    return f"{_text(record.key) or ''}\t{value}" if args.print_key else value
