"""A trained run directory goes through the same diagnose path as a real model."""

from __future__ import annotations

from attnlab.analysis import diagnose_model
from attnlab.models import load
from attnlab.train.trainer import train


def test_diagnose_runs_on_a_run_directory(tmp_path, tiny):
    cfg = tiny("induction", num_layers=2, steps=4)
    train(cfg, tmp_path / "run", quiet=True)
    loaded = load(str(tmp_path / "run"))
    text = loaded.tokenizer.example_text()
    assert len(loaded.tokenizer.encode(text)) <= loaded.max_length
    d = diagnose_model(loaded, text)
    # the repeated sequence was sized to the model: a small vocabulary and 32-token context
    assert d.meta["induction"]["period"] * 2 + d.meta["induction"]["start"] <= loaded.max_length
