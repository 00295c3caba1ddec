"""The ``kcoord`` command."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import trio

from broker.config import ConfigError, load_config
from broker.server import lock_data_dir, parse_listen, run_server
from storage.coordinator_log import PartitionCountError
from storage.partition import CorruptLogError


def _version() -> str:
    try:
        return version("kcoord")
    except PackageNotFoundError:
        return "0+unknown"


# Modules that add subcommands: each has ``register(subparsers)`` and sets ``func`` on its
# parsers to a callable taking the parsed arguments and returning the exit code.
SUBCOMMAND_MODULES = ("broker.admin.cli", "pipeline.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kcoord", description="A Kafka-compatible group coordinator broker."
    )
    parser.add_argument("--version", action="version", version=f"kcoord {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the broker")
    serve.add_argument("--listen", default="127.0.0.1:9092", help="HOST:PORT to listen on (port 0: any)")
    serve.add_argument("--data-dir", default="./data", type=Path, help="where the logs live")
    serve.add_argument("--config", type=Path, help="a TOML file of Kafka broker config names")
    serve.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE",
                       help="one config value; repeatable; wins over --config")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    serve.set_defaults(func=serve_command)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


def serve_command(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
    )
    try:
        config = load_config(args.config, args.sets)
        parse_listen(args.listen)
    except (ConfigError, ValueError) as exc:
        print(f"kcoord: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        with lock_data_dir(args.data_dir):
            trio.run(run_server, config, args.listen, args.data_dir)
    except (RuntimeError, CorruptLogError, PartitionCountError) as exc:
        print(f"kcoord: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"kcoord: cannot listen on {args.listen}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
