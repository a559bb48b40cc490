"""Bad input at the core's public boundary: a ValueError/TypeError naming the argument, or
the right answer; never NaN from finite inputs, never a raw error from inside torch."""

from __future__ import annotations

import math

import pytest
import torch
from attention_reference import reference  # tests/core/attention_reference.py

from attnlab.core import positional as P
from attnlab.core.chunked import chunked_attention
from attnlab.core.functional import default_scale, why_not_fused
from attnlab.core.functional import scaled_dot_product_attention as sdpa
from attnlab.core.linear import linear_attention
from attnlab.core.masks import to_additive

BACKENDS = ["auto", "fused", "explicit", "chunked", "linear"]


def qkv(lq=4, lk=6, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, 2, lq, d, generator=g), torch.randn(1, 2, lk, d, generator=g),
            torch.randn(1, 2, lk, d, generator=g))


# -- scale, dropout_p, flags, head dim -------------------------------------------------


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -math.inf, 0.0])
@pytest.mark.parametrize("fn", ["sdpa", "chunked"])
def test_non_finite_or_zero_scale_is_refused(fn, scale):
    q, k, v = qkv()
    call = sdpa if fn == "sdpa" else chunked_attention
    with pytest.raises(ValueError, match=r"scale must be a finite non-zero float, got"):
        call(q, k, v, scale=scale)


@pytest.mark.parametrize("scale", [True, "0.5", torch.tensor(0.5), [0.5]])
def test_scale_of_another_type_is_refused(scale):
    q, k, v = qkv()
    with pytest.raises(TypeError, match="scale must be a finite non-zero float, got"):
        sdpa(q, k, v, scale=scale)


def test_a_negative_scale_is_still_the_formula():
    q, k, v = qkv()
    for backend in ("auto", "explicit", "chunked"):
        out = sdpa(q, k, v, scale=-0.5, backend=backend)
        want = reference(q, k, v, scale=-0.5)[0]
        assert float((out.double() - want).abs().max()) <= 1e-5
        # and not the default scale's answer
        assert float((out.double() - reference(q, k, v)[0]).abs().max()) > 1e-2


@pytest.mark.parametrize(("dropout_p", "exc"), [("0.1", TypeError), (True, TypeError),
                                                (None, TypeError), (1.0, ValueError),
                                                (-0.1, ValueError), (float("nan"), ValueError)])
def test_bad_dropout_p(dropout_p, exc):
    q, k, v = qkv()
    with pytest.raises(exc, match="dropout_p"):
        sdpa(q, k, v, dropout_p=dropout_p)
    with pytest.raises(exc, match="dropout_p"):
        chunked_attention(q, k, v, dropout_p=dropout_p)


@pytest.mark.parametrize("name", ["causal", "return_weights", "return_lse"])
def test_flags_must_be_bools(name):
    q, k, v = qkv()
    with pytest.raises(TypeError, match=f"{name} must be a bool, got str 'no'"):
        sdpa(q, k, v, **{name: "no"})


def test_head_dim_zero_is_a_value_error_not_a_division_by_zero():
    q, k, v = qkv(d=8)
    for call in (sdpa, chunked_attention, linear_attention):
        with pytest.raises(ValueError, match=r"head dim d >= 1.*\(1, 2, 4, 0\)"):
            call(q[..., :0], k[..., :0], v)
    with pytest.raises(ValueError, match="head_dim must be a positive int, got 0"):
        default_scale(0)
    with pytest.raises(TypeError, match="head_dim must be a positive int, got float"):
        default_scale(64.0)
    assert default_scale(64) == 0.125 and default_scale(3) == 1 / math.sqrt(3)


