"""ScoreShape (attnlab.core.scores) and shaped weights (attnlab.core.weights): every rule
equals the dense formula, and a wrong rule is told apart."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.core.functional import scaled_dot_product_attention
from attnlab.core.masks import causal as causal_mask
from attnlab.core.positional import alibi_bias, alibi_slopes
from attnlab.core.scores import ScoreShape, attend, row_logsumexp
from attnlab.core.weights import shaped_weights


def _dense_scores(q, k, shape: ScoreShape, head: int) -> torch.Tensor:
    """The score formula written out in float64 over the whole (Lq, Lk) map."""
    lq, lk = q.shape[0], k.shape[0]
    s = (q.double() @ k.double().T) * shape.scale
    if shape.softcap is not None:
        s = shape.softcap * torch.tanh(s / shape.softcap)
    if shape.alibi_slopes is not None:  # the canonical slopes: core.positional's bias
        s = s + alibi_bias(len(shape.alibi_slopes), lq, lk)[head].double()
    if shape.bias is not None:
        b = shape.bias[head if shape.bias.shape[0] > 1 else 0].double()
        s = s + b
    keep = torch.ones(lq, lk, dtype=torch.bool)
    if shape.causal:
        keep &= causal_mask(lq, lk, window=shape.window)
    elif shape.window is not None:  # a band: keys within distance < window, both sides
        pos_q = torch.arange(lq)[:, None] + (lk - lq)
        keep &= (torch.arange(lk)[None, :] - pos_q).abs() < shape.window
    if shape.key_mask is not None:
        keep &= shape.key_mask[None, :]
    return s.masked_fill(~keep, -math.inf)


def _dense_softmax(q, k, shape: ScoreShape, head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(lse, weights) of one head in float64: a sink logit is one more column of the
    softmax, dropped afterwards (the rows then sum to less than 1)."""
    s = _dense_scores(q, k, shape, head)
    if shape.sinks is None:
        return torch.logsumexp(s, -1), torch.softmax(s, -1)
    sink = shape.sinks[head].double()
    col = (sink if sink.dim() else sink.expand(1))[:, None].expand(s.shape[0], 1)
    full = torch.cat([s, col], -1)
    return torch.logsumexp(full, -1), torch.softmax(full, -1)[:, :-1]


SHAPES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(causal=True, window=3),
    "band": dict(window=3),  # bidirectional local attention (ModernBERT)
    "key_mask": dict(key_mask=torch.tensor([True, True, False, True, True, True, False, True,
                                            True, True, True, True])),
    "softcap": dict(causal=True, softcap=2.0),
    "alibi": dict(causal=True, alibi_slopes=alibi_slopes(2)),
    "bias": dict(bias=torch.randn(2, 9, 12, generator=torch.Generator().manual_seed(3))),
    "sinks": dict(causal=True, sinks=torch.tensor([1.5, -0.5])),  # one logit per head
    "row_sinks": dict(sinks=torch.randn(2, 9, generator=torch.Generator().manual_seed(4))),
}


