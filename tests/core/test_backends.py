"""Every backend against the float64 formula: explicit (tiled), chunked, fused, linear."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from attention_reference import make_mask, reference  # tests/core/attention_reference.py
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab
import attnlab.core._tiles as tiles
from attnlab.core import (
    attention_weights,
    chunked_attention,
    linear_attention,
    pooled_attention_map,
)

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True)


KINDS = ["none", "bool", "bool-bcast", "float", "key"]


@st.composite
def inputs(draw, max_len=50):
    b, h = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    lq, lk = draw(st.integers(1, max_len)), draw(st.integers(1, max_len))
    d = draw(st.sampled_from([4, 16]))
    dv = draw(st.sampled_from([d, 3]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    q = torch.randn(b, h, lq, d, generator=g)
    k = torch.randn(b, h, lk, d, generator=g)
    v = torch.randn(b, h, lk, dv, generator=g)
    mask = make_mask(draw(st.sampled_from(KINDS)), b, h, lq, lk, g)
    return q, k, v, mask, draw(st.booleans())


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles of a few rows, so that row blocks, causal skipping and tails are exercised."""
    monkeypatch.setattr(tiles, "_TILE_BYTES", 4 * 12 * 70)
    monkeypatch.setattr(tiles, "_MIN_ROWS", 5)


def _max_err(a, b):
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


@SETTINGS
@given(inputs())
def test_every_backend_equals_the_formula(inputs):
    q, k, v, mask, causal = inputs
    ref_out, ref_w, ref_lse = reference(q, k, v, mask, causal)
    for tile in (tiles._TILE_BYTES, 4 * 12 * 70):
        old = tiles._TILE_BYTES, tiles._MIN_ROWS
        tiles._TILE_BYTES, tiles._MIN_ROWS = tile, 5
        try:
            out, w = attnlab.scaled_dot_product_attention(
                q, k, v, mask, causal=causal, return_weights=True, backend="explicit")
        finally:
            tiles._TILE_BYTES, tiles._MIN_ROWS = old
        assert _max_err(out, ref_out) <= 1e-5 and _max_err(w, ref_w) <= 1e-5
    fused = attnlab.scaled_dot_product_attention(q, k, v, mask, causal=causal, backend="fused")
    assert _max_err(fused, ref_out) <= 1e-5
    for bq, bk in ((None, None), (7, 5)):
        out, lse = chunked_attention(q, k, v, mask, causal=causal, block_q=bq, block_k=bk)
        assert _max_err(out, ref_out) <= 1e-5
        alive = torch.isfinite(ref_lse)
        assert torch.equal(torch.isfinite(lse), alive)
        assert _max_err(lse[alive], ref_lse[alive]) <= 1e-5
    out, w = attnlab.scaled_dot_product_attention(
        q, k, v, mask, causal=causal, return_weights=True, backend="chunked")
    assert _max_err(out, ref_out) <= 1e-5 and _max_err(w, ref_w) <= 1e-5
    assert not torch.isnan(out).any()


@pytest.mark.parametrize(
    "wrong",
    [
        dict(scale=1.0),  # no 1/sqrt(d)
        dict(invert=True),  # a mask read the wrong way round
        dict(top_left=True),  # causal aligned top-left instead of bottom-right
    ],
)
@pytest.mark.parametrize("backend", ["explicit", "chunked"])
def test_the_comparison_catches_wrong_variants(backend, wrong):
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(1, 2, 9, 16, generator=g), *torch.randn(2, 1, 2, 13, 16, generator=g)
    mask = torch.rand(1, 2, 9, 13, generator=g) > 0.3
    ref_out, _, _ = reference(q, k, v, mask, causal=True)
    ok = attnlab.scaled_dot_product_attention(q, k, v, mask, causal=True, backend=backend)
    assert _max_err(ok, ref_out) <= 1e-5
    m = ~mask if wrong.get("invert") else mask
    if wrong.get("top_left"):
        m = m & torch.ones(9, 13, dtype=torch.bool).tril()
    bad = attnlab.scaled_dot_product_attention(q, k, v, m, causal=True, backend=backend,
                                               scale=wrong.get("scale"))
    assert _max_err(bad, ref_out) > 1e-3


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal", [False, True])
def test_bf16_backends_within_1e_2(kind, causal):
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 2, 40, 16, generator=g) for _ in range(3))
    mask = make_mask(kind, 2, 2, 40, 40, g)
    qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()
    mb = mask if mask is None or mask.dtype == torch.bool else mask.bfloat16()
    ref_out, ref_w, _ = reference(qb, kb, vb, mb, causal)  # the same (rounded) inputs
    out, w = attnlab.scaled_dot_product_attention(qb, kb, vb, mb, causal=causal,
                                                  return_weights=True, backend="explicit")
    assert out.dtype == w.dtype == torch.bfloat16
    assert _max_err(out, ref_out) <= 1e-2 and _max_err(w, ref_w) <= 1e-2
    out, _ = chunked_attention(qb, kb, vb, mb, causal=causal, block_q=16, block_k=16)
    assert _max_err(out, ref_out) <= 1e-2
    fused = attnlab.scaled_dot_product_attention(qb, kb, vb, mb, causal=causal, backend="fused")
    assert _max_err(fused, ref_out) <= 1e-2


