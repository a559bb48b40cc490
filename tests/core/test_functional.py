"""scaled_dot_product_attention against torch's, property-based over shapes, masks, dtypes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from attention_reference import reference  # tests/core/attention_reference.py
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab
from attnlab.core.functional import why_not_fused

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)


@st.composite
def attention_inputs(draw):
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    b = draw(st.integers(1, 3))
    h = draw(st.integers(1, 4))
    lq = draw(st.integers(1, 9))
    lk = draw(st.integers(1, 9))
    d = draw(st.sampled_from([1, 4, 8, 16]))
    dv = draw(st.sampled_from([d, 3]))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, lq, d, generator=g, dtype=dtype)
    k = torch.randn(b, h, lk, d, generator=g, dtype=dtype)
    v = torch.randn(b, h, lk, dv, generator=g, dtype=dtype)
    kind = draw(st.sampled_from(["none", "bool", "float", "key", "bool-bcast"]))
    mask = None
    if kind == "bool":
        mask = torch.rand(b, h, lq, lk, generator=g) > draw(st.sampled_from([0.2, 0.5, 0.9]))
    elif kind == "bool-bcast":
        mask = torch.rand(lq, lk, generator=g) > 0.4
    elif kind == "float":
        mask = torch.randn(b, 1, lq, lk, generator=g, dtype=dtype)
        mask = mask.masked_fill(torch.rand(b, 1, lq, lk, generator=g) > 0.7, -math.inf)
    elif kind == "key":
        lengths = torch.randint(0, lk + 1, (b,), generator=g)
        mask = attnlab.masks.padding(lengths, lk)[:, None, None, :]
    causal = draw(st.booleans())
    return q, k, v, mask, causal


def _alive(mask, causal, lq, lk, shape):
    allowed = torch.ones(shape[:-1] + (lk,), dtype=torch.bool)
    if causal:
        allowed = allowed & torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq)
    if mask is not None:
        allowed = allowed & (mask if mask.dtype == torch.bool else ~torch.isneginf(mask))
    return allowed.any(-1)  # (..., Lq)


@SETTINGS
@given(attention_inputs())
def test_every_path_matches_reference_and_torch(inputs):
    q, k, v, mask, causal = inputs
    tol = 1e-5 if q.dtype == torch.float32 else 1e-10
    ref_out, ref_w, _ = reference(q, k, v, mask, causal)
    fused = attnlab.scaled_dot_product_attention(q, k, v, mask, causal=causal)
    out, w = attnlab.scaled_dot_product_attention(q, k, v, mask, causal=causal,
                                                  return_weights=True)
    assert not torch.isnan(fused).any() and not torch.isnan(out).any()
    torch.testing.assert_close(fused.double(), ref_out, atol=tol, rtol=0)
    torch.testing.assert_close(out.double(), ref_out, atol=tol, rtol=0)
    torch.testing.assert_close(w.double(), ref_w, atol=tol, rtol=0)
    # torch's own kernel on rows it defines (it gives NaN on fully-masked rows, we give 0)
    lq, lk = q.shape[-2], k.shape[-2]
    merged = mask
    if causal:
        c = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq)
        merged = c if mask is None else (
            mask & c if mask.dtype == torch.bool else mask.masked_fill(~c, -math.inf))
    torch_out = F.scaled_dot_product_attention(q, k, v, attn_mask=merged)
    alive = _alive(mask, causal, lq, lk, torch_out.shape[:-1] + (lk,)).expand(out.shape[:-1])
    torch.testing.assert_close(out[alive], torch_out[alive], atol=tol, rtol=0)
    assert (out[~alive] == 0).all() and (w[~alive.unsqueeze(-1).expand_as(w)] == 0).all()


@SETTINGS
@given(attention_inputs())
def test_weights_are_distributions_and_masked_weights_exactly_zero(inputs):
    q, k, v, mask, causal = inputs
    _, w = attnlab.scaled_dot_product_attention(q, k, v, mask, causal=causal,
                                                return_weights=True)
    lq, lk = q.shape[-2], k.shape[-2]
    alive = _alive(mask, causal, lq, lk, w.shape)
    sums = w.sum(-1)
    assert torch.allclose(sums[alive], torch.ones_like(sums[alive]), atol=1e-6)
    assert (sums[~alive] == 0).all()
    assert (w >= 0).all()
    blocked = torch.zeros_like(w, dtype=torch.bool)
    if causal:
        blocked |= ~torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq)
    if mask is not None:
        blocked |= ~mask if mask.dtype == torch.bool else torch.isneginf(mask)
    assert (w[blocked.expand_as(w)] == 0).all()


def test_gradients_match_torch():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=g, requires_grad=True) for _ in range(3))
    mask = torch.rand(2, 1, 6, 6, generator=g) > 0.3
    mask[..., 0] = True
    gy = torch.randn(2, 3, 6, 8, generator=g)
    torch_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    ref = torch.autograd.grad(torch_out, (q, k, v), gy)
    for kw in ({}, {"return_weights": True}):
        out = attnlab.scaled_dot_product_attention(q, k, v, mask, **kw)
        out = out[0] if isinstance(out, tuple) else out
        ours = torch.autograd.grad(out, (q, k, v), gy)
        for a, b in zip(ours, ref):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=0)


@pytest.mark.parametrize("return_weights", [False, True])
def test_fully_masked_rows_give_zero_and_finite_gradients(return_weights):
    q, k, v = (torch.randn(1, 2, 4, 8, requires_grad=True) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False
    out = attnlab.scaled_dot_product_attention(q, k, v, mask, return_weights=return_weights)
    out = out[0] if return_weights else out
    assert (out[:, :, 1] == 0).all()
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[:, :, 1] == 0).all()


@pytest.mark.parametrize("return_weights", [False, True])
def test_nan_in_masked_values_does_not_leak(return_weights):
    q = torch.randn(1, 1, 3, 4)
    k = torch.randn(1, 1, 5, 4)
    v = torch.randn(1, 1, 5, 4)
    v[..., 4, :] = float("nan")
    v[..., 3, 0] = float("inf")
    key_mask = torch.tensor([True, True, True, False, False])
    out = attnlab.scaled_dot_product_attention(q, k, v, key_mask, return_weights=return_weights)
    out = out[0] if return_weights else out
    assert torch.isfinite(out).all()
    ref_out = reference(q, k[..., :3, :], v[..., :3, :])[0]
    torch.testing.assert_close(out.double(), ref_out, atol=1e-6, rtol=0)
    # a row that does attend the NaN value is NaN, as it should be
    mask = key_mask.expand(3, 5).clone()
    mask[2, 4] = True
    out2 = attnlab.scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out2[..., :2, :]).all() and torch.isnan(out2[..., 2, :]).all()


def test_torch_mha_gives_nan_where_attnlab_gives_zero():
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    ours = attnlab.MultiHeadAttention.from_torch(m)
    x = torch.randn(1, 4, 8)
    allowed = torch.ones(4, 4, dtype=torch.bool)
    allowed[1] = False
    ref_out, ref_w = m(x, x, x, attn_mask=~allowed, average_attn_weights=False)
    out, w = ours(x, mask=allowed, need_weights=True)
    assert torch.isnan(ref_out[0, 1]).all() and torch.isnan(ref_w[0, :, 1]).all()
    assert (w[0, :, 1] == 0).all() and torch.isfinite(out).all()
    keep = torch.tensor([True, False, True, True])
    torch.testing.assert_close(out[:, keep], ref_out[:, keep], atol=1e-5, rtol=0)
    torch.testing.assert_close(w[:, :, keep], ref_w[:, :, keep], atol=1e-5, rtol=0)


def test_causal_is_bottom_right_aligned_for_decoding():
    q = torch.randn(1, 1, 2, 4)
    k = v = torch.randn(1, 1, 5, 4)
    _, w = attnlab.scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)
    assert (w[0, 0, 0, 4] == 0) and (w[0, 0, 0, :4] > 0).all()  # second-to-last position
    assert (w[0, 0, 1] > 0).all()  # the last query sees every key
    # a mis-aligned (top-left) causal mask would hide keys 2.. from the first query
    top_left = torch.ones(2, 5, dtype=torch.bool).tril()
    _, w_wrong = attnlab.scaled_dot_product_attention(q, k, v, top_left, return_weights=True)
    assert not torch.allclose(w, w_wrong)


def test_dropout_returns_weights_before_dropout():
    torch.manual_seed(0)
    q = k = v = torch.randn(1, 2, 16, 8)
    out, w = attnlab.scaled_dot_product_attention(q, k, v, dropout_p=0.5, return_weights=True)
    _, w0 = attnlab.scaled_dot_product_attention(q, k, v, return_weights=True)
    torch.testing.assert_close(w, w0)
    assert not torch.allclose(out, w0 @ v)  # dropout did act on the output


def test_auto_takes_fused_path_unless_weights_needed(monkeypatch):
    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention",
                        lambda *a, **kw: calls.append(1) or real(*a, **kw))
    q = k = v = torch.randn(1, 1, 4, 8)
    attnlab.scaled_dot_product_attention(q, k, v)
    assert len(calls) == 1
    attnlab.scaled_dot_product_attention(q, k, v, return_weights=True)
    assert len(calls) == 1
    assert why_not_fused(q, k, v) is None
    assert "weights" in why_not_fused(q, k, v, return_weights=True)


@pytest.mark.parametrize(
    ("kwargs", "exc", "words"),
    [
        (dict(q=torch.randn(4)), ValueError, ["q", "(4,)"]),
        (dict(k=torch.randn(1, 5, 7)), ValueError, ["last dim", "(1, 5, 7)"]),
        (dict(v=torch.randn(1, 4, 8)), ValueError, ["Lk", "(1, 4, 8)"]),
        (dict(q=torch.randn(1, 3, 8).double()), TypeError, ["dtype", "float64"]),
        (dict(q=torch.ones(1, 3, 8, dtype=torch.long)), TypeError, ["floating", "int64"]),
        (dict(mask=torch.ones(3, 4, dtype=torch.bool)), ValueError, ["(3, 4)", "(1, 3, 5)"]),
        (dict(mask=torch.ones(3, 5, dtype=torch.int32)), TypeError, ["mask", "int32"]),
        (dict(backend="magic"), ValueError, ["backend", "magic"]),
        (dict(dropout_p=1.5), ValueError, ["dropout_p", "1.5"]),
        (dict(q=[[1.0]]), TypeError, ["q", "list"]),
    ],
)
def test_bad_input_names_the_argument(kwargs, exc, words):
    args = dict(q=torch.randn(1, 3, 8), k=torch.randn(1, 5, 8), v=torch.randn(1, 5, 8))
    args.update(kwargs)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(exc) as info:
        attnlab.scaled_dot_product_attention(q, k, v, **args)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("shape", [(6, 8), (2, 6, 8), (2, 3, 6, 8)])
@pytest.mark.parametrize("causal", [False, True])
def test_any_rank_gives_the_same_answer(shape, causal):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(*shape, generator=g) for _ in range(3))
    mask = torch.rand(6, 6, generator=g) > 0.3
    mask[2] = False
    ref_out, _, _ = reference(q, k, v, mask, causal)
    for kw in ({}, {"backend": "explicit"}):
        out = attnlab.scaled_dot_product_attention(q, k, v, mask, causal=causal, **kw)
        assert out.shape == shape
        torch.testing.assert_close(out.double(), ref_out, atol=1e-5, rtol=0)