@pytest.mark.parametrize("kind", list(SHAPES))
def test_shaped_weights_equal_the_dense_softmax(kind):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 9, 8, generator=g)
    k = torch.randn(1, 12, 8, generator=g)  # grouped: both query heads read key head 0
    shape = ScoreShape(scale=8 ** -0.5, **SHAPES[kind])
    lse = row_logsumexp(q, k, shape, tile_rows=4)
    for head in range(2):
        ref_lse, ref = _dense_softmax(q[head], k[0], shape, head)
        assert torch.allclose(lse[head].double(), ref_lse, atol=1e-5)
        rows = [0, 4, 8]
        got = shaped_weights(q[head, rows], k[0], lse[head, rows], shape, rows=rows, head=head,
                             lq=9, lk=12)
        assert (got.double() - ref[rows]).abs().max() < 1e-6
        cols = [1, 5, 11]
        tile = shaped_weights(q[head, rows], k[0, cols], lse[head, rows], shape, rows=rows,
                              cols=cols, head=head, lq=9, lk=12)
        assert (tile.double() - ref[rows][:, cols]).abs().max() < 1e-6
    # both heads at once (their keys given per head) equal the heads one by one
    both = shaped_weights(q, k.expand(2, -1, -1), lse, shape, rows=range(9), head=[0, 1],
                          lq=9, lk=12)
    for head in range(2):
        ref = _dense_softmax(q[head], k[0], shape, head)[1]
        assert (both[head].double() - ref).abs().max() < 1e-6
    # the wrong rule: the same rows rebuilt without the shaping differ (except plain)
    if kind != "plain":
        bare = ScoreShape(scale=8 ** -0.5)
        wrong = shaped_weights(q[1, :9], k[0], row_logsumexp(q[1:], k, bare)[0], bare,
                               rows=range(9), head=1, lq=9, lk=12)
        assert (wrong.double() - _dense_softmax(q[1], k[0], shape, 1)[1]).abs().max() > 1e-3


def test_attend_equals_the_core_and_fully_masked_rows_are_zero():
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(3, 4, 10, 8, generator=g).unbind(0)
    km = torch.ones(10, dtype=torch.bool)
    km[7:] = False
    shape = ScoreShape(scale=0.3, causal=True, key_mask=km)
    out, lse = attend(q, k[:2], v[:2], shape, tile_rows=3)
    mask = causal_mask(10) & km
    ref_out, ref_lse = scaled_dot_product_attention(
        q, k[:2], v[:2], mask, scale=0.3, return_lse=True, backend="chunked")
    assert torch.allclose(out, ref_out, atol=1e-6) and torch.allclose(lse, ref_lse, atol=1e-6)
    # with Lq < Lk (bottom-right) and a key mask hiding every key a row sees
    short = ScoreShape(scale=0.3, causal=True, key_mask=torch.tensor([False] * 8 + [True] * 2))
    out2, lse2 = attend(q[:, :3], k[:2], v[:2], short)
    assert torch.isneginf(lse2[:, 0]).all() and (out2[:, 0] == 0).all()
    assert torch.isfinite(lse2[:, 1:]).all()


