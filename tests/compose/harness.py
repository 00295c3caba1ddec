"""docker-compose.yml run in real containers, with Docker or with podman.

``find_engine`` says which container engine this machine can use, or why none: Docker with
its compose plugin where a Docker daemon answers, else podman with podman-compose, run by
root in a session of deploy/compose/podman-session.sh (podman's storage in the
repository's git-ignored .compose/, nothing written outside it and the temp directory).
``open_engine`` opens that engine; with podman it also imports the locally built Debian
base (deploy/compose/build-base.sh) and fills the wheelhouse (deploy/compose/wheelhouse.py),
both cached between runs, and sets the build arguments that use them.

A ``Project`` is one compose project on that engine. It builds the images with the compose
tool and creates every container with ``up --no-start``, then starts services one at a
time, each when its ``depends_on`` conditions hold: ``service_healthy`` by running the
healthcheck until it passes (``podman healthcheck run``; Docker's own status where a daemon
schedules it), ``service_completed_successfully`` by waiting for exit code 0. So the start
order is the one ``docker compose up`` gives, also with a compose tool that does not wait
and without the systemd timers podman schedules healthchecks with. A test of a topology
drives the project step by step (start, stop, exec, run a command on the compose network)
and tears it down with its volumes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.test_compose import COMPOSE_FILE, REPO, depends_on, load_compose, seconds

SESSION_SCRIPT = REPO / "deploy" / "compose" / "podman-session.sh"
BASE_SCRIPT = REPO / "deploy" / "compose" / "build-base.sh"
WHEELHOUSE_SCRIPT = REPO / "deploy" / "compose" / "wheelhouse.py"
STATE = Path(os.environ.get("KCOORD_COMPOSE_STATE", REPO / ".compose"))
BASE_ARCHIVE = STATE / "base" / "bookworm.tar"
BASE_IMAGE = "localhost/kcoord-base:bookworm"
BASE_LABEL = "org.kcoord.rootfs-sha256"

BUILD_TIMEOUT = 1800.0
COMMAND_TIMEOUT = 120.0


class CommandFailed(AssertionError):
    """A container or compose command exited non-zero; carries what it printed."""


@dataclass(frozen=True)
class EngineChoice:
    kind: str  # "docker" or "podman"
    compose_tool: tuple[str, ...]


def _answers(argv: Sequence[str], timeout: float = 30.0) -> bool:
    try:
        return subprocess.run(list(argv), capture_output=True, timeout=timeout).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_engine() -> EngineChoice | str:
    """The engine to use here, or a sentence saying why containers cannot run.

    ``KCOORD_COMPOSE_ENGINE=docker|podman`` chooses one; otherwise Docker when its daemon
    and compose plugin answer, else podman.
    """
    wanted = os.environ.get("KCOORD_COMPOSE_ENGINE", "")
    reasons: list[str] = []
    if wanted in ("", "docker"):
        if shutil.which("docker") is None:
            reasons.append("no docker command")
        elif not _answers(["docker", "compose", "version"]):
            reasons.append("docker has no compose plugin")
        elif not _answers(["docker", "info"]):
            reasons.append("no Docker daemon answers")
        else:
            return EngineChoice("docker", ("docker", "compose"))
    if wanted in ("", "podman"):
        missing = [tool for tool in ("podman", "podman-compose", "runc", "unshare", "nsenter", "mount")
                   if shutil.which(tool) is None]
        if missing:
            reasons.append(f"no {', '.join(missing)} (`make compose-tools` installs them as root)")
        elif os.geteuid() != 0:
            reasons.append("podman without a daemon needs root here (a private mount namespace)")
        elif not BASE_ARCHIVE.exists() and not (shutil.which("mmdebstrap") or shutil.which("debootstrap")):
            reasons.append("no local base image and neither mmdebstrap nor debootstrap to build one")
        else:
            return EngineChoice("podman", ("podman-compose",))
    if wanted not in ("", "docker", "podman"):
        reasons.append(f"KCOORD_COMPOSE_ENGINE={wanted!r} is neither docker nor podman")
    return "; ".join(reasons)


@dataclass
class Engine:
    """A container engine and its compose tool, with what every command runs under."""

    kind: str
    compose_tool: tuple[str, ...]
    env: dict[str, str]
    prefix: tuple[str, ...] = ()
    #: compose variables that select how the images are built here (base image, offline pip)
    build_variables: dict[str, str] = field(default_factory=dict)
    #: seconds the preparations took (the local base image, the wheelhouse)
    timings: dict[str, float] = field(default_factory=dict)

    def run(self, argv: Sequence[str], timeout: float = COMMAND_TIMEOUT, check: bool = True,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        full = [*self.prefix, *argv]
        try:
            result = subprocess.run(full, cwd=REPO, env={**self.env, **(env or {})}, capture_output=True,
                                    text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise CommandFailed(f"{' '.join(argv)} did not finish within {timeout:g}s\n"
                                f"{_text(exc.stdout)}\n{_text(exc.stderr)}") from None
        if check and result.returncode != 0:
            raise CommandFailed(f"{' '.join(argv)} exited {result.returncode}\n"
                                f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}")
        return result

    def cli(self, *args: str, timeout: float = COMMAND_TIMEOUT, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``docker ARGS`` or ``podman ARGS``."""
        return self.run([self.kind, *args], timeout=timeout, check=check)


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


