"""The shape of the code: no import cycles, broker/ never imports pipeline/, small coordinator modules.

The import graph is built from the source with ``ast``, so it sees every import, not only
the ones a test run happens to execute:

- every import statement counts: at top level, inside functions, under ``if TYPE_CHECKING:``;
- ``import a.b`` and ``from a.b import X`` are edges to ``a.b``; ``from a import c`` where
  ``c`` is a submodule is an edge to ``a`` (its ``__init__.py``) and to ``a.c``;
- relative imports are resolved against the importing module's package;
- ``importlib.import_module("a.b")`` with a literal string is an import of ``a.b``;
- modules outside the project's packages (the standard library, third-party) are ignored.

The project's packages are the repository's top-level Python packages except tests/ and
bench/.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOT_PROJECT_CODE = {"tests", "bench"}
COORDINATOR_MAX_LINES = 600

Graph = dict[str, set[str]]  # module -> the project modules it imports


def project_packages(root: Path) -> list[str]:
    return sorted(
        path.name for path in root.iterdir()
        if (path / "__init__.py").is_file() and path.name not in NOT_PROJECT_CODE
    )


def module_files(root: Path, packages: list[str]) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the given packages."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def imported_names(module: str, path: Path) -> set[str]:
    """Every dotted name the module imports, resolved to absolute names (may be third-party)."""
    is_package = path.name == "__init__.py"
    package = module.split(".") if is_package else module.split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base_parts = package[: len(package) - node.level + 1] if node.level else []
            base = ".".join(base_parts + (node.module.split(".") if node.module else []))
            names.add(base)
            # A name that is a submodule of ``base`` is imported too (unknown ones are dropped later).
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value)
    return names


def _is_import_module(func: ast.expr) -> bool:
    """``importlib.import_module`` or a bare ``import_module`` (from importlib)."""
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module" and isinstance(func.value, ast.Name) and func.value.id == "importlib"
    return isinstance(func, ast.Name) and func.id == "import_module"


def import_graph(root: Path) -> Graph:
    modules = module_files(root, project_packages(root))
    return {
        module: {name for name in imported_names(module, path) if name in modules and name != module}
        for module, path in modules.items()
    }


def reachable(graph: Graph, start: str) -> set[str]:
    seen: set[str] = set()
    queue = deque([start])
    while queue:
        for target in graph[queue.popleft()]:
            if target not in seen:
                seen.add(target)
                queue.append(target)
    return seen


def tangles(graph: Graph) -> list[list[str]]:
    """Groups of modules that all reach each other (strongly connected, more than one module)."""
    reach = {module: reachable(graph, module) for module in graph}
    found: list[list[str]] = []
    placed: set[str] = set()
    for module in sorted(graph):
        if module in placed or module not in reach[module]:
            continue
        tangle = sorted(other for other in reach[module] if module in reach[other])
        found.append(tangle)
        placed.update(tangle)
    return found


def shortest_cycle_through(graph: Graph, start: str) -> list[str]:
    """The shortest import path start -> ... -> start (start must be on a cycle)."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(graph[node]):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if target not in came_from:
                came_from[target] = node
                queue.append(target)
    raise ValueError(f"{start} is on no cycle")


def describe_cycles(graph: Graph) -> list[str]:
    """One line per tangle: a shortest cycle through it, then every module caught in it."""
    lines = []
    for tangle in tangles(graph):
        cycle = " -> ".join(shortest_cycle_through(graph, tangle[0]))
        lines.append(f"{cycle}\n    ({len(tangle)} modules import each other here: {', '.join(tangle)})")
    return lines


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


# --------------------------------------------------------------------------- the rules


def test_the_project_has_no_import_cycles() -> None:
    found = describe_cycles(import_graph(REPO))
    assert not found, "import cycles:\n" + "\n".join("  " + line for line in found)


def test_broker_does_not_import_pipeline() -> None:
    graph = import_graph(REPO)
    offending = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items() if in_package(module, "broker")
        for target in targets if in_package(target, "pipeline")
    )
    assert not offending, "broker/ imports pipeline/:\n" + "\n".join("  " + edge for edge in offending)


def test_broker_does_not_import_cluster() -> None:
    """The cluster plugs into the broker (broker.app.ClusterMembership); the broker knows no etcd."""
    graph = import_graph(REPO)
    offending = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items() if in_package(module, "broker")
        for target in targets if in_package(target, "cluster")
    )
    assert not offending, "broker/ imports cluster/:\n" + "\n".join("  " + edge for edge in offending)


def test_only_cluster_etcd_speaks_to_etcd() -> None:
    """Nothing but cluster/etcd.py uses the HTTP client that talks to etcd's gateway."""
    speakers = sorted(
        module for module, path in module_files(REPO, project_packages(REPO)).items()
        if "httpx" in imported_names(module, path)
    )
    assert speakers == ["cluster.etcd"], speakers


def test_coordinator_modules_are_short() -> None:
    too_long = {
        str(path.relative_to(REPO)): n
        for path in sorted((REPO / "broker" / "coordinator").rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > COORDINATOR_MAX_LINES
    }
    assert not too_long, f"modules of broker/coordinator/ over {COORDINATOR_MAX_LINES} lines: {too_long}"


# --------------------------------------------------------------------------- the graph builder itself


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_graph_counts_every_kind_of_import(tmp_path: Path) -> None:
    _write(tmp_path, {
        "app/__init__.py": "",
        "app/a.py": "import app.b\nimport json\n",
        "app/b.py": "def later():\n    from app import c\n",
        "app/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.d import D\n",
        "app/sub/__init__.py": "",
        "app/sub/d.py": "from .. import e\nfrom ..missing import x\n",
        "app/e.py": "import importlib\nimportlib.import_module('plugin.f')\n",
        "plugin/__init__.py": "",
        "plugin/f.py": "from importlib import import_module\nimport_module('app.a')\n",
        "tests/__init__.py": "",
        "tests/test_x.py": "import app.a\n",
    })
    assert import_graph(tmp_path) == {
        "app": set(),
        "app.a": {"app.b"},
        "app.b": {"app", "app.c"},
        "app.c": {"app.sub.d"},
        "app.sub": set(),
        "app.sub.d": {"app", "app.e"},
        "app.e": {"plugin.f"},
        "plugin": set(),
        "plugin.f": {"app.a"},
    }
    graph = import_graph(tmp_path)
    assert tangles(graph) == [["app.a", "app.b", "app.c", "app.e", "app.sub.d", "plugin.f"]]
    assert shortest_cycle_through(graph, "app.a") == [
        "app.a", "app.b", "app.c", "app.sub.d", "app.e", "plugin.f", "app.a",
    ]
