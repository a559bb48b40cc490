"""Every ``torch.load`` in attnlab passes ``weights_only=True``: a pickle from a file can run
any code when it is unpickled; the AST of each .py file under src/attnlab is checked."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "attnlab"


def unsafe_torch_loads(source: str, filename: str = "<snippet>") -> list[str]:
    """``file:line`` of each ``torch.load(...)`` call (or ``load`` imported from torch)
    without ``weights_only=True`` written out in the call."""
    tree = ast.parse(source, filename=filename)
    from_torch = {a.asname or a.name for n in ast.walk(tree)
                  if isinstance(n, ast.ImportFrom) and n.module == "torch"
                  for a in n.names if a.name == "load"}
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        is_load = (isinstance(f, ast.Attribute) and f.attr == "load"
                   and isinstance(f.value, ast.Name) and f.value.id == "torch") or (
                  isinstance(f, ast.Name) and f.id in from_torch)
        if not is_load:
            continue
        safe = any(k.arg == "weights_only" and isinstance(k.value, ast.Constant)
                   and k.value.value is True for k in node.keywords)
        if not safe:
            bad.append(f"{filename}:{node.lineno}")
    # code held in a string (a driver script run in a subprocess) is checked as code too
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and "torch.load(" in node.value:
            try:
                inner = unsafe_torch_loads(textwrap.dedent(node.value), filename)
            except SyntaxError:  # prose that names torch.load, not code
                continue
            bad += [f"{hit} (in a string at line {node.lineno})" for hit in inner]
    return bad


def test_every_torch_load_in_attnlab_is_weights_only():
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 50  # the package's files were found
    bad = [hit for p in files
           for hit in unsafe_torch_loads(p.read_text(encoding="utf-8"), str(p.relative_to(SRC)))]
    assert bad == [], f"torch.load without weights_only=True: {bad}"


@pytest.mark.parametrize(("snippet", "n_bad"), [
    ("import torch\nx = torch.load('a.pt')\n", 1),
    ("import torch\nx = torch.load(f, map_location='cpu', weights_only=False)\n", 1),
    ("import torch\nflag = True\nx = torch.load(f, weights_only=flag)\n", 1),  # not literal
    ("from torch import load\nx = load(f)\n", 1),
    ("from torch import load as tl\nx = tl(f)\ny = tl(f, weights_only=True)\n", 1),
    ("import torch\nx = torch.load(f, weights_only=True)\n", 0),
    ("import json\nx = json.load(f)\n", 0),
    ("CODE = \"\"\"\nimport torch\nt = torch.load(p)\n\"\"\"\n", 1),  # a driver script
    ("DOC = 'call torch.load(path, weights_only=True) on files you did not write'\n", 0),
])
def test_the_check_catches_a_wrong_snippet(snippet, n_bad):
    assert len(unsafe_torch_loads(snippet)) == n_bad
