"""The import rules of the house, checked on the source of every product module.

Imports run one way: experiments / deploy / the CLI -> engine -> server | client ->
schema -> privacy | fda. The client never imports the server (nor the server the
client), privacy and fda import neither, the library imports neither experiments nor
deploy, and no two modules import each other in a circle.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _package_dirs() -> dict[str, Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {name: ROOT / folder for name, folder in mapping.items()}


def _modules() -> dict[str, Path]:
    """Every product module by its import name."""
    out = {}
    for package, folder in _package_dirs().items():
        for path in folder.glob("*.py"):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            out[name] = path
    return out


MODULES = _modules()


def _imports(path: Path, *, top_level_only: bool) -> set[str]:
    """The ``ldpfda.*`` modules ``path`` imports (at module level, or anywhere)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in MODULES or m.split(".")[0] != "ldpfda"}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


#: What each room must never import (anywhere in a module, lazily included).
FORBIDDEN = {
    "client": {"server", "engine", "experiments", "labeldp", "deploy"},
    "server": {"client", "engine", "experiments", "deploy"},
    "schema": {"client", "server", "engine", "experiments", "labeldp", "deploy"},
    "privacy": {
        "client",
        "server",
        "engine",
        "schema",
        "experiments",
        "datasets",
        "deploy",
    },
    "fda": {"client", "server", "engine", "schema", "privacy", "experiments", "deploy"},
    "datasets": {"client", "server", "engine", "experiments", "deploy"},
    "labeldp": {"client", "server", "engine", "experiments", "deploy"},
    "engine": {"experiments", "deploy"},
}


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_imports_run_one_way(room):
    broken = {
        module: sorted(
            target
            for target in _imports(path, top_level_only=False)
            if target.startswith("ldpfda.") and _room(target) in FORBIDDEN[room]
        )
        for module, path in MODULES.items()
        if _room(module) == room
    }
    assert {m: t for m, t in broken.items() if t} == {}


def test_no_room_of_the_library_reaches_into_deploy():
    # deploy/ is a folder of commands on top: only the CLI may load it.
    for module, path in MODULES.items():
        if module == "ldpfda.cli" or _room(module) == "experiments":
            continue
        source = path.read_text(encoding="utf-8")
        assert '"deploy"' not in source and "'deploy'" not in source, module


def test_schema_and_the_host_side_never_import_flower_server_code():
    for module, path in MODULES.items():
        if _room(module) == "schema":
            assert not any(
                t.split(".")[0] == "flwr" for t in _imports(path, top_level_only=False)
            ), module


def test_there_are_no_import_circles():
    graph = {
        module: {
            t
            for t in _imports(path, top_level_only=True)
            if t in MODULES and t != module
        }
        for module, path in MODULES.items()
    }
    # A package imports its own submodules; that is not a circle between rooms.
    for module in graph:
        graph[module] = {t for t in graph[module] if not t.startswith(module + ".")}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target, [*stack, target])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_rule_checker_sees_a_violation(tmp_path):
    # The checker itself: a client module that imports the server, even lazily inside
    # a function, is caught; one that imports only the schema is not.
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f():\n    from ldpfda.server.plans import run_plan\n", encoding="utf-8"
    )
    good = tmp_path / "good.py"
    good.write_text("from ldpfda.schema import catalog\n", encoding="utf-8")
    for path, caught in ((bad, True), (good, False)):
        found = [
            t
            for t in _imports(path, top_level_only=False)
            if t.startswith("ldpfda.") and _room(t) in FORBIDDEN["client"]
        ]
        assert bool(found) is caught, path.name
