"""Fuzzing the core's public API: the only outcomes are the right answer (finite from finite
inputs) or a ValueError/TypeError that names an argument."""

from __future__ import annotations

import math

import torch
from attention_reference import reference  # tests/core/attention_reference.py
from hypothesis import event, given, settings
from hypothesis import strategies as st

from attnlab.core.chunked import chunked_attention
from attnlab.core.functional import scaled_dot_product_attention as sdpa

ARGUMENTS = ("q", "k", "v", "mask", "scale", "dropout_p", "causal", "backend",
             "return_weights", "return_lse", "head", "block_q", "block_k")

#: Valid values of each argument, and values that must be refused.
GOOD = {
    "scale": st.one_of(st.none(), st.floats(-1e3, 1e3).filter(lambda x: x != 0.0),
                       st.integers(1, 3)),
    "dropout_p": st.one_of(st.just(0.0), st.floats(0.0, 0.9)),
    "causal": st.booleans(),
    "backend": st.sampled_from(["auto", "fused", "explicit", "chunked", "linear"]),
    "return_weights": st.booleans(),
    "return_lse": st.booleans(),
}
BAD = {
    "scale": st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 0, True, "0.5", [1.0]]),
    "dropout_p": st.one_of(st.sampled_from([math.nan, 1.0, -0.1, "0.1", None, True]),
                           st.floats(1.0, 1e30), st.floats(-1e30, -1e-30)),
    "causal": st.sampled_from([0, 1, "yes", None]),
    "backend": st.sampled_from(["magic", None, 3, "AUTO"]),
    "return_weights": st.sampled_from([0, "no", None]),
    "return_lse": st.sampled_from([1, "yes", None]),
}


@st.composite
def arguments(draw):
    """Valid keyword arguments, and half the time one of them replaced by a bad value."""
    kw = {name: draw(strategy) for name, strategy in GOOD.items()}
    if draw(st.booleans()):
        name = draw(st.sampled_from(sorted(BAD)))
        kw[name] = draw(BAD[name])
    return kw


@st.composite
def masks(draw, b, h, lq, lk, g):
    kind = draw(st.sampled_from(["none", "bool", "float"] * 3 + ["poison", "int", "bad-shape"]))
    if kind == "none":
        return None
    if kind == "bool":
        return torch.rand(b, 1, lq, lk, generator=g) > 0.4
    if kind == "int":
        return torch.ones(lq, lk, dtype=torch.int64)
    if kind == "bad-shape":
        return torch.ones(lq + 1, lk, dtype=torch.bool)
    m = torch.randn(lq, lk, generator=g).masked_fill(torch.rand(lq, lk, generator=g) > 0.6,
                                                      -math.inf)
    if kind == "poison" and m.numel():
        m.view(-1)[0] = draw(st.sampled_from([math.inf, math.nan]))
    return m


def _err(a, b) -> float:
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def _names_an_argument(err: Exception) -> bool:
    return any(name in str(err) for name in ARGUMENTS)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.data())
def test_sdpa_gives_the_answer_or_names_the_argument(data):
    b, h, lq, lk = 1, data.draw(st.integers(1, 2)), data.draw(st.integers(0, 6)), \
        data.draw(st.integers(0, 6))
    d = data.draw(st.sampled_from([0, 1, 4, 4, 4]))
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 999)))
    q, k, v = (torch.randn(b, h, n, max(d, 1), generator=g)[..., :d] for n in (lq, lk, lk))
    kw = data.draw(arguments())
    mask = data.draw(masks(b, h, lq, lk, g))
    try:
        res = sdpa(q, k, v, mask, **kw)
    except (ValueError, TypeError) as err:
        assert _names_an_argument(err), str(err)
        event("refused")
        return
    event("answered")
    out = res[0] if isinstance(res, tuple) else res
    assert out.shape == (b, h, lq, max(d, 0)) and torch.isfinite(out).all()
    if kw["backend"] != "linear" and kw["dropout_p"] == 0.0:
        want = reference(q, k, v, mask, kw["causal"], kw["scale"])
        assert _err(out, want[0]) <= 1e-4
        if kw["return_lse"]:
            lse, ref = res[-1], want[2]
            assert torch.equal(torch.isneginf(lse), torch.isneginf(ref))
            alive = torch.isfinite(ref)
            assert _err(lse[alive], ref[alive]) <= 1e-4


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.data())
def test_chunked_attention_gives_the_answer_or_names_the_argument(data):
    lq, lk = data.draw(st.integers(0, 6)), data.draw(st.integers(0, 6))
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 999)))
    q, k, v = (torch.randn(1, 2, n, 4, generator=g) for n in (lq, lk, lk))
    blocks = st.one_of(st.none(), st.integers(-1, 4), st.sampled_from([True, 2.0, "2"]))
    kw = {name: value for name, value in data.draw(arguments()).items()
          if name in ("scale", "causal")}
    kw.update(block_q=data.draw(blocks), block_k=data.draw(blocks))
    mask = data.draw(masks(1, 2, lq, lk, g))
    try:
        out, lse = chunked_attention(q, k, v, mask, **kw)
    except (ValueError, TypeError) as err:
        assert _names_an_argument(err), str(err)
        return
    want = reference(q, k, v, mask, kw["causal"], kw["scale"])
    assert _err(out, want[0]) <= 1e-4
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want[2]))
