"""The head sums taken in the traced forward's attention (one kernel pass computing each
layer's output, log-sum-exp and sums) equal the forward's attention and the separate pass:
at the kernel, against torch's softmax and the pass given the same lse; and through a
traced Hugging Face model, against the trace scanned without them."""

from __future__ import annotations

import pytest
import torch

from attnlab.analysis.heads import forward_sums, traced_with_sums
from attnlab.analysis.scores import ForwardSums, TakenSums, _pair_lists, scan
from attnlab.analysis.sums import Occurrences
from attnlab.core import _kernel
from attnlab.core.scores import ScoreShape
from attnlab.core.weights import HEAD_SUMS, attention_head_sums, head_sums

pytestmark = pytest.mark.skipif(
    _kernel.get() is None,
    # justified: the one pass is the compiled kernel's; without a compiler there is none, and
    # the traced forward then computes its attention as before (tested everywhere else)
    reason="no compiled kernel here")


def _qkv(h=4, hkv=2, n=300, d=16, dv=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(h, n, d, generator=g), torch.randn(hkv, n, d, generator=g),
            torch.randn(hkv, n, dv, generator=g))


def _reference(q, k, v, scale, causal):
    rep = q.shape[0] // k.shape[0]
    kk, vv = k.repeat_interleave(rep, 0).double(), v.repeat_interleave(rep, 0).double()
    s = q.double() @ kk.transpose(-1, -2) * scale
    if causal:
        n = q.shape[1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ vv, torch.logsumexp(s, -1)


def _groups(sizes):
    return torch.cat([torch.zeros(1, dtype=torch.long),
                      torch.tensor(sizes, dtype=torch.long).cumsum(0)])


# one piece a token, and tokens of 1 to 3 pieces (a merged trace's words)
SIZES = {"pieces": [1] * 300, "merged": [1, 2, 1, 1, 3, 1, 1, 1, 2] * 20 + [1] * 40}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kind", SIZES)
def test_one_pass_gives_the_attention_and_the_passes_sums(kind, causal):
    q, k, v = _qkv()
    h, n = q.shape[0], q.shape[1]
    scale = 0.25
    groups = _groups(SIZES[kind])
    tokens = groups.numel() - 1
    block = 16
    nb = -(-tokens // block)
    pairs = None
    if kind == "pieces":
        ids = torch.randint(0, 7, (n,), generator=torch.Generator().manual_seed(1))
        pairs = _pair_lists([Occurrences(ids)], torch.arange(n))
    sums = torch.zeros(h, len(HEAD_SUMS), dtype=torch.float64)
    pooled = torch.zeros(h, nb, nb)
    out, lse = attention_head_sums(q, k, v, scale=scale, causal=causal, groups=groups,
                                   sums=sums, pooled=pooled, pool_block=block, pairs=pairs)
    ref_out, ref_lse = _reference(q, k, v, scale, causal)
    assert (out.double() - ref_out).abs().max() < 1e-5
    assert (lse.double() - ref_lse).abs().max() < 1e-5
    # the separate pass, given the lse the one pass computed: the same sums
    want = torch.zeros_like(sums)
    want_pooled = torch.zeros_like(pooled)
    assert head_sums(q, k, lse, ScoreShape(scale=scale, causal=causal),
                     heads=torch.arange(h), rows=range(tokens), sums=want, pooled=want_pooled,
                     pool_block=block, pairs=pairs,
                     groups=None if kind == "pieces" else groups)
    assert torch.allclose(sums, want, rtol=1e-6, atol=1e-9), (sums - want).abs().max()
    assert torch.allclose(pooled, want_pooled, rtol=1e-6, atol=1e-7)
    # a wrong variant fails the same checks: the other masking
    wrong_out, _ = attention_head_sums(q, k, v, scale=scale, causal=not causal,
                                       groups=groups, sums=torch.zeros_like(sums))
    assert (wrong_out.double() - ref_out).abs().max() > 1e-2


def _model(layers=2):
    from random_models import random_llama

    return random_llama(layers=layers, heads=4, kv_heads=2, hidden=32, vocab=97,
                        positions=512, eager=False)


def test_a_traced_forward_takes_every_layers_sums_and_scan_returns_them(monkeypatch):
    """Above the eager-order limit (lowered here to 16 tokens), the forward's attention is
    the one pass: the trace carries its sums, which equal the pass over the same trace,
    and its lse and the model's output equal those of the forward without it."""
    from attnlab.tracing.adapters import huggingface as hf
    from attnlab.tracing.tracer import trace

    monkeypatch.setattr(hf, "EAGER_ORDER_MAX_TOKENS", 16)
    model = _model()
    ids = torch.randint(0, 97, (200,), generator=torch.Generator().manual_seed(3)).tolist()
    with pytest.raises(TypeError, match="sums must be a SumsTaker"):
        trace(model, ids, sums=object())
    plain = trace(model, ids)
    taken = traced_with_sums(trace, model, ids)
    assert plain.forward_sums is None and isinstance(taken.forward_sums, TakenSums)
    assert (taken.lse - plain.lse).abs().max() < 1e-5
    for name in ("q", "k", "v"):  # the layers' inputs: the model's outputs before them
        assert (getattr(taken, name) - getattr(plain, name)).abs().max() < 1e-4
    block = taken.forward_sums.block
    got = scan(taken, pool_block=block)
    taken.forward_sums = None
    want = scan(taken, pool_block=block)
    assert got[2] == want[2] is True  # the token ids' pairs are in both
    assert torch.allclose(got[0], want[0], rtol=1e-6, atol=1e-9)
    assert torch.allclose(got[1], want[1], rtol=1e-6, atol=1e-7)
    # asked for other rows or another block, scan runs its own pass
    taken.forward_sums = TakenSums(block, got[0] + 1.0, got[1], True)
    assert torch.equal(scan(taken, pool_block=block + 1)[0], want[0])
    assert torch.equal(scan(taken, pool_block=block, queries=range(0, 200))[0], want[0])


def test_a_taker_declines_what_it_cannot_take():
    """Unprepared, or told another length or head count, the taker hands the call back
    (None) and then attaches nothing: the trace is scanned by its own pass."""
    q, k, v = _qkv(n=40)
    t = forward_sums()
    assert t.attention(q, k, v, scale=0.25, causal=True) is None  # not prepared
    t = ForwardSums(lambda heads, lq, lk: 8)
    t.prepare(pieces=40, groups=None, token_ids=list(range(40)), num_layers=2)
    assert t.attention(q, k, v, scale=0.25, causal=True) is not None
    assert t.attention(q[:2], k, v, scale=0.25, causal=True) is None  # other heads
    assert t.declined and t.attention(q, k, v, scale=0.25, causal=True) is None

    class Trace:
        forward_sums = None
        num_layers, num_heads, seq_len, key_len = 2, 4, 40, 40

    assert not t.attach(Trace())
    t.prepare(pieces=40, groups=None, token_ids=list(range(40)), num_layers=2)
    assert t.attention(q, k, v, scale=0.25, causal=True) is not None
    assert not t.attach(Trace())  # one layer of two
    assert t.attention(q, k, v, scale=0.25, causal=True) is not None
    tr = Trace()
    assert t.attach(tr) and tr.forward_sums.block == 8
    assert t.attention(q, k, v, scale=0.25, causal=True) is None  # a third call: declined


@pytest.mark.models
def test_diagnose_model_and_explore_score_from_the_forwards_sums(monkeypatch):
    """SmolLM2 (the limit lowered to 16 tokens): ``diagnose_model`` and ``explore`` trace
    through the taker, every layer's sums are attached, and the scores equal those of the
    same text traced without it and scanned by the pass."""
    from attnlab.analysis.heads import diagnose, diagnose_model
    from attnlab.models import load
    from attnlab.tracing.adapters import huggingface as hf
    from attnlab.tracing.tracer import trace
    from attnlab.viz.explorer import explore

    monkeypatch.setattr(hf, "EAGER_ORDER_MAX_TOKENS", 16)
    attached = []
    real = ForwardSums.attach
    monkeypatch.setattr(ForwardSums, "attach",
                        lambda self, t: attached.append(real(self, t)) or attached[-1])
    loaded = load("smollm2", progress=False)
    text = "The quick brown fox jumps over the lazy dog, then over the 注意力 of the cat."
    got = diagnose_model(loaded, text, period=20)
    want = diagnose(trace(loaded, text, merge_pieces=False))
    assert attached == [True]
    for name, scores in want.scores.items():
        assert torch.allclose(got.scores[name], scores, rtol=1e-5, atol=1e-6), name
    ex = explore(loaded, text)
    assert attached == [True, True] and ex.traces[0].forward_sums is not None
    assert ex.traces[0].groups is not None  # the merged words' path (注意力's byte pieces)
