"""`attnlab serve --model M --dtype D --device X`: the served model runs as asked (a copy:
the loaded model stays as it was), and what this machine cannot run is one line, before
any model loads."""

from __future__ import annotations

import pytest
import torch

from attnlab import cli, models
from attnlab.serve.app import model_tracer


@pytest.mark.models
def test_a_served_model_runs_in_the_dtype_asked_for():
    tracer = model_tracer("smollm2", dtype="bfloat16", device="cpu")
    t = tracer("The cat sat on the mat.")
    assert t.meta["run"] == {"dtype": "bfloat16", "device": "cpu"}
    assert t.meta["precision"]["dtype"] == "bfloat16"
    rows = t.weights_rows(18, 6, list(range(t.seq_len)))
    assert (rows.sum(-1) - 1).abs().max() < 1e-5  # the half-precision trace keeps its promise
    assert next(models.load("smollm2").model.parameters()).dtype is torch.float32
    assert model_tracer("smollm2")("The cat sat.").meta["run"]["dtype"] == "float32"


@pytest.mark.parametrize("argv, words", [
    (["--model", "smollm2", "--device", "cuda"], "--device cuda: "),
    (["--model", "smollm2", "--device", "tpu"], "--device tpu: device must be one of"),
    (["--trace", "t.safetensors", "--dtype", "bfloat16"], "a saved trace (--trace) has no"),
])
def test_what_cannot_run_is_one_line_naming_the_flag(capsys, argv, words):
    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    rc = cli.main(["serve", *argv, "--port", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and words in err[0]
