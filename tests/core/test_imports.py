"""The core's own import graph: a DAG of files, with every import at the top of its file."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "src" / "attnlab" / "core"


def core_graph(root: Path) -> tuple[dict[str, set[str]], list[str]]:
    """(module -> core modules it imports, imports found inside functions as 'file:line')."""
    graph: dict[str, set[str]] = {}
    lazy: list[str] = []
    for path in sorted(root.glob("*.py")):
        name = path.stem
        tree = ast.parse(path.read_text(encoding="utf-8"))
        deps = graph.setdefault(name, set())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnlab.core"):
                sub = node.module.removeprefix("attnlab.core").lstrip(".")
                deps.update([sub] if sub else [a.name for a in node.names])
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                # an import of attnlab inside a function would hide an edge of the graph;
                # a third-party module loaded on first use (the compiler toolchain) does not
                lazy += [f"{path.name}:{n.lineno}" for n in ast.walk(node)
                         if isinstance(n, ast.ImportFrom) and (n.module or "").startswith(
                             "attnlab") or isinstance(n, ast.Import) and any(
                             a.name.startswith("attnlab") for a in n.names)]
    graph.pop("__init__", None)
    return graph, lazy


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the path, 2 = done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for child in sorted(graph.get(node, ())):
            if state.get(child) == 1:
                return path + [node, child]
            if child not in state and (found := visit(child, path + [node])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [])):
            return found
    return None


def test_core_imports_form_a_dag_with_no_lazy_imports():
    graph, lazy = core_graph(CORE)
    assert find_cycle(graph) is None
    assert lazy == []
    # the layout the dispatcher relies on: backends never import the dispatcher
    for backend in ("explicit", "chunked", "linear", "_tiles", "masks"):
        assert "functional" not in graph[backend]


def test_a_planted_cycle_and_lazy_import_are_caught(tmp_path):
    (tmp_path / "functional.py").write_text("from attnlab.core.chunked import f\n")
    (tmp_path / "chunked.py").write_text(
        "def f():\n    from attnlab.core.functional import g\n    return g\n")
    graph, lazy = core_graph(tmp_path)
    assert find_cycle(graph) in (["chunked", "functional", "chunked"],
                                 ["functional", "chunked", "functional"])
    assert lazy == ["chunked.py:2"]
