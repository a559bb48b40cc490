"""Head diagnostics: each role finds the pattern it names and misses a near miss; clusters
and redundancy; the induction score on a repeated random sequence."""

from __future__ import annotations

import json

import pytest
import torch
from rows_only_trace import RowsOnlyTrace

from attnlab.analysis import (
    HeadDiagnostics,
    Thresholds,
    diagnose,
    diagnose_model,
    induction_trace,
    repeated_random_tokens,
)

N = 8


def _heads(*patterns: torch.Tensor) -> torch.Tensor:
    return torch.stack(patterns)[None]  # (1, H, N, N)


def _previous(n: int = N) -> torch.Tensor:
    w = torch.zeros(n, n)
    w[0, 0] = 1
    w[torch.arange(1, n), torch.arange(n - 1)] = 1
    return w


def _sink(n: int = N) -> torch.Tensor:
    w = torch.zeros(n, n)
    w[:, 0] = 1
    return w


def test_roles_clusters_and_json():
    a = _previous()
    b = _previous() * 0.98 + _sink() * 0.02
    d = diagnose(RowsOnlyTrace(_heads(a, b, _sink(), torch.eye(N))))
    assert isinstance(d, HeadDiagnostics) and (d.num_layers, d.num_heads) == (1, 4)
    assert d.clusters == [0, 0, 1, 2]
    assert d.redundancy()[0, 0] > 0.99 and d.redundancy()[0, 3] < 0.5
    roles = d.roles()
    assert [(l_, h) for l_, h, _ in roles["previous-token"]] == [(0, 0), (0, 1)]
    assert [(l_, h) for l_, h, _ in roles["sink"]] == [(0, 2)]
    assert [(l_, h) for l_, h, _ in roles["self"]] == [(0, 3)]
    assert "induction" not in roles  # no repeated-sequence trace was given
    js = json.loads(json.dumps(d.to_json()))
    assert js["heads"][2]["roles"] == ["sink"] and js["num_clusters"] == 3
    assert js["thresholds"]["previous"] == 0.4 and js["meta"]["similarity_block"] == 1
    assert d.top("sink")[0][:2] == (0, 2)
    with pytest.raises(KeyError, match="computed: entropy"):
        d.top("repeat_induction")


def test_thresholds_gate_the_roles():
    # previous-token mass (N-1)/N = 0.875: a role at 0.8, not at 0.9
    t = RowsOnlyTrace(_heads(_previous()))
    assert diagnose(t, thresholds=Thresholds(previous=0.8)).roles()["previous-token"]
    assert not diagnose(t, thresholds=Thresholds(previous=0.9)).roles()["previous-token"]
    with pytest.raises(TypeError, match="Thresholds"):
        diagnose(t, thresholds={"previous": 0.8})