def test_score_shape_checks_its_arguments():
    with pytest.raises(ValueError, match="window must be a positive int"):
        ScoreShape(scale=1.0, window=0)
    with pytest.raises(ValueError, match="sinks must be a float tensor"):
        ScoreShape(scale=1.0, sinks=torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="do not fit"):
        ScoreShape(scale=1.0, sinks=torch.zeros(3)).check(num_heads=2, lq=4, lk=4)
    with pytest.raises(ValueError, match="do not fit"):
        ScoreShape(scale=1.0, sinks=torch.zeros(2, 5)).check(num_heads=2, lq=4, lk=4)
    with pytest.raises(ValueError, match="scale must be a finite float"):
        ScoreShape(scale=float("nan"))
    with pytest.raises(TypeError, match="causal must be a bool"):
        ScoreShape(scale=1.0, causal=1)
    with pytest.raises(ValueError, match="key_mask must be a 1-D bool"):
        ScoreShape(scale=1.0, key_mask=torch.ones(3))
    with pytest.raises(ValueError, match="softcap must be a positive"):
        ScoreShape(scale=1.0, softcap=0.0)
    with pytest.raises(ValueError, match="bias must be a float tensor"):
        ScoreShape(scale=1.0, bias=torch.zeros(4, 4))
    s = ScoreShape(scale=1.0, key_mask=torch.ones(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_mask has 5 entries for 6 keys"):
        s.check(num_heads=1, lq=6, lk=6)
    with pytest.raises(ValueError, match="rows must lie in"):
        s.scores(torch.zeros(1, 2), torch.zeros(5, 2), rows=[5], lq=5, lk=5)
    assert s.same_as(ScoreShape(scale=1.0, key_mask=torch.ones(5, dtype=torch.bool)))
    assert not s.same_as(ScoreShape(scale=1.0))
    # the key range of a tile of rows is exactly where the rule lets keys through
    w = ScoreShape(scale=1.0, causal=True, window=4)
    assert w.key_range(10, 12, lq=20, lk=20) == (7, 12)
    assert w.key_range(10, 12, lq=10, lk=20) == (17, 20)
    band = ScoreShape(scale=1.0, window=4)  # both sides: keys 10-3 .. 11+3
    assert band.key_range(10, 12, lq=20, lk=20) == (7, 15)
    assert band.key_range(0, 1, lq=20, lk=20) == (0, 4)


def test_the_causal_band_shortcut_equals_the_general_rule(monkeypatch):
    """Plain causal tiles mask only the columns some row may not see; the result must be
    the general rule's, and a band that starts one column late must not be."""
    from attnlab.core.scores import ScoreShape

    torch.manual_seed(0)
    shape = ScoreShape(scale=0.3, causal=True)
    cases = [(7, 7, torch.arange(7), None), (5, 9, torch.arange(2, 5), torch.arange(1, 8)),
             (64, 64, torch.tensor([0, 3, 4]), torch.arange(64)),
             (6, 6, torch.tensor([3, 1]), None),
             (6, 6, torch.arange(6), torch.tensor([0, 2, 5]))]

    def all_scores():
        out = []
        for lq, lk, rows, cols in cases:
            g = torch.Generator().manual_seed(lq * 100 + lk)
            q, k = torch.randn(lq, 8, generator=g), torch.randn(lk, 8, generator=g)
            out.append(shape.scores(q[rows], k if cols is None else k[cols], rows=rows,
                                    cols=cols, lq=lq, lk=lk))
        return out

    fast = all_scores()
    monkeypatch.setattr(ScoreShape, "_causal_band", lambda self, *a, **kw: None)
    general = all_scores()
    assert all(torch.equal(a, b) for a, b in zip(fast, general))
    monkeypatch.undo()
    late = ScoreShape._causal_band
    monkeypatch.setattr(ScoreShape, "_causal_band",
                        lambda self, r, c, **kw: (None if late(self, r, c, **kw) is None
                                                  else late(self, r, c, **kw) + 1))
    assert not all(torch.equal(a, b) for a, b in zip(all_scores(), general))


def test_attend_with_sinks_is_the_softmax_with_one_more_key_and_no_value():
    """gpt-oss's eager formula: the sink is a column of the softmax whose value is zero."""
    g = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(3, 2, 7, 4, generator=g).unbind(0)
    for sinks in (torch.tensor([0.3, 2.0]), torch.randn(2, 7, generator=g)):
        shape = ScoreShape(scale=0.5, causal=True, sinks=sinks)
        out, lse = attend(q, k, v, shape, tile_rows=3)
        s = (q @ k.mT * 0.5).masked_fill(~causal_mask(7), -math.inf)
        col = (sinks[:, None] if sinks.dim() == 1 else sinks).expand(2, 7)[..., None]
        p = torch.softmax(torch.cat([s, col], -1), -1)
        assert torch.allclose(out, p[..., :-1] @ v, atol=1e-6)
        assert torch.allclose(lse, torch.logsumexp(torch.cat([s, col], -1), -1), atol=1e-6)
        assert bool((p[..., :-1].sum(-1) < 1).all())  # the sink took a share of every row
        # without the sink the same q, k give other weights and another output
        plain, _ = attend(q, k, v, ScoreShape(scale=0.5, causal=True))
        assert (plain - out).abs().max() > 1e-3
    rows_only = ScoreShape(scale=1.0, sinks=torch.zeros(2, 7))
    with pytest.raises(ValueError, match="per-row sinks"):
        rows_only.logsumexp(torch.zeros(3, 5), head=0)
