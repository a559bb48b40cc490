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
                       text=True, timeout=120)
    loaded = json.loads(r.stderr.strip().splitlines()[-1])
    assert loaded == {" ".join(a): [] for a in argvs}
    assert "usage: attnlab" in r.stdout and r.stdout.count("usage: attnlab ") == len(argvs)


def test_the_probe_sees_an_eager_import():
    """The wrong variant: a command whose help does import torch is reported."""
    probe = _PROBE.replace("import attnlab.cli as cli", "import attnlab.cli as cli\nimport torch")
    r = subprocess.run([sys.executable, "-c", probe, json.dumps([["--help"]])],
                       capture_output=True, text=True, timeout=120)
    assert "torch" in json.loads(r.stderr.strip().splitlines()[-1])["--help"]


def test_import_attnlab_is_light_and_its_names_resolve():
    r = subprocess.run([sys.executable, "-c", "import sys, attnlab, attnlab.train; "
                        "print('torch' in sys.modules)"], capture_output=True, text=True,
                       timeout=120)
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
