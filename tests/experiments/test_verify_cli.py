"""`attnlab verify`: once as a real subprocess (stdout must be pure JSON), then in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from attnlab.cli import main


def test_verify_json_only_on_stdout():
    p = subprocess.run(
        [sys.executable, "-m", "attnlab", "verify", "--only", "pe-relative-position",
         "--only", "masking", "--json"],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert [d["name"] for d in data] == ["pe-relative-position", "masking"]
    for d in data:
        assert {"name", "claim", "measured", "expected", "tolerance", "passed"} <= set(d)
        assert d["passed"] is True


def test_verify_table(capsys):
    assert main(["verify", "--only", "init-scale", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "init-scale" in out and "pass" in out and "FAIL" not in out


def test_verify_unknown_name_lists_valid_names(capsys):
    assert main(["verify", "--only", "qk-varianse"]) == 2
    err = capsys.readouterr().err
    assert "qk-varianse" in err and "valid names" in err and "qk-variance" in err
    assert err.count("\n") == 1
