"""`attnlab verify`: once as a real subprocess (stdout must be pure JSON), then in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from attnlab.cli import main
from limits import CHILD_S


def test_verify_json_only_on_stdout():
    p = subprocess.run(
        [sys.executable, "-m", "attnlab", "verify", "--only", "pe-relative-position",
         "--only", "masking", "--json"],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=CHILD_S)
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert [d["name"] for d in data] == ["pe-relative-position", "masking"]
    for d in data:
        assert {"name", "claim", "measured", "expected", "tolerance", "passed"} <= set(d)
        assert d["passed"] is True
        # each experiment's control and the margin by which the measurement beats it
        assert d["control_value"] == d["control"]["measured"]
        assert d["control_margin"] > 0
        for c in d["checks"]:
            assert (c["control_value"] is None) == (c["control"] is None)
    masking = {c["id"]: c for c in data[1]["checks"]}["masked-weight-zero"]
    assert masking["control_margin"] == masking["control_value"] - masking["value"] > 0


def test_control_margin_reads_the_relation():
    from attnlab.experiments import Check, Control
    from attnlab.experiments._result import control_margin
    assert control_margin(45.8, 61.0, ">=") < 0  # the untrained heads pass by more
    assert control_margin(0.0, 0.1, "<=") == 0.1
    assert control_margin(1.0, 3.0, "==", 1.0) == 2.0
    c = Check("x", 3.0, "≥ 3", True, control=Control("c", "对照", 0.0))
    assert c.control_margin == 3.0
    assert Check("x", 3.0, "≥ 3", True).control_margin is None


def test_verify_table_shows_a_finding_and_exits_0(capsys):
    """article-code refutes that article 001's listing runs as printed, as it expects: a
    finding, not a failure."""
    assert main(["verify", "--only", "article-code", "--only", "masking", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "article-code" in out and "finding" in out and "holds" in out
    assert "DEFECT" not in out


def test_verify_exits_1_on_a_verdict_other_than_expected(capsys, monkeypatch):
    from attnlab.experiments import Result, registry

    def claim_that_does_not_hold(seed=0, **_):
        return Result("masking", "c", "论", "q", "量", measured=0.0, expected=1.0,
                      tolerance=0.0, relation=">=")

    monkeypatch.setattr(registry, "get", lambda name: claim_that_does_not_hold)
    assert main(["verify", "--only", "masking", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "DEFECT" in out and "expected holds" in out


def test_verify_unknown_name_lists_valid_names(capsys):
    assert main(["verify", "--only", "qk-varianse"]) == 2
    err = capsys.readouterr().err
    assert "qk-varianse" in err and "valid names" in err and "qk-variance" in err
    assert err.count("\n") == 1
