"""cory's import graph read from its source: module arrows (imports inside functions count,
``if TYPE_CHECKING:`` blocks do not), folder ("room") arrows, cycles, and the imports made
inside functions. Used by tests/test_import_cycles.py and bench/structure.py."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "src"


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            continue
        yield node
        yield from _runtime_nodes(node)


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return []


def sources(root: Path = SOURCE) -> dict[str, Path]:
    """Module name -> file, for every module of the ``cory`` package under ``root``."""
    return {module_name(path, root): path for path in sorted((root / "cory").rglob("*.py"))}


def import_graph(root: Path = SOURCE) -> dict[str, set[str]]:
    """Module -> the cory modules it imports when run (``root`` holds the package)."""
    paths = sources(root)
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        for node in _runtime_nodes(ast.parse(path.read_text())):
            graph[name].update(t for t in _imported(node)
                               if t in paths and t != name and not name.startswith(f"{t}."))
    return graph


def room_of(module: str) -> str:
    """A module's room: its folder under ``cory`` (``cory.agents``), or the module itself
    when it sits at the top (``cory.trainer``)."""
    return ".".join(module.split(".")[:2])


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Room -> the rooms its modules import (arrows inside one room are left out)."""
    rooms: dict[str, set[str]] = {}
    for source, targets in graph.items():
        home = room_of(source)
        rooms.setdefault(home, set()).update(room_of(t) for t in targets if room_of(t) != home)
    return rooms


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def imports_in_functions(root: Path = SOURCE) -> list[tuple[str, int, str]]:
    """(module, line, imported name) for every import made inside a function body."""
    found = []
    for name, path in sources(root).items():
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and node.module:
                    found.append((name, node.lineno, node.module))
                elif isinstance(node, ast.Import):
                    found.extend((name, node.lineno, alias.name) for alias in node.names)
    return sorted(set(found))
