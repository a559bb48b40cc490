"""The report's explorer section: its QK-view check, both ways, and its note when the model
cannot be loaded."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.report.explorer import QK_TOL, qk_view_error
from attnlab.tracing.attention import AttentionTrace


def _trace(scale: float, causal: bool, *, lse_scale: float | None = None,
           lse_causal: bool | None = None, dense: bool = False) -> AttentionTrace:
    """A trace of 2 layers, 4 query heads sharing 2 key heads; its log-sum-exp (or dense
    weights) computed under ``lse_scale``/``lse_causal`` (default: its own shape)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 5, 8, generator=g)  # (L, H, Lq, d)
    k = torch.randn(2, 2, 5, 8, generator=g)  # (L, H_kv, Lk, d): grouped heads
    shape = ScoreShape(scale=scale, causal=causal)
    model = ScoreShape(scale=scale if lse_scale is None else lse_scale,
                       causal=causal if lse_causal is None else lse_causal)
    lse = torch.stack([row_logsumexp(q[i], k[i], model) for i in range(2)])
    tokens = list("abcde")
    if dense:
        w = torch.exp(torch.stack([
            torch.stack([model.scores(q[i, h], k[i, h // 2], rows=range(5), head=h, lq=5, lk=5)
                         for h in range(4)]) for i in range(2)]) - lse[..., None])
        return AttentionTrace(tokens=tokens, weights=w, q=q, k=k, shapes=shape)
    return AttentionTrace(tokens=tokens, q=q, k=k, lse=lse, shapes=shape)


@pytest.mark.parametrize("dense", [False, True])
def test_qk_view_error_is_small_for_the_model_weights_and_large_otherwise(dense):
    for causal in (False, True):
        assert qk_view_error(_trace(8 ** -0.5, causal, dense=dense)) <= QK_TOL
        wrong_scale = _trace(1.0, causal, lse_scale=8 ** -0.5, dense=dense)
        assert qk_view_error(wrong_scale) > 0.05
        wrong_mask = _trace(8 ** -0.5, causal, lse_causal=not causal, dense=dense)
        assert qk_view_error(wrong_mask) > 0.05


def test_qk_view_error_is_nan_without_q_and_k_or_with_merged_tokens():
    t = _trace(0.5, False, dense=True)
    no_qk = AttentionTrace(tokens=t.tokens, weights=t.weights, scale=0.5)
    assert math.isnan(qk_view_error(no_qk))  # nothing to recompute from
    merged = _trace(0.5, True).merge_tokens([[0], [1, 2], [3], [4]])
    assert math.isnan(qk_view_error(merged))  # the view shows no merged q/k
