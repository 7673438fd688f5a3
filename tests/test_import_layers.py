"""The core's modules import one another one way only: no import cycle among ``core/*.py``.

Every import counts, at the top of a module, inside a function or under ``if TYPE_CHECKING:``:
an import moved into a function to dodge a cycle is still the cycle. ``envengineer.X`` (and
``from envengineer import X``) is ``core/X.py``; plugins and tasks are not looked at.
"""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "core"

#: Cycles known and accepted (each a sorted tuple of module names), with why. None today.
KNOWN_CYCLES: set[tuple[str, ...]] = set()


def imports(path: Path, modules: set[str]) -> dict[str, int]:
    """The core modules ``path`` imports (anywhere in it), each with the line of its first import."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import X / from .X import Y
                names = [f"envengineer.{node.module}"] if node.module else [f"envengineer.{a.name}" for a in node.names]
            elif node.module == "envengineer":
                names = [f"envengineer.{alias.name}" for alias in node.names]
            elif node.module:
                names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "envengineer" and len(parts) > 1 and parts[1] in modules and parts[1] != path.stem:
                found.setdefault(parts[1], node.lineno)
    return found


def import_graph(core: Path = CORE) -> dict[str, dict[str, int]]:
    """Module -> {module it imports: line}, over ``core/*.py``."""
    modules = {p.stem for p in core.glob("*.py")}
    return {p.stem: imports(p, modules) for p in sorted(core.glob("*.py"))}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def describe(graph: dict[str, dict[str, int]], component: list[str]) -> str:
    edges = [f"{a}.py:{line} imports {b}" for a in component for b, line in sorted(graph[a].items()) if b in component]
    return " <-> ".join(component) + " (" + "; ".join(edges) + ")"


def test_the_core_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 10 and "components" in graph  # the core is where this test looks for it
    found = [c for c in cycles(graph) if tuple(c) not in KNOWN_CYCLES]
    assert not found, "import cycles among the core's modules:\n" + "\n".join(describe(graph, c) for c in found)


def test_the_known_cycles_are_still_cycles():
    """A known cycle that was broken is taken off the list, so that it cannot come back unnoticed."""
    current = {tuple(c) for c in cycles(import_graph())}
    assert not KNOWN_CYCLES - current, f"no longer cycles; remove them from KNOWN_CYCLES: {sorted(KNOWN_CYCLES - current)}"


def test_the_checker_finds_a_cycle_and_its_modules(tmp_path):
    (tmp_path / "a.py").write_text("from envengineer.b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from envengineer import c\n")
    (tmp_path / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import envengineer.a\n")
    (tmp_path / "d.py").write_text("from envengineer.a import y\nfrom envengineer.d import z\nimport os\n")
    graph = import_graph(tmp_path)
    assert graph["d"] == {"a": 1}  # itself and other packages do not count
    assert cycles(graph) == [["a", "b", "c"]]
    assert "b.py:2 imports c" in describe(graph, ["a", "b", "c"])
