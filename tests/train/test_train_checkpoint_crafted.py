"""Crafted checkpoints (a valid checksum over tensors that do not fit) are refused in one
line, before anything is loaded or any training starts."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from train_helpers import tiny_config

from attnlab.cli import main
from attnlab.train.checkpoint import (
    CheckpointError,
    _digest,
    build_model,
    checkpoint_config,
    load_checkpoint,
    read_config,
)
from attnlab.train.trainer import train

CKPT = "checkpoint.safetensors"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    cfg = tiny_config(steps=2)
    run_dir = tmp_path_factory.mktemp("trained")
    train(cfg, run_dir, quiet=True)
    return run_dir, cfg


@pytest.fixture
def run(tmp_path, trained):
    """A copy of a finished 2-step run: (its folder, its config)."""
    src, cfg = trained
    shutil.copytree(src, tmp_path / "run")
    return tmp_path / "run", cfg


def _craft(run_dir, edit_tensors=None, edit_meta=None):
    """Rewrite the checkpoint with edited tensors/metadata and a checksum that matches."""
    path = str(run_dir / CKPT)
    with safe_open(path, "pt") as f:
        meta = dict(f.metadata())
    tensors = load_file(path)
    if edit_tensors:
        edit_tensors(tensors)
    if edit_meta:
        edit_meta(meta)
    meta["sha256"] = _digest(tensors)
    save_file(tensors, path, metadata=meta)


def _param(tensors, suffix="exp_avg"):
    return next(k for k in tensors if k.startswith("optim/") and k.endswith("/" + suffix))


def _set(key, value):
    return lambda t: t.__setitem__(key, value)


CASES = {
    "optimizer state of the wrong shape": (
        lambda t: t.__setitem__(_param(t), torch.zeros(3)),
        None, r"optim/\S+/exp_avg is torch.float32 \(3,\), the model expects torch.float32"),
    "optimizer state of the wrong dtype": (
        lambda t: t.__setitem__(_param(t), t[_param(t)].double()),
        None, r"exp_avg is torch.float64 .*, the model expects torch.float32"),
    "optimizer step of the wrong shape": (
        lambda t: t.__setitem__(_param(t, "step"), torch.zeros(2)),
        None, r"optim/\S+/step is torch.float32 \(2,\), the model expects torch.float32 \(\)"),
    "negative second moment": (
        lambda t: t.__setitem__(_param(t, "exp_avg_sq"), -torch.ones_like(t[_param(t)])),
        None, r"exp_avg_sq must be >= 0"),
    "half the optimizer state of a parameter": (
        lambda t: t.pop(_param(t, "exp_avg_sq")), None, r"optimizer state of \S+ has"),
    "optimizer state of no parameter": (
        _set("optim/no.such.param/exp_avg", torch.zeros(2)), None,
        r"the model has no parameter 'no.such.param'"),
    "unknown optimizer state": (
        lambda t: t.__setitem__(_param(t).replace("exp_avg", "momentum"),
                                t[_param(t)].clone()), None,
        r"unexpected optimizer state 'momentum'"),
    "RNG state of the wrong shape": (
        _set("rng/torch_cpu", torch.zeros(10, dtype=torch.uint8)), None,
        r"rng/torch_cpu is torch.uint8 \(10,\), the model expects torch.uint8 \(5056,\)"),
    "RNG state of the wrong dtype": (
        lambda t: t.__setitem__("rng/torch_cpu", t["rng/torch_cpu"].float()), None,
        r"rng/torch_cpu is torch.float32"),
    "no RNG state": (lambda t: t.pop("rng/torch_cpu"), None, r"missing tensor 'rng/torch_cpu'"),
    "weights of the wrong dtype": (
        lambda t: t.__setitem__("model/wte.weight", t["model/wte.weight"].double()), None,
        r"model/wte.weight is torch.float64"),
    "NaN in the weights": (
        lambda t: t["model/wte.weight"].__setitem__((0, 0), float("nan")), None,
        r"model/wte.weight holds NaN or infinite values"),
    "an extra tensor": (_set("evil", torch.zeros(1)), None, r"unexpected tensor 'evil'"),
    "no step tensor": (lambda t: t.pop("step"), None, r"missing tensor 'step'"),
    "a float step": (_set("step", torch.tensor(2.0)), None,
                     r"tensor 'step' must be an int64 scalar, got torch.float32"),
    "a negative step": (_set("step", torch.tensor(-1)), lambda m: m.update(step="-1"),
                        r"tensor 'step' must be >= 0, got -1"),
    "no step field": (None, lambda m: m.pop("step"), r"missing field 'step' in the metadata"),
    "a step field that disagrees": (None, lambda m: m.update(step="7"),
                                    r"field 'step' \('7'\) disagrees with the tensor 'step'"),
    "no config field": (None, lambda m: m.pop("config"),
                        r"missing field 'config' in the metadata"),
    "a config that is not JSON": (None, lambda m: m.update(config="{oops"),
                                  r"field 'config' is not JSON"),
    "a config that is a list": (None, lambda m: m.update(config="[1, 2]"),
                                r"'config' must be a JSON object, got list"),
    "a config with a bad value": (
        None, lambda m: m.update(config=json.dumps({**json.loads(m["config"]), "steps": "x"})),
        r"invalid 'config' \(--steps \(steps\) must be a positive int, got str 'x'"),
    "a tie map that is not a map": (None, lambda m: m.update(tied="[]"),
                                    r"field 'tied' must map parameter names to names"),
    "a tie to nothing": (None, lambda m: m.update(tied='{"lm_head.weight": "nope"}'),
                         r"field 'tied' maps 'lm_head.weight' to 'nope'"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_crafted_checkpoint_is_refused_and_changes_nothing(run, case):
    run_dir, cfg = run
    edit_tensors, edit_meta, message = CASES[case]
    _craft(run_dir, edit_tensors, edit_meta)
    model = build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(run_dir, model, opt, config=cfg)
    assert "\n" not in str(info.value) and str(info.value).startswith(str(run_dir / CKPT))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not opt.state and torch.equal(torch.get_rng_state(), rng)


@pytest.mark.parametrize("case", ["optimizer state of the wrong shape",
                                  "RNG state of the wrong shape", "no step tensor",
                                  "no config field"])
def test_resume_from_a_crafted_checkpoint_is_one_line_before_training(run, capsys, case):
    run_dir, _ = run
    edit_tensors, edit_meta, message = CASES[case]
    _craft(run_dir, edit_tensors, edit_meta)
    metrics = (run_dir / "metrics.jsonl").read_bytes()
    argv = ["train", "--task", "copy", "--layers", "1", "--heads", "2", "--dim", "16",
            "--batch-size", "8", "--steps", "4", "--checkpoint-every", "3", "--log-every", "2",
            "--out", str(run_dir), "--resume", "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnlab train: error: {run_dir / CKPT}: ") and err.count("\n") == 1
    assert (run_dir / "metrics.jsonl").read_bytes() == metrics  # no step was trained


def test_checkpoint_config_and_read_config_refuse_bad_config_fields(run):
    run_dir, _ = run
    _craft(run_dir, edit_meta=lambda m: m.pop("config"))
    with pytest.raises(CheckpointError, match="missing field 'config'"):
        checkpoint_config(run_dir)
    doc = json.loads((run_dir / "config.json").read_text())
    for bad, message in (([], "'config' must be a JSON object, got list"),
                         ({"steps": 0}, "invalid 'config'"), (None, "missing field 'config'")):
        if bad is None:
            doc.pop("config", None)
        else:
            doc["config"] = bad
        (run_dir / "config.json").write_text(json.dumps(doc))
        with pytest.raises(CheckpointError, match=message):
            read_config(run_dir)


def test_the_untouched_checkpoint_still_loads(run):
    """The checks above refuse what does not fit, not a good file."""
    run_dir, cfg = run
    _craft(run_dir)  # rewritten, nothing changed
    model = build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    assert load_checkpoint(run_dir, model, opt, config=cfg) == 2
    assert len(opt.state) == len(list(model.parameters()))
