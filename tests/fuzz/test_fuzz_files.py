"""Fuzzing what attnlab reads from disk: traces and training checkpoints, corrupted byte by
byte, cut short, or crafted (valid format, edited contents). Outcomes allowed: the file is
refused with a ValueError naming it (or the field at fault), or it loads and everything it
gives is finite and consistent."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import struct
import tempfile
from pathlib import Path

import torch
from fuzz_helpers import FUZZ, Refused, call, finite
from hypothesis import example, given
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from attnlab.nn.transformer import GPT, GPTConfig
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.tracer import trace
from attnlab.train.checkpoint import _digest, build_model, load_checkpoint
from attnlab.train.config import TrainConfig
from attnlab.train.trainer import train

TRACE_FIELDS = ("tokens", "key_tokens", "token_ids", "model", "causal", "text", "meta",
                "groups", "shapes", "tensors", "format_version", "format", "scale", "window",
                "softcap", "q", "k", "v", "lse", "weights", "context", "NaN", "finite")


@functools.cache
def trace_bytes(qkv: bool = True) -> bytes:
    """A small v2 trace (2 layers, 2 query heads sharing 1 key/value head, 6 tokens): q, k,
    v and lse, or dense weights (``qkv=False``)."""
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=16, block_size=8, num_layers=2, num_heads=2, embed_dim=8,
                        num_kv_heads=1)).eval()
    t = trace(gpt, [1, 2, 3, 4, 5, 6], qkv=qkv)
    return _save_bytes(t)


def _save_bytes(t: AttentionTrace) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        return Path(t.save(Path(d) / "t.safetensors")).read_bytes()


@contextlib.contextmanager
def _scratch():
    """A fresh folder per example (not a fixture: hypothesis would print it)."""
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


def _split(data: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def _join(header: dict, body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + body


def _check_loaded(path, t: AttentionTrace) -> None:
    """A trace that loaded must give finite, normalized weights (or refuse by name)."""
    assert isinstance(t.tokens, list) and all(isinstance(s, str) for s in t.tokens)
    assert len(t.tokens) == t.seq_len
    names = (str(path), *TRACE_FIELDS)
    for layer in range(t.num_layers):
        for head in range(t.num_heads):
            w = call(t.weights_rows, layer, head, list(range(t.seq_len)), names=names)
            assert finite(w), f"non-finite weights drawn from {path}"
            sums = w.sum(-1)
            assert bool(((sums - 1).abs() < 1e-4).logical_or(sums == 0).all())


def _load_and_check(path) -> None:
    try:
        t = call(AttentionTrace.load, path, names=(str(path), *TRACE_FIELDS))
        _check_loaded(path, t)
    except Refused:
        pass


JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 10),
                              st.floats(allow_nan=True, allow_infinity=True),
                              st.text(max_size=4)),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.text(max_size=3), inner, max_size=3), max_leaves=6)


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 255)), min_size=1,
                      max_size=4), cut=st.one_of(st.none(), st.integers(0, 10**9)))
@example(edits=[(-7, 0x40)], cut=None)  # one byte of the last log-sum-exp: rows off 1
def test_a_trace_corrupted_byte_by_byte_is_refused_or_sound(edits, cut):
    data = bytearray(trace_bytes())
    for pos, val in edits:
        data[pos % len(data)] = val
    if cut is not None:
        data = data[:cut % len(data)]
    with _scratch() as d:
        (d / "t.safetensors").write_bytes(bytes(data))
        _load_and_check(d / "t.safetensors")


@FUZZ
@given(field=st.sampled_from(["tokens", "key_tokens", "token_ids", "model", "causal", "text",
                              "meta", "groups", "format_version", "shapes", "shapes.scale",
                              "shapes.causal", "shapes.window", "shapes.softcap",
                              "shapes.lse", "tensors"]),
       value=JSON)
@example(field="tokens", value=5)  # the cases of hand-edited metadata seen in the wild
@example(field="shapes.scale", value="0.5")
@example(field="meta", value=[1, 2])
@example(field="token_ids", value="123")
@example(field="causal", value="yes")
def test_a_trace_with_edited_metadata_is_refused_or_sound(field, value):
    header, body = _split(trace_bytes())
    meta = json.loads(header["__metadata__"]["attnlab"])
    if field.startswith("shapes."):
        meta["shapes"][0][field.split(".")[1]] = value
    else:
        meta[field] = value
    header["__metadata__"]["attnlab"] = json.dumps(meta)
    with _scratch() as d:
        (d / "t.safetensors").write_bytes(_join(header, body))
        _load_and_check(d / "t.safetensors")


@FUZZ
@given(name=st.sampled_from(["q", "k", "v", "lse", "weights"]), index=st.integers(0, 10**6),
       value=st.sampled_from([math.nan, math.inf, -math.inf, 1e38, -1e38]))
def test_a_trace_holding_non_finite_numbers_is_refused_or_sound(name, index, value):
    with _scratch() as d:
        src = d / "src.safetensors"
        src.write_bytes(trace_bytes(qkv=name != "weights"))
        with safe_open(str(src), "pt") as f:
            meta = f.metadata()
            tensors = {n: f.get_tensor(n) for n in f.keys()}
        flat = tensors[name].reshape(-1)
        flat[index % flat.numel()] = value
        save_file(tensors, str(d / "t.safetensors"), metadata=meta)
        _load_and_check(d / "t.safetensors")


# -- checkpoints --------------------------------------------------------------------------


def _tiny() -> TrainConfig:
    return TrainConfig.for_task("copy", num_layers=1, num_heads=2, embed_dim=8, batch_size=4,
                                steps=1, warmup_steps=1, eval_batches=1, log_every=1)


@functools.cache
def checkpoint_bytes() -> bytes:
    """The checkpoint of a 1-step run of a tiny model."""
    with _scratch() as d:
        train(_tiny(), d, quiet=True)
        return (d / "checkpoint.safetensors").read_bytes()


def _try_resume(d) -> None:
    """Load the checkpoint; if it loads, one training step must run and stay finite."""
    cfg = _tiny()
    model = build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    path = d / "checkpoint.safetensors"
    try:
        step = call(load_checkpoint, d, model, opt, config=cfg, names=(str(path),))
    except Refused:
        return
    assert step == 1
    from attnlab.train.tasks import get_task

    b = get_task(cfg.task).batch(0, 2, 0)
    loss = torch.nn.functional.cross_entropy(model(b.inputs)[b.scored], b.targets[b.scored])
    loss.backward()
    opt.step()
    assert finite(loss) and all(finite(p) for p in model.parameters())


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 255)), min_size=1,
                      max_size=3), cut=st.one_of(st.none(), st.integers(0, 10**9)))
def test_a_checkpoint_corrupted_byte_by_byte_is_refused(edits, cut):
    data = bytearray(checkpoint_bytes())
    for pos, val in edits:
        data[pos % len(data)] = val
    if cut is not None:
        data = data[:cut % len(data)]
    with _scratch() as d:
        (d / "checkpoint.safetensors").write_bytes(bytes(data))
        _try_resume(d)


@FUZZ
@given(key=st.sampled_from(["model/wte.weight", "optim/wte.weight/exp_avg",
                            "optim/wte.weight/exp_avg_sq", "optim/wte.weight/step",
                            "rng/torch_cpu", "step", "model/new", "optim/x/y"]),
       shape=st.lists(st.integers(0, 5), max_size=3),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.float16, torch.int64,
                              torch.uint8, torch.bool]),
       fill=st.sampled_from([0.0, 1.0, -1.0, math.nan, math.inf]),
       meta_key=st.sampled_from([None, "step", "config", "tied", "format_version", "kind",
                                 "optimizer"]),
       meta_value=st.one_of(st.text(max_size=6), JSON.map(json.dumps)))
def test_a_crafted_checkpoint_is_refused_or_trains(key, shape, dtype, fill, meta_key,
                                                   meta_value):
    with _scratch() as d:
        src = d / "src.safetensors"
        src.write_bytes(checkpoint_bytes())
        with safe_open(str(src), "pt") as f:
            meta = dict(f.metadata())
        tensors = load_file(str(src))
        value = torch.full(shape, fill) if dtype.is_floating_point else torch.zeros(shape)
        tensors[key] = value.to(dtype)
        if meta_key is not None:
            meta[meta_key] = meta_value
        meta["sha256"] = _digest(tensors)
        save_file(tensors, str(d / "checkpoint.safetensors"), metadata=meta)
        _try_resume(d)
