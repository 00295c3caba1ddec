"""``kcoord serve``: the broker's own command.

The ``kcoord`` root (``kcoord/cli.py``) adds it next to the admin and pipeline commands;
``python -m broker serve`` runs it alone.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker import logs
from broker.config import ConfigError, load_config

if TYPE_CHECKING:
    from broker.http import ExtensionFactory
    from broker.server import ClusterFactory

# The server (trio, storage) is imported only when `serve` runs: the other kcoord commands
# build this parser too and start faster without it.


def register(sub: Any, http_extension: ExtensionFactory | None = None,
             cluster: ClusterFactory | None = None) -> None:
    """Add ``serve`` to a parser's subcommands.

    ``http_extension`` adds to the HTTP surface (``kcoord`` adds the console); without it,
    ``--http-listen`` serves /metrics and /healthz only. ``cluster`` makes a node of a
    cluster when ``cluster.etcd.endpoints`` is set (``kcoord`` adds ``cluster.node``).
    """
    serve = sub.add_parser("serve", help="run the broker")
    serve.add_argument("--listen", default="127.0.0.1:9092", help="HOST:PORT to listen on (port 0: any)")
    serve.add_argument("--data-dir", default="./data", type=Path, help="where the logs live")
    serve.add_argument("--config", type=Path, help="a TOML file of Kafka broker config names")
    serve.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE",
                       help="one config value; repeatable; wins over --config")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    serve.add_argument("--log-format", default="kv", choices=list(logs.FORMATS),
                       help="kv: key=value lines (default); json: one JSON object per line")
    serve.add_argument("--request-log", action="store_true",
                       help="log one INFO line per request (peer, client, API, duration, reply size)")
    serve.add_argument("--http-listen", "--metrics-listen", dest="http_listen", metavar="HOST:PORT",
                       help="serve HTTP on HOST:PORT (port 0: any): Prometheus metrics at /metrics, a health "
                            "check at /healthz" + (", the console at /" if http_extension is not None else "")
                            + "; --metrics-listen is the same option")
    serve.add_argument("--node-id", type=int, metavar="N", help="this node's id (node.id)")
    serve.add_argument("--cluster", metavar="ETCD_ENDPOINTS",
                       help="join the cluster whose state is in these etcd endpoints (cluster.etcd.endpoints), "
                            "e.g. http://127.0.0.1:2379")
    serve.add_argument("--cluster-name", metavar="NAME", help="the cluster's name in etcd (cluster.name)")
    serve.set_defaults(func=serve_command, http_extension=http_extension, cluster_factory=cluster)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m broker``: the broker alone, so only ``serve``."""
    parser = argparse.ArgumentParser(
        prog="python -m broker", description="The kcoord broker alone; `kcoord` has every command."
    )
    register(parser.add_subparsers(dest="command", required=True))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


def serve_command(args: argparse.Namespace) -> int:
    """Run the broker; exit 2 for what the operator must change, 1 for a failure to run.

    Every start-up failure is one line that names its cause: the configuration (a key,
    ``--listen``), the data directory (not a directory, not writable, a newer format),
    its lock (another broker uses it) or the listen address (busy, not local).
    """
    import trio

    from broker.heap import collect_young_objects_less_often, keep_large_buffers
    from broker.listeners import parse_listeners, server_ssl_context
    from broker.server import ListenError, lock_data_dir, parse_listen, run_server
    from storage.coordinator_log import PartitionCountError
    from storage.data_dir import DataDirError, check_format, prepare
    from storage.partition import CorruptLogError

    logs.configure(args.log_level, args.log_format)
    sets = list(args.sets)
    for option, name in (("node_id", "node.id"), ("cluster", "cluster.etcd.endpoints"),
                         ("cluster_name", "cluster.name")):
        if getattr(args, option, None) is not None:
            sets.append(f"{name}={getattr(args, option)}")
    try:
        config = load_config(args.config, sets)
        specs = parse_listeners(config, parse_listen(args.listen))
        if any(spec.tls for spec in specs):
            server_ssl_context(config)
        if args.http_listen is not None:
            parse_listen(args.http_listen, "--http-listen")
        clustered = bool(config["cluster.etcd.endpoints"])
        if clustered and getattr(args, "cluster_factory", None) is None:
            raise ConfigError("cluster.etcd.endpoints: this command cannot run a cluster node; use `kcoord serve`")
        if clustered:
            inter = config["inter.broker.listener.name"] or specs[0].name
            spec = next((s for s in specs if s.name == inter), None)
            if spec is None or spec.protocol != "PLAINTEXT":
                raise ConfigError(f"inter.broker.listener.name: nodes copy partitions over listener {inter}, "
                                  "which must be a PLAINTEXT listener")
    except (ConfigError, ValueError) as exc:
        return _fail(f"configuration error: {exc}", 2)
    keep_large_buffers()
    collect_young_objects_less_often()
    try:
        prepare(args.data_dir)
        with lock_data_dir(args.data_dir):
            check_format(args.data_dir)
            trio.run(partial(run_server, http_listen=args.http_listen, http_extension=args.http_extension,
                             request_logging=args.request_log,
                             cluster=args.cluster_factory if clustered else None),
                     config, args.listen, args.data_dir)
    except DataDirError as exc:
        return _fail(str(exc), 2)
    except ListenError as exc:
        return _fail(str(exc), 2 if exc.configuration else 1)
    except (RuntimeError, CorruptLogError, PartitionCountError) as exc:
        return _fail(str(exc), 1)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        return _fail(f"data directory {args.data_dir}: {exc.strerror or exc}{where}", 1)
    return 0


def _fail(message: str, code: int) -> int:
    print(f"kcoord: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
