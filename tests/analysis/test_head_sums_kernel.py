"""The head scores on the compiled kernel (:func:`attnlab.core.weights.head_sums`): one pass
over q, k and the log-sum-exp that writes no weight, held to the dense float64 definitions
of ``oracles.own_scores`` and to the pass that reads the weights, on every rule the kernel
takes; the formulas it stands on (entropy from the lse, distance, sink) checked both ways."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from oracles import own_scores

from attnlab.analysis import scores as scores_mod
from attnlab.analysis.scores import scan
from attnlab.analysis.sums import SUMS, scores_from_sums
from attnlab.core import _kernel
from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.core.weights import HEAD_SUMS, head_sums
from attnlab.tracing.attention import AttentionTrace

# the compiled kernel splits rows between threads: two, whatever the worker runs on
pytestmark = pytest.mark.usefixtures("two_threads")

TOL = 1e-6
HAVE_COMPILER = shutil.which(os.environ.get("CXX") or "c++") is not None


@pytest.fixture(scope="module", autouse=True)
def kernel():
    """The kernel, built or loaded once (skipped without a compiler or when disabled)."""
    ops = _kernel.get()
    if ops is None:
        if HAVE_COMPILER and not _kernel._disabled():
            pytest.fail(f"a compiler is here but the kernel is not: {_kernel.kernel_status()}")
        # justified: without a compiler (or with ATTNLAB_NO_KERNEL=1) scan reads the weights,
        # a pass tests/analysis/test_scores.py holds to the same definitions
        pytest.skip(f"no kernel: {_kernel.kernel_status()['reason']}")
    return ops


def _trace(lq: int, shape: ScoreShape, *, lk: int | None = None, heads: int = 6,
           kv_heads: int = 2, d: int = 12, layers: int = 2, seed: int = 0,
           vocab: int = 25) -> AttentionTrace:
    """Random q/k (grouped heads, sharp and flat ones, leanings to the previous, the own and
    the first key), the
    lse of ``shape``, token ids with many repeats (one id per key)."""
    lk = lq if lk is None else lk
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(layers, heads, lq, d, generator=g)
    q = q * torch.linspace(0.5, 3.0, heads)[None, :, None, None]
    k = torch.randn(layers, kv_heads, lk, d, generator=g)
    group = heads // kv_heads
    k[:, :, lk - lq:-1] += 0.7 * q[:, ::group, 1:]  # row i leans to the key before it
    k[:, :, lk - lq:] += 0.5 * q[:, 1::group]  # and in other heads to its own key
    common = torch.randn(d, generator=g)
    q += 0.5 * common
    k[:, :, 0] += 1.5 * common  # and every row to the first key (a sink)
    lse = torch.stack([row_logsumexp(q[i], k[i], shape) for i in range(layers)])
    ids = torch.randint(vocab, (lk,), generator=g).tolist()
    keys = None if lk == lq else [f"k{j}" for j in range(lk)]
    return AttentionTrace(tokens=[f"t{i}" for i in range(lq)], key_tokens=keys, q=q, k=k,
                          lse=lse, shapes=shape, token_ids=ids if lk == lq else None)


def _square(w: torch.Tensor) -> torch.Tensor:
    """(..., Lq, Lk) bottom-right rows as the last rows of an (..., Lk, Lk) pattern whose
    other rows are 0: rows of no mass add nothing to any of the oracle's sums."""
    lq, lk = w.shape[-2:]
    out = w.new_zeros(*w.shape[:-2], lk, lk)
    out[..., lk - lq:, :] = w
    return out


