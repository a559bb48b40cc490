"""Head scores of trained models: a previous-token pattern and an induction pattern are told
apart, through analysis's scores, on traces captured from a GPT."""

from __future__ import annotations

import pytest
import torch

from attnlab.tracing.attention import AttentionTrace
from attnlab.train.heads import capture_weights, score_heads, score_traces, trace_batch
from attnlab.train.tasks import get_task


def _pattern(ids: list[int], kind: str) -> torch.Tensor:
    """Ideal weights (N, N) for a head of ``kind`` on tokens ``ids``."""
    n = len(ids)
    w = torch.zeros(n, n)
    for t in range(n):
        target = max(t - 1, 0)
        earlier = [j for j in range(t) if ids[j] == ids[t]]
        if kind == "induction":
            target = earlier[-1] + 1 if earlier else 0
        elif kind == "off-by-one":  # the matched token itself: a near miss
            target = earlier[-1] if earlier else 0
        w[t, target] = 1.0
    return w


def _traces(idx: torch.Tensor) -> list[AttentionTrace]:
    out = []
    for row in idx.tolist():
        w = torch.stack([_pattern(row, k) for k in ("previous", "induction", "off-by-one")])
        out.append(AttentionTrace(tokens=[str(i) for i in row], weights=w[None],
                                  token_ids=row))
    return out


def test_scores_separate_the_two_head_kinds():
    idx = get_task("induction").batch(0, 4, seed=0).inputs
    s = score_traces(_traces(idx))
    prev, ind = s.previous_token[0], s.induction[0]  # heads: previous, induction, near miss
    n = idx.shape[1]
    assert prev[0] == pytest.approx((n - 1) / n)  # the first token has no previous one
    assert ind[1] == pytest.approx(1.0)
    assert ind[0] < 0.05 and prev[1] < 0.3
    assert ind[2] < 0.05  # one position off scores nothing
    assert s.best_induction[:2] == (0, 1) and s.best_previous_token[:2] == (0, 0)
    with pytest.raises(ValueError, match="token_ids"):
        score_traces([AttentionTrace(tokens=["a", "b"], weights=torch.eye(2)[None, None])])


def test_score_heads_runs_on_a_gpt():
    from attnlab.nn.transformer import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=33, block_size=32, num_layers=2, num_heads=2,
                          embed_dim=16)).eval()
    idx = get_task("induction").batch(0, 2, seed=0).inputs
    traces = trace_batch(model, idx)
    assert len(traces) == 2 and traces[1].token_ids == idx[1].tolist()
    s = score_heads(model, idx)
    assert s.previous_token.shape == (2, 2) and s.induction.shape == (2, 2)
    # untrained: attention is near uniform, far from either pattern
    assert s.best_previous_token[2] < 0.5 and s.best_induction[2] < 0.5
    assert set(s.to_json()) == {"previous_token", "induction"}
    w = capture_weights(model, idx)  # (L, B, H, N, N)
    assert w.shape == (2, 2, 2, 32, 32)
    assert torch.allclose(w[1, 0, 1], traces[0].head_weights(1, 1))
    assert torch.allclose(w.sum(-1), torch.ones(2, 2, 2, 32), atol=1e-5)
    with pytest.raises(ValueError, match="idx must be token ids"):
        trace_batch(model, idx.float())
