"""Streamed head scores: equal to a dense computation, TransformerLens's definitions, and
never more than one tile of one head's weights in memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rows_only_trace import RowsOnlyTrace

from attnlab.analysis import SCORE_NAMES, head_scores, pattern_similarity

N = 512
TOL = 1e-6


def _causal_weights(layers: int, heads: int, lq: int, lk: int | None = None, *,
                    seed: int = 0, ids: torch.Tensor | None = None) -> torch.Tensor:
    """Random causal softmax rows (bottom-right aligned), some sharp and some flat, with
    planted heads (previous-token, self, sink and, given ids, induction) so that every
    score is far from 0 somewhere."""
    lk = lq if lk is None else lk
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(layers, heads, lq, lk, generator=g)
    s = s * torch.linspace(0.5, 6.0, layers * heads).reshape(layers, heads, 1, 1)
    pos = torch.arange(lq) + lk - lq
    keys = torch.arange(lk)
    s[0, 0, torch.arange(lq), (pos - 1).clamp_min(0)] += 8.0  # previous-token
    if heads > 1:
        s[0, 1, torch.arange(lq), pos] += 8.0  # self
    s[-1, 0, :, 0] += 10.0  # sink
    if ids is not None:  # induction: the key after an earlier copy of the query's token
        same = ids[pos][:, None] == ids[None, :]
        after = torch.zeros(lq, lk, dtype=torch.bool)
        after[:, 1:] = same[:, :-1]
        s[-1, -1] += 10.0 * (after & (keys[None, :] <= pos[:, None]))
        if heads > 2:  # duplicate: an earlier copy of the query's token
            s[-1, 1] += 10.0 * (same & (keys[None, :] < pos[:, None]))
    keep = keys[None, :] <= pos[:, None]
    return torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1)


def _ids(n: int, vocab: int = 40, seed: int = 1) -> torch.Tensor:
    """Token ids with many repeats, and one repeated segment (an induction target)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(vocab, (n,), generator=g)
    ids[n // 2: n // 2 + 20] = ids[5:25].clone()
    return ids


def _dense(w: torch.Tensor, ids: torch.Tensor | None = None, rows: range | None = None, *,
           prev_shift: int = 1) -> dict[str, torch.Tensor]:
    """The module's definitions written out on the whole (L, H, Lq, Lk) map, in float64."""
    w = w.double()
    lq, lk = w.shape[-2:]
    rows = range(lq) if rows is None else rows
    w = w[:, :, list(rows)]
    pos = torch.tensor(list(rows)) + (lk - lq)  # (R,)
    j = torch.arange(lk)

    def frac(target: torch.Tensor) -> torch.Tensor:  # target (R, Lk) bool
        return (w * target).sum((-1, -2)) / w.sum((-1, -2))

    later = pos >= 1
    out = {
        "entropy": -torch.special.xlogy(w, w).sum((-1, -2)) / w.sum((-1, -2)),
        "max_weight": w.amax(-1).sum(-1) / w.sum((-1, -2)),
        "sink": w[:, :, later, 0].sum(-1) / w[:, :, later].sum((-1, -2)),
        "previous": frac(j[None] == pos[:, None] - prev_shift),
        "diagonal": frac(j[None] == pos[:, None]),
        "distance": (w * (pos[:, None] - j[None]).abs()).sum((-1, -2)) / w.sum((-1, -2)),
    }
    if ids is not None:
        same = ids[pos][:, None] == ids[None, :]
        out["duplicate"] = frac(same & (j[None] < pos[:, None]))
        after = torch.zeros_like(same)
        after[:, 1:] = same[:, :-1]
        out["induction"] = frac(after & (j[None] <= pos[:, None]))
    return out


def _max_diff(a: dict, b: dict) -> float:
    assert set(a) == set(b)
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


# -- the definitions, as TransformerLens writes them (transformer_lens/head_detector.py) ----


def _tl_previous(tokens: torch.Tensor) -> torch.Tensor:
    p = torch.zeros(tokens.shape[-1], tokens.shape[-1])
    p[1:, :-1] = torch.eye(tokens.shape[-1] - 1)
    return torch.tril(p)


def _tl_duplicate(tokens: torch.Tensor) -> torch.Tensor:
    token_pattern = tokens.repeat(tokens.shape[-1], 1).numpy()
    eq_mask = np.equal(token_pattern, token_pattern.T).astype(int)
    np.fill_diagonal(eq_mask, 0)
    return torch.tril(torch.as_tensor(eq_mask).float())


def _tl_induction(tokens: torch.Tensor) -> torch.Tensor:
    shifted = torch.roll(_tl_duplicate(tokens), shifts=1, dims=1)
    return torch.tril(torch.cat((torch.zeros(tokens.shape[-1], 1), shifted[:, 1:]), dim=1))


def _tl_mul(pattern: torch.Tensor, detection: torch.Tensor) -> float:
    return ((pattern * detection).sum() / pattern.sum()).item()


# -- tests ---------------------------------------------------------------------------------


def test_streamed_scores_equal_the_dense_computation_at_512_tokens():
    ids = _ids(N)
    w = _causal_weights(2, 3, N, ids=ids)
    ref = _dense(w, ids)
    for tile_rows in (None, 37):
        got = head_scores(RowsOnlyTrace(w, ids.tolist()), tile_rows=tile_rows)
        assert list(got) == list(SCORE_NAMES)
        assert _max_diff(got, ref) < TOL, tile_rows
    # every score is far from 0 somewhere, so the comparison has teeth
    assert all(float(v.abs().max()) > 0.3 for v in ref.values())


def test_wrong_dense_variants_do_not_match():
    ids = _ids(N)
    w = _causal_weights(2, 3, N, ids=ids)
    got = head_scores(RowsOnlyTrace(w, ids.tolist()))
    off_by_one = _dense(w, ids, prev_shift=2)
    assert float((got["previous"] - off_by_one["previous"]).abs().max()) > 1e-2
    transposed = _dense(w.transpose(-1, -2).contiguous(), ids)
    for key in ("sink", "previous", "duplicate", "induction"):  # not symmetric in i, j
        assert float((got[key] - transposed[key]).abs().max()) > 1e-2, key


def test_scores_match_transformer_lens_detect_head():
    n = 64
    ids = _ids(n, vocab=12)
    w = _causal_weights(1, 4, n, seed=3, ids=ids)
    got = head_scores(RowsOnlyTrace(w, ids.tolist()))
    for h in range(4):
        pat = w[0, h].double()
        assert got["previous"][0, h] == pytest.approx(_tl_mul(pat, _tl_previous(ids)), abs=TOL)
        assert got["duplicate"][0, h] == pytest.approx(_tl_mul(pat, _tl_duplicate(ids)),
                                                       abs=TOL)
        assert got["induction"][0, h] == pytest.approx(_tl_mul(pat, _tl_induction(ids)),
                                                       abs=TOL)
    # a shifted detection pattern (TransformerLens's induction read one key too early,
    # i.e. its duplicate pattern) scores differently
    wrong = [_tl_mul(w[0, h].double(), _tl_duplicate(ids)) for h in range(4)]
    assert max(abs(float(got["induction"][0, h]) - wrong[h]) for h in range(4)) > 1e-2


def _one_hot(targets: list[int]) -> torch.Tensor:
    n = len(targets)
    w = torch.zeros(1, 1, n, n)
    w[0, 0, torch.arange(n), torch.tensor(targets)] = 1.0
    return w


def test_each_score_names_its_pattern():
    n = 8
    prev = head_scores(RowsOnlyTrace(_one_hot([0] + list(range(n - 1)))))
    assert prev["previous"].item() == pytest.approx((n - 1) / n)  # row 0 has no previous
    assert prev["sink"].item() == pytest.approx(1 / (n - 1))  # only row 1 looks at token 0
    assert prev["distance"].item() == pytest.approx((n - 1) / n)
    assert prev["max_weight"].item() == 1 and prev["entropy"].item() == 0
    sink = head_scores(RowsOnlyTrace(_one_hot([0] * n)))
    assert sink["sink"].item() == 1 and sink["diagonal"].item() == pytest.approx(1 / n)
    assert sink["distance"].item() == pytest.approx(sum(range(n)) / n)
    uniform = torch.tril(torch.ones(n, n))
    uniform = (uniform / uniform.sum(-1, keepdim=True))[None, None]
    s = head_scores(RowsOnlyTrace(uniform))
    assert s["entropy"].item() == pytest.approx(
        sum(np.log(i + 1) for i in range(n)) / n, abs=1e-6)
    # induction: tokens a b c a b c; the second copy attends the token after its first copy
    ids = [5, 6, 7, 5, 6, 7]
    ind = head_scores(RowsOnlyTrace(_one_hot([0, 0, 0, 1, 2, 3])), token_ids=ids)
    dup = head_scores(RowsOnlyTrace(_one_hot([0, 0, 0, 0, 1, 2])), token_ids=ids)
    assert ind["induction"].item() == pytest.approx(0.5) and ind["duplicate"].item() == 0
    assert dup["duplicate"].item() == pytest.approx(0.5) and dup["induction"].item() == 0
    second_copy = head_scores(RowsOnlyTrace(_one_hot([0, 0, 0, 1, 2, 3])), token_ids=ids,
                              queries=range(3, 6))
    assert second_copy["induction"].item() == pytest.approx(1.0)


def test_only_tiles_of_rows_are_read():
    t = RowsOnlyTrace(_causal_weights(2, 2, 300), _ids(300).tolist())
    head_scores(t, tile_rows=32)
    assert t.max_rows == 32 and t.calls == 2 * 2 * 10  # every head, every tile, once
    t = RowsOnlyTrace(_causal_weights(1, 1, 300))
    pattern_similarity(t, tile_rows=50)
    assert t.max_rows == 50


def test_query_rows_and_bottom_right_alignment():
    w = _causal_weights(1, 2, 40, 100)  # 40 queries over 100 keys (a cache)
    ids = _ids(100)
    got = head_scores(RowsOnlyTrace(w, ids.tolist()), tile_rows=9)
    assert _max_diff(got, _dense(w, ids)) < TOL
    part = head_scores(RowsOnlyTrace(w, ids.tolist()), queries=range(10, 25), tile_rows=4)
    assert _max_diff(part, _dense(w, ids, range(10, 25))) < TOL
    assert _max_diff(part, got) > 1e-3  # the subset is a different measurement
    # ids of the queries only (40 of them for 100 keys): no token scores
    assert "duplicate" not in head_scores(RowsOnlyTrace(w, ids[:40].tolist()))


def test_fully_masked_rows_do_not_count():
    w = _causal_weights(1, 1, 10)
    w[0, 0, 3] = 0.0  # a row with no visible key
    s = head_scores(RowsOnlyTrace(w))
    assert _max_diff(s, _dense(w)) < TOL
    assert _max_diff(s, _dense(_causal_weights(1, 1, 10))) > 1e-3


def test_arguments_are_checked():
    t = RowsOnlyTrace(_causal_weights(1, 1, 10))
    with pytest.raises(TypeError, match="AttentionTrace"):
        head_scores(torch.zeros(1, 1, 4, 4))
    with pytest.raises(ValueError, match="consecutive"):
        head_scores(t, queries=range(0, 10, 2))
    with pytest.raises(ValueError, match=r"lie in \[0, 10\)"):
        head_scores(t, queries=range(5, 12))
    with pytest.raises(ValueError, match="one id per key"):
        head_scores(t, token_ids=[1, 2, 3])
    with pytest.raises(ValueError, match="tile_rows"):
        head_scores(t, tile_rows=0)


def test_similarity_is_the_cosine_of_the_patterns():
    w = _causal_weights(2, 3, 24)
    flat = w.reshape(6, -1).double()
    flat = flat / flat.norm(dim=-1, keepdim=True)
    exact = pattern_similarity(RowsOnlyTrace(w), tile_rows=5)
    assert torch.allclose(exact.double(), flat @ flat.T, atol=1e-6)
    assert not torch.allclose(exact.double(), (flat @ flat.T).T.flip(0), atol=1e-3)
    # longer than max_blocks: the pooled maps (mean over a block's queries of the sum over
    # its keys), here blocks of 3 tokens
    b = 3
    pooled = w.reshape(2, 3, 8, b, 8, b).sum(-1).mean(-2).reshape(6, -1).double()
    pooled = pooled / pooled.norm(dim=-1, keepdim=True)
    got = pattern_similarity(RowsOnlyTrace(w), max_blocks=8, tile_rows=7)
    assert torch.allclose(got.double(), pooled @ pooled.T, atol=1e-6)
    assert not torch.allclose(got, exact, atol=1e-3)


# -- on the trace itself: dense weights, and q/k/log-sum-exp with weights on demand --------


def _qk_trace(n: int, shape, *, layers: int = 1, heads: int = 4, kv_heads: int = 2,
              ids: torch.Tensor | None = None, seed: int = 0):
    from attnlab.core.scores import row_logsumexp
    from attnlab.tracing.attention import AttentionTrace

    g = torch.Generator().manual_seed(seed)
    q = torch.randn(layers, heads, n, 16, generator=g) * 2.0
    k = torch.randn(layers, kv_heads, n, 16, generator=g)
    k[..., :-1, :] += 0.5 * q[:, ::heads // kv_heads, 1:, :]  # a leaning to the previous key
    lse = torch.stack([row_logsumexp(q[i], k[i], shape) for i in range(layers)])
    return AttentionTrace(tokens=[f"t{i}" for i in range(n)], q=q, k=k, lse=lse,
                          shapes=shape, token_ids=None if ids is None else ids.tolist())


@pytest.mark.parametrize("rule", ["causal", "window+padding", "bidirectional"])
def test_qk_lse_traces_give_the_dense_scores_without_the_dense_map(rule, monkeypatch):
    from attnlab.core.scores import ScoreShape
    from attnlab.tracing.attention import AttentionTrace

    ids = _ids(N)
    km = torch.ones(N, dtype=torch.bool)
    km[-20:] = False
    shape = {"causal": ScoreShape(scale=0.25, causal=True),
             "window+padding": ScoreShape(scale=0.25, causal=True, window=64, key_mask=km),
             "bidirectional": ScoreShape(scale=0.25)}[rule]
    t = _qk_trace(N, shape, ids=ids)
    ref = _dense(t.weights, ids)  # the reference may build the dense map; the scores may not
    t = _qk_trace(N, shape, ids=ids)
    monkeypatch.setattr(AttentionTrace, "weights", property(
        lambda self: pytest.fail("head_scores built the dense weights")))
    got = head_scores(t, tile_rows=100)
    assert _max_diff(got, ref) < TOL
    assert float(got["previous"].max()) > 0.2  # the planted leaning shows
    # the shaping matters: the same q, k under another rule are other scores
    other = ScoreShape(scale=0.25, causal=rule == "bidirectional")
    assert _max_diff(got, _dense(_qk_trace(N, other, ids=ids).head_weights(0, 0)[None, None]
                                 .expand(1, 4, N, N), ids)) > 1e-3


def test_dense_weight_traces_work_the_same():
    from attnlab.tracing.attention import AttentionTrace

    ids = _ids(N)
    w = _causal_weights(2, 3, N, ids=ids)
    t = AttentionTrace(tokens=[str(i) for i in ids.tolist()], weights=w,
                       token_ids=ids.tolist())
    assert _max_diff(head_scores(t), _dense(w, ids)) < TOL


def test_a_padded_batch_of_sums_is_each_sequence_alone():
    """The survey's use of the one arithmetic: a padded batch (B, H, N, N) with each
    sequence's length and ids gives, per sequence, the sums of its own n x n pattern (the
    padded rows hold weight, and are left out); the scores equal the dense definitions."""
    from oracles import own_scores

    from attnlab.analysis.sums import SUMS, Occurrences, TileTargets, scores_from_sums, tile_sums

    lengths = [5, 9, 7]
    n = max(lengths)
    g = torch.Generator().manual_seed(4)
    ids = [torch.randint(4, (m,), generator=g) for m in lengths]
    w = torch.softmax(torch.randn(3, 2, n, n, generator=g) * 2, -1).double()  # rows to pad too
    for b, m in enumerate(lengths):
        w[b, :, :m, m:] = 0.0  # the key mask: real rows never see the padding
        w[b, :, :m, :m] /= w[b, :, :m, :m].sum(-1, keepdim=True)
    got = tile_sums(w, TileTargets(0, n, 0, n, [Occurrences(x) for x in ids], lengths=lengths))
    assert got.shape == (3, 2, len(SUMS))
    for b, m in enumerate(lengths):
        alone = tile_sums(w[b:b + 1, :, :m, :m], TileTargets(0, m, 0, m, [Occurrences(ids[b])]))
        assert torch.allclose(got[b], alone[0], atol=1e-12), b
        scores = scores_from_sums(got[b], True)
        ref = own_scores(w[b, :, :m, :m], ids[b])
        assert _max_diff(scores, ref) < 1e-12, b
        s = dict(zip(SUMS, got[b].unbind(-1)))
        assert torch.allclose(s["first"], w[b, :, :m, 0].sum(-1), atol=1e-12)
    # without the lengths the padded rows would count: the check above has teeth
    leaky = tile_sums(w, TileTargets(0, n, 0, n, [Occurrences(x) for x in ids]))
    assert float((leaky[0] - got[0]).abs().max()) > 1e-3
