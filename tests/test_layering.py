"""The layer order of attnlab, read from every import in the source (AST, lazy ones included).

Layers, low to high (DESIGN.md, "The house")::

    _errors → _io, _proc, i18n, _mathml, _lazy, _text, _dist, _options, _course_runs, _render
        → _cli | core
        → nn (+ masks.py, positional.py) → tracing → analysis → train → models → experiments
        → viz → report | serve | bench → commands → cli (+ __main__.py)

A module imports its own package and lower layers only. Reported:

* ``upward``: an import of a higher layer;
* ``sideways``: an import of another package on the same layer (report, serve and bench
  never import one another; nn and the ``masks``/``positional`` re-exports neither);
* ``root``: ``import attnlab`` / ``from attnlab import X`` inside the package (the root
  ``__init__`` re-exports the public API for users; nothing inside imports it);
* ``unmapped``: a module whose top-level name the layer table does not know;
* ``cycle``: files that import one another, directly or through others (strongly connected
  components of the file graph, imports inside functions included).

Every import statement counts: top level, inside functions, under ``TYPE_CHECKING``, and
``importlib.import_module("literal")`` calls.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "attnlab"

#: Top-level name inside ``attnlab`` -> layer (higher may import lower, never the reverse).
LAYERS: dict[str, int] = {
    "_io": 0, "_proc": 0, "i18n": 0, "_mathml": 0, "_lazy": 0, "_text": 0, "_dist": 0,
    "_options": 0, "_course_runs": 0, "_render": 0,
    "_errors": -1,  # below every layer: each one's exceptions derive from attnlab.Error
    "core": 1, "_cli": 1,
    "nn": 2, "masks": 2, "positional": 2,
    "tracing": 3,
    "analysis": 4,
    "train": 5,
    "models": 6,
    "experiments": 7,
    "viz": 8,
    "report": 9, "serve": 9, "bench": 9, "course": 9,
    "commands": 10,
    "cli": 11, "__main__": 11,
}
#: Names that belong to another name's package: ``python -m attnlab`` is the cli.
UNITS: dict[str, str] = {"__main__": "cli"}


@dataclass(frozen=True)
class Violation:
    kind: str  # "upward", "sideways", "root", "unmapped" or "cycle"
    module: str  # the importing module (for a cycle: its first file)
    target: str  # the imported module (for a cycle: the whole loop, " -> "-joined)
    line: int = 0

    def __str__(self) -> str:
        where = f":{self.line}" if self.line else ""
        return f"{self.kind}: {self.module}{where} imports {self.target}"


def _modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under ``root`` (the package directory)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join([package, *parts])] = path
    return out


def _imports(name: str, path: Path, known: set[str], package: str) -> list[tuple[str, int]]:
    """(imported module, line) for every import in one file, resolved to known modules
    where possible (``from pkg.x import sub`` -> ``pkg.x.sub`` when ``sub`` is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_pkg = path.name == "__init__.py"
    here = name if is_pkg else name.rpartition(".")[0]  # the package relative imports start in
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:  # `from <root> import x` runs the root: it stays the root
                sub = f"{mod}.{a.name}"
                root = mod == package and name != package
                found.append((sub if sub in known and not root else mod, node.lineno))
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name)
                       and node.func.id in ("import_module", "__import__")))):
            found.append((node.args[0].value, node.lineno))
    return found