@pytest.mark.parametrize(("lq", "lk", "causal", "kind"), [
    (37, 37, True, "none"), (37, 37, True, "float"), (23, 41, True, "bool"),
    (41, 23, True, "key"), (41, 23, True, "none"), (30, 30, False, "bool-bcast"),
    (30, 19, False, "float"), (19, 30, True, "key")])
def test_backward_of_explicit_and_chunked_equals_autograd(lq, lk, causal, kind, small_tiles):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 2, lq, 8, generator=g, dtype=torch.float64).float().requires_grad_()
    k = torch.randn(2, 2, lk, 8, generator=g).requires_grad_()
    v = torch.randn(2, 2, lk, 5, generator=g).requires_grad_()
    mask = make_mask(kind, 2, 2, lq, lk, g)
    ref_out, ref_w, ref_lse = reference(q, k, v, mask, causal)
    g_out, g_w = torch.randn_like(ref_out), torch.randn_like(ref_w)
    g_lse = torch.randn_like(ref_lse)
    alive = torch.isfinite(ref_lse)
    want = torch.autograd.grad((ref_out * g_out).sum() + (ref_w * g_w).sum(), (q, k, v),
                               retain_graph=True)
    out, w = attnlab.scaled_dot_product_attention(q, k, v, mask, causal=causal,
                                                  return_weights=True, backend="explicit")
    got = torch.autograd.grad((out * g_out).sum() + (w * g_w).sum(), (q, k, v))
    for a, b in zip(got, want):
        assert _max_err(a, b) <= 1e-4
    # chunked: through out and through the logsumexp
    want = torch.autograd.grad(
        (ref_out * g_out).sum() + (ref_lse[alive] * g_lse[alive]).sum(), (q, k, v))
    out, lse = chunked_attention(q, k, v, mask, causal=causal, block_q=9, block_k=7)
    got = torch.autograd.grad((out * g_out).sum() + (lse[alive] * g_lse[alive]).sum(),
                              (q, k, v))
    for a, b in zip(got, want):
        assert torch.isfinite(a).all()
        assert _max_err(a, b) <= 1e-4


def test_explicit_falls_back_to_plain_autograd_for_dropout_and_learned_masks():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 6, 8, generator=g, requires_grad=True) for _ in range(3))
    bias = torch.zeros(6, 6, requires_grad=True)
    out, w = attnlab.scaled_dot_product_attention(q, k, v, bias, return_weights=True)
    (out.sum() + w[..., 0].sum()).backward()
    assert bias.grad is not None and bias.grad.abs().sum() > 0
    torch.manual_seed(0)
    out = attnlab.scaled_dot_product_attention(q, k, v, dropout_p=0.5, return_weights=True)[0]
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


@pytest.mark.parametrize("backend", ["explicit", "chunked"])
def test_nan_in_masked_values_does_not_leak(backend, small_tiles):
    g = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(1, 2, 20, 8, generator=g), *torch.randn(2, 1, 2, 30, 8, generator=g)
    v[..., 25, :] = float("nan")
    v[..., 27, 0] = float("inf")
    key_mask = torch.arange(30) < 24
    out = attnlab.scaled_dot_product_attention(q, k, v, key_mask, backend=backend)
    ref, _, _ = reference(q, k[..., :24, :], v[..., :24, :])
    assert _max_err(out, ref) <= 1e-5
    # a row that does attend the NaN value is NaN, as it should be
    mask = key_mask.expand(20, 30).clone()
    mask[3, 25] = True
    out = attnlab.scaled_dot_product_attention(q, k, v, mask, backend=backend)
    assert torch.isnan(out[..., 3, :]).all() and torch.isfinite(out[..., 4:, :]).all()


@SETTINGS
@given(inputs(max_len=40), st.data())
def test_attention_weights_rows_equal_the_explicit_weights(inputs, data):
    q, k, v, mask, causal = inputs
    lq, h = q.shape[-2], q.shape[-3]
    _, lse = chunked_attention(q, k, v, mask, causal=causal)
    _, w = attnlab.scaled_dot_product_attention(q, k, v, mask, causal=causal,
                                                return_weights=True)
    rows = data.draw(st.lists(st.integers(0, lq - 1), min_size=1, max_size=5))
    heads = data.draw(st.lists(st.integers(0, h - 1), min_size=1, max_size=3))
    got = attention_weights(q, k, lse, rows=rows, heads=heads, mask=mask, causal=causal)
    want = w[:, heads][:, :, rows]
    assert got.shape == want.shape
    assert _max_err(got, want) <= 1e-5
    wrong = attention_weights(q, k, lse, rows=rows, heads=heads, mask=mask, causal=causal,
                              scale=1.0)
    if want.abs().sum() > 0 and k.shape[-2] > 1:
        assert _max_err(wrong, want) > 1e-4 or bool((want.sum(-1) == 0).all())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("lq", "lk", "block", "causal"), [
    (64, 64, 8, True), (50, 37, (7, 5), False), (45, 70, 16, True), (30, 30, 30, False)])
