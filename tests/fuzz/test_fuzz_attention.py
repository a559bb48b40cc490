"""Fuzzing scaled_dot_product_attention, the masks and MultiHeadAttention."""

from __future__ import annotations

import math

import pytest
import torch
from fuzz_helpers import FUZZ, Refused, call, close, finite, tensor
from hypothesis import assume, given
from hypothesis import strategies as st

from attnlab.core import masks
from attnlab.core.functional import BACKENDS, scaled_dot_product_attention
from attnlab.nn.attention import MultiHeadAttention

SOFTMAX_BACKENDS = ("auto", "fused", "explicit", "chunked")


@st.composite
def attention_case(draw):
    """A valid call: shapes (incl. empty sequences), grouped heads, masks, flags."""
    b = draw(st.integers(1, 2))
    hkv = draw(st.sampled_from([1, 2]))
    h = hkv * draw(st.sampled_from([1, 2]))
    lq, lk = draw(st.integers(0, 6)), draw(st.integers(0, 6))
    d, dv = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    q = tensor(gen, (b, h, lq, d), dtype)
    k = tensor(gen, (b, hkv, lk, d), dtype)
    v = tensor(gen, (b, hkv, lk, dv), dtype)
    kind = draw(st.sampled_from(["none", "bool", "float", "key"]))
    mask = None
    if kind == "bool":
        mask = torch.rand((lq, lk), generator=gen) < 0.7
    elif kind == "float":
        mask = tensor(gen, (b, 1, lq, lk), dtype)
        mask[torch.rand(mask.shape, generator=gen) < 0.3] = -math.inf
    elif kind == "key":
        mask = (torch.rand((b, 1, 1, lk), generator=gen) < 0.7)
    kw = {"causal": draw(st.booleans()),
          "scale": draw(st.one_of(st.none(), st.floats(0.01, 4.0), st.floats(-4.0, -0.01))),
          "backend": draw(st.sampled_from(BACKENDS)),
          "return_weights": draw(st.booleans()), "return_lse": draw(st.booleans())}
    return q, k, v, mask, kw