@contextmanager
def open_engine(choice: EngineChoice, build: bool = True) -> Iterator[Engine]:
    """The chosen engine; with podman, in a session, and ready to build (``build``): the
    local base image imported and the wheelhouse filled."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if choice.kind == "docker":
        yield Engine("docker", choice.compose_tool, env)
        return
    with podman_session(env) as (prefix, session_env):
        engine = Engine("podman", choice.compose_tool, {**env, **session_env}, prefix)
        if build:
            began = time.monotonic()
            engine.build_variables = {"KCOORD_PYTHON_IMAGE": import_base(engine), "KCOORD_PIP_OFFLINE": "1"}
            engine.timings["base image"] = time.monotonic() - began
            began = time.monotonic()
            fill_wheelhouse()
            engine.timings["wheelhouse"] = time.monotonic() - began
        yield engine


@contextmanager
def podman_session(env: Mapping[str, str]) -> Iterator[tuple[tuple[str, ...], dict[str, str]]]:
    """A podman-session.sh ``hold``: the nsenter prefix into it and the variables it set."""
    # its own session: a Ctrl-C meant for the caller must not end it before the teardown
    holder = subprocess.Popen([str(SESSION_SCRIPT), "hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**env, "KCOORD_COMPOSE_STATE": str(STATE)},
                              start_new_session=True)
    assert holder.stdin is not None and holder.stdout is not None
    variables: dict[str, str] = {}
    try:
        for line in holder.stdout:  # the script prints a few lines and then `ready`
            line = line.strip()
            if line == "ready":
                break
            key, _, value = line.partition("=")
            variables[key] = value
        else:
            raise CommandFailed(f"podman-session.sh hold ended early:\n{holder.stderr.read() if holder.stderr else ''}")
        pid = variables.pop("pid")
        prefix = ("nsenter", f"--mount=/proc/{pid}/ns/mnt", f"--wd={REPO}", "--")
        yield prefix, variables
    finally:
        holder.stdin.close()
        try:
            holder.wait(timeout=30)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait(timeout=10)


def import_base(engine: Engine) -> str:
    """The local Debian base as an image, built (deploy/compose/build-base.sh) if not cached.

    The archive is imported again only when its content changed: the image carries the
    archive's hash as a label, so the layers built on it stay cached between runs.
    """
    if not BASE_ARCHIVE.exists():
        subprocess.run([str(BASE_SCRIPT), str(BASE_ARCHIVE)], check=True, timeout=BUILD_TIMEOUT)
    digest = hashlib.sha256()
    with BASE_ARCHIVE.open("rb") as archive:
        for chunk in iter(lambda: archive.read(1 << 20), b""):
            digest.update(chunk)
    present = engine.cli("image", "inspect", "--format", f'{{{{index .Labels "{BASE_LABEL}"}}}}', BASE_IMAGE,
                         check=False)
    if present.returncode != 0 or present.stdout.strip() != digest.hexdigest():
        engine.cli("import", "--change", f"LABEL {BASE_LABEL}={digest.hexdigest()}", str(BASE_ARCHIVE),
                   BASE_IMAGE, timeout=600)
    return BASE_IMAGE


def fill_wheelhouse() -> None:
    """deploy/wheelhouse/ for the offline builds (a no-op when its inputs did not change)."""
    subprocess.run([sys.executable, str(WHEELHOUSE_SCRIPT)], check=True, timeout=BUILD_TIMEOUT, cwd=REPO)


# --------------------------------------------------------------------------- a compose project


@dataclass
class Project:
    """One compose project: its containers, volumes and network, on one engine."""

    engine: Engine
    name: str
    variables: dict[str, str]
    file: Path = COMPOSE_FILE
    #: compose profiles to enable (Docker's ``--profile``; podman-compose 1.0 has no
    #: profiles and creates every service, which the harness starts one by one anyway)
    profiles: tuple[str, ...] = ()
    #: seconds each step took, by name, for the record in docs/deployment.md
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.variables = {**self.engine.build_variables, **self.variables}
        self.spec = load_compose(self.variables, self.file)

    # ------------------------------------------------------------------ compose commands

    def compose(self, *args: str, timeout: float = COMMAND_TIMEOUT, check: bool = True) -> subprocess.CompletedProcess[str]:
        profiles = [arg for name in self.profiles for arg in ("--profile", name)] if self.engine.kind == "docker" else []
        argv = [*self.engine.compose_tool, "-p", self.name, "-f", str(self.file), *profiles, *args]
        return self.engine.run(argv, timeout=timeout, check=check, env=self.variables)

    def build(self) -> None:
        """Build every image with the compose tool, each once (services may share one), and
        check that each exists; ``CommandFailed`` with the build's output if one does not."""
        first_of_image: dict[str, str] = {}
        for service, spec in self.spec["services"].items():
            if "build" in spec:
                first_of_image.setdefault(str(spec.get("image", service)), service)
        began = time.monotonic()
        built = self.compose("build", *first_of_image.values(), timeout=BUILD_TIMEOUT)
        self.timings["build"] = time.monotonic() - began
        # podman-compose exits 0 even when an image's build fails (a full disk, say): the
        # failure would show only later, as a missing image, far from its cause.
        missing = [image for image in first_of_image
                   if self.engine.cli("image", "inspect", "--format", "{{.Id}}", image, check=False).returncode]
        if missing:
            raise CommandFailed(f"compose build exited {built.returncode} but made no image {', '.join(missing)}\n"
                                f"stdout:\n{built.stdout[-4000:]}\nstderr:\n{built.stderr[-4000:]}")

    def create(self) -> None:
        """Every service's container, the network and the volumes; nothing started."""
        self.compose("up", "--no-start", "--no-build")

    def down(self, volumes: bool = True) -> None:
        """Remove the containers, the network and (``volumes``) the volumes, whatever the
        compose tool left behind."""
        self.compose("down", *(["--volumes"] if volumes else []), timeout=300, check=False)
        label = f"label=com.docker.compose.project={self.name}"
        for container in self.engine.cli("ps", "--all", "--quiet", "--filter", label, check=False).stdout.split():
            self.engine.cli("rm", "--force", container, check=False)
        if volumes:
            for volume in self.engine.cli("volume", "ls", "--quiet", "--filter", label, check=False).stdout.split():
                self.engine.cli("volume", "rm", "--force", volume, check=False)
        for network in self.networks():
            self.engine.cli("network", "rm", network, check=False)

    def leftovers(self) -> dict[str, list[str]]:
        """The project's containers, volumes and networks that still exist."""
        label = f"label=com.docker.compose.project={self.name}"
        return {
            "containers": self.engine.cli("ps", "--all", "--quiet", "--filter", label).stdout.split(),
            "volumes": self.engine.cli("volume", "ls", "--quiet", "--filter", label).stdout.split(),
            "networks": self.networks(),
        }

    def networks(self) -> list[str]:
        listed = self.engine.cli("network", "ls", "--format", "{{.Name}}", check=False).stdout.split()
        return [name for name in listed if name == f"{self.name}_default"]

    # ------------------------------------------------------------------ containers

    def container(self, service: str) -> str:
        found = self.engine.cli(
            "ps", "--all", "--quiet", "--no-trunc",
            "--filter", f"label=com.docker.compose.project={self.name}",
            "--filter", f"label=com.docker.compose.service={service}",
        ).stdout.split()
        assert len(found) == 1, f"{service}: expected one container, found {found}"
        return found[0]

    def inspect(self, service: str, template: str) -> str:
        return self.engine.cli("inspect", "--format", template, self.container(service)).stdout.strip()

    def state(self, service: str) -> str:
        return self.inspect(service, "{{.State.Status}}")

    def logs(self, service: str) -> tuple[str, str]:
        """(standard output, standard error) of the service's container, every run of it."""
        result = self.engine.cli("logs", self.container(service))
        return result.stdout, result.stderr

    def network(self, service: str) -> str:
        names = self.inspect(service, "{{range $name, $_ := .NetworkSettings.Networks}}{{$name}} {{end}}").split()
        assert len(names) == 1, f"{service} is on networks {names}"
        return names[0]

    def image(self, service: str) -> str:
        return str(self.spec["services"][service]["image"])

    def image_sizes(self) -> dict[str, int]:
        """Bytes of each service image, as the engine reports them."""
        images = sorted({self.image(service) for service in self.spec["services"]})
        return {image: int(self.engine.cli("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())
                for image in images}

    # ------------------------------------------------------------------ start order

    def start(self, service: str, timeout: float = COMMAND_TIMEOUT) -> None:
        """Start a service's container once its ``depends_on`` conditions hold."""
        for dependency, condition in depends_on(self.spec["services"][service]).items():
            if condition == "service_healthy":
                self.wait_healthy(dependency)
            elif condition == "service_completed_successfully":
                # a container never started "exits" 0 at once for `wait`: that is no completion
                assert self.state(dependency) != "created", f"{service} needs {dependency} started first"
                code = self.wait_exit(dependency, timeout)
                assert code == 0, f"{service} needs {dependency} to exit 0; it exited {code}\n{self.describe(dependency)}"
            else:
                assert self.state(dependency) == "running", f"{service} needs {dependency} running"
        self.engine.cli("start", self.container(service))

    def healthcheck_budget(self, service: str) -> float:
        """How long compose lets a service become healthy: start period plus every retry."""
        check = self.spec["services"][service]["healthcheck"]
        retries = int(check["retries"])
        return seconds(check["start_period"]) + retries * (seconds(check["interval"]) + seconds(check["timeout"]))

    def wait_healthy(self, service: str, timeout: float | None = None) -> float:
        """Run the service's healthcheck until it passes (bounded); the seconds it took.

        podman runs the check now (``podman healthcheck run``), the same command its timer
        would run; Docker's daemon runs it on its own schedule and reports the status.
        """
        deadline = time.monotonic() + (timeout if timeout is not None else self.healthcheck_budget(service))
        began = time.monotonic()
        container = self.container(service)
        while True:
            state = self.state(service)
            assert state == "running", f"{service} is {state}, not running:\n{self.describe(service)}"
            if self.engine.kind == "podman":
                healthy = self.engine.cli("healthcheck", "run", container, check=False).returncode == 0
            else:
                healthy = self.inspect(service, "{{.State.Health.Status}}") == "healthy"
            if healthy:
                return time.monotonic() - began
            assert time.monotonic() < deadline, f"{service} never became healthy:\n{self.describe(service)}"
            time.sleep(0.5)

    def wait_exit(self, service: str, timeout: float) -> int:
        """Wait for a one-shot service's container to exit (bounded); its exit code."""
        container = self.container(service)
        result = self.engine.cli("wait", container, timeout=timeout, check=False)
        if result.returncode != 0:
            raise CommandFailed(f"{service} did not exit within {timeout:g}s:\n{self.describe(service)}")
        return int(result.stdout.strip().splitlines()[-1])

    def run_once(self, service: str, timeout: float) -> tuple[str, str]:
        """Start a one-shot service (again), wait for exit 0; the output of this run only."""
        before_out, before_err = self.logs(service)
        began = time.monotonic()
        self.start(service)
        code = self.wait_exit(service, timeout)
        self.timings.setdefault(f"{service} run", time.monotonic() - began)
        assert code == 0, f"{service} exited {code}:\n{self.describe(service)}\nbroker:\n{self.describe('kcoord')}"
        out, err = self.logs(service)
        return out[len(before_out):] if out.startswith(before_out) else out, \
            err[len(before_err):] if err.startswith(before_err) else err

    def stop(self, service: str, timeout: float = 30.0) -> int:
        """Stop a service's container as compose does (SIGTERM, then SIGKILL); its exit code."""
        self.engine.cli("stop", "--time", str(int(timeout)), self.container(service), timeout=timeout + 30)
        return int(self.inspect(service, "{{.State.ExitCode}}"))

    def exec(self, service: str, argv: Sequence[str], timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess[str]:
        return self.engine.cli("exec", self.container(service), *argv, timeout=timeout)

    def run_on_network(self, image: str, argv: Sequence[str], network: str,
                       timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess[str]:
        """A new container of ``image`` on the project's network, removed afterwards."""
        return self.engine.cli("run", "--rm", "--no-healthcheck", "--network", network, image, *argv,
                               timeout=timeout)

    def describe(self, service: str) -> str:
        """A service's state and the tail of its logs, for failure messages."""
        try:
            state = self.inspect(service, "{{.State.Status}} exit={{.State.ExitCode}}")
            out, err = self.logs(service)
        except (CommandFailed, AssertionError) as exc:
            return f"({service}: {exc})"
        return f"[{service}: {state}]\n{out[-3000:]}\n{err[-3000:]}"


def published_port(project: Project, service: str, container_port: int) -> int:
    """The host port a service's container port is published on (compose ``ports``)."""
    for mapping in project.spec["services"][service].get("ports", []):
        parts = str(mapping).split(":")
        if int(parts[-1]) == container_port:
            return int(parts[-2])
    raise AssertionError(f"{service} does not publish {container_port}")


def summary_line(output: str) -> dict[str, Any]:
    """The one ``summary {json}`` line a demo app prints."""
    lines = [line for line in output.splitlines() if line.startswith("summary ")]
    assert len(lines) == 1, output
    summary: dict[str, Any] = json.loads(lines[0].removeprefix("summary "))
    return summary


def parse_table(text: str) -> list[dict[str, str]]:
    """Rows of a table printed by ``pipeline.cli.format_table``: column spans from its rule line."""
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if i > 0 and line.startswith("-") and set(line) <= {"-", " "}]
    assert rules, f"no table in:\n{text}"
    header, rule = lines[rules[0] - 1], lines[rules[0]]
    index = rules[0]
    spans: list[tuple[int, int]] = []
    start = 0
    for dashes in rule.split("  "):
        spans.append((start, start + len(dashes)))
        start += len(dashes) + 2
    names = [header[a:b].strip() for a, b in spans]
    rows = []
    for row in lines[index + 1:]:
        if not row.strip():
            break
        rows.append({name: row[a:b].strip() for name, (a, b) in zip(names, spans, strict=True)})
    return rows
