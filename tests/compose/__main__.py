"""``python -m tests.compose check|up [--cluster]|down``: the compose topology from the Makefile.

``check`` says which container engine the compose tests will use, or plainly why
containers cannot run here (exit 0 either way). ``up`` and ``down`` are ``make compose-up``
and ``make compose-down`` where there is no Docker: ``up`` builds the images with podman,
starts the services in ``depends_on`` order (each when its conditions hold), prints what the
one-shot services printed, and keeps the broker running until Ctrl-C; then it stops and
removes the containers and keeps the volume, as ``docker compose down`` does. ``down``
removes the volume too.
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.compose.harness import REPO, CommandFailed, Project, find_engine, open_engine
from tests.test_compose import dependency_order

PROJECT = "kcoord"
CLUSTER_PROJECT = "kcoord-cluster"
CLUSTER_FILE = REPO / "docker-compose.cluster.yml"


def check() -> int:
    choice = find_engine()
    if isinstance(choice, str):
        print(f"compose: SKIPPED, containers cannot run on this machine: {choice}")
    else:
        print(f"compose: containers run here with {choice.kind} ({' '.join(choice.compose_tool)})")
    return 0


def up(cluster: bool = False) -> int:
    choice = find_engine()
    if isinstance(choice, str):
        print(f"compose-up: containers cannot run on this machine: {choice}", file=sys.stderr)
        return 1
    watched = "kcoord-1" if cluster else "kcoord"
    with open_engine(choice) as engine:
        project = (Project(engine, CLUSTER_PROJECT, {}, CLUSTER_FILE) if cluster
                   else Project(engine, PROJECT, {}))
        try:
            project.build()
            project.create()
            for service in dependency_order(project.spec):
                print(f"compose-up: starting {service}", file=sys.stderr)
                project.start(service, timeout=600)
                if project.spec["services"][service].get("restart") == "no":
                    code = project.wait_exit(service, timeout=600)
                    print(project.logs(service)[0], end="")
                    print(f"compose-up: {service} exited {code}", file=sys.stderr)
            print("compose-up: the broker is running; Ctrl-C stops the topology", file=sys.stderr)
            while project.state(watched) == "running":
                time.sleep(2)
            print(project.describe(watched), file=sys.stderr)
        except KeyboardInterrupt:
            pass
        except CommandFailed as exc:
            print(f"compose-up: {exc}", file=sys.stderr)
            return 1
        finally:
            print("compose-up: stopping (the volume is kept; `make compose-down` removes it)", file=sys.stderr)
            project.down(volumes=False)
    return 0


def down() -> int:
    choice = find_engine()
    if isinstance(choice, str):
        print(f"compose-down: containers cannot run on this machine: {choice}", file=sys.stderr)
        return 1
    with open_engine(choice, build=False) as engine:
        Project(engine, PROJECT, {}).down()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.compose", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("check", "up", "down"))
    parser.add_argument("--cluster", action="store_true", help="up: the cluster profile (docker-compose.cluster.yml)")
    args = parser.parse_args(argv)
    if args.command == "up":
        return up(args.cluster)
    return {"check": check, "down": down}[args.command]()


if __name__ == "__main__":
    sys.exit(main())
