"""``attnlab --help``, ``attnlab COMMAND --help`` and ``import attnlab`` print or finish
without importing torch (PEP 562 lazy exports, :mod:`attnlab._lazy`); the public names
still resolve to the objects they name."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import attnlab
from attnlab.cli import build_parser
from limits import CHILD_S

COMMANDS = sorted(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]

_PROBE = r"""
import json, sys
import attnlab.cli as cli
out = {}
for argv in json.loads(sys.argv[1]):
    try:
        cli.main(argv)
    except SystemExit:
        pass
    out[" ".join(argv)] = sorted(m for m in ("torch", "numpy", "matplotlib", "transformers")
                                 if m in sys.modules)
print(json.dumps(out), file=sys.stderr)
"""


def test_every_help_prints_without_torch():
    assert len(COMMANDS) >= 10 and "trace" in COMMANDS and "train" in COMMANDS
    argvs = [["--help"]] + [[c, "--help"] for c in COMMANDS]
    r = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argvs)], capture_output=True,
                       text=True, timeout=CHILD_S)
    loaded = json.loads(r.stderr.strip().splitlines()[-1])
    assert loaded == {" ".join(a): [] for a in argvs}
    assert "usage: attnlab" in r.stdout and r.stdout.count("usage: attnlab ") == len(argvs)


def test_the_probe_sees_an_eager_import():
    """The wrong variant: a command whose help does import torch is reported."""
    probe = _PROBE.replace("import attnlab.cli as cli", "import attnlab.cli as cli\nimport torch")
    r = subprocess.run([sys.executable, "-c", probe, json.dumps([["--help"]])],
                       capture_output=True, text=True, timeout=CHILD_S)
    assert "torch" in json.loads(r.stderr.strip().splitlines()[-1])["--help"]


def test_import_attnlab_is_light_and_its_names_resolve():
    r = subprocess.run([sys.executable, "-c", "import sys, attnlab, attnlab.train; "
                        "print('torch' in sys.modules)"], capture_output=True, text=True,
                       timeout=CHILD_S)
    assert r.stdout.strip() == "False", r.stderr
    for name in attnlab.__all__:
        assert getattr(attnlab, name) is not None, name
    from attnlab.core.functional import scaled_dot_product_attention
    from attnlab.tracing import AttentionTrace

    assert attnlab.scaled_dot_product_attention is scaled_dot_product_attention
    assert attnlab.AttentionTrace is AttentionTrace and attnlab.masks.__name__ == "attnlab.masks"
    assert set(attnlab.__all__) <= set(dir(attnlab))
    import attnlab.train as train

    for name in train.__all__:
        assert getattr(train, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        attnlab.nope  # noqa: B018


def test_a_subpackage_is_imported_on_first_use():
    """``import attnlab`` then ``attnlab.nn.X`` works as after ``import attnlab.nn``; a
    private or missing one is still no attribute."""
    code = ("import sys, attnlab; assert 'attnlab.nn' not in sys.modules; "
            "print(attnlab.nn.MultiHeadAttention.__module__, attnlab.tracing.__name__); "
            "import attnlab.nn; assert attnlab.nn is sys.modules['attnlab.nn']; "
            "names = [n for n in ('_mathml', 'nowhere') if hasattr(attnlab, n)]; "
            "print(names, '_mathml' in vars(attnlab))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=CHILD_S)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["attnlab.nn.attention", "attnlab.tracing", "[]", "False"]


@pytest.mark.parametrize("package", ["attnlab", "attnlab.train"])
def test_the_type_checking_imports_name_exactly_the_lazy_ones(package):
    """The names type checkers and the API reference see (``if TYPE_CHECKING:`` imports)
    are the run-time lazy table, module for module."""
    import ast
    import importlib

    module = importlib.import_module(package)
    tree = ast.parse(open(module.__file__, encoding="utf-8").read())
    block = next(n for n in tree.body if isinstance(n, ast.If)
                 and getattr(n.test, "id", "") == "TYPE_CHECKING")
    seen = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom)
        for alias in node.names:
            mod = node.module
            seen[alias.name] = mod if f"{mod}.{alias.name}" not in module._LAZY.values() \
                else f"{mod}.{alias.name}"
    assert seen == dict(module._LAZY)
    assert sorted(seen) == sorted(n for n in module.__all__ if n != "trace")


_FIRST_CALL = r"""
import sys, torch
from attnlab.core.functional import scaled_dot_product_attention
from attnlab.core.masks import causal, combine
from attnlab.core.weights import attention_weights, pooled_attention_map
from attnlab.nn import MultiHeadAttention
x = torch.randn(2, 6, 16)
MultiHeadAttention(16, 4)(x, need_weights=True)
q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
mask = combine(causal(6), torch.tensor([True] * 5 + [False]))
out, lse = scaled_dot_product_attention(q, k, v, mask=mask, return_lse=True)
k4 = k.repeat_interleave(2, dim=1)
attention_weights(q, k4, lse, rows=[0, 3], mask=mask)
pooled_attention_map(q, k4, lse, size=2, mask=mask)
print(sorted(m for m in ("sympy", "torch.fx.experimental.symbolic_shapes")
             if m in sys.modules))
"""


def test_the_first_attention_does_not_import_sympy():
    """torch's ``broadcast_shapes`` imports torch.fx's symbolic shapes and sympy on its
    first call (0.4-0.6 s): attnlab's checks broadcast shapes themselves
    (:func:`attnlab.core._checks.broadcast_shapes`), so a process's first attention costs
    what the later ones do."""
    r = subprocess.run([sys.executable, "-c", _FIRST_CALL], capture_output=True, text=True,
                       timeout=CHILD_S)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"
    # the wrong variant: torch's own broadcast_shapes, once, is seen
    probe = _FIRST_CALL.replace("print(", "torch.broadcast_shapes((2, 1), (3,))\nprint(", 1)
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       timeout=CHILD_S)
    assert r.returncode == 0, r.stderr
    assert "sympy" in r.stdout.strip().splitlines()[-1]
