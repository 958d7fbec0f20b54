"""The shape of cory's source: rooms, arrows, upward arrows, imports inside functions, the
largest classes.

    python bench/structure.py

A room is a folder under ``src/cory`` (a top-level module is a room of its own); an arrow is
one room importing another (imports inside functions count); an upward arrow is an arrow
inside a cycle of rooms (each is listed with the number of module imports that carry it;
the thinner side of a cycle is the one that points up).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers.import_graph import cycles, import_graph, imports_in_functions, room_graph, room_of, sources  # noqa: E402


def largest_classes(count: int = 5) -> list[tuple[str, int, int]]:
    """(class, lines, methods) of the ``count`` longest classes."""
    found = []
    for name, path in sources().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                methods = sum(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) for item in node.body)
                found.append((f"{name}.{node.name}", (node.end_lineno or node.lineno) - node.lineno + 1, methods))
    return sorted(found, key=lambda row: -row[1])[:count]


def main() -> None:
    modules = import_graph()
    rooms = room_graph(modules)
    arrows = [(a, b) for a, targets in rooms.items() for b in targets]
    tangled = {room for component in cycles(rooms) for room in component}
    upward = sorted((a, b) for a, b in arrows if a in tangled and b in tangled and a in _reaches(rooms, b))
    carried = Counter((room_of(a), room_of(b)) for a, targets in modules.items() for b in targets)
    inside = imports_in_functions()
    own = [row for row in inside if row[2].startswith("cory")]
    top = [path for path in sources().values() if path.parent.name == "cory"]
    print(f"modules {len(modules)}, lines {sum(len(p.read_text().splitlines()) for p in sources().values())}")
    print(f"top-level modules {len(top)} (besides __init__ and __main__: "
          f"{sum(path.stem not in ('__init__', '__main__') for path in top)})")
    print(f"rooms {len(rooms)}, arrows {len(arrows)}, module cycles {len(cycles(modules))}")
    print(f"upward arrows {len(upward)}: " + (", ".join(f"{a} -> {b} ({carried[a, b]})" for a, b in upward) or "none"))
    print(f"imports inside functions {len(inside)}, of cory's own modules {len(own)}")
    for module, n in Counter(module for module, _, _ in own).most_common():
        print(f"  {module}: {n}")
    print("largest classes (lines, methods):")
    for name, lines, methods in largest_classes():
        print(f"  {name}: {lines}, {methods}")


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for other in graph.get(todo.pop(), ()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


if __name__ == "__main__":
    main()