def reference(q, k, v, mask, causal, scale):
    """float64 softmax attention; fully-masked rows give 0 output, 0 weights, -inf lse."""
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(g, dim=-3), v.repeat_interleave(g, dim=-3)
    lq, lk = q.shape[-2], k.shape[-2]
    s = (q @ k.transpose(-2, -1)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    allowed = torch.ones(lq, lk, dtype=torch.bool)
    if causal:
        allowed = masks.causal(lq, lk)
    if mask is not None:
        if mask.dtype == torch.bool:
            allowed = allowed & mask
        else:
            s = s + mask.double()
    s = s.masked_fill(~allowed, -math.inf)
    lse = torch.logsumexp(s, dim=-1) if lk else torch.full(s.shape[:-1], -math.inf,
                                                            dtype=torch.float64)
    w = torch.exp(s - lse[..., None].clamp_min(-1e300)).nan_to_num(0.0)
    w = torch.where(torch.isinf(lse)[..., None], torch.zeros_like(w), w)
    return w @ v, w, lse


@FUZZ
@given(attention_case())
def test_valid_calls_are_correct_and_finite(case):
    q, k, v, mask, kw = case
    try:
        res = call(scaled_dot_product_attention, q, k, v, mask,
                   names=("backend", "return_weights", "return_lse", "mask", "causal"), **kw)
    except Refused:
        return  # a documented combination refused by name (e.g. fused + weights)
    res = res if isinstance(res, tuple) else (res,)
    out = res[0]
    assert out.shape == (*q.shape[:-1], v.shape[-1]) and out.dtype == q.dtype
    assert finite(out), "NaN/inf from finite inputs"
    if kw["backend"] == "linear":
        return  # another kernel: not softmax attention
    ref_out, ref_w, ref_lse = reference(q, k, v, mask, kw["causal"], kw["scale"])
    tol = 1e-4 if q.dtype == torch.float32 else 1e-9
    assert close(out, ref_out, tol)
    i = 1
    if kw["return_weights"]:
        assert close(res[i], ref_w, tol) and finite(res[i])
        i += 1
    if kw["return_lse"]:
        assert res[i].dtype in (torch.float32, q.dtype) and close(res[i], ref_lse, 1e-4)


BAD_ARGS = {
    "scale": [math.nan, math.inf, -math.inf, 0.0, "0.5", True, 1 + 2j, [0.5]],
    "dropout_p": ["0.1", math.nan, -0.1, 1.0, 1.5, math.inf, True, None, [0.1]],
    "backend": ["nope", "", 3, None, "AUTO"],
    "causal": ["yes", 1, None, 0.0],
    "return_weights": ["True", 1, None],
    "return_lse": ["False", 0, None],
}


@FUZZ
@given(case=attention_case(), arg=st.sampled_from(sorted(BAD_ARGS)), data=st.data())
def test_one_bad_keyword_is_refused_by_name(case, arg, data):
    q, k, v, mask, kw = case
    kw[arg] = data.draw(st.sampled_from(BAD_ARGS[arg]), label=arg)
    with pytest.raises(Refused):
        call(scaled_dot_product_attention, q, k, v, mask, names=(arg,), **kw)


@FUZZ
@given(case=attention_case(), bad=st.sampled_from(
    ["+inf", "nan", "int", "shape", "list", "device-less scalar"]))
def test_a_bad_mask_is_refused_by_name(case, bad):
    q, k, v, _, kw = case
    lq, lk = q.shape[-2], k.shape[-2]
    if bad in ("+inf", "nan"):
        assume(lq and lk)
        mask = torch.zeros(lq, lk, dtype=q.dtype)
        mask[0, 0] = math.inf if bad == "+inf" else math.nan
    elif bad == "int":
        mask = torch.ones(lq, lk, dtype=torch.int64)
    elif bad == "shape":
        mask = torch.ones(lq + 1, lk + 2, dtype=torch.bool)
    elif bad == "list":
        mask = [[True] * lk] * lq
    else:
        mask = 0.5
    with pytest.raises(Refused):
        call(scaled_dot_product_attention, q, k, v, mask, names=("mask",), **kw)


@FUZZ
@given(case=attention_case(), bad=st.sampled_from(
    ["q-int", "q-1d", "k-d", "v-len", "dtype", "groups", "q-list", "head-dim-0"]))
def test_bad_tensors_are_refused_by_name(case, bad):
    q, k, v, mask, kw = case
    if bad == "q-int":
        q = q.long()
    elif bad == "q-1d":
        q = q.reshape(-1)
    elif bad == "k-d":
        k = torch.zeros(*k.shape[:-1], k.shape[-1] + 1, dtype=k.dtype)
    elif bad == "v-len":
        v = torch.zeros(*v.shape[:-2], v.shape[-2] + 1, v.shape[-1], dtype=v.dtype)
    elif bad == "dtype":
        v = v.half()
    elif bad == "groups":
        assume(q.shape[-3] > 1)
        k = torch.zeros(k.shape[0], q.shape[-3] + 1, *k.shape[2:], dtype=k.dtype)
        v = torch.zeros(v.shape[0], q.shape[-3] + 1, *v.shape[2:], dtype=v.dtype)
    elif bad == "q-list":
        q = q.tolist()
    else:
        q = q[..., :0]
        k = k[..., :0]
    mask = mask if bad not in ("v-len", "groups", "q-1d") else None
    with pytest.raises(Refused):
        call(scaled_dot_product_attention, q, k, v, mask, names=("q", "k", "v", "head"),
             **kw)


@FUZZ
@given(case=attention_case(), where=st.sampled_from(["k", "v", "both"]),
       value=st.sampled_from([math.nan, math.inf, -math.inf]))
def test_non_finite_values_at_masked_keys_never_leak(case, where, value):
    """Masked keys and values contribute exactly 0, whatever they hold (the docstring)."""
    q, k, v, _, kw = case
    lk = k.shape[-2]
    assume(lk >= 2)
    key = torch.ones(lk, dtype=torch.bool)
    key[-1] = False  # the last key is masked for every query
    mask = key[None, :].expand(q.shape[-2], lk)
    k2, v2 = k.clone(), v.clone()
    if where in ("k", "both"):
        k2[..., -1, :] = value
    if where in ("v", "both"):
        v2[..., -1, :] = value
    kw = {**kw, "return_weights": False, "return_lse": False}
    try:
        out = call(scaled_dot_product_attention, q, k2, v2, mask,
                   names=("backend", "mask", "causal"), **kw)
    except Refused:
        return
    clean = scaled_dot_product_attention(q, k, v, mask, **{**kw, "backend": "explicit"}) \
        if kw["backend"] != "linear" else None
    assert finite(out), f"{value} in a masked {where} leaked into the output"
    if clean is not None:
        assert close(out, clean, 1e-4 if q.dtype == torch.float32 else 1e-9)


# -- masks ------------------------------------------------------------------------------

INTS = st.one_of(st.integers(-3, 7), st.sampled_from([True, 2.0, "3", None, 1.5]))


@FUZZ
@given(lq=INTS, lk=st.one_of(st.none(), INTS),
       window=st.one_of(st.none(), st.integers(-2, 8), st.sampled_from([0, True, 2.5, "2"])))
def test_causal_masks(lq, lk, window):
    try:
        m = call(masks.causal, lq, lk, window=window, names=("lq", "lk", "window"))
    except Refused:
        return
    nk = lq if lk is None else lk
    assert m.dtype == torch.bool and m.shape == (lq, nk)
    for i in range(lq):
        for j in range(nk):
            ok = j <= i + nk - lq and (window is None or i + nk - lq - j < window)
            assert bool(m[i, j]) == ok


@FUZZ
@given(lengths=st.one_of(st.lists(st.integers(-2, 6), max_size=4),
                         st.sampled_from([[1.5, 2], "12", None, [[1, 2]], [True, False]])),
       max_len=st.one_of(st.none(), st.integers(-1, 8), st.sampled_from([2.0, "4"])))
def test_padding_masks(lengths, max_len):
    try:
        m = call(masks.padding, lengths, max_len, names=("lengths", "max_len"))
    except Refused:
        return
    assert m.dtype == torch.bool and m.shape[0] == len(lengths)
    assert m.sum(-1).tolist() == [int(x) for x in lengths]


@FUZZ
@given(kinds=st.lists(st.sampled_from(["none", "bool", "float", "ninf", "wide", "int", "str"]),
                      max_size=3), seed=st.integers(0, 1000))
def test_combining_masks(kinds, seed):
    gen = torch.Generator().manual_seed(seed)
    parts = []
    for kind in kinds:
        if kind == "none":
            parts.append(None)
        elif kind == "bool":
            parts.append(torch.rand(3, 4, generator=gen) < 0.5)
        elif kind == "float":
            parts.append(tensor(gen, (3, 4)))
        elif kind == "ninf":
            parts.append(torch.where(torch.rand(3, 4, generator=gen) < 0.5, 0.0, -math.inf))
        elif kind == "wide":
            parts.append(torch.ones(2, 3, 4, dtype=torch.bool))
        elif kind == "int":
            parts.append(torch.ones(3, 4, dtype=torch.int32))
        else:
            parts.append("mask")
    try:
        m = call(masks.combine, *parts, names=("mask",))
    except Refused:
        return
    real = [p for p in parts if p is not None]
    if not real:
        assert m is None
        return
    assert m.shape[-2:] == (3, 4) and not bool(torch.isnan(m.float()).any())


@FUZZ
@given(kind=st.sampled_from(["bool", "float-ninf", "float-hf", "float-nan", "int", "3d",
                             "list"]), seed=st.integers(0, 1000))
def test_torch_key_padding_masks(kind, seed):
    gen = torch.Generator().manual_seed(seed)
    pad = torch.rand(2, 5, generator=gen) < 0.4  # torch: True = padding
    if kind == "bool":
        x = pad
    elif kind == "float-ninf":
        x = torch.zeros(2, 5).masked_fill(pad, -math.inf)
    elif kind == "float-hf":
        x = torch.zeros(2, 5).masked_fill(pad, torch.finfo(torch.float32).min)
    elif kind == "float-nan":
        x = torch.zeros(2, 5).masked_fill(pad, math.nan)
    elif kind == "int":
        x = pad.long()
    elif kind == "3d":
        x = pad[None]
    else:
        x = pad.tolist()
    try:
        m = call(masks.from_torch_key_padding_mask, x, names=("key_padding_mask",))
    except Refused:
        return
    assert m.dtype == torch.bool and torch.equal(m, ~pad)


# -- MultiHeadAttention -----------------------------------------------------------------

DIMS = st.one_of(st.integers(-1, 12), st.sampled_from([True, 4.0, "8", None]))


@FUZZ
@given(embed_dim=DIMS, num_heads=DIMS, num_kv_heads=st.one_of(st.none(), DIMS),
       dropout=st.sampled_from([0.0, 0.1, -0.1, 1.0, math.nan, "0.1", None]),
       kdim=st.one_of(st.none(), DIMS), bias=st.sampled_from([True, False, 1, "yes"]))
def test_multihead_attention_construction(embed_dim, num_heads, num_kv_heads, dropout, kdim,
                                          bias):
    names = ("embed_dim", "num_heads", "num_kv_heads", "dropout", "kdim", "bias", "head_dim")
    try:
        m = call(MultiHeadAttention, embed_dim, num_heads, num_kv_heads=num_kv_heads,
                 dropout=dropout, kdim=kdim, bias=bias, names=names)
    except Refused:
        return
    assert m.head_dim * m.num_heads == m.embed_dim and m.num_heads % m.num_kv_heads == 0
    assert m.head_dim >= 1 and math.isfinite(m.scale) and m.scale > 0


@st.composite
def mha_call(draw):
    heads = draw(st.sampled_from([1, 2, 4]))
    kv = draw(st.sampled_from([h for h in (1, 2, 4) if heads % h == 0]))
    e = heads * draw(st.integers(1, 4))
    b, lq, lk = draw(st.integers(1, 2)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    torch.manual_seed(draw(st.integers(0, 100)))
    mha = MultiHeadAttention(e, heads, num_kv_heads=kv).eval()
    query = tensor(gen, (b, lq, e))
    cross = draw(st.booleans())
    key = tensor(gen, (b, lk, e)) if cross else None
    n = lk if cross else lq
    kw = {"causal": draw(st.booleans())}
    mask_kind = draw(st.sampled_from(["none", "bool", "float", "bad-shape", "int", "+inf"]))
    if mask_kind == "bool":
        kw["mask"] = torch.rand(lq, n, generator=gen) < 0.7
    elif mask_kind == "float":
        kw["mask"] = tensor(gen, (b, lq, n))
    elif mask_kind == "bad-shape":
        kw["mask"] = torch.ones(lq + 1, n, dtype=torch.bool)
    elif mask_kind == "int":
        kw["mask"] = torch.ones(lq, n, dtype=torch.int64)
    elif mask_kind == "+inf":
        kw["mask"] = torch.full((lq, n), math.inf)
    key_kind = draw(st.sampled_from(["none", "bool", "bad-shape", "float"]))
    if key_kind == "bool":
        kw["key_mask"] = torch.rand(b, n, generator=gen) < 0.7
    elif key_kind == "bad-shape":
        kw["key_mask"] = torch.ones(b, n + 1, dtype=torch.bool)
    elif key_kind == "float":
        kw["key_mask"] = torch.ones(b, n)
    return mha, query, key, kw


@FUZZ
@given(mha_call())
def test_multihead_attention_forward(case):
    mha, query, key, kw = case
    names = ("query", "key", "value", "mask", "key_mask", "causal")
    try:
        out, _ = call(mha, query, key, names=names, **kw)
        out2, w = call(mha, query, key, need_weights=True, names=names, **kw)
    except Refused:
        return
    assert out.shape == query.shape and finite(out)
    assert torch.allclose(out, out2, atol=1e-5)  # the fast path and the weights path agree
    assert finite(w) and bool(((w.sum(-1) - 1).abs() < 1e-4).logical_or(w.sum(-1) == 0).all())
