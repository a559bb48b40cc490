"""`attnlab trace`, `attnlab plot` and `attnlab diagnose`, run in-process."""

from __future__ import annotations

import json

import pytest

from attnlab import cli
from attnlab.trace import AttentionTrace

SENTENCE = "The animal didn't cross the street because it was too tired"


@pytest.mark.models
def test_trace_then_plot_then_diagnose(tmp_path, capsys):
    out = tmp_path / "t.safetensors"
    assert cli.main(["trace", "--model", "minilm", "--text", SENTENCE, "--out", str(out),
                     "--quiet"]) == 0
    t = AttentionTrace.load(out)
    assert t.model == "minilm" and t.q is not None and "animal" in t.tokens
    assert cli.main(["plot", str(out), "--kind", "heatmap", "--layer", "0", "--head", "2",
                     "--out", str(tmp_path / "h.svg")]) == 0
    assert (tmp_path / "h.svg").read_text().lstrip().startswith("<?xml")
    assert cli.main(["plot", str(out), "--kind", "heatmap", "--layer", "9",
                     "--out", str(tmp_path / "x.png")]) == 2
    assert "layer must be in [0, 6)" in capsys.readouterr().err
    assert cli.main(["diagnose", "--model", "minilm", "--text", SENTENCE, "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["roles"]["previous-token"][0] == {"layer": 0, "head": 2,
                                                "score": js["roles"]["previous-token"][0]["score"]}
    assert len(js["heads"]) == 72 and js["tokens"][0] == "[CLS]"


def test_cli_errors_name_the_fix(tmp_path, capsys):
    assert cli.main(["trace", "--model", "no-such-model", "--text", "x", "--out",
                     str(tmp_path / "t.safetensors"), "--quiet"]) == 2
    assert "known model name (minilm, smollm2)" in capsys.readouterr().err
    assert cli.main(["plot", str(tmp_path / "missing.safetensors"), "--out",
                     str(tmp_path / "a.png")]) == 2
    assert "no trace file" in capsys.readouterr().err