def test_pooled_map_equals_block_means_of_the_explicit_map(kind, lq, lk, block, causal):
    g = torch.Generator().manual_seed(6)
    q, k = torch.randn(2, 3, lq, 16, generator=g), torch.randn(2, 3, lk, 16, generator=g)
    v = torch.randn(2, 3, lk, 4, generator=g)
    mask = make_mask(kind, 2, 3, lq, lk, g)
    _, w = attnlab.scaled_dot_product_attention(q, k, v, mask, causal=causal,
                                                return_weights=True)
    bq, bk = (block, block) if isinstance(block, int) else block
    gq, gk = -(-lq // bq), -(-lk // bk)
    # pooled: the mean over a block's (real) queries of the sum over its keys
    padded = F.pad(w, (0, gk * bk - lk, 0, gq * bq - lq))
    sums = padded.reshape(2, 3, gq, bq, gk, bk).sum(dim=(3, 5))
    rows_in = torch.tensor([min(bq, lq - i * bq) for i in range(gq)], dtype=w.dtype)
    want = sums / rows_in[:, None]
    from_v = pooled_attention_map(q, k, v, block=block, mask=mask, causal=causal)
    _, lse = chunked_attention(q, k, v, mask, causal=causal)
    from_lse = pooled_attention_map(q, k, lse, block=block, mask=mask, causal=causal)
    assert from_v.shape == want.shape
    assert _max_err(from_v, want) <= 1e-6 and _max_err(from_lse, want) <= 1e-6
    if lq == lk and bq == bk and lq // bq > 1 and kind == "none":
        # a wrong variant: pooling the transposed map is not the same picture
        assert _max_err(from_v.transpose(-2, -1), want) > 1e-4


def test_pooled_map_default_size_bounds_the_picture():
    q = k = v = torch.randn(1, 1, 1000, 8)
    assert pooled_attention_map(q, k, v, size=128).shape == (1, 1, 125, 125)
    assert pooled_attention_map(q, k, v, size=64, causal=True).shape == (1, 1, 63, 63)


# -- linear attention ------------------------------------------------------------------


def linear_reference(q, k, v, mask=None, causal=False):
    fq, fk = F.elu(q.double()) + 1, F.elu(k.double()) + 1
    a = fq @ fk.transpose(-2, -1)
    lq, lk = a.shape[-2:]
    if causal:
        a = a * torch.ones(lq, lk, dtype=torch.float64).tril(lk - lq)
    if mask is not None:
        a = a * (mask.double() if mask.dtype == torch.bool else torch.exp(mask.double()))
    s = a.sum(-1, keepdim=True)
    w = torch.where(s > 0, a / torch.where(s > 0, s, 1), 0)
    return w @ v.double(), w


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("lq", "lk"), [(33, 33), (20, 45), (45, 20)])
@pytest.mark.parametrize("causal", [False, True])
def test_linear_forms_equal_the_formula(kind, lq, lk, causal):
    g = torch.Generator().manual_seed(7)
    q, k = torch.randn(2, 2, lq, 8, generator=g), torch.randn(2, 2, lk, 8, generator=g)
    v = torch.randn(2, 2, lk, 5, generator=g)
    mask = make_mask(kind, 2, 2, lq, lk, g)
    ref_out, ref_w = linear_reference(q, k, v, mask, causal)
    out, w = attnlab.scaled_dot_product_attention(q, k, v, mask, causal=causal,
                                                  return_weights=True, backend="linear")
    assert _max_err(out, ref_out) <= 1e-5 and _max_err(w, ref_w) <= 1e-5
    key_only = mask is None or mask.shape[-2] == 1
    if key_only:
        for chunk in (1, 7, 64):
            rec = linear_attention(q, k, v, mask, causal=causal, form="recurrent", chunk=chunk)
            assert _max_err(rec, ref_out) <= 1e-5
    else:
        with pytest.raises(ValueError, match="recurrent"):
            linear_attention(q, k, v, mask, causal=causal, form="recurrent")
    # softmax attention is a different function: the comparison can tell them apart
    soft, _, _ = reference(q, k, v, mask, causal)
    assert _max_err(soft, ref_out) > 1e-3


def test_bad_arguments_name_themselves():
    q = k = v = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="block_q"):
        chunked_attention(q, k, v, block_q=0)
    with pytest.raises(ValueError, match=r"lse must have shape"):
        attention_weights(q, k, torch.zeros(1, 5))
    with pytest.raises(ValueError, match="rows"):
        attention_weights(q, k, torch.zeros(1, 4), rows=[7])
    with pytest.raises(ValueError, match="block"):
        pooled_attention_map(q, k, v, block=0)
    with pytest.raises(ValueError, match="form"):
        linear_attention(q, k, v, form="magic")
    with pytest.raises(ValueError, match="dropout"):
        chunked_attention(q.requires_grad_(), k, v, dropout_p=0.1)
