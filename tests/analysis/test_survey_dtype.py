"""`attnlab survey --dtype`: the survey runs the model in half precision (a copy), and its
per-head scores stay those of float32 within the half-precision rule's reach."""

from __future__ import annotations

import json

import pytest

from attnlab import cli

pytestmark = pytest.mark.models


def _survey(tmp_path, capsys, *extra: str) -> dict:
    texts = tmp_path / "t.txt"
    texts.write_text("The cat sat on the mat because it was tired.\n"
                     "Attention is all you need, they said, and said it again.\n")
    out = tmp_path / ("s" + "-".join(extra).replace("--", ""))
    rc = cli.main(["survey", "--model", "smollm2", "--texts", str(texts), "--out", str(out),
                   "--no-probes", "--json", *extra])
    assert rc == 0
    capsys.readouterr()
    return json.loads((out / "survey.json").read_text())


def test_survey_in_bfloat16_keeps_the_float32_scores_close(tmp_path, capsys):
    f32 = _survey(tmp_path, capsys)
    bf16 = _survey(tmp_path, capsys, "--dtype", "bfloat16")
    a, b = f32["scores"], bf16["scores"]
    assert a.keys() == b.keys() and a
    # each score's mean per layer and head (entropy, previous-token, sink, ...)
    worst = max(abs(x - y) for k in a for x, y in zip(_flat(a[k]["mean"]), _flat(b[k]["mean"])))
    assert 0 < worst < 0.05  # half precision moves the scores, and only a little


def _flat(x) -> list[float]:
    if isinstance(x, (int, float)):
        return [float(x)]
    if isinstance(x, dict):
        return [v for k in sorted(x) for v in _flat(x[k])]
    return [v for item in x for v in _flat(item)]
