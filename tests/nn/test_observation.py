"""The observation protocol: hook points, their shapes, and paths chosen per module.

A module computes what its observers ask for and nothing more: dense weights only when
``need_weights`` or ``hook_weights`` is observed, the log-sum-exp only when ``hook_lse`` is
observed. Observing one module never changes another's path.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from attnlab.core import functional
from attnlab.core import masks as core_masks
from attnlab.nn import GPT, GPTConfig, HookPoint, MultiHeadAttention, SelfAttention

HOOKS = ("q", "k", "v", "weights", "lse", "context")


def _record(module, names=HOOKS) -> tuple[dict, list]:
    seen: dict = {}
    handles = [getattr(module, f"hook_{n}").register_forward_hook(
        lambda mod, inp, out, n=n: seen.__setitem__(n, out)) for n in names]
    return seen, handles


def test_hook_point_is_observed_only_while_it_has_forward_hooks():
    hp = HookPoint()
    assert not hp.observed
    pre = hp.register_forward_pre_hook(lambda mod, inp: None)
    assert not hp.observed  # a pre-hook does not read the output
    h = hp.register_forward_hook(lambda mod, inp, out: None)
    assert hp.observed
    h.remove()
    pre.remove()
    assert not hp.observed


@pytest.mark.parametrize("make", [
    lambda: MultiHeadAttention(32, 8, num_kv_heads=2),
    lambda: SelfAttention(32, 8),
])
def test_hook_shapes_and_scale(make):
    torch.manual_seed(0)
    m = make()
    h, h_kv = m.num_heads, m.num_kv_heads
    assert isinstance(m.scale, float) and m.scale == functional.default_scale(m.head_dim)
    assert m.scale == pytest.approx(1 / math.sqrt(m.head_dim), rel=1e-15)
    seen, _ = _record(m)
    x = torch.randn(3, 5, 32)
    out, _ = m(x)
    d = m.head_dim
    assert seen["q"].shape == (3, h, 5, d)
    assert seen["k"].shape == seen["v"].shape == (3, h_kv, 5, d)  # grouped heads not repeated
    assert seen["weights"].shape == (3, h, 5, 5)
    assert seen["lse"].shape == (3, h, 5) and seen["lse"].dtype == torch.float32
    assert seen["context"].shape == (3, h, 5, d)
    assert out.shape == (3, 5, 32)


def test_lse_hook_gives_the_logsumexp_of_the_scaled_masked_scores():
    torch.manual_seed(0)
    m = MultiHeadAttention(32, 4, num_kv_heads=2)
    seen, _ = _record(m, ("q", "k", "lse"))
    x = torch.randn(2, 6, 32)
    key_mask = torch.ones(2, 6, dtype=torch.bool)
    key_mask[1, 4:] = False
    m(x, causal=True, key_mask=key_mask)
    q, k = seen["q"], seen["k"].repeat_interleave(2, dim=1)
    allowed = core_masks.combine(core_masks.causal(6), key_mask[:, None, None, :])
    scores = (q @ k.transpose(-2, -1)).masked_fill(~allowed, float("-inf"))
    torch.testing.assert_close(seen["lse"], torch.logsumexp(scores * m.scale, -1),
                               atol=1e-5, rtol=0)
    # the wrong variant (scores not scaled) is told apart
    assert not torch.allclose(seen["lse"], torch.logsumexp(scores, -1), atol=1e-2)


def test_observed_weights_reach_the_hook_but_are_not_returned():
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 2)
    seen, _ = _record(m, ("weights",))
    out, w = m(torch.randn(1, 4, 16), causal=True)
    assert w is None
    assert seen["weights"].shape == (1, 2, 4, 4)
    torch.testing.assert_close(seen["weights"].sum(-1), torch.ones(1, 2, 4))
    assert (seen["weights"].triu(1) == 0).all()


def test_a_hook_may_change_what_passes_through():
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 2)
    m.hook_v.register_forward_hook(lambda mod, inp, out: torch.zeros_like(out))
    out, _ = m(torch.randn(1, 4, 16))
    torch.testing.assert_close(out, m.out_proj.bias.expand(1, 4, 16))


def _gpt() -> GPT:
    return GPT(GPTConfig(vocab_size=13, block_size=16, num_layers=2, num_heads=4,
                         embed_dim=32, num_kv_heads=2)).eval()


def _ops(model: GPT, ids: torch.Tensor) -> set[str]:
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        model(ids)
    return {e.key for e in prof.key_averages()}


def test_observing_one_model_leaves_another_on_the_fast_path():
    torch.manual_seed(0)
    watched, other = _gpt(), _gpt()
    ids = torch.randint(0, 13, (1, 8))
    lse = []
    for block in watched.blocks:
        block.attn.hook_lse.register_forward_hook(lambda mod, inp, out: lse.append(out))
    _ops(watched, ids)
    ops_other = _ops(other, ids)
    # the watched model reported one (B, H, Lq) log-sum-exp per layer
    assert [t.shape for t in lse] == [(1, 4, 8)] * 2
    # the unwatched model ran torch's fused kernel and nothing of the explicit path, even
    # though the other model is being observed at the same time
    assert "aten::scaled_dot_product_attention" in ops_other
    explicit = {"aten::_softmax", "aten::logsumexp", "attnlab_kernel::forward"}
    assert not explicit & ops_other
    # a model whose weights are observed does take the explicit path (the compiled kernel
    # where it is built, PyTorch's softmax otherwise): the signal can fail
    other.blocks[0].attn.hook_weights.register_forward_hook(lambda mod, inp, out: None)
    assert explicit & _ops(other, ids)


def test_the_core_is_asked_for_exactly_what_is_observed(monkeypatch):
    """A spy on the module's call into the core (it records, then calls the real one)."""
    import attnlab.nn.attention as attention

    calls = []

    def spy(q, k, v, mask=None, **kw):
        calls.append(dict(kw, q=q, k=k, v=v, mask=mask))
        return functional.scaled_dot_product_attention(q, k, v, mask, **kw)

    monkeypatch.setattr(attention, "scaled_dot_product_attention", spy)
    m = MultiHeadAttention(32, 4, num_kv_heads=2)
    x = torch.randn(1, 6, 32)

    def asked(**kw):
        calls.clear()
        m(x, causal=True, **kw)
        (c,) = calls
        return c

    c = asked()
    assert not c["return_weights"] and not c["return_lse"] and c["scale"] == m.scale
    assert c["k"].shape[1] == 2  # grouped keys go to the core as they are
    assert functional.why_not_fused(c["q"], c["k"], c["v"], causal=True) is None
    assert asked(need_weights=True)["return_weights"]
    with_lse = m.hook_lse.register_forward_hook(lambda *a: None)
    c = asked()
    assert c["return_lse"] and not c["return_weights"]
    with_lse.remove()
    m.hook_weights.register_forward_hook(lambda *a: None)
    c = asked()
    assert c["return_weights"] and not c["return_lse"]