def _dense_pooled(w: torch.Tensor, block: int) -> torch.Tensor:
    """(L, H, Lq, Lk) -> blocks: mean over each block's queries of the sum over its keys."""
    lq, lk = w.shape[-2:]
    nq, nk = -(-lq // block), -(-lk // block)
    p = torch.nn.functional.pad(w.double(), (0, nk * block - lk, 0, nq * block - lq))
    sums = p.reshape(*w.shape[:2], nq, block, nk, block).sum((-1, -3))
    counts = torch.tensor([min(block, lq - i * block) for i in range(nq)], dtype=torch.float64)
    return sums / counts[:, None]


def _no_weights_read(monkeypatch) -> None:
    """Make any read of the weights fail: what follows must be the kernel's own pass."""
    for name in ("weights_rows", "weights_tile"):
        monkeypatch.setattr(AttentionTrace, name, lambda *a, **k: pytest.fail(
            "the kernel pass read the weights"))
    monkeypatch.setattr(AttentionTrace, "weights", property(
        lambda self: pytest.fail("the kernel pass built the dense weights")))


def _max_diff(a: dict, b: dict) -> float:
    assert set(a) == set(b), (set(a), set(b))
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _mask(n: int) -> torch.Tensor:
    km = torch.ones(n, dtype=torch.bool)
    km[-15:] = False  # padding
    km[100:140] = False  # a band wider than the window: rows 115..139 see no key at all
    return km


RULES = {
    "causal": dict(shape=ScoreShape(scale=0.3, causal=True)),
    "window+padding": dict(shape=ScoreShape(scale=0.3, causal=True, window=16,
                                            key_mask=_mask(300))),
    "bidirectional": dict(shape=ScoreShape(scale=0.3)),
    "band": dict(shape=ScoreShape(scale=0.3, window=40)),
    "sinks": dict(shape=ScoreShape(scale=0.3, causal=True, sinks=torch.randn(
        6, generator=torch.Generator().manual_seed(5)))),
    "keys over tiles": dict(shape=ScoreShape(scale=0.3, causal=True), n=1100, heads=3,
                            kv_heads=1, d=16, layers=1),
    "cache": dict(shape=ScoreShape(scale=0.3, causal=True), n=90, lk=300),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_the_kernel_pass_gives_the_dense_scores_and_pooled_maps(rule, monkeypatch):
    spec = dict(RULES[rule])
    shape, n = spec.pop("shape"), spec.pop("n", 300)
    t = _trace(n, shape, **spec)
    w = t.weights  # (L, H, Lq, Lk) float32, the weights every method gives
    ids = t.token_ids if t.token_ids is not None else None
    ref = own_scores(_square(w), ids)
    block = 7
    pooled_ref = _dense_pooled(w, block)
    with monkeypatch.context() as m:  # the other pass: the weights read, tile by tile
        m.setattr(scores_mod, "_kernel_shapes", lambda trace: None)
        read_sums, read_pooled, _ = scan(t, pool_block=block, tile_rows=64)
    _no_weights_read(monkeypatch)
    assert scores_mod._kernel_shapes(t) is not None
    sums, pooled, with_ids = scan(t, pool_block=block, tile_rows=64)
    assert with_ids == (ids is not None)
    got = scores_from_sums(sums, with_ids)
    assert _max_diff(got, ref) < TOL
    assert _max_diff(got, scores_from_sums(read_sums, with_ids)) < TOL
    assert float((pooled.double() - pooled_ref).abs().max()) < TOL
    assert float((pooled - read_pooled).abs().max()) < TOL
    # the comparison has teeth: every score is a thousand tolerances from 0 somewhere
    assert all(float(v.abs().max()) > 1e3 * TOL for v in ref.values()), ref
    if rule == "window+padding":  # rows that see no key: lse -inf, no mass, nothing else
        assert bool(torch.isinf(t.lse[0, 0, 115:140]).all())


def test_the_entropy_from_the_lse_needs_both_of_its_terms():
    """A row's entropy is ``lse·m − Σ_j p_j s_j``: the kernel's (``−Σ p (s − lse)``) equals
    the dense ``−Σ p log p``; either term alone, or a log of the weights in another base,
    is rejected by the same tolerance."""
    shape = ScoreShape(scale=0.3, causal=True, sinks=torch.zeros(6))  # rows of mass < 1 too
    t = _trace(200, shape)
    w = t.weights.double()
    ref = own_scores(w)["entropy"]
    sums, _, _ = scan(t)
    got = scores_from_sums(sums, False)["entropy"]
    assert float((got - ref).abs().max()) < TOL
    s = torch.stack([torch.stack([shape.scores(t.q[i, h], t.k[i, t.kv_head(h)],
                                               rows=range(200), head=h, lq=200, lk=200,
                                               dtype=torch.float64)
                                  for h in range(6)]) for i in range(2)])
    ps = torch.where(w > 0, w * s, torch.zeros_like(w)).sum((-1, -2))  # Σ p s (-inf · 0 = 0)
    lse_m = (t.lse.double() * w.sum(-1)).sum(-1)  # Σ_i lse_i m_i
    mass = w.sum((-1, -2))
    assert float(((lse_m - ps) / mass - ref).abs().max()) < 1e-4  # the identity itself
    for wrong in (lse_m / mass, -ps / mass, (lse_m - ps) / mass / torch.log(torch.tensor(2.0))):
        assert float((wrong - ref).abs().max()) > 1e-3


def test_distance_and_sink_are_the_definitions_not_their_near_misses():
    t = _trace(200, ScoreShape(scale=0.3, causal=True))
    w = t.weights.double()
    ref = own_scores(w)
    s = dict(zip(SUMS, scan(t)[0].unbind(-1)))
    got = scores_from_sums(scan(t)[0], False)
    assert abs(got["distance"] - ref["distance"]).max() < TOL
    assert abs(got["sink"] - ref["sink"]).max() < TOL
    pos = torch.arange(200)
    signed = (w * (pos[:, None] - pos[None, :]).double()).sum((-1, -2)) / w.sum((-1, -2))
    assert float((signed - ref["distance"]).abs().max()) < TOL  # causal: p_i - j >= 0 ...
    band = _trace(200, ScoreShape(scale=0.3, window=30))  # ... but not without the mask
    wb = band.weights.double()
    got_b = scores_from_sums(scan(band)[0], False)["distance"]
    signed_b = (wb * (pos[:, None] - pos[None, :]).double()).sum((-1, -2)) / wb.sum((-1, -2))
    assert float((got_b - own_scores(wb)["distance"]).abs().max()) < TOL
    assert float((signed_b - got_b).abs().max()) > 1e-2
    # the sink leaves out row 0 (it has only key 0 to attend when causal); with it, it moves
    with_row0 = s["first"] / s["mass"]
    assert float((with_row0 - ref["sink"]).abs().max()) > 1e-3


def test_disjoint_heads_add_up_to_every_head_to_the_bit():
    """Heads split across the query heads of one key head (the split of a distributed
    diagnosis): each head's sums and pooled blocks are the same bits as in the whole pass."""
    t = _trace(150, ScoreShape(scale=0.3, causal=True), heads=6, kv_heads=2)
    every = [(layer, head) for layer in range(2) for head in range(6)]
    whole, pooled, _ = scan(t, pool_block=8)
    parts = [scan(t, pool_block=8, heads=every[r::3]) for r in range(3)]
    assert torch.equal(sum(p[0] for p in parts), whole)
    assert torch.equal(sum(p[1] for p in parts), pooled)
    assert not torch.equal(parts[0][0], whole)
    alone, _, _ = scan(t, heads=[(1, 4)])
    assert torch.equal(alone[1, 4], scan(t)[0][1, 4]) and not bool(alone[0].any())
    merged = t.merge_tokens(_runs(150))  # and on merged tokens
    whole, pooled, _ = scan(merged, pool_block=8)
    parts = [scan(merged, pool_block=8, heads=every[r::3]) for r in range(3)]
    assert torch.equal(sum(p[0] for p in parts), whole)
    assert torch.equal(sum(p[1] for p in parts), pooled)


def test_row_tiles_change_nothing_but_rounding():
    t = _trace(300, ScoreShape(scale=0.3, causal=True, window=50))
    a, pa, _ = scan(t, pool_block=16, tile_rows=37)
    b, pb, _ = scan(t, pool_block=16)
    assert float(((a - b).abs() / b.abs().clamp_min(1e-9)).max()) < 1e-7
    assert float((pa - pb).abs().max()) < 1e-6


def test_arguments_of_the_kernel_pass_are_checked():
    t = _trace(20, ScoreShape(scale=0.3, causal=True), layers=1)
    q, k, lse = t.q[0], t.k[0], t.lse[0]
    sums = torch.zeros(6, len(HEAD_SUMS), dtype=torch.float64)
    heads = torch.arange(6)
    with pytest.raises(ValueError, match="rows must be a range of consecutive rows"):
        head_sums(q, k, lse, t.score_shape(0), heads=heads, rows=range(0, 20, 2), sums=sums)
    with pytest.raises(RuntimeError, match=r"rows \[10, 30\) out of \[0, 20\)"):
        head_sums(q, k, lse, t.score_shape(0), heads=heads, rows=range(10, 30), sums=sums)
    with pytest.raises(RuntimeError, match="float64 sums"):
        head_sums(q, k, lse, t.score_shape(0), heads=heads, rows=range(20),
                  sums=sums.float())
    with pytest.raises(RuntimeError, match="pooled"):
        head_sums(q, k, lse, t.score_shape(0), heads=heads, rows=range(20), sums=sums,
                  pool_block=4, pooled=torch.zeros(6, 2, 5))
    assert not bool(sums.any())  # nothing was added by a refused call
    # shapes the kernel does not take: refused without touching anything (weights are read)
    capped = ScoreShape(scale=0.3, causal=True, softcap=5.0)
    assert head_sums(q, k, lse, capped, heads=heads, rows=range(20), sums=sums) is False
    assert not bool(sums.any())
    assert scores_mod._kernel_shapes(AttentionTrace(tokens=t.tokens, q=t.q, k=t.k, lse=t.lse,
                                                    shapes=capped)) is None


def _runs(n: int, seed: int = 2) -> list[list[int]]:
    """0..n-1 cut into consecutive runs of 1 to 4 pieces (a text's byte pieces merged)."""
    g = torch.Generator().manual_seed(seed)
    out, i = [], 0
    while i < n:
        k = min(n - i, int(torch.randint(1, 5, (1,), generator=g)))
        out.append(list(range(i, i + k)))
        i += k
    return out


@pytest.mark.parametrize("rule", ["causal", "window+padding", "bidirectional", "sinks"])
def test_merged_tokens_are_merged_by_the_kernel_as_the_trace_merges_them(rule, monkeypatch):
    """Merged tokens (``w[a, b] = mean_{i in a} sum_{j in b} p_ij``): the kernel's pass over
    the pieces gives the dense scores of the merged weights, and those of the reading pass."""
    shape = RULES[rule]["shape"]
    merged = _trace(300, shape).merge_tokens(_runs(300))
    n = merged.seq_len
    assert merged.groups is not None and n < 200  # many tokens of several pieces
    ids = torch.randint(12, (n,), generator=torch.Generator().manual_seed(7)).tolist()
    w = merged.weights  # (L, H, n, n): the trace's own merge of its pieces' weights
    ref = own_scores(w, ids)
    block = 5
    with monkeypatch.context() as m:
        m.setattr(scores_mod, "_kernel_shapes", lambda trace: None)
        read_sums, read_pooled, _ = scan(merged, token_ids=ids, pool_block=block,
                                         tile_rows=40)
    _no_weights_read(monkeypatch)
    assert scores_mod._kernel_shapes(merged) is not None
    sums, pooled, _ = scan(merged, token_ids=ids, pool_block=block, tile_rows=40)
    got = scores_from_sums(sums, True)
    assert _max_diff(got, ref) < TOL
    assert _max_diff(got, scores_from_sums(read_sums, True)) < TOL
    assert float((pooled.double() - _dense_pooled(w, block)).abs().max()) < TOL
    assert float((pooled - read_pooled).abs().max()) < TOL
    assert all(float(v.abs().max()) > 1e3 * TOL for v in ref.values()), ref
    # the merge matters: the pieces' own scores are other numbers
    pieces = scores_from_sums(scan(_trace(300, shape))[0], False)
    assert float((pieces["distance"] - got["distance"]).abs().max()) > 1e-2
