"""return_lse and grouped-query k/v on every backend, against the float64 formula."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from attention_reference import make_mask, reference  # tests/core/attention_reference.py
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab.core.chunked as chunked_mod
import attnlab.core.explicit as explicit_mod
import attnlab.core.functional as functional
from attnlab.core.chunked import chunked_attention
from attnlab.core.functional import scaled_dot_product_attention as sdpa
from attnlab.core.functional import why_not_fused
from attnlab.core.linear import linear_attention
from attnlab.core.masks import padding

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True)
SOFTMAX_BACKENDS = ["auto", "fused", "explicit", "chunked"]


KINDS = ["none", "bool", "bool-bcast", "float", "key"]


@st.composite
def grouped_inputs(draw, max_len=24):
    b = draw(st.integers(1, 2))
    h_kv = draw(st.integers(1, 3))
    group = draw(st.sampled_from([1, 2, 3]))
    lq, lk = draw(st.integers(1, max_len)), draw(st.integers(1, max_len))
    d = draw(st.sampled_from([4, 8]))
    dv = draw(st.sampled_from([d, 3]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    q = torch.randn(b, h_kv * group, lq, d, generator=g)
    k = torch.randn(b, h_kv, lk, d, generator=g)
    v = torch.randn(b, h_kv, lk, dv, generator=g)
    mask = make_mask(draw(st.sampled_from(KINDS)), b, h_kv * group, lq, lk, g)
    return q, k, v, mask, draw(st.booleans())


def repeated(q, k, v):
    """k and v with each key head repeated for its group of query heads (the reference)."""
    group = q.shape[-3] // k.shape[-3]
    return k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)


def _err(a, b):
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def _check_lse(lse, ref_lse, tol=1e-5):
    alive = torch.isfinite(ref_lse)
    assert lse.dtype == torch.float32
    assert torch.equal(torch.isneginf(lse), ~alive)  # -inf exactly for dead rows
    assert _err(lse[alive], ref_lse[alive]) <= tol


@SETTINGS
@given(grouped_inputs())
def test_lse_and_grouped_heads_equal_the_formula_on_every_backend(inputs):
    q, k, v, mask, causal = inputs
    kr, vr = repeated(q, k, v)
    ref_out, ref_w, ref_lse = reference(q, kr, vr, mask, causal)
    for backend in SOFTMAX_BACKENDS:
        out, lse = sdpa(q, k, v, mask, causal=causal, backend=backend, return_lse=True)
        assert _err(out, ref_out) <= 1e-5, backend
        _check_lse(lse, ref_lse)
        out = sdpa(q, k, v, mask, causal=causal, backend=backend)
        assert _err(out, ref_out) <= 1e-5, backend
    for backend in ("auto", "explicit", "chunked"):
        out, w, lse = sdpa(q, k, v, mask, causal=causal, backend=backend,
                           return_weights=True, return_lse=True)
        assert _err(out, ref_out) <= 1e-5 and _err(w, ref_w) <= 1e-5
        _check_lse(lse, ref_lse)
    out, lse = chunked_attention(q, k, v, mask, causal=causal, block_q=5, block_k=4)
    assert _err(out, ref_out) <= 1e-5
    _check_lse(lse, ref_lse)


@pytest.mark.parametrize("backend", SOFTMAX_BACKENDS)
def test_the_lse_comparison_catches_wrong_variants(backend):
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(1, 2, 7, 8, generator=g), *torch.randn(2, 1, 2, 9, 8, generator=g)
    mask = torch.rand(7, 9, generator=g) > 0.3
    mask[:, 0] = True
    _, lse = sdpa(q, k, v, mask, backend=backend, return_lse=True)
    s = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(8)
    right = torch.logsumexp(s.masked_fill(~mask, -math.inf), -1)
    assert _err(lse, right) <= 1e-5
    assert _err(lse, torch.logsumexp(s, -1)) > 1e-2  # the lse without the mask
    assert _err(lse, torch.logsumexp(s * math.sqrt(8), -1).masked_fill(  # without the scale
        ~mask.any(-1), -math.inf)) > 1e-2
    # a causal lse is bottom-right aligned, not top-left
    q2 = q[..., :4, :]
    _, lse_c = sdpa(q2, k, v, causal=True, backend=backend, return_lse=True)
    s2 = (q2.double() @ k.double().transpose(-2, -1)) / math.sqrt(8)
    bottom_right = torch.ones(4, 9, dtype=torch.bool).tril(5)
    top_left = torch.ones(4, 9, dtype=torch.bool).tril()
    assert _err(lse_c, torch.logsumexp(s2.masked_fill(~bottom_right, -math.inf), -1)) <= 1e-5
    assert _err(lse_c, torch.logsumexp(s2.masked_fill(~top_left, -math.inf), -1)) > 1e-2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("backend", SOFTMAX_BACKENDS)
def test_lse_dtype_is_float32_or_float64(backend, dtype):
    q = k = v = torch.randn(1, 2, 6, 8).to(dtype)
    _, lse = sdpa(q, k, v, causal=True, backend=backend, return_lse=True)
    assert lse.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    ref = reference(q, k, v, causal=True)[2]
    assert _err(lse, ref) <= (1e-10 if dtype == torch.float64 else 2e-2)


@pytest.mark.parametrize("backend", ["explicit", "chunked"])
@pytest.mark.parametrize("group", [1, 2])
def test_gradients_through_lse_and_grouped_heads(backend, group):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 2 * group, 9, 8, generator=g, requires_grad=True)
    k = torch.randn(2, 2, 11, 8, generator=g, requires_grad=True)
    v = torch.randn(2, 2, 11, 5, generator=g, requires_grad=True)
    mask = torch.rand(9, 11, generator=g) > 0.3
    mask[3] = False  # a dead row
    kr, vr = repeated(q, k, v)
    ref_out, _, ref_lse = reference(q, kr, vr, mask, causal=True)
    g_out, g_lse = torch.randn_like(ref_out), torch.randn_like(ref_lse)
    alive = torch.isfinite(ref_lse)
    want = torch.autograd.grad((ref_out * g_out).sum() + (ref_lse[alive] * g_lse[alive]).sum(),
                               (q, k, v), retain_graph=True)
    out, lse = sdpa(q, k, v, mask, causal=True, backend=backend, return_lse=True)
    got = torch.autograd.grad((out * g_out).sum() + (lse[alive] * g_lse[alive]).sum(), (q, k, v))
    for a, b in zip(got, want):
        assert torch.isfinite(a).all() and _err(a, b) <= 1e-4
    # the lse's gradient is really there: without it the gradients differ
    plain = torch.autograd.grad((ref_out * g_out).sum(), (q,))[0]
    assert _err(plain, want[0]) > 1e-3


def test_auto_lse_without_weights_never_takes_the_explicit_path(monkeypatch):
    calls = []

    def spy(real):
        def call(*a, **kw):
            calls.append(1)
            return real(*a, **kw)
        return call

    # the explicit path: the compiled kernel where it is built, the PyTorch code otherwise
    for name in ("_explicit_forward", "_explicit_kernel"):
        monkeypatch.setattr(explicit_mod, name, spy(getattr(explicit_mod, name)))
    q, k, v = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 9, 8), torch.randn(1, 2, 9, 4)
    mask = torch.rand(5, 9) > 0.3
    for kw in (dict(causal=True), dict(mask=mask), dict(mask=mask, causal=True), {}):
        functional.scaled_dot_product_attention(q, k, v, return_lse=True, **kw)
        assert not calls, kw
    functional.scaled_dot_product_attention(q, k, v, return_lse=True, return_weights=True)
    assert calls  # the spy does see the explicit path when weights are asked for


def test_auto_lse_takes_the_flash_kernel_where_exact_else_chunked(monkeypatch):
    flash, chunk = [], []
    real_flash, real_chunked = functional._flash_cpu, chunked_mod._flash_forward
    monkeypatch.setattr(functional, "_flash_cpu",
                        lambda *a, **kw: flash.append(1) or real_flash(*a, **kw))
    monkeypatch.setattr(chunked_mod, "_flash_forward",
                        lambda *a, **kw: chunk.append(1) or real_chunked(*a, **kw))
    q = k = v = torch.randn(1, 2, 6, 8)
    key_mask = torch.tensor([True] * 5 + [False])
    sdpa(q, k, v, causal=True, return_lse=True)
    sdpa(q, k, v, key_mask, return_lse=True)
    assert len(flash) == 2 and not chunk
    sdpa(q, k, v, key_mask, causal=True, return_lse=True)  # would need an (Lq, Lk) mask
    sdpa(q[..., :3, :], k, v, causal=True, return_lse=True)  # Lq != Lk
    sdpa(q, k, v[..., :4], return_lse=True)  # dv != d
    assert len(flash) == 2 and len(chunk) == 3
    assert "(Lq, Lk)" in why_not_fused(q, k, v, key_mask, causal=True, return_lse=True)
    assert why_not_fused(q, k, v, key_mask, return_lse=True) is None


def test_grouped_heads_are_never_repeated_for_the_fused_kernel(monkeypatch):
    seen = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention",
                        lambda q, k, v, **kw: seen.append(k.shape) or real(q, k, v, **kw))
    q, k, v = torch.randn(2, 8, 5, 4), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
    out = sdpa(q, k, v, causal=True)
    assert seen == [torch.Size([2, 2, 5, 4])]
    kr, vr = repeated(q, k, v)
    assert _err(out, reference(q, kr, vr, causal=True)[0]) <= 1e-5
    # the comparison can tell: repeating whole blocks (tile) instead of each head is wrong
    tiled = reference(q, k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1), causal=True)[0]
    assert _err(out, tiled) > 1e-2


@pytest.mark.parametrize("form", ["parallel", "recurrent"])
@pytest.mark.parametrize("causal", [False, True])
def test_linear_grouped_heads_equal_repeated_heads(form, causal):
    g = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(2, 6, 10, 4, generator=g), *torch.randn(2, 2, 3, 13, 4, generator=g)
    mask = padding([13, 9], 13)[:, None, None, :]
    kr, vr = repeated(q, k, v)
    want = linear_attention(q, kr, vr, mask, causal=causal, form="parallel")
    got = linear_attention(q, k, v, mask, causal=causal, form=form)
    assert _err(got, want) <= 1e-5
    wrong = linear_attention(q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1), mask, causal=causal)
    assert _err(wrong, want) > 1e-3


def test_grouped_heads_shape_errors_name_the_heads():
    q, k = torch.randn(1, 6, 4, 8), torch.randn(1, 4, 4, 8)
    with pytest.raises(ValueError, match=r"H_kv.*\(1, 4, 4, 8\)|\(1, 4, 4, 8\).*H_kv"):
        sdpa(q, k, k)
    with pytest.raises(ValueError, match="do not broadcast"):
        chunked_attention(q, k, k)
