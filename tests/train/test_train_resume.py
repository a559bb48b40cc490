"""--resume: 2N steps straight == N steps + resume N, weights equal within 1e-6."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.train.checkpoint import build_model, load_checkpoint
from attnlab.train.trainer import read_metrics, train


def _weights(run_dir, cfg):
    model = build_model(cfg)
    load_checkpoint(run_dir, model, config=cfg, restore_rng=False)
    return model.state_dict()


def _max_diff(a, b):
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_resume_matches_an_uninterrupted_run(tmp_path, tiny):
    straight = tiny(steps=8)
    train(straight, tmp_path / "straight", quiet=True)
    train(tiny(steps=4), tmp_path / "split", quiet=True)
    r = train(tiny(steps=8), tmp_path / "split", resume=True, quiet=True)
    assert r.start_step == 4 and r.step == 8
    a, b = _weights(tmp_path / "straight", straight), _weights(tmp_path / "split", straight)
    assert _max_diff(a, b) <= 1e-6
    # the loss trajectory is the same too, and metrics hold one final line
    rows_a, rows_b = read_metrics(tmp_path / "straight"), read_metrics(tmp_path / "split")
    assert [r["step"] for r in rows_a] == [r["step"] for r in rows_b]
    assert all(abs(x["loss"] - y["loss"]) < 1e-6 for x, y in zip(rows_a, rows_b))
    assert [r.get("final", False) for r in rows_b] == [False] * (len(rows_b) - 1) + [True]
    assert "eval_accuracy" in rows_b[-1]
    assert (tmp_path / "split" / "training.png").stat().st_size > 1000


def test_resume_without_optimizer_state_would_differ(tmp_path, tiny):
    """The same comparison catches a resume that forgets the optimizer state."""
    cfg = tiny(steps=8)
    train(cfg, tmp_path / "straight", quiet=True)
    train(tiny(steps=4), tmp_path / "split", quiet=True)
    ckpt = tmp_path / "split" / "checkpoint.safetensors"
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(ckpt), "pt") as f:
        meta = f.metadata()
    tensors = {k: v for k, v in load_file(str(ckpt)).items() if not k.startswith("optim/")}
    from attnlab.train.checkpoint import _digest

    meta["sha256"] = _digest(tensors)
    save_file(tensors, str(ckpt), metadata=meta)  # a checkpoint that lost Adam's moments
    train(tiny(steps=8), tmp_path / "split", resume=True, quiet=True)
    a, b = _weights(tmp_path / "straight", cfg), _weights(tmp_path / "split", cfg)
    assert _max_diff(a, b) > 1e-4


def test_resume_refuses_a_different_run(tmp_path, tiny):
    train(tiny(steps=2), tmp_path, quiet=True)
    with pytest.raises(ValueError, match="lr"):
        train(tiny(steps=4, lr=0.5), tmp_path, resume=True, quiet=True)
    cfg = json.loads((tmp_path / "config.json").read_text())["config"]
    assert cfg["lr"] != 0.5  # nothing was overwritten
    torch.testing.assert_close(torch.tensor(cfg["steps"]), torch.tensor(2))


def test_resume_of_a_finished_run_only_evaluates(tmp_path, tiny):
    first = train(tiny(steps=4), tmp_path, quiet=True)
    again = train(tiny(steps=4), tmp_path, resume=True, quiet=True)
    assert again.start_step == again.step == 4
    assert again.loss == first.loss and again.eval_loss == first.eval_loss
    rows = read_metrics(tmp_path)
    assert sum(bool(r.get("final")) for r in rows) == 1 and json.dumps(rows, allow_nan=False)
