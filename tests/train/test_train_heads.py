"""Head scores: a previous-token pattern and an induction pattern are told apart."""

from __future__ import annotations

import torch

from attnlab.train.heads import induction_score, previous_token_score, score_heads
from attnlab.train.tasks import get_task


def _pattern(idx: torch.Tensor, kind: str) -> torch.Tensor:
    """Ideal weights (B, 1, N, N) for a head of ``kind`` on tokens ``idx``."""
    b, n = idx.shape
    w = torch.zeros(b, 1, n, n)
    for i in range(b):
        for t in range(n):
            target = max(t - 1, 0)
            if kind == "induction":
                earlier = (idx[i, :t] == idx[i, t]).nonzero().flatten()
                target = int(earlier[-1]) + 1 if len(earlier) and earlier[-1] + 1 < t else 0
            elif kind == "off-by-one":  # the matched token itself: a near miss
                earlier = (idx[i, :t] == idx[i, t]).nonzero().flatten()
                target = int(earlier[-1]) if len(earlier) else 0
            w[i, 0, t, target] = 1.0
    return w


def test_scores_separate_the_two_head_kinds():
    idx = get_task("induction").batch(0, 4, seed=0).inputs
    prev, ind, miss = (_pattern(idx, k) for k in ("previous", "induction", "off-by-one"))
    assert previous_token_score(prev).mean() > 0.99
    assert induction_score(prev, idx).item() < 0.05
    assert induction_score(ind, idx).item() > 0.99
    assert previous_token_score(ind).mean() < 0.3
    assert induction_score(miss, idx).item() < 0.05  # one position off scores nothing


def test_score_heads_runs_on_a_gpt():
    from attnlab.nn.transformer import GPT, GPTConfig

    model = GPT(GPTConfig(vocab_size=33, block_size=32, n_layer=2, n_head=2, n_embd=16))
    idx = get_task("induction").batch(0, 2, seed=0).inputs
    s = score_heads(model, idx)
    assert s.previous_token.shape == (2, 2) and s.induction.shape == (2, 2)
    # untrained: attention is near uniform, far from either pattern
    assert s.best_previous_token[2] < 0.5 and s.best_induction[2] < 0.5
    j = s.to_json()
    assert set(j) == {"previous_token", "induction"}
