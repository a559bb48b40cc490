"""Head scores, streamed: what each head does, in a few numbers, without N² memory.

Every score is computed in one pass over the query rows of a trace, a tile of rows at a
time, from the trace's on-demand weights (``trace.weights_rows``): the memory is
O(tile_rows x Lk) for one head at a time, and ``trace.weights`` (dense) is never used.
The same code serves traces that keep q, k and the log-sum-exp and traces that keep dense
weights.

Notation: a head's weights ``W`` (Lq x Lk), rows summing to 1 (0 for a fully masked row);
query ``i`` sits at key position ``p_i = i + Lk - Lq`` (bottom-right alignment: ``p_i = i``
for self-attention); ``m_i = sum_j W_ij`` is the row's mass; ``x`` are the token ids of the
keys; ``Q`` the scored query rows (all rows unless ``queries`` is given). Most scores are a
*mass fraction*: the share of the head's attention mass over ``Q`` that falls on the
score's target pairs, ``sum_{i in Q, j} W_ij D_ij / sum_{i in Q} m_i``; with every row of
mass 1 this is the mean over the rows of the mass each row puts on its targets.

==============  ============================================================================
entropy         ``sum_i -sum_j W_ij log W_ij / sum_i m_i``: mean row entropy in nats
                (0 = one key, ``log Lk`` = uniform); fully masked rows do not count.
max_weight      ``sum_i max_j W_ij / sum_i m_i``: mean largest weight (near 1 = one-hot rows).
sink            mass fraction on the first token, ``j = 0``, over the rows with ``p_i >= 1``
                (the query at position 0 is left out: it has nothing else to attend when
                causal).
previous        TransformerLens ``previous_token_head`` (``detect_head``, error measure
                ``"mul"``, no exclusions): mass fraction on ``j = p_i - 1``.
diagonal        mass fraction on ``j = p_i`` (the query's own token): the "self" score,
                TransformerLens's ``"mul"`` measure with the identity as detection pattern.
distance        ``sum_ij W_ij |p_i - j| / sum_i m_i``: mean attention distance in tokens.
duplicate       TransformerLens ``duplicate_token_head``: mass fraction on the earlier keys
                holding the query's token, ``j < p_i`` and ``x_j = x_{p_i}``.
induction       TransformerLens ``induction_head``: mass fraction on the keys right after an
                earlier occurrence of the query's token, ``1 <= j <= p_i`` and
                ``x_{j-1} = x_{p_i}`` (the duplicate pattern shifted one key right).
==============  ============================================================================

``duplicate`` and ``induction`` need the keys' token ids; without them they are left out.
Over all rows, ``previous``, ``duplicate`` and ``induction`` are exactly TransformerLens's
``detect_head(..., error_measure="mul")`` scores; ``queries`` applies the same measure to a
subset of the rows (for instance the second copy of a repeated sequence).

Accuracy: the weights are used in float32 as the trace gives them; row masses and
distances are summed in float64, entropies per row in float32, and every sum over rows in
float64; the scores, returned in float64, equal the same formulas applied to the dense
weights in float64 within 1e-6.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from attnlab.core.scores import row_tiles

__all__ = ["SCORE_NAMES", "head_scores", "pattern_similarity"]

#: Names of the scores :func:`head_scores` returns, in order (the last two need token ids).
SCORE_NAMES = ("entropy", "max_weight", "sink", "previous", "diagonal", "distance",
               "duplicate", "induction")

# accumulated sums per head, in this order
_SUMS = ("mass", "entropy", "max_weight", "sink", "sink_mass", "previous", "diagonal",
         "distance", "duplicate", "induction")
_TINY = torch.finfo(torch.float32).tiny


def _check_trace(trace: Any) -> None:
    need = ("weights_rows", "num_layers", "num_heads", "seq_len", "key_len")
    missing = [n for n in need if not hasattr(trace, n)]
    if missing:
        raise TypeError(
            f"trace must be an attnlab.tracing.AttentionTrace (with {', '.join(need)}), got "
            f"{type(trace).__name__} without {', '.join(missing)}")


def _query_range(queries: range | slice | None, lq: int) -> range:
    if queries is None:
        return range(lq)
    if isinstance(queries, slice):
        queries = range(*queries.indices(lq))
    if not isinstance(queries, range):
        raise TypeError(f"queries must be a range or slice of query rows, got "
                        f"{type(queries).__name__}")
    if queries.step != 1 or len(queries) == 0:
        raise ValueError(f"queries must be a non-empty run of consecutive rows (step 1), "
                         f"got {queries}")
    if queries.start < 0 or queries.stop > lq:
        raise ValueError(f"queries must lie in [0, {lq}), got {queries}")
    return queries


def _key_ids(trace: Any, token_ids: Sequence[int] | Tensor | None) -> Tensor | None:
    lk = trace.key_len
    if token_ids is None:
        ids = getattr(trace, "token_ids", None)
        if ids is None or len(ids) != lk:
            return None  # no ids, or ids of the queries only (cross-attention)
        token_ids = ids
    ids = torch.as_tensor(token_ids, dtype=torch.long).flatten()
    if ids.numel() != lk:
        raise ValueError(f"token_ids must give one id per key ({lk}), got {ids.numel()}")
    return ids


class _Occurrences:
    """Where each token occurred before: ``ids`` sorted stably by id, so the earlier
    occurrences of the token at position p are ``pos[start[p] : start[p] + rank[p]]``."""

    def __init__(self, ids: Tensor) -> None:
        order = torch.sort(ids, stable=True).indices  # positions, grouped by id, in order
        self.pos = order
        self.start = torch.searchsorted(ids[order], ids)  # (Lk,) first slot of p's id
        slot = torch.empty_like(order)
        slot[order] = torch.arange(ids.numel())
        self.rank = slot - self.start  # (Lk,) how many times p's token occurred before p

    def earlier(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        """(row, key) pairs: for each query row at key position ``pos[row]``, every earlier
        key holding the same token."""
        count = self.rank[pos]  # (T,)
        rows = torch.repeat_interleave(torch.arange(pos.numel()), count)
        first = torch.repeat_interleave(self.start[pos], count)
        within = torch.arange(rows.numel()) - torch.repeat_interleave(count.cumsum(0) - count,
                                                                      count)
        return rows, self.pos[first + within]


class _Tile:
    """What one tile of query rows ``[r0, r1)`` needs, shared by every head: the rows' key
    positions, flat indices of the single-key targets (first, previous and own token) and
    of the token-matching pairs, and the pooling of rows into query blocks."""

    def __init__(self, r0: int, r1: int, off: int, lk: int, occ: _Occurrences | None,
                 pool_block: int | None, stride: int | None = None) -> None:
        # ``stride``: the width of the tiles of weights this tile will be given (all Lk keys
        # by default; up to the last row's own position for a causal trace)
        lk_flat = lk if stride is None else stride
        rows = torch.arange(r1 - r0)
        pos = torch.arange(r0, r1) + off  # (T,) key position of each query
        self.pos = pos
        self.pos64 = pos.double()
        self.first_ahead = int(pos.min()) + 1  # no key before this one is ahead of any row
        self.last_key = min(int(pos.max()) + 1, lk)  # keys from here on are ahead of all rows
        keys64 = torch.arange(lk, dtype=torch.float64)
        self.mass_and_key = torch.stack([torch.ones_like(keys64), keys64], dim=1)  # (Lk, 2)
        later = rows[pos >= 1]  # rows that have a previous token
        self.later = later
        self.sink = later * lk_flat  # flat index of (row, key 0)
        self.prev = later * lk_flat + pos[later] - 1
        self.own = rows * lk_flat + pos
        self.duplicate: Tensor | None = None
        self.induction: Tensor | None = None
        if occ is not None:
            # duplicate: earlier keys j < p_i with x_j = x_{p_i}; induction: the key after
            # each of them, j + 1 <= p_i
            r, j = occ.earlier(pos)
            self.duplicate = r * lk_flat + j
            self.induction = self.duplicate + 1
        self.pool_rows: Tensor | None = None
        if pool_block is not None:
            qb = torch.arange(r0, r1) // pool_block
            self.qblock0 = int(qb[0])
            # (query blocks met, T) one-hot: summing rows into blocks is a small matmul
            self.pool_rows = (qb[None, :] == torch.arange(self.qblock0, int(qb[-1]) + 1)[:, None]
                              ).float()


def _block_sums(x: Tensor, block: int) -> Tensor:
    """(T, C) -> (T, ceil(C / block)): row sums over blocks of ``block`` columns (the last
    block may be shorter)."""
    t, c = x.shape
    full = c // block * block
    parts = [x[:, :full].reshape(t, -1, block).sum(-1)]
    if full < c:
        parts.append(x[:, full:].sum(-1, keepdim=True))
    return torch.cat(parts, dim=-1)


def _tile_sums(w: Tensor, t: _Tile, pool_block: int | None) -> tuple[Tensor, Tensor | None]:
    """Float64 sums (len(_SUMS),) of one head over one tile of weights ``w`` (T, Lk), and
    the tile's weights summed into the query blocks it meets and the key blocks from the
    first key on (or None)."""
    f64 = torch.float64
    zero = torch.zeros((), dtype=f64)
    # keys after the last row's position hold no weight in a causal tile: skip them (zeros
    # add nothing to any sum below), after checking that they are zeros indeed
    c1 = t.last_key
    if c1 < w.shape[1] and float(w[:, c1:].amax()) != 0.0:
        c1 = w.shape[1]
    region = w[:, :c1]
    w64 = region.double()  # (T, C)
    mj = w64 @ t.mass_and_key[:c1]  # (T, 2): row mass, sum_j j W_ij
    m = mj[:, 0]
    # sum_j W_ij |p_i - j| = sum_j W_ij (p_i - j) + 2 sum_{j > p_i} W_ij (j - p_i)
    dist = (t.pos64 * m - mj[:, 1]).sum()
    a = t.first_ahead
    if a < c1:
        ahead = (t.mass_and_key[a:c1, 1][None, :] - t.pos64[:, None]).clamp_min_(0.0)
        dist = dist + 2.0 * (w64[:, a:] * ahead).sum()
    flat = w.reshape(-1)
    sums = torch.stack([
        m.sum(),
        # float32 products summed per row, rows summed in float64: the mean over rows is
        # exact to ~1e-8 (a float64 log costs tens of times more)
        -(region * region.clamp_min(_TINY).log()).sum(-1).double().sum(),
        region.amax(-1).sum(dtype=f64),
        flat[t.sink].sum(dtype=f64),
        m[t.later].sum(),
        flat[t.prev].sum(dtype=f64),
        flat[t.own].sum(dtype=f64),
        dist,
        flat[t.duplicate].sum(dtype=f64) if t.duplicate is not None else zero,
        flat[t.induction].sum(dtype=f64) if t.induction is not None else zero,
    ])
    pooled = None
    if pool_block is not None:  # (query blocks met, key blocks up to the last key used)
        pooled = t.pool_rows @ _block_sums(region, pool_block)
    return sums, pooled


def _causal_everywhere(trace: Any) -> bool:
    """True when every layer of ``trace`` is causal by its score shape (so the keys after a
    query's position need not be computed); False for dense or merged traces."""
    shape_of = getattr(trace, "score_shape", None)
    if shape_of is None or not hasattr(trace, "weights_tile") or (
            getattr(trace, "groups", None) is not None):
        return False
    try:
        return all(shape_of(layer).causal for layer in range(trace.num_layers))
    except ValueError:  # dense weights: no score shape
        return False


def _scan(trace: Any, *, queries: range | slice | None = None,
          token_ids: Sequence[int] | Tensor | None = None, tile_rows: int | None = None,
          pool_block: int | None = None, on_tile: Callable[[int, int], Any] | None = None
          ) -> tuple[Tensor, Tensor | None, bool]:
    """One pass over the query rows of every head.

    Returns the sums (L, H, len(_SUMS)) in float64, the pooled patterns (L, H, nq, nk)
    in float32 with blocks of ``pool_block`` rows/keys (or None), and whether token ids were
    used.
    ``on_tile(rows_done, rows_total)`` is called after each tile of rows (progress).
    """
    _check_trace(trace)
    nl, nh, lq, lk = trace.num_layers, trace.num_heads, trace.seq_len, trace.key_len
    rows = _query_range(queries, lq)
    ids = _key_ids(trace, token_ids)
    occ = None if ids is None else _Occurrences(ids)
    off = lk - lq
    sums = torch.zeros(nl, nh, len(_SUMS), dtype=torch.float64)
    pooled = None
    if pool_block is not None:
        nq, nk = -(-lq // pool_block), -(-lk // pool_block)
        pooled = torch.zeros(nl, nh, nq, nk)
        counts = torch.zeros(nq)
    causal = _causal_everywhere(trace)
    for t0, t1 in row_tiles(len(rows), lk, tile_rows):
        r0, r1 = rows.start + t0, rows.start + t1
        # a causal tile's keys after its last row's position hold no weight: not computed
        width = min(r1 + off, lk) if causal else lk
        tile = _Tile(r0, r1, off, lk, occ, pool_block, stride=width)
        if pooled is not None:
            counts[tile.qblock0:tile.qblock0 + tile.pool_rows.shape[0]] += tile.pool_rows.sum(1)
        for layer in range(nl):
            for head in range(nh):
                if causal:
                    w = trace.weights_tile(layer, head, range(r0, r1), range(width))
                else:
                    w = trace.weights_rows(layer, head, range(r0, r1))  # (T, Lk)
                w = w.float()
                tile_sums, tile_pooled = _tile_sums(w, tile, pool_block)
                sums[layer, head] += tile_sums
                if tile_pooled is not None:
                    q0, (nqb, nkb) = tile.qblock0, tile_pooled.shape
                    pooled[layer, head, q0:q0 + nqb, :nkb] += tile_pooled
        if on_tile is not None:
            on_tile(t1, len(rows))
    if pooled is not None:
        pooled /= counts.clamp_min(1.0)[:, None]  # mean over each block's queries
    return sums, pooled, ids is not None


def _ratio(num: Tensor, den: Tensor) -> Tensor:
    """num / den, 0 where den is 0 (no rows to score)."""
    return torch.where(den > 0, num / den.clamp_min(1e-300), torch.zeros_like(num))


def _scores_from_sums(sums: Tensor, with_ids: bool) -> dict[str, Tensor]:
    s = dict(zip(_SUMS, sums.unbind(-1)))
    mass = s["mass"]
    out = {
        "entropy": _ratio(s["entropy"], mass) + 0.0,  # + 0.0: no -0.0
        "max_weight": _ratio(s["max_weight"], mass),
        "sink": _ratio(s["sink"], s["sink_mass"]),
        "previous": _ratio(s["previous"], mass),
        "diagonal": _ratio(s["diagonal"], mass),
        "distance": _ratio(s["distance"], mass),
    }
    if with_ids:
        out["duplicate"] = _ratio(s["duplicate"], mass)
        out["induction"] = _ratio(s["induction"], mass)
    return out


def head_scores(trace: Any, *, queries: range | slice | None = None,
                token_ids: Sequence[int] | Tensor | None = None,
                tile_rows: int | None = None) -> dict[str, Tensor]:
    """Every score of the module docstring for every head: name -> (L, H) float64.

    Args:
        trace: an :class:`attnlab.tracing.AttentionTrace` (either kind: q/k/log-sum-exp or
            dense weights); only its on-demand ``weights_rows`` is read.
        queries: the query rows to score, a range or slice of consecutive rows (default:
            all rows).
        token_ids: the keys' token ids (Lk,), for ``duplicate`` and ``induction``; default
            the trace's ``token_ids`` when they name the keys (self-attention).
        tile_rows: query rows per tile (default: as many as
            :data:`attnlab.core.scores.TILE_BYTES` of float32 weights hold); memory is
            O(tile_rows x Lk), the result does not depend on it.

    >>> from attnlab.tracing.attention import AttentionTrace
    >>> w = torch.eye(4).expand(1, 1, 4, 4)  # every token attends to itself
    >>> s = head_scores(AttentionTrace(tokens=list("abab"), weights=w, token_ids=[0, 1, 0, 1]))
    >>> s["diagonal"].item(), s["previous"].item(), s["entropy"].item(), s["duplicate"].item()
    (1.0, 0.0, 0.0, 0.0)
    """
    sums, _, with_ids = _scan(trace, queries=queries, token_ids=token_ids,
                              tile_rows=tile_rows)
    return _scores_from_sums(sums, with_ids)


def _pool_block(lq: int, lk: int, max_blocks: int) -> int:
    if isinstance(max_blocks, bool) or not isinstance(max_blocks, int) or max_blocks < 1:
        raise ValueError(f"max_blocks must be a positive int, got {max_blocks!r}")
    return max(1, -(-max(lq, lk) // max_blocks))


def _cosine(pooled: Tensor) -> Tensor:
    flat = pooled.reshape(pooled.shape[0] * pooled.shape[1], -1).double()  # (L·H, nq·nk)
    flat = flat / flat.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return (flat @ flat.T).float()


def pattern_similarity(trace: Any, *, max_blocks: int = 256,
                       tile_rows: int | None = None) -> Tensor:
    """(L·H, L·H) cosine similarity of the heads' attention patterns, head index l·H + h.

    The patterns are pooled (each block: mean over its queries of the sum over its keys,
    so rows still sum to 1) with square blocks of ``ceil(max(Lq, Lk) / max_blocks)``
    tokens: up to ``max_blocks`` tokens that is the exact pattern, beyond it a map of at
    most ``max_blocks`` x ``max_blocks`` blocks: the memory per head stays
    O(max_blocks²) whatever the length.
    """
    _check_trace(trace)
    block = _pool_block(trace.seq_len, trace.key_len, max_blocks)
    _, pooled, _ = _scan(trace, tile_rows=tile_rows, pool_block=block)
    return _cosine(pooled)
