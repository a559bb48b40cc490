"""The head scores on the compiled kernel (:func:`attnlab.core.weights.head_sums`): one pass
over q, k and the log-sum-exp that writes no weight, held to the dense float64 definitions
of ``oracles.own_scores`` and to the pass that reads the weights, on every rule the kernel
takes, and to the bit to its own arithmetic written out rounding by rounding; the formulas it
stands on (entropy from the lse, distance, sink) checked both ways."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch
from oracles import own_scores
from torch import Tensor

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
    # blocks of 5 keys (summed block by block), on 40 rows at a time; and of 16 (a multiple
    # of the vector width: summed in each row's one pass), on all rows at once (the kernel's
    # tiles of rows, whose last block of keys is cut short by their last row's last key, in
    # the order its threads take them)
    runs = ((5, 40), (16, 1000))
    with monkeypatch.context() as m:
        m.setattr(scores_mod, "_kernel_shapes", lambda trace: None)
        read = [scan(merged, token_ids=ids, pool_block=b, tile_rows=t) for b, t in runs]
    _no_weights_read(monkeypatch)
    assert scores_mod._kernel_shapes(merged) is not None
    for (block, rows), (read_sums, read_pooled, _) in zip(runs, read):
        sums, pooled, _ = scan(merged, token_ids=ids, pool_block=block, tile_rows=rows)
        got = scores_from_sums(sums, True)
        assert _max_diff(got, ref) < TOL
        assert _max_diff(got, scores_from_sums(read_sums, True)) < TOL
        assert float((pooled.double() - _dense_pooled(w, block)).abs().max()) < TOL, block
        assert float((pooled - read_pooled).abs().max()) < TOL
    assert all(float(v.abs().max()) > 1e3 * TOL for v in ref.values()), ref
    # the merge matters: the pieces' own scores are other numbers
    pieces = scores_from_sums(scan(_trace(300, shape))[0], False)
    assert float((pieces["distance"] - got["distance"]).abs().max()) > 1e-2


def test_merged_tokens_over_several_tiles_of_keys():
    """Over 1,024 merged tokens (the kernel's tiles of keys), most of one piece: each row's
    pooled blocks of 16 keys (summed in its one pass) and scores are the dense ones, where a
    tile of keys ends short of a block (rows 1,000 to 1,099 at a time, their last key)."""
    shape = ScoreShape(scale=0.3, causal=True)
    n = 1130
    runs = [[i] for i in range(n)]
    for i in range(n - 2, 0, -47):  # a token of two pieces every 47
        runs[i:i + 2] = [runs[i] + runs[i + 1]]
    merged = _trace(n, shape, heads=3, kv_heads=1, d=16, layers=1).merge_tokens(runs)
    assert merged.groups is not None and 1024 < merged.seq_len < n
    w = merged.weights
    ids = torch.randint(40, (merged.seq_len,), generator=torch.Generator().manual_seed(3))
    block = 16
    sums, pooled, _ = scan(merged, token_ids=ids.tolist(), pool_block=block, tile_rows=100)
    assert _max_diff(scores_from_sums(sums, True), own_scores(w, ids.tolist())) < TOL
    assert float((pooled.double() - _dense_pooled(w, block)).abs().max()) < TOL


# ---------------------------------------------------------------------------------------------
# The kernel's sums to the bit: every rounding of the pass written out in float32 / float64


def _fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a·b + c`` of float32 arrays rounded once to float32, as an FMA rounds it: the exact
    product in float64 (24 + 24 bits), the sum in float64 with its error (TwoSum), which
    decides the one case the float64 sum cannot: a float64 sum halfway between two float32s."""
    p = a.astype(np.float64) * b.astype(np.float64)
    cc = c.astype(np.float64)
    s = p + cc
    bb = s - p
    err = (p - (s - bb)) + (cc - bb)  # s + err == p + c exactly
    r = s.astype(np.float32)
    below = np.where(r.astype(np.float64) > s, np.nextafter(r, np.float32(-np.inf)), r)
    above = np.where(r.astype(np.float64) < s, np.nextafter(r, np.float32(np.inf)), r)
    tie = (below != above) & (s == (below.astype(np.float64) + above.astype(np.float64)) / 2)
    return np.where(tie & (err > 0), above, np.where(tie & (err < 0), below, r))


def _cpp_max(a, b):
    """``std::max(a, b)``: ``a < b ? b : a`` (a NaN ``b`` is passed over)."""
    return b if a < b else a


def _reduce_lanes(t: np.ndarray) -> float:
    """The float64 lanes of mass_distance summed as the kernel sums them: 8 lanes (AVX-512)
    as ``_mm512_reduce_add_pd`` (the halves added, then their halves, then the two), 4 (AVX2)
    pairwise."""
    if len(t) == 8:
        t = t[4:] + t[:4]
        t = t[2:] + t[:2]
        return float(t[0] + t[1])
    return float((t[0] + t[1]) + (t[2] + t[3]))


def _kernel_exps(ops, x: Tensor) -> tuple[Tensor, Tensor]:
    """The kernel's two exponentials of float32 ``x``, each element both ways: its vector loop's
    (``Vectorized<float>::exp``, Sleef's; torch's own ``exp`` is MKL's, other bits) and its
    scalar tail's (``std::exp``), read off ``exp_rows`` (weights of a one-dimensional q·k with
    q = 1, scale 1 and lse 0: exactly exp(x)) on one row of whole vectors, and on rows of one
    key."""
    flat = x.reshape(-1)
    n = flat.numel()
    padded = torch.cat([flat, torch.zeros(-n % 16)])
    c = padded.numel()
    vec = ops.exp_rows(torch.ones(1, 1, 1), padded.reshape(1, c, 1).contiguous(),
                       torch.zeros(1, 1), torch.zeros(1, dtype=torch.long), 0, 1, c, False, 0,
                       None, 1.0)[0, 0, :n]
    tail = ops.exp_rows(flat.reshape(1, n, 1).contiguous(), torch.ones(1, 1, 1),
                        torch.zeros(1, n), torch.arange(n), 0, n, 1, False, 0, None,
                        1.0)[0, :, 0]
    return vec.reshape(x.shape), tail.reshape(x.shape)


def _reference_sums(ops, q: Tensor, k: Tensor, lse: Tensor, shape: ScoreShape, heads: list[int],
                    rows: range, pool_block: int, pairs: tuple[Tensor, Tensor] | None,
                    lanes: int, fused_scale: bool = False) -> tuple[Tensor, Tensor]:
    """head_sums' sums and pooled blocks, every float32 / float64 operation in the kernel's
    order: x = (s·scale) − lse, two roundings (one, with ``fused_scale``: a wrong kernel);
    per row, per tile of keys (1024, or whole pooling blocks) the keys [a, b) seen there,
    ``lanes`` at a time from a (16 on AVX-512, 8 on AVX2) then the scalar tail (whose
    exponential is ``std::exp``'s): Σ p·x by a float32 FMA per lane, the lanes summed in
    float64 in order, then the tail's float32 products; the mass and distance in float64
    lanes (the first and second half of each vector apart), reduced as ``_mm512_reduce_add_pd``
    (AVX-512) or pairwise (AVX2), then the tail; the largest p; p at keys; the pair keys;
    each pooling block's float32 sum (``lanes`` from its first key, its lanes from 0 in order,
    its tail). The rows' sums then added row by row, pooled blocks included."""
    h_all, lq, _ = q.shape
    lk = k.shape[1]
    group = h_all // k.shape[0]
    s64 = torch.stack([q[h].double() @ k[h // group].double().T for h in range(h_all)])
    s = s64.float()
    assert torch.equal(s.double(), s64), "q and k must give exact scores (a grid of values)"
    scale = float(torch.tensor(shape.scale, dtype=torch.float32))
    lse_x = torch.where(torch.isinf(lse), torch.zeros(()), lse)  # rows of -inf: skipped below
    if fused_scale:
        x = torch.from_numpy(_fma32(s.numpy(), np.full(s.shape, scale, np.float32),
                                    -lse_x[..., None].expand_as(s).numpy()))
    else:
        x = (s * scale) - lse_x[..., None]
    assert bool(torch.isfinite(x).all())
    vec_exp, tail_exp = (t.numpy() for t in _kernel_exps(ops, x))
    x = x.numpy()
    tile = 1024
    if pool_block:
        tile = pool_block if pool_block >= 1024 else 1024 // pool_block * pool_block
    tile = min(tile, lk)
    km = None if shape.key_mask is None else shape.key_mask.numpy()
    half = lanes // 2
    nkb = -(-lk // pool_block) if pool_block else 0
    sums = np.zeros((h_all, len(HEAD_SUMS)), np.float64)
    pooled = np.zeros((h_all, -(-lq // pool_block) if pool_block else 0, nkb), np.float32)
    f32 = np.float32
    for h in heads:
        for ri, row in enumerate(rows):
            pos = row + lk - lq
            lo, hi = 0, lk
            if shape.causal:
                hi = pos + 1
            if shape.window:
                lo, hi = max(lo, pos - shape.window + 1), min(hi, pos + shape.window)
            lo = min(max(lo, 0), lk)
            hi = min(max(hi, lo), lk)
            st = [0.0] * 9
            prow = np.zeros(nkb, np.float32)
            el = float(lse[h, row])
            for c0 in range(0, lk, tile):
                a, b = max(lo, c0), min(hi, c0 + tile)
                if b <= a or el == float("-inf"):
                    continue
                n = b - a
                nv = n // lanes * lanes
                xs = x[h, row, a:b].copy()
                es = np.concatenate([vec_exp[h, row, a:a + nv], tail_exp[h, row, a + nv:b]])
                if km is not None:
                    hidden = ~km[a:b]
                    es[hidden] = 0.0
                    xs[hidden] = 0.0
                ae = np.zeros(lanes, np.float32)
                ax = np.zeros(lanes, np.float32)
                m0, m1 = np.zeros(half), np.zeros(half)
                d0, d1 = np.zeros(half), np.zeros(half)
                for j in range(0, nv, lanes):
                    e, xv = es[j:j + lanes], xs[j:j + lanes]
                    ae = _fma32(e, xv, ae)
                    ax = np.maximum(ax, e)  # NaN-propagating, as at::vec::maximum
                    key = a + j + np.arange(lanes)
                    e64 = e.astype(np.float64)
                    m0, m1 = m0 + e64[:half], m1 + e64[half:]
                    dist = np.abs((key - pos).astype(np.float64))
                    d0, d1 = d0 + e64[:half] * dist[:half], d1 + e64[half:] * dist[half:]
                ent = 0.0
                for v in ae:
                    ent += float(v)
                nan, mx = False, f32(0.0)
                for v in ax:
                    nan |= bool(np.isnan(v))
                    mx = _cpp_max(mx, v)

                mass, dd = _reduce_lanes(m0 + m1), _reduce_lanes(d0 + d1)
                for j in range(nv, n):
                    ent += float(f32(es[j]) * f32(xs[j]))
                    nan |= bool(np.isnan(es[j]))
                    mx = _cpp_max(mx, es[j])
                    mass += float(es[j])
                    dd += float(es[j]) * abs(a + j - pos)
                st[0] += mass
                st[1] -= ent
                st[2] = float("nan") if nan else _cpp_max(st[2], float(mx))
                st[3] += dd
                st[4] += float(es[0]) if a == 0 else 0.0  # p at key 0 (b > a here)
                if pos >= 1:
                    st[5] += float(es[pos - 1 - a]) if a <= pos - 1 < b else 0.0
                if pos >= 0:
                    st[6] += float(es[pos - a]) if a <= pos < b else 0.0
                if pairs is not None:
                    ptr, keys = pairs
                    mine = keys[int(ptr[ri]):int(ptr[ri + 1])].tolist()
                    for key in mine:
                        if a <= key < b:
                            st[7] += float(es[key - a])
                    for key in mine:
                        if a <= key + 1 < b:
                            st[8] += float(es[key + 1 - a])
                for blk in range(a // pool_block, -(-b // pool_block)) if pool_block else ():
                    seg = es[max(blk * pool_block, a) - a:min((blk + 1) * pool_block, b) - a]
                    acc = np.zeros(lanes, np.float32)
                    whole = len(seg) // lanes * lanes
                    for j in range(0, whole, lanes):
                        acc = acc + seg[j:j + lanes]
                    total = f32(0.0)
                    for v in list(acc) + list(seg[whole:]):
                        total = f32(total + v)
                    prow[blk] = f32(prow[blk] + total)
            for c in range(9):
                sums[h, c] += st[c]
            if pos >= 1:
                sums[h, 9] += st[4]
                sums[h, 10] += st[0]
            if pool_block:
                pooled[h, row // pool_block] += prow
    return torch.from_numpy(sums), torch.from_numpy(pooled)


def _grid(*shape: int, generator: torch.Generator) -> Tensor:
    """Multiples of 1/8 in [-1, 1]: every q·k over d <= 16 is exact in float32, whatever the
    order of its sum."""
    return torch.randint(-8, 9, shape, generator=generator).float() / 8


EXACT = {
    "causal, pairs, pool 32 (vector blocks)": dict(shape=dict(causal=True), pool=32),
    "causal, window, key mask, pool 7": dict(shape=dict(causal=True, window=24), mask=True,
                                              pool=7),
    "window, key mask, pool 16": dict(shape=dict(window=40), mask=True, pool=16, rows=(30, 200)),
    "bidirectional, no pool": dict(shape=dict(), pool=0, rows=(5, 77)),
    "tiles of keys, cache": dict(shape=dict(causal=True), pool=16, lq=40, lk=1100,
                                 heads=[0, 3]),
}


@pytest.mark.parametrize("case", list(EXACT))
def test_the_kernel_sums_are_the_written_out_roundings_to_the_bit(case, kernel):
    """Every sum and pooled block equals, bit for bit, the pass written out rounding by
    rounding (:func:`_reference_sums`); the same reference with the scale fused into the
    subtraction (one rounding: what an FMA would give) is caught by the same comparison."""
    cap = kernel.capability()
    if cap not in ("AVX512", "AVX2"):
        # justified: the reference follows the lanes of the vector kernels; the DEFAULT build
        # is held to the dense definitions by the tests above
        pytest.skip(f"the kernel here is {cap}")
    lanes = 16 if cap == "AVX512" else 8
    spec = EXACT[case]
    lq, lk = spec.get("lq", 200), spec.get("lk", 200)
    g = torch.Generator().manual_seed(11)
    h_all, d = 4, 16
    q, k = _grid(h_all, lq, d, generator=g), _grid(2, lk, d, generator=g)
    k[:, 0] += 0.5  # a key many rows lean to
    key_mask = None
    if spec.get("mask"):
        key_mask = torch.rand(lk, generator=g) > 0.2
        key_mask[:3] = True
    shape = ScoreShape(scale=1.3, key_mask=key_mask, **spec["shape"])
    lse = row_logsumexp(q, k, shape)
    lse[1, 7] = float("-inf")  # a row taken as seeing nothing
    rows = range(*spec.get("rows", (0, lq)))
    heads = spec.get("heads", [0, 1, 3])
    ids = torch.randint(6, (lk,), generator=g)  # each row's earlier keys of its own token
    keys, ptr = [], [0]
    for row in rows:
        pos = row + lk - lq
        keys += [j for j in range(min(pos, lk)) if ids[j] == ids[pos]] if pos < lk else []
        ptr.append(len(keys))
    pairs = (torch.tensor(ptr), torch.tensor(keys, dtype=torch.long))
    pb = spec["pool"]
    sums = torch.zeros(h_all, len(HEAD_SUMS), dtype=torch.float64)
    pooled = torch.zeros(h_all, -(-lq // pb), -(-lk // pb)) if pb else None
    assert head_sums(q, k, lse, shape, heads=torch.tensor(heads), rows=rows, sums=sums,
                     pooled=pooled, pool_block=pb, pairs=pairs)
    ref, ref_pooled = _reference_sums(kernel, q, k, lse, shape, heads, rows, pb, pairs, lanes)
    assert torch.equal(sums, ref), (sums - ref).abs().max()
    if pb:
        assert torch.equal(pooled, ref_pooled), (pooled - ref_pooled).abs().max()
    assert bool(ref[heads].any(-1).all()) and bool((ref[heads, 7] > 0).any())
    wrong, _ = _reference_sums(kernel, q, k, lse, shape, heads, rows, pb, pairs, lanes,
                               fused_scale=True)
    assert not torch.equal(sums, wrong)
    assert not torch.equal(sums[:, 1], wrong[:, 1])  # the entropy sees x itself
