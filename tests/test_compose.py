"""docker-compose.yml and the Dockerfile, checked without a container engine.

The compose file and the Dockerfile are parsed; every command in them is parsed by the
parser of the program it runs (the real ``kcoord`` parser, the demo apps' own parsers),
every file they name exists, and the wiring between services (volume, ports, healthcheck,
start order, build arguments) is what docs/deployment.md describes. These checks are fast
and run everywhere; tests/integration/test_topology.py builds the images and runs the
topology in real containers, with the compose helpers here (tests/compose/harness.py).
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from broker.cli import serve_command
from broker.config import load_config
from broker.server import advertised, parse_listen
from kcoord.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DATA_DIR = "/var/lib/kcoord"
SERVICES = {"kcoord", "demo-producer", "demo-consumer", "pipeline"}


# --------------------------------------------------------------------------- compose file

_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}")


def interpolate(value: str, variables: Mapping[str, str]) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}``, ``${NAME-default}`` and ``$$``."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, operator, default = match.groups()
        if operator == ":-":
            return variables.get(name) or default
        if operator == "-":
            return variables.get(name, default)
        return variables.get(name, "")

    result = _VARIABLE.sub(substitute, value)
    assert "${" not in result, f"unsupported interpolation in {value!r}"
    return result


def _interpolate_all(node: Any, variables: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, variables)
    if isinstance(node, list):
        return [_interpolate_all(item, variables) for item in node]
    if isinstance(node, dict):
        return {key: _interpolate_all(item, variables) for key, item in node.items()}
    return node


def load_compose(variables: Mapping[str, str] | None = None, file: Path = COMPOSE_FILE) -> dict[str, Any]:
    """A compose file (docker-compose.yml unless told) with its variables replaced (unset
    ones take their defaults)."""
    document = yaml.safe_load(file.read_text())
    assert isinstance(document, dict)
    return _interpolate_all(document, variables or {})  # type: ignore[no-any-return]


def as_argv(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return shlex.split(value) if isinstance(value, str) else [str(part) for part in value]


def dependency_order(compose: Mapping[str, Any]) -> list[str]:
    """Services so that each comes after everything it depends on (file order otherwise)."""
    services = compose["services"]
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"dependency cycle: {[*path, name]}"
        if name in order:
            return
        for dependency in depends_on(services[name]):
            visit(dependency, (*path, name))
        order.append(name)

    for name in services:
        visit(name, ())
    return order


def depends_on(service: Mapping[str, Any]) -> dict[str, str]:
    """Dependency -> condition (the short list form means service_started)."""
    raw = service.get("depends_on", {})
    if isinstance(raw, list):
        return {name: "service_started" for name in raw}
    return {name: spec.get("condition", "service_started") for name, spec in raw.items()}


def healthcheck_argv(service: Mapping[str, Any]) -> list[str]:
    test = service["healthcheck"]["test"]
    if isinstance(test, str):
        return ["sh", "-c", test]
    if test[0] == "CMD":
        return list(test[1:])
    assert test[0] == "CMD-SHELL", test
    return ["sh", "-c", test[1]]


_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?(?:(\d+)ms)?$")


def seconds(duration: str) -> float:
    """A compose duration (``1m30s``, ``5s``, ``500ms``) in seconds."""
    match = _DURATION.match(duration)
    assert match and duration, f"not a duration: {duration!r}"
    h, m, s, ms = (int(part or 0) for part in match.groups())
    return h * 3600 + m * 60 + s + ms / 1000


# --------------------------------------------------------------------------- Dockerfile


@dataclass
class Stage:
    """One build stage, with what it inherits from the stage it is built FROM."""

    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)
    user: str = "root"
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    expose: list[str] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)
    copies: list[tuple[list[str], str]] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    #: COPY --from=STAGE: (stage, sources there, destination)
    copied_from: list[tuple[str, list[str], str]] = field(default_factory=list)
    #: the build-context folders RUN --mount=type=bind mounts
    mounts: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    raw_base: str = ""


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: comments dropped, continuation lines joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        keyword, _, arguments = whole.partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
    assert not pending, "the Dockerfile ends in a continuation line"
    return instructions


def exec_form(arguments: str) -> list[str]:
    """The JSON-array form of CMD/ENTRYPOINT/HEALTHCHECK CMD; fails on the shell form."""
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(part, str) for part in value), arguments
    return value


def parse_dockerfile(text: str | None = None) -> dict[str, Stage]:
    """Stages by name, in file order (the last is the default build target)."""
    build_args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    stage: Stage | None = None
    for keyword, arguments in dockerfile_instructions(text or DOCKERFILE.read_text()):
        if keyword == "ARG" and stage is None:
            name, _, default = arguments.partition("=")
            build_args[name] = default
            continue
        if keyword == "FROM":
            words = arguments.split()
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: build_args[m.group(1) or m.group(2)], words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(stages))
            if base in stages:
                parent = stages[base]
                stage = Stage(name, parent.base, [], parent.user, list(parent.entrypoint), list(parent.cmd),
                              list(parent.volumes), list(parent.expose), list(parent.healthcheck),
                              list(parent.copies), list(parent.runs), list(parent.copied_from),
                              list(parent.mounts), [], words[0])  # ARGs end with their stage
            else:
                stage = Stage(name, base, raw_base=words[0])
            stages[name] = stage
            continue
        assert stage is not None, f"{keyword} before FROM"
        stage.instructions.append((keyword, arguments))
        if keyword == "USER":
            stage.user = arguments
        elif keyword == "ENTRYPOINT":
            stage.entrypoint = exec_form(arguments)
            stage.cmd = []  # a new ENTRYPOINT drops an inherited CMD
        elif keyword == "CMD":
            stage.cmd = exec_form(arguments)
        elif keyword == "VOLUME":
            stage.volumes += exec_form(arguments) if arguments.startswith("[") else arguments.split()
        elif keyword == "EXPOSE":
            stage.expose += arguments.split()
        elif keyword == "HEALTHCHECK":
            options = re.match(r"((?:--\S+\s+)*)CMD\s+(.*)$", arguments)
            assert options, f"HEALTHCHECK {arguments}"
            stage.healthcheck = exec_form(options.group(2))
        elif keyword in ("COPY", "ADD"):
            flags = dict(word[2:].partition("=")[::2] for word in arguments.split() if word.startswith("--"))
            words = [word for word in arguments.split() if not word.startswith("--")]
            if "from" in flags:
                stage.copied_from.append((flags["from"], words[:-1], words[-1]))
            else:
                stage.copies.append((words[:-1], words[-1]))
        elif keyword == "RUN":
            stage.runs.append(arguments)
            for mount in re.findall(r"--mount=(\S+)", arguments):
                settings = dict(item.partition("=")[::2] for item in mount.split(","))
                if settings.get("type") == "bind":
                    stage.mounts.append(settings["source"])
        elif keyword == "ARG":
            stage.args.append(arguments.partition("=")[0])
    return stages


def image_files(stages: Mapping[str, Stage] | None = None) -> dict[str, Path]:
    """Every file the Dockerfile copies into an image: its path there -> its path here."""
    files: dict[str, Path] = {}
    for stage in (stages or parse_dockerfile()).values():
        for sources, destination in stage.copies:
            for source in sources:
                local = REPO / source
                if local.is_dir():
                    for path in local.rglob("*"):
                        if path.is_file() and "__pycache__" not in path.parts:
                            inside = destination.rstrip("/") + "/" + path.relative_to(local).as_posix()
                            files[inside] = path
                elif destination.endswith("/") or len(sources) > 1:
                    files[destination.rstrip("/") + "/" + local.name] = local
                else:
                    files[destination] = local
    return files


def effective_argv(service_name: str, compose: Mapping[str, Any] | None = None) -> list[str]:
    """What a service's container runs: compose's entrypoint/command over the image's."""
    service = (compose or load_compose())["services"][service_name]
    stage = parse_dockerfile()[service["build"]["target"]]
    if "entrypoint" in service:
        return as_argv(service["entrypoint"]) + as_argv(service.get("command"))
    command = as_argv(service["command"]) if "command" in service else stage.cmd
    return stage.entrypoint + command