def _repeat_patterns(period: int, start: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ideal induction head on prefix + r + r, and a near miss that attends the earlier
    copy of the token itself instead of the token after it."""
    n = start + 2 * period
    right, near_miss = torch.zeros(n, n), torch.zeros(n, n)
    for i in range(n):
        second = i >= start + period
        right[i, i - period + 1 if second else i] = 1
        near_miss[i, i - period if second else i] = 1
    return right, near_miss


def test_repeat_induction_needs_the_token_after_the_earlier_copy():
    period, start = 5, 1
    right, near_miss = _repeat_patterns(period, start)
    ind = RowsOnlyTrace(_heads(right, near_miss))
    ind.meta["repeated_random"] = {"period": period, "start": start}
    main = RowsOnlyTrace(_heads(_previous(), _sink()))
    d = diagnose(main, induction=ind)
    assert d.scores["repeat_induction"][0].tolist() == [1.0, 0.0]
    assert [(l_, h) for l_, h, _ in d.roles()["induction"]] == [(0, 0)]
    assert d.meta["induction"] == {"period": period, "start": start, "tokens": 11}
    # the structure can be given instead of read from the trace's meta; the real token ids,
    # when the trace has them, define the targets (here: all distinct, so nothing repeats)
    bare = RowsOnlyTrace(_heads(right, near_miss))
    assert diagnose(main, induction=bare, period=period, start=start).scores[
        "repeat_induction"][0].tolist() == [1.0, 0.0]
    distinct = RowsOnlyTrace(_heads(right, near_miss), token_ids=list(range(11)))
    assert diagnose(main, induction=distinct, period=period, start=start).scores[
        "repeat_induction"][0].tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="period is required"):
        diagnose(main, induction=bare)
    with pytest.raises(ValueError, match="needs a self-attention trace of 15 tokens"):
        diagnose(main, induction=bare, period=7, start=1)
    with pytest.raises(ValueError, match="not the same model"):
        diagnose(RowsOnlyTrace(_heads(_previous())), induction=ind)


def test_repeated_random_tokens_is_seeded():
    a = repeated_random_tokens(1000, 20, seed=3, prefix=[1])
    assert a == repeated_random_tokens(1000, 20, seed=3, prefix=[1])
    assert a != repeated_random_tokens(1000, 20, seed=4, prefix=[1])
    assert a[1:21] == a[21:] and len(set(a[1:21])) == 20
    with pytest.raises(ValueError, match="period"):
        repeated_random_tokens(10, 11)


def test_models_are_not_loaded_by_name():
    with pytest.raises(TypeError, match="load it by name first"):
        diagnose_model("smollm2", "hello")
    with pytest.raises(TypeError, match="already-loaded"):
        induction_trace(torch.nn.Linear(2, 2))


@pytest.mark.models
def test_real_models_name_their_heads():
    from attnlab.models import load

    text = "The quick brown fox jumps over the lazy dog."
    sm = diagnose_model(load("smollm2"), text, period=20)
    roles = sm.roles()
    assert roles["induction"] and roles["induction"][0][2] > 0.5
    assert roles["previous-token"] and roles["sink"]
    # the best induction head is not simply a previous-token head
    l_, h, _ = roles["induction"][0]
    assert sm.scores["previous"][l_, h] < 0.3
    mini = diagnose_model(load("minilm"), text)
    assert "repeat_induction" not in mini.scores  # bidirectional: no induction test
    assert mini.top("previous")[0][:2] == (0, 2) and mini.top("previous")[0][2] > 0.8


def test_progress_reports_every_tile_and_changes_nothing():
    from attnlab.analysis.scores import scan

    w = torch.softmax(torch.randn(2, 2, 30, 30), -1)
    seen = []
    scan(RowsOnlyTrace(w), tile_rows=8, on_tile=lambda done, total: seen.append((done, total)))
    assert seen == [(8, 30), (16, 30), (24, 30), (30, 30)]
    quiet, shown = diagnose(RowsOnlyTrace(w)), diagnose(RowsOnlyTrace(w), progress=True)
    assert all(torch.equal(quiet.scores[k], shown.scores[k]) for k in quiet.scores)


def test_diagnose_checks_its_traces():
    with pytest.raises(TypeError, match="AttentionTrace"):
        diagnose(torch.eye(3))
    with pytest.raises(TypeError, match="AttentionTrace"):
        diagnose(RowsOnlyTrace(_heads(_previous())), induction="not a trace", period=2)


def test_pooled_maps_are_the_traces_pooled_meaning():
    from attnlab.core.scores import ScoreShape, row_logsumexp
    from attnlab.tracing.attention import AttentionTrace

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, 2, 100, 8, generator=g).unbind(0)
    shape = ScoreShape(scale=0.5, causal=True)
    t = AttentionTrace(tokens=[str(i) for i in range(100)], q=q, k=k, shapes=shape,
                       lse=row_logsumexp(q[0], k[0], shape)[None])
    d = diagnose(t, max_blocks=16, tile_rows=9)
    block = d.meta["similarity_block"]
    assert block == 7 and d.pooled.shape == (1, 2, 15, 15)
    for h in range(2):
        assert torch.allclose(d.pooled[0, h], t.pooled(0, h, block), atol=1e-5)
    assert not torch.allclose(d.pooled[0, 0], t.pooled(0, 0, block).T, atol=1e-3)


def test_past_max_cluster_heads_the_pairs_are_left_out_and_said(monkeypatch):
    """The same four heads with the cap below their count: every score as before, no
    similarity or clusters (a stated reason instead), and every view still renders."""
    from attnlab.analysis import heads as heads_module

    trace = RowsOnlyTrace(_heads(_previous(), _previous() * 0.98 + _sink() * 0.02, _sink(),
                                 torch.eye(N)))
    full = diagnose(trace)
    monkeypatch.setattr(heads_module, "MAX_CLUSTER_HEADS", 3)
    d = diagnose(trace)
    assert d.similarity is None and d.clusters is None
    assert d.meta["similarity_skipped"].startswith("4 heads: the similarity of every pair")
    for name, s in full.scores.items():
        assert torch.equal(d.scores[name], s), name
    assert d.roles() == full.roles()
    js = json.loads(json.dumps(d.to_json()))
    assert js["num_clusters"] is None
    assert {r["cluster"] for r in js["heads"]} == {None}
    assert {r["redundancy"] for r in js["heads"]} == {None}
    assert bool(d.redundancy().isnan().all())
    assert "no clusters: 4 heads" in d.tables()[0].caption
    monkeypatch.setattr(heads_module, "MAX_CLUSTER_HEADS", 4)  # at the cap: computed
    assert diagnose(trace).clusters == full.clusters == [0, 0, 1, 2]
