"""ScoreShape's rows as the explorer and the server show them (``scores`` at any scale and
dtype, ``additive``, ``sink_logits``, ``probs``): equal to the eager tiled path (``attend``,
``row_logsumexp``) and to the formulas written out, and apart from the wrong variants."""

from __future__ import annotations

import pytest
import torch

from attnlab.core.scores import ScoreShape, attend, row_logsumexp

H, LQ, LK, D = 2, 5, 7, 4


def _qkv(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(H, n, d, generator=g) * 2 for n, d in ((LQ, D), (LK, D), (LK, 3))]


SHAPES = {
    "plain": ScoreShape(scale=0.5),
    "causal_window": ScoreShape(scale=0.5, causal=True, window=3),
    "bidirectional_window": ScoreShape(scale=0.5, window=2),
    "softcap": ScoreShape(scale=1.0, causal=True, softcap=1.5),
    "alibi": ScoreShape(scale=0.5, causal=True, alibi_slopes=torch.tensor([0.5, 0.25])),
    "bias": ScoreShape(scale=0.5, bias=torch.randn(H, LQ, LK).masked_fill(
        torch.eye(LQ, LK, dtype=torch.bool)[None], float("-inf"))),
    "sinks": ScoreShape(scale=0.5, causal=True, sinks=torch.tensor([0.5, -1.0])),
    "row_sinks": ScoreShape(scale=0.5, sinks=torch.randn(H, LQ)),
    "key_mask": ScoreShape(scale=0.5, causal=True,
                           key_mask=torch.tensor([False, False, False, True, True, True, True])),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_probs_are_the_attention_of_the_eager_path(name):
    shape, (q, k, v) = SHAPES[name], _qkv()
    out, lse = attend(q, k, v, shape)
    assert torch.allclose(lse, row_logsumexp(q, k, shape))
    rows = list(range(LQ))
    for h in range(H):
        p = shape.probs(q[h], k[h], rows=rows, head=h, lq=LQ, lk=LK)
        s = shape.scores(q[h], k[h], rows=rows, head=h, lq=LQ, lk=LK)
        finite = lse[h].masked_fill(lse[h] == float("-inf"), 0.0)
        eager = torch.exp(s - finite[:, None])  # the model's weights: exp(s − lse)
        assert p.dtype == torch.float64
        assert torch.allclose(p, eager.double(), atol=1e-6), (name, h)
        assert torch.allclose(p.float() @ v[h], out[h], atol=1e-5), (name, h)


def test_a_fully_hidden_row_is_zeros_and_a_sink_takes_all_of_it():
    q, k, _ = _qkv(1)
    hidden = SHAPES["key_mask"]  # row 0 sees key 2 at most: masked
    p = hidden.probs(q[0], k[0], rows=range(LQ), lq=LQ, lk=LK)
    assert p[0].tolist() == [0.0] * LK and p[1:].sum(-1).allclose(torch.ones(LQ - 1,
                                                                              dtype=p.dtype))
    sunk = ScoreShape(scale=0.5, causal=True, key_mask=hidden.key_mask,
                      sinks=torch.tensor([1.0, 1.0]))
    p = sunk.probs(q[0], k[0], rows=range(LQ), lq=LQ, lk=LK)
    assert p[0].tolist() == [0.0] * LK and bool((p[1:].sum(-1) < 1).all())


def test_scores_at_another_scale_and_dtype_follow_the_formula():
    q, k, _ = _qkv(2)
    shape = ScoreShape(scale=0.5, causal=True, softcap=1.5,
                       alibi_slopes=torch.tensor([0.5, 0.25]))
    rows, h, scale = [1, 4], 1, 2.0
    got = shape.scores(q[h, rows], k[h], rows=rows, head=h, lq=LQ, lk=LK, scale=scale,
                       dtype=torch.float64)
    z = q[h, rows].double() @ k[h].double().T * scale
    z = 1.5 * torch.tanh(z / 1.5)
    pos = torch.tensor(rows)[:, None] + (LK - LQ)
    z = z - 0.25 * (pos - torch.arange(LK)[None]).double()
    z = z.masked_fill(torch.arange(LK)[None] > pos, float("-inf"))
    assert got.dtype == torch.float64 and torch.allclose(got, z, atol=1e-12)
    # the cap on the unscaled q·k (then scaled), or the ALiBi penalty turned into a bonus
    capped_first = (1.5 * torch.tanh(q[h, rows].double() @ k[h].double().T / 1.5) * scale
                    - 0.25 * (pos - torch.arange(LK)[None]).double())
    bonus = 1.5 * torch.tanh(q[h, rows].double() @ k[h].double().T * scale / 1.5) \
        + 0.25 * (pos - torch.arange(LK)[None]).double()
    seen = torch.isfinite(got)
    for wrong in (capped_first, bonus):
        assert (wrong[seen] - got[seen]).abs().max() > 1e-2
    # temperature divides the shaped scores (the sink's too)
    p2 = shape.probs(q[h, rows], k[h], rows=rows, head=h, lq=LQ, lk=LK, temperature=2.0)
    assert torch.allclose(p2, torch.softmax(shape.scores(
        q[h, rows], k[h], rows=rows, head=h, lq=LQ, lk=LK, dtype=torch.float64) / 2, -1))


def test_additive_is_what_scores_add_after_the_cap():
    q, k, _ = _qkv(3)
    shape = ScoreShape(scale=0.5, softcap=2.0, alibi_slopes=torch.tensor([0.5, 0.25]),
                       bias=torch.randn(1, LQ, LK))
    rows = [0, 3]
    for h in range(H):
        add = shape.additive(rows, head=h, lq=LQ, lk=LK)
        capped = 2.0 * torch.tanh(q[h, rows].double() @ k[h].double().T * 0.5 / 2.0)
        s = shape.scores(q[h, rows], k[h], rows=rows, head=h, lq=LQ, lk=LK, dtype=torch.float64)
        assert torch.allclose(capped + add, s, atol=1e-12)
    assert ScoreShape(scale=1.0, causal=True).additive([0], lq=LQ, lk=LK) is None


def test_sink_logits_per_head_and_per_row():
    assert SHAPES["sinks"].sink_logits([0, 2, 4], head=1).tolist() == [-1.0] * 3
    rs = SHAPES["row_sinks"]
    assert torch.equal(rs.sink_logits([4, 1], head=0), rs.sinks[0, [4, 1]])
    assert SHAPES["plain"].sink_logits([0]) is None


@pytest.mark.parametrize("kwargs, error, message", [
    ({"temperature": 0.0}, ValueError, "temperature must be a positive finite float, got 0.0"),
    ({"temperature": float("nan")}, ValueError, "temperature must be a positive finite"),
    ({"scale": float("inf")}, ValueError, "scale must be a finite float, got inf"),
    ({"dtype": torch.int64}, TypeError, "dtype must be a floating torch.dtype"),
    ({"head": 1.0}, TypeError, "head must be an int, got float"),
])
def test_bad_arguments_are_named(kwargs, error, message):
    q, k, _ = _qkv()
    with pytest.raises(error, match=message.replace("(", r"\(")):
        SHAPES["plain"].probs(q[0], k[0], rows=range(LQ), lq=LQ, lk=LK, **kwargs)