def load_script(path: Path) -> ModuleType:
    """Import a program run by the images (a demo app, the healthcheck) from its file."""
    spec = importlib.util.spec_from_file_location(f"image_script_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kcoord_subcommands() -> set[str]:
    """The subcommands the real ``kcoord`` parser knows (serve, and what modules register)."""
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def dockerignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip().lstrip("/") for line in lines if line.strip() and not line.startswith("#")]


def dockerignored(relative: str, patterns: list[str]) -> bool:
    """Whether .dockerignore keeps a path (or one of its parent folders) out of the context."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!")
        candidates = [pattern, pattern.removeprefix("**/")]
        if any(fnmatch.fnmatchcase(prefix, p) for prefix in prefixes for p in candidates) or (
            pattern.startswith("**/") and any(fnmatch.fnmatchcase(part, pattern[3:]) for part in parts)
        ):
            ignored = not negate
    return ignored


# --------------------------------------------------------------------------- the compose file


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


@pytest.fixture(scope="module")
def stages() -> dict[str, Stage]:
    return parse_dockerfile()


def _serve_args(compose: Mapping[str, Any]) -> Any:
    argv = effective_argv("kcoord", compose)
    assert argv[0] == "kcoord"
    args = build_parser().parse_args(argv[1:])
    assert args.func is serve_command
    return args


def test_services_build_from_the_dockerfile_targets(compose: dict[str, Any], stages: dict[str, Stage]) -> None:
    services = compose["services"]
    assert set(services) == SERVICES
    image_of_target: dict[str, str] = {}
    for name, service in services.items():
        build = service["build"]
        assert build["context"] == "."
        assert build.get("dockerfile", "Dockerfile") == "Dockerfile"
        assert build["target"] in stages, f"{name}: no stage {build['target']} in the Dockerfile"
        # one image name per target, never two targets under one name
        assert image_of_target.setdefault(build["target"], service["image"]) == service["image"], name
    assert len(set(image_of_target.values())) == len(image_of_target)
    assert {s["build"]["target"] for s in services.values()} == {"broker", "demo", "pipeline"}


def test_the_broker_command_parses_and_agrees_with_the_image(
    compose: dict[str, Any], stages: dict[str, Stage]
) -> None:
    args = _serve_args(compose)
    config = load_config(None, args.sets)  # a bad --set raises ConfigError
    host, port = parse_listen(args.listen)
    assert (host, str(args.data_dir)) == ("0.0.0.0", DATA_DIR)
    # clients on the compose network are told the service name and the listening port
    assert advertised(config, host, port) == ("kcoord", port)
    # `docker run kcoord` and compose run the same thing
    assert stages["broker"].entrypoint + stages["broker"].cmd == effective_argv("kcoord", compose)


def test_the_data_volume_is_declared_and_mounted(compose: dict[str, Any], stages: dict[str, Stage]) -> None:
    assert "kcoord-data" in compose["volumes"]
    assert compose["services"]["kcoord"]["volumes"] == [f"kcoord-data:{DATA_DIR}"]
    assert compose["services"]["pipeline"]["volumes"] == [f"kcoord-data:{DATA_DIR}:ro"]
    for name in ("demo-producer", "demo-consumer"):
        assert "volumes" not in compose["services"][name]
    assert stages["broker"].volumes == [DATA_DIR]
    # the image creates the directory for the unprivileged user, so a new volume is writable
    assert any("chown" in run and DATA_DIR in run for run in stages["broker"].runs)


def test_the_broker_ports_are_published_and_exposed(compose: dict[str, Any], stages: dict[str, Stage]) -> None:
    args = _serve_args(compose)
    (_, port), (metrics_host, metrics_port) = parse_listen(args.listen), parse_listen(args.http_listen)
    assert metrics_host == "0.0.0.0"
    # published on the host's loopback unless KCOORD_PUBLISH_ADDRESS says otherwise
    assert compose["services"]["kcoord"]["ports"] == [
        f"127.0.0.1:{port}:{port}", f"127.0.0.1:{metrics_port}:{metrics_port}"]
    moved = load_compose({"KCOORD_PORT": "19092", "KCOORD_METRICS_PORT": "19308", "KCOORD_PUBLISH_ADDRESS": "0.0.0.0"})
    assert moved["services"]["kcoord"]["ports"] == [f"0.0.0.0:19092:{port}", f"0.0.0.0:19308:{metrics_port}"]
    assert set(stages["broker"].expose) == {str(port), str(metrics_port)}
    for name in SERVICES - {"kcoord"}:
        assert "ports" not in compose["services"][name]


def test_the_healthcheck_asks_the_broker_itself(compose: dict[str, Any], stages: dict[str, Stage]) -> None:
    healthcheck = compose["services"]["kcoord"]["healthcheck"]
    assert healthcheck["test"][0] == "CMD"
    argv = healthcheck_argv(compose["services"]["kcoord"])
    assert argv[0] == "python"
    script = image_files(stages)[argv[1]]
    assert script == REPO / "deploy" / "healthcheck.py"
    args = load_script(script).build_parser().parse_args(argv[2:])
    _, port = parse_listen(_serve_args(compose).listen)
    assert args.bootstrap_server == f"127.0.0.1:{port}"
    assert args.timeout <= seconds(healthcheck["timeout"])
    for key in ("interval", "timeout", "start_period"):
        assert seconds(healthcheck[key]) > 0
    assert healthcheck["retries"] >= 1
    # the image's own HEALTHCHECK (for `docker run`) is the same command
    assert stages["broker"].healthcheck == argv


def test_services_start_in_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert depends_on(services["kcoord"]) == {}
    assert depends_on(services["demo-producer"]) == {"kcoord": "service_healthy"}
    assert depends_on(services["demo-consumer"]) == {
        "kcoord": "service_healthy", "demo-producer": "service_completed_successfully"}
    assert depends_on(services["pipeline"]) == {"demo-consumer": "service_completed_successfully"}
    assert dependency_order(compose) == ["kcoord", "demo-producer", "demo-consumer", "pipeline"]
    for name in SERVICES - {"kcoord"}:
        assert services[name]["restart"] == "no", f"{name} is one-shot"


@pytest.mark.parametrize("name, script", [("demo-producer", "producer.py"), ("demo-consumer", "consumer.py")])
def test_demo_commands_run_the_demo_apps(
    compose: dict[str, Any], stages: dict[str, Stage], monkeypatch: pytest.MonkeyPatch, name: str, script: str
) -> None:
    service = compose["services"][name]
    argv = effective_argv(name, compose)
    assert argv[0] == "python"
    path = image_files(stages)[argv[1]]
    assert path == REPO / "deploy" / "demo" / script
    module = load_script(path)
    environment = service["environment"]
    assert set(environment) <= set(module.ENVIRONMENT), "a variable the app does not read"
    for variable, value in environment.items():
        monkeypatch.setenv(variable, str(value))
    args = module.build_parser().parse_args(argv[2:])  # defaults come from the environment
    _, port = parse_listen(_serve_args(compose).listen)
    assert args.bootstrap_server == f"kcoord:{port}"
    assert (args.topic, args.records) == ("demo", 1000)
    assert args.timeout > 0
    assert load_compose({"DEMO_RECORDS": "50"})["services"][name]["environment"]["DEMO_RECORDS"] == "50"


def test_the_demo_apps_agree_on_the_topic_and_count(compose: dict[str, Any]) -> None:
    producer = compose["services"]["demo-producer"]["environment"]
    consumer = compose["services"]["demo-consumer"]["environment"]
    for key in ("DEMO_BOOTSTRAP_SERVERS", "DEMO_TOPIC", "DEMO_RECORDS"):
        assert producer[key] == consumer[key], key
    assert producer["DEMO_PARTITIONS"] == "3"


def test_the_demo_client_libraries_are_the_tested_ones() -> None:
    from importlib.metadata import version

    from packaging.requirements import Requirement

    for line in (REPO / "deploy" / "demo" / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            assert requirement.specifier.contains(version(requirement.name)), line


def test_the_pipeline_command_reads_the_volume(compose: dict[str, Any], stages: dict[str, Stage]) -> None:
    argv = effective_argv("pipeline", compose)
    # the demo group's committed offsets, as of a time after every commit
    assert argv[:3] == ["kcoord", "pipeline", "as-of"]
    assert argv[argv.index("--data-dir") + 1] == DATA_DIR
    assert argv[argv.index("--group") + 1] == compose["services"]["demo-consumer"]["environment"]["DEMO_GROUP"]
    assert stages["pipeline"].entrypoint == ["kcoord"]
    assert stages["pipeline"].cmd[:2] == ["pipeline", "stats"]
    if "pipeline" not in kcoord_subcommands():
        pytest.skip("`kcoord pipeline` is not registered yet")
    build_parser().parse_args(argv[1:])
    build_parser().parse_args(stages["pipeline"].cmd)


def test_docker_compose_config_accepts_the_file() -> None:
    docker = shutil.which("docker")
    has_compose = docker is not None and subprocess.run(
        [docker, "compose", "version"], capture_output=True, timeout=30).returncode == 0
    if not has_compose:
        pytest.skip("no `docker compose` on this machine")
    assert docker is not None
    result = subprocess.run([docker, "compose", "-f", str(COMPOSE_FILE), "config", "--quiet"],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------- the Dockerfile


def lineage(stages: Mapping[str, Stage], name: str) -> list[str]:
    """A stage and the stages it is built FROM, nearest first."""
    chain = [name]
    while stages[chain[-1]].raw_base in stages:
        chain.append(stages[chain[-1]].raw_base)
    return chain


def test_every_stage_starts_from_the_python_image_argument_and_the_broker_is_the_default(
    stages: dict[str, Stage],
) -> None:
    assert list(stages) == ["runtime", "requirements", "sources", "wheel", "deps-etcd", "deps", "deps-demo",
                            "deps-pipeline", "demo", "pipeline", "etcd", "broker"]
    for name, stage in stages.items():
        # by default the public Python image; a local base through the build argument
        assert stage.base == ("scratch" if name == "sources" else "python:3.11-slim-bookworm"), name
    assert {name for name, stage in stages.items() if stage.raw_base == "${PYTHON_IMAGE}"} == {
        "runtime", "requirements", "wheel", "deps-etcd"}
    # every image is the runtime stage and what is added to it
    for target in ("broker", "demo", "pipeline", "etcd"):
        assert lineage(stages, target)[-1] == "runtime", target


def test_the_images_install_in_place_and_carry_no_pip_sources_or_wheels(stages: dict[str, Stage]) -> None:
    for target in ("broker", "demo", "pipeline"):
        # kcoord's installed files over the matching dependency stage's packages, in place:
        # no virtualenv copied from another stage, no sources, no wheel
        assert [arguments for keyword, arguments in stages[target].instructions
                if keyword == "COPY" and "--from=" in arguments] == ["--from=wheel /opt/kcoord/staged/ /"], target
        assert {origin for origin, _, _ in stages[target].copied_from} <= {"requirements", "wheel"}, target
        assert not any(destination.startswith("/opt/kcoord/src") for _, destination in stages[target].copies)
        assert "deps" in lineage(stages, target)
    assert re.search(r"pip-install\.sh wheel .*/opt/kcoord/src", " ".join(stages["wheel"].runs))
    assert "--root /opt/kcoord/staged" in " ".join(stages["wheel"].runs)
    for name, stage in stages.items():
        own_runs = [arguments for keyword, arguments in stage.instructions if keyword == "RUN"]
        for run in own_runs:
            # pip only through the script, which removes it again in the same step
            assert not re.search(r"-m pip\b|\bpip3? install", run), f"{name} runs pip itself: {run}"
            if "pip-install.sh" in run:
                # the script and the wheelhouse beside it are mounted for the step, never copied
                assert "--mount=type=bind,source=deploy,target=/tmp/deploy" in run, name
                assert "sh /tmp/deploy/pip-install.sh" in run, name
                # a build argument reaches only the stages that declare it
                assert "PIP_OFFLINE" in stage.args, f"{name} runs pip without ARG PIP_OFFLINE"
    # each dependency stage checks what it installed
    for name in ("deps", "deps-demo", "deps-pipeline"):
        assert "pip-install.sh install --check -r" in stages[name].instructions[-1][1], name
    assert not any("wheelhouse" in " ".join(sources) for stage in stages.values() for sources, _ in stage.copies)


def test_the_compose_build_passes_the_base_image_and_offline_pip_through(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        assert service["build"]["args"] == {"PYTHON_IMAGE": "python:3.11-slim-bookworm", "PIP_OFFLINE": "0"}, name
    local = load_compose({"KCOORD_PYTHON_IMAGE": "localhost/kcoord-base:bookworm", "KCOORD_PIP_OFFLINE": "1"})
    for service in local["services"].values():
        assert service["build"]["args"] == {"PYTHON_IMAGE": "localhost/kcoord-base:bookworm", "PIP_OFFLINE": "1"}


@pytest.mark.parametrize("offline", ["1", "0"])
@pytest.mark.parametrize("argv, check", [(["install", "kcoord"], False), (["install", "--check", "-r", "r.txt"], True),
                                         (["wheel", "--no-deps", "src"], False)])
def test_pip_in_the_image_uses_the_wheelhouse_alone_when_offline_and_leaves_no_pip(
        tmp_path: Path, offline: str, argv: list[str], check: bool) -> None:
    fake_python = tmp_path / "bin" / "python"
    fake_python.parent.mkdir()
    fake_python.write_text('#!/bin/sh\necho "$*" >>"$CALLS"\n')  # each call, its output aside
    fake_python.chmod(0o755)
    calls = tmp_path / "calls"
    subprocess.run(["sh", str(REPO / "deploy" / "pip-install.sh"), *argv], capture_output=True, check=True,
                   env={"PATH": "/usr/bin:/bin", "PIP_OFFLINE": offline, "KCOORD_VENV": str(tmp_path),
                        "CALLS": str(calls)})
    wheelhouse = REPO / "deploy" / "wheelhouse"
    command, rest = argv[0], [arg for arg in argv[1:] if arg != "--check"]
    index = ["--no-index"] if offline == "1" else []
    assert calls.read_text().splitlines() == [
        "-m ensurepip --default-pip",
        " ".join(["-m", "pip", command, "--find-links", str(wheelhouse), *index, *rest]),
        *(["-m pip check"] if check else []),
        "-m pip uninstall --quiet --yes pip setuptools",
    ]


@pytest.mark.parametrize("argv", [[], ["download", "kcoord"], ["check"]])
def test_pip_in_the_image_refuses_what_it_does_not_do(tmp_path: Path, argv: list[str]) -> None:
    result = subprocess.run(["sh", str(REPO / "deploy" / "pip-install.sh"), *argv], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", "KCOORD_VENV": str(tmp_path)})
    assert result.returncode == 2 and "usage:" in result.stderr and result.stdout == ""


@pytest.mark.parametrize("target", ["broker", "demo", "pipeline"])
def test_images_run_as_an_unprivileged_user(stages: dict[str, Stage], target: str) -> None:
    assert stages[target].user.split(":")[0] not in ("root", "0", "")


def test_entrypoints_and_commands_are_exec_form(stages: dict[str, Stage]) -> None:
    for stage in stages.values():
        for keyword, arguments in stage.instructions:
            if keyword in ("ENTRYPOINT", "CMD"):
                assert arguments.startswith("["), f"{stage.name}: {keyword} {arguments} is shell form"
                exec_form(arguments)
    broker = stages["broker"]
    assert broker.entrypoint == ["kcoord"]
    args = build_parser().parse_args(broker.cmd)
    assert args.func is serve_command and str(args.data_dir) == DATA_DIR


def test_only_the_pipeline_image_has_java_17_and_the_pipeline_extra(stages: dict[str, Stage]) -> None:
    assert "openjdk-17-jre-headless" in " ".join(stages["pipeline"].runs)
    assert re.search(r"requirements\.py /opt/kcoord/pyproject\.toml pipeline", " ".join(stages["requirements"].runs))
    assert {target: lineage(stages, target)[:-1] for target in ("broker", "demo", "pipeline")} == {
        "broker": ["broker", "deps"], "demo": ["demo", "deps-demo", "deps"],
        "pipeline": ["pipeline", "deps-pipeline", "deps"]}
    pipeline_list = ("requirements", ["/opt/kcoord/requirements/pipeline.txt"], "/opt/kcoord/requirements/pipeline.txt")
    assert pipeline_list in stages["pipeline"].copied_from
    for target in ("broker", "demo"):
        assert "openjdk" not in " ".join(stages[target].runs)
        assert pipeline_list not in stages[target].copied_from


def test_the_requirements_the_image_installs_are_the_projects() -> None:
    script = load_script(REPO / "deploy" / "requirements.py")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert script.requirements(REPO / "pyproject.toml", []) == project["dependencies"]
    assert script.requirements(REPO / "pyproject.toml", ["pipeline"]) == [
        *project["dependencies"], *project["optional-dependencies"]["pipeline"]]


def test_copied_files_exist_and_are_in_the_build_context(stages: dict[str, Stage]) -> None:
    patterns = dockerignore_patterns()
    for stage in stages.values():
        for source in [*(s for sources, _ in stage.copies for s in sources), *stage.mounts]:
            assert (REPO / source).exists(), source
            assert not dockerignored(source.rstrip("/"), patterns), f"{source} is excluded by .dockerignore"
        for origin, _, _ in stage.copied_from:
            assert origin in stages, f"{stage.name} copies from an unknown stage {origin}"
    # what the package build needs is copied
    copied = {source.rstrip("/") for stage in stages.values() for sources, _ in stage.copies for source in sources}
    assert {"pyproject.toml", "README.md", "protocol", "storage", "broker", "admin", "pipeline", "kcoord"} <= copied


def test_dockerignore_keeps_local_state_out() -> None:
    patterns = dockerignore_patterns()
    for path in (".venv", ".venv/bin/python", "data", "data/topics.json", ".git", ".mypy_cache", ".ruff_cache",
                 ".pytest_cache", ".hypothesis", "node_modules", "bench/results", "broker/__pycache__/cli.pyc",
                 "kcoord.egg-info", ".compose", ".compose/storage/overlay", ".compose/base/bookworm.tar"):
        assert dockerignored(path, patterns), path
    for path in ("broker/cli.py", "pyproject.toml", "README.md", "deploy/demo/consumer.py", "storage/log.py",
                 "deploy/pip-install.sh", "deploy/wheelhouse/pyspark-4.3.0-py2.py3-none-any.whl"):
        assert not dockerignored(path, patterns), path


def test_git_ignores_the_caches_but_keeps_the_wheelhouse_folder() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = ["deploy/wheelhouse/pyspark-4.3.0-py2.py3-none-any.whl", "deploy/wheelhouse/.inputs",
               ".compose/base/bookworm.tar", ".compose/storage/overlay"]
    kept = ["deploy/wheelhouse/README.md", "deploy/compose/build-base.sh"]
    for path in ignored + kept:
        result = subprocess.run(["git", "check-ignore", "--quiet", "--no-index", path], cwd=REPO, timeout=30)
        assert result.returncode == (0 if path in ignored else 1), path


def test_the_wheelhouse_holds_everything_the_images_install() -> None:
    wheelhouse = load_script(REPO / "deploy" / "compose" / "wheelhouse.py")
    wanted = wheelhouse.requirements()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    demo = [line for line in (REPO / "deploy" / "demo" / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    for requirement in [*project["dependencies"], *project["optional-dependencies"]["pipeline"], *demo]:
        assert requirement in wanted, requirement
    # pip builds kcoord from its sources in the image: its build backend must be there too
    assert any(requirement.startswith("setuptools") for requirement in wanted)
    assert not any(requirement.startswith("kcoord") for requirement in wanted)


# --------------------------------------------------------------------------- Makefile and docs


def test_make_targets_exist() -> None:
    makefile = (REPO / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:((?:.*\\\n)*.*)$", makefile, re.M)
    targets = {"compose-tools", "compose-wheels", "compose-base", "compose-test", "compose-up", "compose-down",
               "compose-clean"}
    assert phony and targets <= set(phony.group(1).replace("\\", " ").split())
    for target in targets:
        assert re.search(rf"^{target}:", makefile, re.M), target
    # `make test` installs the container tools where it can, so the topology test runs in it
    test = re.search(r"^test:(.*)$", makefile, re.M)
    assert test and "compose-tools" in test.group(1).split()
    lint = re.search(r"^lint:.*\n\t(.*)$", makefile, re.M)
    assert lint and "deploy" in lint.group(1).split()


def test_deployment_doc_names_every_service_and_variable() -> None:
    text = (REPO / "docs" / "deployment.md").read_text()
    for name in SERVICES:
        assert f"`{name}`" in text, name
    for script in ("producer.py", "consumer.py"):
        for variable in load_script(REPO / "deploy" / "demo" / script).ENVIRONMENT:
            assert f"`{variable}`" in text, variable
    for variable in set(re.findall(r"\$\{(\w+)", COMPOSE_FILE.read_text())):
        assert f"`{variable}`" in text, variable
    for script in ("podman-session.sh", "build-base.sh", "wheelhouse.py"):
        assert (REPO / "deploy" / "compose" / script).exists() and script in text, script
    assert "(docs/deployment.md)" in (REPO / "README.md").read_text()


# --------------------------------------------------------------------------- the harness


def _program(path: Path, script: str) -> str:
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("made", [False, True])
def test_the_harness_checks_that_a_build_made_its_images(tmp_path: Path, made: bool) -> None:
    """podman-compose exits 0 when an image's build fails (a full disk): the harness checks
    each image exists and fails with the build's output, not later at a missing image."""
    from tests.compose.harness import CommandFailed, Engine, Project  # it imports this module

    log = tmp_path / "inspected"
    compose_tool = _program(tmp_path / "compose", "echo 'Error: writing blob: no space left on device' >&2\n")
    engine_cli = _program(tmp_path / "engine", f'[ "$1 $2" = "image inspect" ] || exit 0\necho "$5" >> {log}\n'
                                               + ("exit 0\n" if made else 'echo "Error: $5: image not known" >&2\nexit 125\n'))
    project = Project(Engine(engine_cli, (compose_tool,), dict(os.environ)), "kcoord-harness-test", {})
    if made:
        project.build()
    else:
        with pytest.raises(CommandFailed, match="no space left on device") as failed:
            project.build()
        assert "kcoord-pipeline:latest" in str(failed.value)
    built = {str(spec["image"]) for spec in project.spec["services"].values() if "build" in spec}
    assert set(log.read_text().split()) == built
