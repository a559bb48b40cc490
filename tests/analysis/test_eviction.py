"""KV-cache eviction (attnlab.analysis.eviction) against policies written out densely
here, on the model's own eager attention maps."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlab.analysis.eviction import CONTROLS, POLICIES, evict, kept_keys, key_scores
from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.tracing import trace
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.attribution import RolloutRows, rollout_rows
from random_models import random_llama

transformers = pytest.importorskip("transformers")

N, C, WINDOW = 300, 240, 16


@pytest.fixture(scope="module")
def model_and_ids():
    ids = torch.randint(1, 97, (N,), generator=torch.Generator().manual_seed(2)).tolist()
    return random_llama(), ids


@pytest.fixture(scope="module")
def traced(model_and_ids):
    model, ids = model_and_ids
    return trace(model, ids)


@pytest.fixture(scope="module")
def maps(model_and_ids):
    model, ids = model_and_ids
    with torch.no_grad():
        return [a[0].double() for a in model(torch.tensor([ids]),
                                              output_attentions=True).attentions]


def _dense_scores(maps, traced, layer, g):
    """Each policy written out from the dense (H, N, N) maps of the model itself."""
    heads = [h for h in range(traced.num_heads) if traced.kv_head(h) == g]
    a = maps[layer][heads][:, :, :C]  # (G, N, C)
    snap = a[:, C - WINDOW:C].sum(1).mean(0)
    snap = F.avg_pool1d(snap[None, None], 5, stride=1, padding=2,
                        count_include_pad=False)[0, 0]
    snap[C - WINDOW:] = float("inf")
    stream = torch.arange(C, dtype=torch.float64)
    stream[:4] = float("inf")
    return {
        "h2o": a[:, :C].sum(1).mean(0),
        "snapkv": snap,
        "tova": a[:, C - 1].mean(0),
        "streaming": stream,
        "knorm": -traced.k[layer, g, :C].double().norm(dim=-1),
        "oracle": a[:, C:].mean(1).mean(0),
    }, heads


def test_every_policy_equals_its_dense_definition(traced, maps):
    got = evict(traced, (0.1, 0.25, 0.5), context=C, window=WINDOW)
    assert got.context == C and got.later == N - C
    for layer in range(traced.num_layers):
        for g in range(traced.num_kv_heads):
            ref, heads = _dense_scores(maps, traced, layer, g)
            for p, scores in ref.items():
                mine = key_scores(traced, layer, g, p, context=C, window=WINDOW)
                finite = torch.isfinite(scores)
                assert torch.equal(finite, torch.isfinite(mine)), p
                assert torch.allclose(mine[finite], scores[finite], atol=1e-7, rtol=1e-6), p
                for b in got.budgets:
                    keep = kept_keys(scores, b)
                    for h in heads:
                        lost = float(maps[layer][h, C:, :C][:, ~keep].sum(1).mean())
                        assert got.lost[p][b][layer, h] == pytest.approx(lost, abs=1e-6), p


def test_the_controls_bound_every_policy(traced):
    got = evict(traced, (0.1, 0.25, 0.5, 1.0), context=C, window=WINDOW)
    for b in got.budgets:
        oracle = got.mean("oracle", b)
        for p in POLICIES + ("random",):
            assert oracle <= got.mean(p, b) + 1e-12, (p, b)
    for p in POLICIES + CONTROLS:
        assert got.mean(p, 1.0) == pytest.approx(0.0, abs=1e-12)
        means = [got.mean(p, b) for b in got.budgets]
        assert all(x >= y - 1e-12 for x, y in zip(means, means[1:])), p  # nested kept sets


def test_the_measure_tells_a_heavy_hitter_policy_from_a_random_one():
    """Every query attends to the same few keys: H2O and the oracle keep them, a random
    choice and StreamingLLM (which keeps sinks and the most recent) lose that mass."""
    n, c, d = 200, 160, 8
    g = torch.Generator().manual_seed(4)
    u = torch.zeros(d)
    u[0] = 1.0
    k = 0.1 * torch.randn(n, d, generator=g)
    heavy = torch.tensor([20, 57, 90, 133])
    k[heavy] += 8.0 * u
    q = 0.1 * torch.randn(n, d, generator=g) + u
    shape = ScoreShape(scale=1.0, causal=True)
    qq, kk = q[None, None], k[None, None]
    t = AttentionTrace([str(i) for i in range(n)], q=qq, k=kk,
                       lse=row_logsumexp(qq[0], kk[0], shape)[None], shapes=shape)
    got = evict(t, (0.05,), context=c, window=8)
    assert got.mean("h2o", 0.05) < 0.05 and got.mean("oracle", 0.05) < 0.05
    assert got.mean("random", 0.05) > 0.5 and got.mean("streaming", 0.05) > 0.5


def test_a_wrong_measure_is_caught(traced, maps):
    """Counting the kept keys' mass as lost (an inverted mask) is far from the result."""
    got = evict(traced, (0.25,), context=C, window=WINDOW, policies=("h2o",))
    ref, heads = _dense_scores(maps, traced, 0, 0)
    keep = kept_keys(ref["h2o"], 0.25)
    inverted = float(maps[0][heads[0], C:, :C][:, keep].sum(1).mean())
    assert abs(got.lost["h2o"][0.25][0, heads[0]] - inverted) > 0.05


