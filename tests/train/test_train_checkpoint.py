"""Checkpoints: round trip, no pickle, corrupt or mismatched files refused."""

from __future__ import annotations

import json
import struct

import pytest
import torch

from attnlab.train.checkpoint import (
    CheckpointError,
    RunTokenizer,
    build_model,
    is_run_dir,
    load_checkpoint,
    load_run,
    save_checkpoint,
)
from attnlab.train.tasks import get_task
from attnlab.train.trainer import train


def _model_opt(cfg):
    model = build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    model(get_task(cfg.task).batch(0, 2, 0).inputs).sum().backward()
    opt.step()  # some optimizer state to save
    return model, opt


def test_round_trip_restores_weights_optimizer_and_rng(tmp_path, tiny):
    cfg = tiny()
    model, opt = _model_opt(cfg)
    torch.manual_seed(123)
    save_checkpoint(tmp_path, model, opt, step=7, config=cfg)
    expected_draw = torch.rand(3)
    fresh = build_model(tiny(seed=cfg.seed))
    with torch.no_grad():
        for p in fresh.parameters():
            p.add_(1.0)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=cfg.lr)
    assert load_checkpoint(tmp_path, fresh, fresh_opt, config=cfg) == 7
    assert torch.equal(torch.rand(3), expected_draw)  # RNG state restored
    for (n, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a, b), n
    assert fresh.lm_head.weight is fresh.wte.weight  # tying survives
    for p, q in zip(model.parameters(), fresh.parameters()):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt.state[p][key], fresh_opt.state[q][key])


def test_file_is_safetensors_with_json_metadata_no_pickle(tmp_path, tiny):
    cfg = tiny()
    model, opt = _model_opt(cfg)
    save_checkpoint(tmp_path, model, opt, step=1, config=cfg)
    data = (tmp_path / "checkpoint.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header["__metadata__"]
    assert meta["format_version"] == "1" and json.loads(meta["config"])["task"] == "copy"
    assert b"\x80\x04" not in data[:8 + n]  # no pickle protocol marker in the header
    kinds = {k.split("/")[0] for k in header if k != "__metadata__"}
    assert kinds == {"model", "optim", "rng", "step"}
    assert not list(tmp_path.glob(".*.tmp"))  # the temp file was renamed away


def test_corrupt_checkpoint_is_refused(tmp_path, tiny):
    cfg = tiny()
    model, opt = _model_opt(cfg)
    save_checkpoint(tmp_path, model, opt, step=1, config=cfg)
    path = tmp_path / "checkpoint.safetensors"
    good = path.read_bytes()
    flipped = bytearray(good)
    flipped[-100] ^= 0xFF  # one bit pattern inside the tensor data
    path.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        load_checkpoint(tmp_path, build_model(cfg), config=cfg)
    path.write_bytes(good[: len(good) // 2])
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(tmp_path, build_model(cfg), config=cfg)
    path.write_bytes(good)  # intact again: accepted
    assert load_checkpoint(tmp_path, build_model(cfg), config=cfg) == 1


def test_mismatched_checkpoint_is_refused(tmp_path, tiny):
    cfg = tiny()
    model, opt = _model_opt(cfg)
    save_checkpoint(tmp_path, model, opt, step=1, config=cfg)
    other = tiny(seed=5)
    with pytest.raises(CheckpointError, match="seed: 5 != 0"):
        load_checkpoint(tmp_path, build_model(other), config=other)
    bigger = tiny(embed_dim=32)
    with pytest.raises(CheckpointError, match="embed_dim"):
        load_checkpoint(tmp_path, build_model(bigger), config=bigger)
    with pytest.raises(CheckpointError, match="shape"):  # no config given: shapes still checked
        load_checkpoint(tmp_path, build_model(bigger))
    # the steps may change on resume
    assert load_checkpoint(tmp_path, build_model(cfg), config=tiny(steps=99)) == 1


def test_load_run_gives_model_and_tokenizer(tmp_path, tiny):
    cfg = tiny("induction", num_layers=2)
    assert not is_run_dir(tmp_path)
    train(cfg, tmp_path, quiet=True)
    assert is_run_dir(tmp_path) and not is_run_dir(tmp_path / "checkpoint.safetensors")
    model, tok = load_run(tmp_path)
    assert not model.training and tok.name == "attnlab-train:induction"
    ids = tok.encode("3 17 5 3 17")
    assert tok.decode_tokens(ids) == ["<bos>", "3", "17", "5", "3", "17"]
    logits = model(torch.tensor([ids]))
    assert logits.shape == (1, 6, tok.vocab_size)
    with pytest.raises(ValueError, match="unknown symbol"):
        tok.encode("3 banana")
    text = tok.example_text()  # one full model context, no more
    assert len(tok.encode(text)) == model.config.block_size == get_task("induction").seq_len - 1
    model(torch.tensor([tok.encode(text)]))


def test_tokenizer_is_documented_by_its_task():
    tok = RunTokenizer(get_task("modular-add"))
    assert tok.decode_tokens(tok.encode("4 + 16 =")) == ["<bos>", "4", "+", "16", "="]
