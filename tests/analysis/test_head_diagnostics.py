"""Head diagnostics: each score finds the pattern it names, and misses a near miss."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab import analysis
from attnlab.analysis import (
    cluster_heads,
    diagnose,
    head_scores,
    induction_scores,
    recompute_errors,
    repeated_random_tokens,
)
from attnlab.trace import AttentionTrace

N = 8


def _trace(*patterns: torch.Tensor) -> AttentionTrace:
    w = torch.stack(patterns)[None]  # (1, H, N, N)
    return AttentionTrace(tokens=[f"t{i}" for i in range(w.shape[-1])], weights=w, causal=True)


def _previous(n: int = N) -> torch.Tensor:
    w = torch.zeros(n, n)
    w[0, 0] = 1
    w[torch.arange(1, n), torch.arange(n - 1)] = 1
    return w


def _sink(n: int = N) -> torch.Tensor:
    w = torch.zeros(n, n)
    w[:, 0] = 1
    return w


def test_scores_name_their_patterns():
    uniform = torch.tril(torch.ones(N, N))
    uniform = uniform / uniform.sum(-1, keepdim=True)
    s = head_scores(_trace(_previous(), _sink(), torch.eye(N), uniform))
    assert s["previous"][0].tolist() == pytest.approx([1, 1 / 7, 0, 0.2454], abs=1e-3)
    assert s["sink"][0, 1] == 1 and s["sink"][0, 0] == pytest.approx(1 / (N - 1))
    assert s["diagonal"][0, 2] == 1 and s["diagonal"][0, 0] == pytest.approx(1 / N)
    assert s["max_weight"][0, :3].tolist() == [1, 1, 1]
    assert s["entropy"][0, 0] == 0 and s["entropy"][0, 3] > 1.0


def test_induction_score_needs_the_token_after_the_earlier_copy():
    t_len, start = 5, 1
    n = start + 2 * t_len
    right, off_by_one = torch.zeros(n, n), torch.zeros(n, n)
    for i in range(n):
        j = i - t_len + 1 if i > start + t_len else i
        right[i, j] = 1
        # near miss: attends to the earlier copy of itself, not the token after it
        off_by_one[i, i - t_len if i >= start + t_len else i] = 1
    s = induction_scores(_trace(right, off_by_one), t_len, start)
    assert s[0].tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="needs 13 tokens"):
        induction_scores(_trace(right), 6, start)


def test_clustering_and_redundancy():
    a = _previous()
    b = _previous() * 0.98 + _sink() * 0.02
    d = diagnose(_trace(a, b, _sink(), torch.eye(N)))
    assert d.clusters == [0, 0, 1, 2]
    assert d.redundancy()[0, 0] > 0.99 and d.redundancy()[0, 3] < 0.5
    assert cluster_heads(torch.eye(3), 0.9) == [0, 1, 2]
    roles = d.roles()
    assert [(l_, h) for l_, h, _ in roles["previous-token"]] == [(0, 0), (0, 1)]
    assert [(l_, h) for l_, h, _ in roles["sink"]] == [(0, 2)]
    js = json.loads(json.dumps(d.to_json()))
    assert js["heads"][2]["roles"] == ["sink"] and js["num_clusters"] == 3


def test_recompute_errors_detects_a_corrupted_weight():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 2, 5, 4).unbind(0)
    w = torch.softmax(q @ k.transpose(-1, -2) * 0.5, -1)
    t = AttentionTrace(tokens=list("abcde"), weights=w, q=q, k=k, v=v, context=w @ v,
                       scale=0.5)
    assert recompute_errors(t)["weights"] < 1e-6
    w2 = w.clone()
    w2[0, 0, 0] = w2[0, 0, 0].flip(-1)
    bad = AttentionTrace(tokens=list("abcde"), weights=w2, q=q, k=k, v=v, scale=0.5)
    assert recompute_errors(bad)["weights"] > 1e-3
    with pytest.raises(ValueError, match="q and k"):
        recompute_errors(AttentionTrace(tokens=list("abcde"), weights=w))


def test_repeated_random_tokens_is_seeded():
    a = repeated_random_tokens(1000, 20, seed=3, prefix=[1])
    assert a == repeated_random_tokens(1000, 20, seed=3, prefix=[1])
    assert a != repeated_random_tokens(1000, 20, seed=4, prefix=[1])
    assert a[1:21] == a[21:] and len(set(a[1:21])) == 20


@pytest.mark.models
def test_real_models_name_their_heads():
    sm = analysis.diagnose_model("smollm2", "The quick brown fox jumps over the lazy dog.",
                                 period=20)
    roles = sm.roles()
    assert roles["induction"] and roles["induction"][0][2] > 0.5
    assert roles["previous-token"] and roles["sink"]
    # the best induction head is not simply a previous-token head
    l_, h, _ = roles["induction"][0]
    assert sm.scores["previous"][l_, h] < 0.3
    mini = analysis.diagnose_model("minilm", "The quick brown fox jumps over the lazy dog.")
    assert "induction" not in mini.scores  # bidirectional: no induction test
    assert mini.top("previous")[0][:2] == (0, 2) and mini.top("previous")[0][2] > 0.9


def _naive_average_linkage(s: torch.Tensor, threshold: float) -> list[int]:
    clusters = [[i] for i in range(len(s))]
    while len(clusters) > 1:
        best = max((float(s[clusters[a]][:, clusters[b]].mean()), a, b)
                    for a in range(len(clusters)) for b in range(a + 1, len(clusters)))
        if best[0] < threshold:
            break
        clusters[best[1]] += clusters.pop(best[2])
    label = {i: min(c) for c in clusters for i in c}
    order: dict[int, int] = {}
    return [order.setdefault(label[i], len(order)) for i in range(len(s))]


@pytest.mark.parametrize("threshold", [0.2, 0.5, 0.8])
def test_clustering_matches_a_brute_force_average_linkage(threshold):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(30, 4, generator=g)
    x = x / x.norm(dim=-1, keepdim=True)
    s = x @ x.T
    got = cluster_heads(s, threshold)
    assert got == _naive_average_linkage(s, threshold)
    assert 1 < len(set(got)) < 30
