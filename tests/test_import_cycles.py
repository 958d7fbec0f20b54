"""No import cycles among cory's modules nor among its folders, counting imports inside
functions (they hide cycles rather than remove them) and not counting ``if TYPE_CHECKING:``
blocks (annotations only, never run)."""

from __future__ import annotations

from helpers.import_graph import cycles, import_graph, room_graph


def test_the_finder_sees_a_cycle_hidden_in_a_function(tmp_path):
    package = tmp_path / "cory"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from cory.b import f\n")
    (package / "b.py").write_text("def f():\n    from cory.a import g\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cory.a import g\n")
    assert cycles(import_graph(tmp_path)) == [["cory.a", "cory.b"]]


def test_the_finder_sees_a_cycle_between_folders_without_one_between_modules(tmp_path):
    for folder, text in {"x": "from cory.y.two import g\n", "y": "from cory.x.three import h\n"}.items():
        (tmp_path / "cory" / folder).mkdir(parents=True)
        (tmp_path / "cory" / "__init__.py").write_text("")
        (tmp_path / "cory" / folder / "__init__.py").write_text("")
        (tmp_path / "cory" / folder / "one.py").write_text(text)
    (tmp_path / "cory" / "y" / "two.py").write_text("")
    (tmp_path / "cory" / "x" / "three.py").write_text("")
    graph = import_graph(tmp_path)
    assert cycles(graph) == []
    assert cycles(room_graph(graph)) == [["cory.x", "cory.y"]]


def test_cory_has_no_import_cycles():
    assert cycles(import_graph()) == []


def test_cory_has_no_cycles_between_its_folders():
    assert cycles(room_graph(import_graph())) == []
