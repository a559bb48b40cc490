"""Fuzzing GPT.generate and attnlab.tracing's arguments."""

from __future__ import annotations

import functools
import math

import torch
from fuzz_helpers import FUZZ, Refused, call, finite
from hypothesis import given
from hypothesis import strategies as st

from attnlab.nn.transformer import GPT, GPTConfig
from attnlab.tracing.tracer import trace

VOCAB, BLOCK = 11, 12


@functools.cache
def gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=VOCAB, block_size=BLOCK, num_layers=1, num_heads=2,
                         embed_dim=8)).eval()


@st.composite
def prompts(draw):
    kind = draw(st.sampled_from(["ok"] * 6 + ["int32", "float", "bool", "1d", "3d", "list",
                                              "out-of-vocab", "negative", "empty"]))
    b, n = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 1000)))
    idx = torch.randint(0, VOCAB, (b, n), generator=gen)
    return {"ok": idx, "int32": idx.int(), "float": idx.float(), "bool": idx > 3,
            "1d": idx[0], "3d": idx[None], "list": idx.tolist(),
            "out-of-vocab": idx + VOCAB, "negative": idx - VOCAB,
            "empty": idx[:, :0]}[kind]


@FUZZ
@given(idx=prompts(),
       max_new_tokens=st.one_of(st.integers(-1, 6), st.sampled_from([2.5, True, "3", None,
                                                                       10**9])),
       temperature=st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                             st.sampled_from([1e-30, 1e-8, 1e30, 0.0, -1.0, "1", True, None])),
       top_k=st.one_of(st.none(), st.integers(-1, 15), st.sampled_from([1.5, True, "2"])),
       greedy=st.sampled_from([False, True, 1, "no"]),
       use_cache=st.sampled_from([True, False, 0, None]),
       seed=st.one_of(st.integers(0, 100), st.sampled_from(["seed", 3.5])))
def test_generate(idx, max_new_tokens, temperature, top_k, greedy, use_cache, seed):
    generator = torch.Generator().manual_seed(seed) if isinstance(seed, int) else seed
    names = ("idx", "max_new_tokens", "temperature", "top_k", "greedy", "use_cache",
             "generator", "block_size")
    try:
        out = call(gpt().generate, idx, max_new_tokens, temperature=temperature, top_k=top_k,
                   greedy=greedy, use_cache=use_cache, generator=generator, names=names)
    except Refused:
        return
    assert out.dtype == torch.long and out.shape == (idx.shape[0],
                                                     idx.shape[1] + max_new_tokens)
    assert torch.equal(out[:, :idx.shape[1]], idx) and bool(((out >= 0) & (out < VOCAB)).all())
    if greedy:  # the KV cache changes nothing
        again = gpt().generate(idx, max_new_tokens, temperature=temperature, top_k=top_k,
                               greedy=True, use_cache=not use_cache)
        assert torch.equal(out, again)


TRACE_INPUTS = st.sampled_from([
    123, 1.5, None, b"\x01\x02", [1, "a"], [], [-1], [VOCAB], [True, False], [1.0, 2.0],
    torch.tensor([1.0, 2.0]), torch.ones(2, 2, dtype=torch.long), torch.tensor(3),
    "no tokenizer", "", [1] * (BLOCK + 1), {1: 2}, [[1, 2]], torch.tensor([1, 2, 3]),
    [1, 2, 3], (4, 5), torch.tensor([[1, 2]]),
])


@FUZZ
@given(x=TRACE_INPUTS, qkv=st.sampled_from([True, False, "yes"]),
       truncate=st.sampled_from([False, True, 1]),
       max_memory=st.sampled_from([None, "1GB", "1KiB", 0, -5, "lots", 2.5]))
def test_trace_arguments(x, qkv, truncate, max_memory):
    names = ("text_or_token_ids", "token_ids", "text", "tokenizer", "qkv", "truncate",
             "max_memory", "memory budget", "accepts at most")
    try:
        t = call(trace, gpt(), x, qkv=qkv, truncate=truncate, max_memory=max_memory,
                 names=names)
    except Refused:
        return
    ids = x.reshape(-1).tolist() if isinstance(x, torch.Tensor) else list(x)
    n = min(len(ids), BLOCK) if truncate else len(ids)
    assert t.seq_len == n and t.num_layers == 1 and t.num_heads == 2
    for head in range(2):
        w = t.weights_rows(0, head, list(range(n)))
        assert finite(w) and bool(((w.sum(-1) - 1).abs() < 1e-5).all())
    assert not math.isnan(float(t.weights_rows(0, 0, [n - 1]).sum()))
