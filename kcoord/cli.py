"""The ``kcoord`` command: one program for the broker, the admin tools and the pipeline.

Each package owns its commands and adds them here through ``register(subparsers)``, setting
``func`` on its parsers to a callable that takes the parsed arguments and returns the exit
code. Registering imports no server, trio, pyspark or pyarrow: those load only when the
command that needs them runs, so ``kcoord groups`` and ``kcoord offsets`` start fast.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, NoReturn

import admin.cli
import admin.topics_cli
import admin.transactions_cli
import broker.cli
import cluster.cli
import pipeline.cli

if TYPE_CHECKING:
    from pathlib import Path

    from broker.app import ClusterMembership
    from broker.config import Config
    from broker.http import HttpContext, HttpExtension


class BriefParser(argparse.ArgumentParser):
    """Usage errors in two lines: the error, then where the usage is.

    argparse's default prints the whole usage first, which hides a one-line error (a
    mistyped time, say) under a screen of options.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\nRun '{self.prog} --help' for usage.\n")


def _version() -> str:
    try:
        return version("kcoord")
    except PackageNotFoundError:
        return "0+unknown"


def console(context: HttpContext) -> HttpExtension:
    """The web console on ``kcoord serve --http-listen`` (imported only when it starts)."""
    from console.app import extension

    return extension(context)


def cluster_node(config: Config, data_dir: Path) -> ClusterMembership:
    """This process as a node of a cluster (imported only when `serve --cluster` starts)."""
    from cluster.node import ClusterNode

    return ClusterNode(config, data_dir)


def build_parser() -> argparse.ArgumentParser:
    parser = BriefParser(
        prog="kcoord", description="A Kafka-compatible group coordinator broker."
    )
    parser.add_argument("--version", action="version", version=f"kcoord {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    broker.cli.register(sub, http_extension=console, cluster=cluster_node)
    admin.topics_cli.register(sub)
    admin.cli.register(sub)
    admin.transactions_cli.register(sub)
    pipeline.cli.register(sub)
    cluster.cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
