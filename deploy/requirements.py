"""Print kcoord's requirements from its pyproject.toml, one a line.

    python3 requirements.py PYPROJECT [EXTRA...]

The project's dependencies, then those of each extra named. The Dockerfile's build stages
install these before kcoord's sources are copied, so a change in the sources rebuilds only
the small layer that installs kcoord, not PySpark's; deploy/compose/wheelhouse.py builds
wheels for the same list.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    return wanted


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    print("\n".join(requirements(Path(argv[0]), argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