def test_bad_settings_are_refused_naming_the_argument(traced):
    with pytest.raises(ValueError, match="context must be an int"):
        evict(traced, context=N)
    with pytest.raises(ValueError, match="policies must be among"):
        evict(traced, policies=("lru",))
    with pytest.raises(ValueError, match="budget must be a fraction"):
        evict(traced, (0.0,))
    with pytest.raises(ValueError, match="pool must be odd"):
        evict(traced, pool=4)
    with pytest.raises(ValueError, match="window must be shorter"):
        evict(traced, context=10, window=64)
    with pytest.raises(IndexError, match="kv_head"):
        key_scores(traced, 0, 5, "h2o")
    q = torch.randn(1, 1, 6, 4)
    shape = ScoreShape(scale=0.5)
    enc = AttentionTrace(list("abcdef"), q=q, k=q, lse=row_logsumexp(q[0], q[0], shape)[None],
                         shapes=shape)
    with pytest.raises(ValueError, match="causal self-attention"):
        evict(enc)


def _within_block_rounding(sums, w):
    """|sums − the exact column sums| within the float32 roundings of a 32-row block."""
    exact = w.double().sum(0)
    bound = 32 * 2.0 ** -24 * w.double().abs().sum(0)
    return bool(((sums - exact).abs() <= bound).all())


def test_column_sums_keep_a_long_column_s_small_weights():
    """One large weight then 2¹² weights of 2⁻²⁵ (each under half a float32 step of 1.0):
    the column sums add them (blocks of 32 in float32, the blocks in float64); summed in
    float32 row after row, every one is lost."""
    from attnlab.analysis.eviction import _column_sums

    w = torch.full((2**12 + 1, 3), 2.0 ** -25)
    w[0] = 1.0
    w[:, 2] = torch.rand(w.shape[0], generator=torch.Generator().manual_seed(0))
    assert _within_block_rounding(_column_sums(w), w)
    assert float(_column_sums(w)[1]) > 1 + 2**-13 - 2**-20
    row_by_row = torch.zeros(3)
    for row in w:
        row_by_row += row
    assert float(row_by_row[1]) == 1.0
    assert not _within_block_rounding(row_by_row.double(), w)


ROLLED = [N - 1, 250, 100]  # later rows and a context row


def test_the_pass_makes_the_rollout_rows_on_the_way(traced, monkeypatch):
    """``evict(rollout=rows)`` gives :func:`rollout_rows`' rows from the eviction's own
    weight tiles (cut here every 37 rows, so tiles end inside the context, at its end and
    among the later rows) and the same eviction as without them."""
    from attnlab.analysis import eviction

    monkeypatch.setattr(eviction, "_ROW_BYTES", 4 * traced.key_len * 37)
    budgets = (0.1, 0.5)
    plain = evict(traced, budgets, window=WINDOW)
    both = evict(traced, budgets, window=WINDOW, rollout=ROLLED)
    want = rollout_rows(traced, ROLLED)
    assert plain.rollout is None and plain.rollout_seconds is None
    # the heads summed in float32 over other tiles than rollout_rows' own: ~1e-7 apart
    assert both.rollout.shape == want.shape and both.rollout.dtype == torch.float64
    assert torch.allclose(both.rollout, want, rtol=1e-6, atol=1e-12)
    assert both.rollout_seconds is not None and both.rollout_seconds > 0
    for p in plain.policies:
        for b in budgets:
            assert torch.equal(both.keep[p][b], plain.keep[p][b]), (p, b)
            assert torch.allclose(both.lost[p][b], plain.lost[p][b], rtol=1e-9, atol=0), (p, b)


def test_a_rollout_pass_that_gives_later_rows_only_the_context_keys_is_caught(traced):
    """The wrong variant of the pass above: the sums read only the context's keys, but a
    later row's rollout needs every key it sees; fed only those, the rows are far off."""
    want = rollout_rows(traced, ROLLED)
    acc = RolloutRows(traced, ROLLED)
    for layer in reversed(range(traced.num_layers)):
        for r0, r1 in ((0, C), (C, N)):
            keys = range(r1) if r0 < C else range(C)
            total = traced.weights_tile(layer, 0, range(r0, r1), keys)
            for h in range(1, traced.num_heads):
                total += traced.weights_tile(layer, h, range(r0, r1), keys)
            acc.add(layer, r0, r1, 0, total)
        acc.end_layer(layer)
    assert float((acc.result() - want).abs().max()) > 1e-3


def test_a_rollout_pass_must_end_every_layer_last_first(traced):
    acc = RolloutRows(traced, [N - 1])
    with pytest.raises(ValueError, match="expected a tile of layer 1, got layer 0"):
        acc.add(0, 0, 1, 0, torch.ones(1, 1))
    acc.end_layer(1)
    with pytest.raises(ValueError, match="has not ended layer 0"):
        acc.result()