def test_arguments_of_the_wrong_kind_name_themselves():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="k must be a torch.Tensor, got list"):
        sdpa(q, k.tolist(), v)
    with pytest.raises(TypeError, match="v must be a floating-point tensor, got dtype torch.int32"):
        sdpa(q, k, v.int())
    with pytest.raises(TypeError, match="q, k, v must share one dtype.*float64"):
        sdpa(q, k.double(), v)
    with pytest.raises(ValueError, match="q, k, v must be on one device.*meta"):
        sdpa(q, k.to("meta"), v)
    with pytest.raises(ValueError, match="mask must be on q's device"):
        sdpa(q, k, v, torch.ones(4, 6, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match="backend must be one of"):
        sdpa(q, k, v, backend=None)
    with pytest.raises(ValueError, match="backend='linear' has no logsumexp"):
        sdpa(q, k, v, backend="linear", return_lse=True)
    with pytest.raises(TypeError, match="causal must be a bool"):
        linear_attention(q, k, v, causal=1)
    with pytest.raises(TypeError, match="causal must be a bool"):
        chunked_attention(q, k, v, causal=None)


# -- masks that would make NaN -------------------------------------------------------


@pytest.mark.parametrize("value", [math.inf, math.nan])
@pytest.mark.parametrize("fn", ["sdpa", "chunked", "linear"])
def test_float_mask_with_plus_inf_or_nan_is_refused(fn, value):
    q, k, v = qkv()
    mask = torch.zeros(4, 6)
    mask[1, 2] = value
    call = {"sdpa": sdpa, "chunked": chunked_attention, "linear": linear_attention}[fn]
    with pytest.raises(ValueError, match="mask may hold finite values and -inf"):
        call(q, k, v, mask)
    mask[1, 2] = -math.inf  # -inf is what blocking means: accepted
    assert torch.isfinite(call(q, k, v, mask)[0]).all()


# -- NaN/inf in masked-out keys and values ---------------------------------------------


def _clean_reference(backend, q, k, v, mask, causal):
    """What a backend must give: its answer on the same inputs with the masked entries
    replaced by ordinary numbers (they must contribute exactly nothing)."""
    if backend == "linear":
        return linear_attention(q, k, v, mask, causal=causal, form="parallel")
    return reference(q, k, v, mask, causal)[0]


def _poisoned(kind):
    """q, k, v with NaN/inf only where `mask`/`causal` hide them, and a clean k, v."""
    q, k, v = qkv(lq=6, lk=6)
    kp, vp = k.clone(), v.clone()
    mask, causal = None, False
    if kind in ("bool", "float", "key"):
        keep = torch.tensor([True, True, True, True, False, False])
        mask = keep if kind == "key" else keep.expand(6, 6)
        if kind == "float":
            mask = to_additive(mask)
        kp[..., 4, :] = math.nan
        kp[..., 5, 0] = math.inf
        vp[..., 5, :] = math.nan
        vp[..., 4, 1] = -math.inf
    else:  # causal: the last key and value are hidden from every row but the last
        causal = True
        kp[..., 5, :] = math.nan
        vp[..., 5, :] = math.inf
    return q, k, v, kp, vp, mask, causal


@pytest.mark.parametrize("kind", ["bool", "float", "key", "causal"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_and_inf_in_masked_keys_and_values_never_leak(backend, kind):
    q, k, v, kp, vp, mask, causal = _poisoned(kind)
    out = sdpa(q, kp, vp, mask, causal=causal, backend=backend)
    want = _clean_reference(backend, q, k, v, mask, causal)
    rows = slice(None, -1) if causal else slice(None)  # under causal the last row sees them
    assert torch.isfinite(out[..., rows, :]).all()
    assert float((out[..., rows, :].double() - want[..., rows, :].double()).abs().max()) <= 1e-5
    if causal:  # ...and gets the formula's non-finite answer, not a silent 0
        assert not torch.isfinite(out[..., -1, :]).all()


@pytest.mark.parametrize("backend", ["auto", "fused", "explicit", "chunked"])
def test_a_row_that_attends_a_nan_key_is_nan_and_only_that_row(backend):
    q, k, v = qkv()
    k[..., 5, :] = math.nan
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[:3, 5] = False  # rows 0..2 hide key 5, row 3 attends it
    out, lse = sdpa(q, k, v, to_additive(mask), backend=backend, return_lse=True)
    assert torch.isfinite(out[..., :3, :]).all() and torch.isnan(out[..., 3, :]).all()
    assert torch.isfinite(lse[..., :3]).all() and torch.isnan(lse[..., 3]).all()


@pytest.mark.parametrize("backend", ["explicit", "chunked"])
def test_masked_nan_keys_do_not_reach_the_gradients(backend):
    q, k, v, kp, vp, mask, causal = _poisoned("float")
    q.requires_grad_()
    out = sdpa(q, kp, vp, mask, backend=backend)
    (grad,) = torch.autograd.grad(out.sum(), (q,))
    assert torch.isfinite(grad).all()


def test_why_not_fused_names_non_finite_keys():
    q, k, v = qkv()
    k[..., 5, :] = math.nan
    assert "k or v holds NaN/inf" in why_not_fused(q, k, v, torch.arange(6) < 5)
    assert why_not_fused(q, k, v) is None  # unmasked: every row sees it, NaN is the answer


# -- empty sequences -----------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_sequences(backend, causal):
    q, k, v = qkv()
    out = sdpa(q[..., :0, :], k, v, causal=causal, backend=backend)  # no query
    assert out.shape == (1, 2, 0, 8)
    out = sdpa(q, k[..., :0, :], v[..., :0, :], causal=causal, backend=backend)  # no key
    assert out.shape == (1, 2, 4, 8) and (out == 0).all()
    if backend != "linear":
        out, lse = sdpa(q, k[..., :0, :], v[..., :0, :], causal=causal, backend=backend,
                        return_lse=True)
        assert (out == 0).all() and torch.isneginf(lse).all() and lse.shape == (1, 2, 4)
    if backend not in ("fused", "linear"):
        _, w = sdpa(q, k[..., :0, :], v[..., :0, :], backend=backend, return_weights=True)
        assert w.shape == (1, 2, 4, 0)


def test_linear_attention_on_empty_sequences_in_every_form():
    q, k, v = qkv()
    for form in ("auto", "parallel", "recurrent"):
        for causal in (False, True):
            assert linear_attention(q[..., :0, :], k, v, causal=causal, form=form).shape == (
                1, 2, 0, 8)
            out = linear_attention(q, k[..., :0, :], v[..., :0, :], causal=causal, form=form)
            assert out.shape == (1, 2, 4, 8) and (out == 0).all()


# -- positional encodings --------------------------------------------------------------


@pytest.mark.parametrize(("call", "exc", "words"), [
    (lambda: P.frequencies(0), ValueError, "embed_dim must be a positive int, got 0"),
    (lambda: P.frequencies(7), ValueError, "embed_dim must be even"),
    (lambda: P.frequencies(8.0), TypeError, "embed_dim must be a positive int, got float"),
    (lambda: P.frequencies(8, float("nan")), ValueError, "base must be a finite float, got nan"),
    (lambda: P.frequencies(8, "1e4"), TypeError, "base must be a finite float, got str"),
    (lambda: P.frequencies(8, 1.0), ValueError, "base must be > 1"),
    (lambda: P.sinusoidal_table(-1, 8), ValueError, "n_positions must be an int >= 0, got -1"),
    (lambda: P.sinusoidal_table(4, -2), ValueError, "embed_dim must be a positive int, got -2"),
    (lambda: P.SinusoidalPositionalEncoding(8, max_len=-1), ValueError, "max_len"),
    (lambda: P.SinusoidalPositionalEncoding(8, dropout=1.5), ValueError, "dropout"),
    (lambda: P.SinusoidalPositionalEncoding(8)(torch.zeros(1, 2, 8), offset=-1), ValueError,
     "offset must be an int >= 0, got -1"),
    (lambda: P.SinusoidalPositionalEncoding(8)([[0.0]]), TypeError, "x must be a torch.Tensor"),
    (lambda: P.relative_rotation(float("nan"), 8), ValueError,
     "offset must be a finite float, got nan"),
    (lambda: P.relative_rotation("3", 8), TypeError, "offset must be a finite float, got str"),
    (lambda: P.RotaryEmbedding(0), ValueError, "head_dim must be a positive int, got 0"),
    (lambda: P.RotaryEmbedding(8)(torch.zeros(2, 8), offset=-3), ValueError, "offset"),
    (lambda: P.RotaryEmbedding(8)(torch.zeros(2, 8), positions=[0, 1]), ValueError,
     "positions must be a tensor"),
    (lambda: P.apply_rotary(torch.zeros(2, 7), torch.zeros(2, 7), torch.zeros(2, 7)),
     ValueError, "even d"),
    (lambda: P.alibi_bias(2, -1), ValueError, "lq must be an int >= 0, got -1"),
    (lambda: P.alibi_bias(2, 3, 2.5), TypeError, "lk must be an int"),
])
def test_positional_bad_input_names_the_argument(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_positional_accepts_the_edges():
    assert P.sinusoidal_table(0, 8).shape == (0, 8)
    assert P.alibi_bias(2, 0, 3).shape == (2, 0, 3)
    rope = P.RotaryEmbedding(8)
    x = torch.randn(3, 8)
    # fractional positions (position interpolation) are meaningful: accepted
    torch.testing.assert_close(rope(x, positions=torch.tensor([0.0, 1.0, 2.0])), rope(x))


# -- what the chunked backend cannot differentiate -------------------------------------


def test_the_chunked_backend_refuses_what_its_backward_cannot_do():
    q, k, v = (t.requires_grad_() for t in qkv())
    mask = torch.zeros(4, 6, requires_grad=True)
    with pytest.raises(ValueError, match="treats mask as a constant; got a mask that requires "
                                         r"grad \(use backend='explicit'\)"):
        sdpa(q, k, v, mask, backend="chunked")
    with pytest.raises(ValueError, match="no dropout in its backward; got dropout_p=0.1 with "
                                         "inputs that require grad"):
        sdpa(q, k, v, dropout_p=0.1, backend="chunked")
    with torch.no_grad():  # nothing to differentiate: both are taken
        sdpa(q, k, v, mask, backend="chunked")
        sdpa(q, k, v, dropout_p=0.1, backend="chunked")


def test_a_logsumexp_with_a_learned_mask_takes_the_explicit_path():
    """What the chunked backend refuses, ``backend="fused"`` sends to the explicit path."""
    q, k, v = qkv()
    mask = torch.randn(4, 6, requires_grad=True)
    out, lse = sdpa(q, k, v, mask, backend="fused", return_lse=True)
    ref_out, _, ref_lse = reference(q, k, v, mask.detach())
    assert torch.allclose(out.double(), ref_out, atol=1e-5)
    assert torch.allclose(lse.double(), ref_lse, atol=1e-5)
    lse.sum().backward()
    assert mask.grad is not None and bool(mask.grad.abs().sum() > 0)
