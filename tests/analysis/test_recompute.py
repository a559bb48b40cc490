"""recompute_errors: a trace that agrees with its q, k, v passes; a corrupted one fails."""

from __future__ import annotations

import pytest
import torch

from attnlab.analysis import recompute_errors
from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.tracing.attention import AttentionTrace


def _qkv(n: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 1, 2, n, 4, generator=g).unbind(0)  # (L, H, N, d) each


def test_dense_weights_trace_and_a_corrupted_weight():
    q, k, v = _qkv()
    w = torch.softmax(q @ k.mT * 0.5, -1)
    t = AttentionTrace(tokens=list("abcdef"), weights=w, q=q, k=k, v=v, context=w @ v,
                       scale=0.5)
    err = recompute_errors(t, tile_rows=4)
    assert err["weights"] < 1e-6 and err["context"] < 1e-6
    w2 = w.clone()
    w2[0, 0, 0] = w2[0, 0, 0].flip(-1)
    bad = AttentionTrace(tokens=list("abcdef"), weights=w2, q=q, k=k, scale=0.5)
    assert recompute_errors(bad)["weights"] > 1e-3 and "context" not in recompute_errors(bad)
    unscaled = AttentionTrace(tokens=list("abcdef"), weights=w, q=q, k=k, scale=1.0)
    assert recompute_errors(unscaled)["weights"] > 1e-2
    with pytest.raises(ValueError, match="q and k"):
        recompute_errors(AttentionTrace(tokens=list("abcdef"), weights=w))


def test_qk_lse_trace_checks_its_log_sum_exp_and_context():
    q, k, v = _qkv(9, seed=1)
    km = torch.tensor([True] * 7 + [False] * 2)
    shape = ScoreShape(scale=0.5, causal=True, window=4, key_mask=km)
    lse = torch.stack([row_logsumexp(q[0], k[0, :1], shape)])  # both heads read kv head 0
    ref = torch.exp(shape.scores(q[0, 1], k[0, 0], rows=range(9), lq=9, lk=9) - lse[0, 1, :, None])
    ctx = torch.stack([torch.stack([torch.exp(shape.scores(q[0, h], k[0, 0], rows=range(9),
                                                           lq=9, lk=9) - lse[0, h, :, None])
                                    @ v[0, 0] for h in range(2)])])
    t = AttentionTrace(tokens=list("abcdefghi"), q=q, k=k[:, :1], v=v[:, :1], lse=lse,
                       context=ctx, shapes=shape)
    err = recompute_errors(t, tile_rows=2)
    assert err["weights"] < 1e-6 and err["context"] < 1e-5
    assert torch.allclose(t.weights_rows(0, 1, range(9)), ref)
    shifted = lse.clone()
    shifted[0, 1, 5] += 0.1  # an lse that does not belong to these q, k
    bad = AttentionTrace(tokens=list("abcdefghi"), q=q, k=k[:, :1], lse=shifted, shapes=shape)
    assert recompute_errors(bad)["weights"] > 1e-2
    no_window = AttentionTrace(tokens=list("abcdefghi"), q=q, k=k[:, :1], lse=lse,
                               shapes=ScoreShape(scale=0.5, causal=True, key_mask=km))
    assert recompute_errors(no_window)["weights"] > 1e-2


def test_sink_logits_take_their_share_of_each_row():
    """A trace with learned sink logits (gpt-oss): the recomputed weights leave the sink its
    share, as the model's do; a softmax without the sink would be off by that share."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, 2, 6, 4).unbind(0)
    shape = ScoreShape(scale=0.5, causal=True, sinks=torch.tensor([0.5, -1.0]))
    lse = row_logsumexp(q[0], k[0], shape)[None]
    t = AttentionTrace(tokens=list("abcdef"), q=q, k=k, lse=lse, shapes=shape, model="x")
    assert recompute_errors(t)["weights"] < 1e-6
    without = ScoreShape(scale=0.5, causal=True)
    t_wrong = AttentionTrace(tokens=list("abcdef"), q=q, k=k, lse=lse, shapes=without,
                             model="x")
    assert recompute_errors(t_wrong)["weights"] > 0.05