def _unit(module: str, package: str) -> str | None:
    """The top-level name inside the package (``attnlab.core.masks`` -> ``core``);
    None for the root itself."""
    rest = module[len(package) + 1:] if module != package else ""
    return rest.split(".")[0] or None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one file, or a file importing itself
    (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == node:
                        break
                if len(comp) > 1 or node in graph[node]:
                    out.append(sorted(comp))
    return out


def _loop(comp: list[str], graph: dict[str, set[str]]) -> list[str]:
    """The shortest loop through the component's first file, for the message."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:  # breadth-first inside the component until the start comes round
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return path[::-1] + [start]
                if child not in prev:
                    prev[child] = node
                    nxt.append(child)
        frontier = nxt
    return [start, start]


def check_layers(root: Path, layers: dict[str, int], units: dict[str, str] | None = None,
                 package: str | None = None) -> list[Violation]:
    """Every layering violation in the package at ``root`` (a directory with
    ``__init__.py``), given ``layers``: top-level name inside the package -> layer, and
    ``units``: names that count as part of another name's package (default: none)."""
    units = units or {}
    root = Path(root)
    package = package or root.name
    modules = _modules(root, package)
    known = set(modules)
    out: list[Violation] = []
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        src = _unit(name, package)
        for target, line in _imports(name, path, known, package):
            if target != package and not target.startswith(package + "."):
                continue  # torch, numpy, the standard library ...
            while target not in known and "." in target:  # an attribute of a module
                target = target.rpartition(".")[0]
            graph[name].add(target)
            if src is None:  # the root re-exports: it may import anything below it
                continue
            dst = _unit(target, package)
            if dst is None:
                out.append(Violation("root", name, target, line))
            elif src not in layers:
                out.append(Violation("unmapped", name, target, line))
            elif dst not in layers:
                out.append(Violation("unmapped", target, target, line))
            elif layers[dst] > layers[src]:
                out.append(Violation("upward", name, target, line))
            elif layers[dst] == layers[src] and units.get(dst, dst) != units.get(src, src):
                out.append(Violation("sideways", name, target, line))
    for comp in _cycles(graph):
        out.append(Violation("cycle", comp[0], " -> ".join(_loop(comp, graph))))
    return sorted(set(out), key=lambda v: (v.kind, v.module, v.line, v.target))


# --------------------------------------------------------------------------------------
# the checker catches what it must
# --------------------------------------------------------------------------------------


def _write_package(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "toy"
    for rel, text in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return pkg


TOY_LAYERS = {"low": 0, "mid": 1, "side": 1, "top": 2}


def test_a_clean_package_passes(tmp_path):
    pkg = _write_package(tmp_path, {
        "__init__.py": "from toy.top import run\n",
        "low/__init__.py": "",
        "low/a.py": "import os\n",
        "mid/__init__.py": "from .b import f\n",
        "mid/b.py": "from toy.low import a\nfrom . import c\n",
        "mid/c.py": "from ..low.a import os\n",
        "top.py": "def run():\n    from toy.mid import f\n    return f\n",
    })
    assert check_layers(pkg, TOY_LAYERS) == []


def test_planted_upward_sideways_root_and_lazy_imports_are_reported(tmp_path):
    pkg = _write_package(tmp_path, {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from toy.top import run  # lazy, still upward\n",
        "mid/__init__.py": "",
        "mid/b.py": "from ..side import s\n",
        "side/__init__.py": "",
        "side/s.py": "import toy\n",
        "top.py": "import importlib\nm = importlib.import_module('toy.extra')\n",
        "extra.py": "",
    })
    got = {(v.kind, v.module, v.target) for v in check_layers(pkg, TOY_LAYERS)}
    assert got == {
        ("upward", "toy.low.a", "toy.top"),
        ("sideways", "toy.mid.b", "toy.side.s"),
        ("root", "toy.side.s", "toy"),
        ("unmapped", "toy.extra", "toy.extra"),
    }


def test_planted_cycle_is_reported(tmp_path):
    pkg = _write_package(tmp_path, {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "from toy.low.b import g\ndef f():\n    pass\n",
        "low/b.py": "def g():\n    from toy.low.c import h  # the lazy import closes it\n",
        "low/c.py": "from toy.low import a\n",
        "low/d.py": "from toy.low import a\n",  # imports into the loop, not part of it
    })
    (v,) = check_layers(pkg, TOY_LAYERS)
    assert v.kind == "cycle"
    assert v.target == "toy.low.a -> toy.low.b -> toy.low.c -> toy.low.a"


def test_relative_imports_resolve_against_the_right_package(tmp_path):
    pkg = _write_package(tmp_path, {
        "__init__.py": "",
        "mid/__init__.py": "from . import b\n",  # in an __init__: the package itself
        "mid/b.py": "from ..low import a\n",  # two dots from a module: the root package
        "mid/c.py": "from .. import top\n",  # `from <root> import x` imports the root
        "low/__init__.py": "",
        "low/a.py": "from ..mid.b import x\n",
        "top.py": "",
    })
    got = {(v.kind, v.module, v.target) for v in check_layers(pkg, TOY_LAYERS)}
    assert got == {("upward", "toy.low.a", "toy.mid.b"), ("root", "toy.mid.c", "toy"),
                   ("cycle", "toy.low.a", "toy.low.a -> toy.mid.b -> toy.low.a")}


# --------------------------------------------------------------------------------------
# attnlab itself
# --------------------------------------------------------------------------------------


def test_every_attnlab_module_has_a_layer():
    units = {_unit(m, "attnlab") for m in _modules(SRC, "attnlab")} - {None}
    assert units <= set(LAYERS), f"add to LAYERS (and DESIGN.md): {sorted(units - set(LAYERS))}"


def test_attnlab_imports_only_go_down_and_have_no_cycles():
    violations = check_layers(SRC, LAYERS, UNITS)
    if violations:
        pytest.fail(f"{len(violations)} layering violation(s):\n"
                    + "\n".join(f"  {v}" for v in violations))
