"""Head scores, streamed: what each head does, in a few numbers, without N² memory.

Every score is computed in one pass over the query rows of a trace, a tile of rows at a
time, and ``trace.weights`` (dense) is never used. Two passes give the same sums:

* a trace whose weights are ``exp(s − lse)`` of its own q and k, under a shape of scale,
  causal, window, key mask and sinks (SmolLM2's, Llama's, GPT-2's...), its pieces merged
  or not, is summed by the compiled kernel (:func:`attnlab.core.weights.head_sums`)
  straight from q, k and the lse, layer by layer, every asked head of a tile of rows in one
  call: no weight is written, and a row's entropy comes from its lse,
  ``−Σ_j p_j log p_j = −Σ_j p_j (s_j − lse)``, with no log taken (a merged token's row, a
  sum of weights, takes its log);
* any other trace (dense weights, a soft-cap, ALiBi or a dense bias, or no compiled
  kernel) is read through its on-demand weights (``trace.weights_rows``), one head's tile
  at a time, memory O(tile_rows x Lk), and summed by :mod:`attnlab.analysis.sums`, the
  arithmetic the survey uses on its batches too.

And a third way to the same sums, without a pass: a trace whose forward took them in its
own attention (:class:`ForwardSums`, which ``diagnose_model`` and ``explore`` use: the
kernel computes each layer's output, log-sum-exp and sums from the scores once) carries
them, and :func:`scan` of every row and head with the same pooling block returns them.

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
distances are summed in float64, entropies per row in float32 (the kernel: over at most
1,024 keys, then in float64), and every sum over rows in float64; the scores, returned in
float64, equal the same formulas applied to the dense weights in float64 within 1e-6.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, overload

import torch
from torch import Tensor

from attnlab._errors import check_int
from attnlab.analysis.sums import SUMS, Occurrences, TileTargets, scores_from_sums, tile_sums
from attnlab.core import _kernel
from attnlab.core.scores import row_tiles
from attnlab.core.weights import HEAD_SUMS, attention_head_sums, head_sums

__all__ = ["SCORE_NAMES", "ForwardSums", "TakenSums", "head_scores", "pattern_similarity"]

#: Names of the scores :func:`head_scores` returns, in order (the last two need token ids).
SCORE_NAMES = ("entropy", "max_weight", "sink", "previous", "diagonal", "distance",
               "duplicate", "induction")


def check_trace(trace: Any) -> None:
    """Refuse anything but a trace with on-demand weights (an ``AttentionTrace``)."""
    need = ("weights_rows", "num_layers", "num_heads", "seq_len", "key_len")
    missing = [n for n in need if not hasattr(trace, n)]
    if missing:
        raise TypeError(
            f"trace must be an attnlab.tracing.AttentionTrace (with {', '.join(need)}), got "
            f"{type(trace).__name__} without {', '.join(missing)}")


def _check_heads(heads: Any, nl: int, nh: int) -> list[tuple[int, int]]:
    """``heads`` as a list of distinct ``(layer, head)`` pairs of an (nl, nh) trace."""
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Sequence):
        raise TypeError(f"heads must be a sequence of (layer, head) pairs, got "
                        f"{type(heads).__name__}")
    out = []
    for pair in heads:
        ok = (isinstance(pair, tuple) and len(pair) == 2
              and all(isinstance(x, int) and not isinstance(x, bool) for x in pair))
        if not ok or not (0 <= pair[0] < nl and 0 <= pair[1] < nh):
            raise ValueError(f"heads must hold (layer, head) pairs with layer in [0, {nl}) and "
                             f"head in [0, {nh}), got {pair!r}")
        out.append(pair)
    if len(set(out)) != len(out):
        raise ValueError("heads must not name a (layer, head) pair twice")
    return out


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


def _block_sums(x: Tensor, block: int) -> Tensor:
    """(T, C) -> (T, ceil(C / block)): row sums over blocks of ``block`` columns (the last
    block may be shorter)."""
    t, c = x.shape
    full = c // block * block
    parts = [x[:, :full].reshape(t, -1, block).sum(-1)]
    if full < c:
        parts.append(x[:, full:].sum(-1, keepdim=True))
    return torch.cat(parts, dim=-1)


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


def _kernel_shapes(trace: Any) -> list[Any] | None:
    """The layers' score shapes when every weight of ``trace`` is ``exp(s − lse)`` of its
    own q and k (no dense weights; merged tokens are merged by the kernel) under shapes the
    compiled kernel's :func:`~attnlab.core.weights.head_sums` takes; else None (the weights
    are read)."""
    if not getattr(trace, "has_qk", False) or getattr(trace, "lse", None) is None or (
            not getattr(trace, "weights_from_qk", False)):
        return None
    shapes = [trace.score_shape(layer) for layer in range(trace.num_layers)]
    if any(s.softcap is not None or s.alibi_slopes is not None or s.bias is not None
           for s in shapes):
        return None
    if any(t.dtype != torch.float32 or t.device.type != "cpu"
           for t in (trace.q, trace.k, trace.lse)) or _kernel.get() is None:
        return None
    return shapes


def _pair_lists(occ: list[Occurrences] | None, pos: Tensor) -> tuple[Tensor, Tensor] | None:
    """Each row's earlier keys holding its token, as ``(ptr (R + 1), keys)``: row ``r``'s
    are ``keys[ptr[r]:ptr[r + 1]]``, ascending."""
    if occ is None:
        return None
    o = occ[0]
    seen = pos < len(o)
    count = torch.zeros(pos.numel(), dtype=torch.long)
    count[seen] = o.rank[pos[seen]]
    _, keys = o.earlier(pos[seen])
    return _offsets(count), keys.contiguous()


def _offsets(sizes: Tensor) -> Tensor:
    """Where each of ``sizes``' runs starts in their concatenation, then where the last
    ends: (n + 1,) long (a merged trace's groups of pieces, the earlier-copy lists).

    >>> _offsets(torch.tensor([2, 1, 3])).tolist()
    [0, 2, 3, 6]
    """
    return torch.cat([torch.zeros(1, dtype=torch.long), sizes.long().cumsum(0)])


def _rows_per_block(rows: range, block: int, blocks: int) -> Tensor:
    """How many of ``rows`` fall in each of ``blocks`` pooling blocks of ``block`` rows
    (float: the divisor of a block's mean over its rows).

    >>> _rows_per_block(range(3, 10), 4, 3).tolist()
    [1.0, 4.0, 2.0]
    """
    return torch.bincount(torch.arange(rows.start, rows.stop) // block, minlength=blocks).float()


#: Query rows per call of the compiled kernel's pass when ``tile_rows`` is not given.
KERNEL_TILE_ROWS = 1024

#: Where each of :data:`~attnlab.analysis.sums.SUMS` sits among the kernel's sums.
_FROM_KERNEL = [HEAD_SUMS.index(name) for name in SUMS]


def _kernel_scan(trace: Any, shapes: list[Any], rows: range, occ: list[Occurrences] | None,
                 tile_rows: int | None, pool_block: int | None,
                 on_tile: Callable[[int, int], Any] | None,
                 pairs_of: list[tuple[int, int]], sums: Tensor, pooled: Tensor | None) -> None:
    """:func:`scan`'s pass on the compiled kernel (:func:`attnlab.core.weights.head_sums`):
    layer by layer, the sums of every asked head over a tile of rows in one call (the query
    heads of one key head in one GEMM), straight from q, k and the lse; no weight is
    written. Each head's sums add up tile by tile, row by row, as in the other pass."""
    lq, lk = trace.seq_len, trace.key_len
    by_layer: dict[int, list[int]] = {}
    for layer, head in pairs_of:
        by_layer.setdefault(layer, []).append(head)
    # the kernel writes no weight: a tile of rows only bounds its per-row sums (and the
    # progress steps); fewer, larger calls keep its threads busy to the end of each
    tiles = [range(rows.start + t0, rows.start + t1)
             for t0, t1 in row_tiles(len(rows), lk, tile_rows or KERNEL_TILE_ROWS)]
    every = _pair_lists(occ, torch.arange(rows.start, rows.stop) + (lk - lq))
    pair_lists = [None if every is None else  # each tile's rows point into the one list
                  (every[0][t.start - rows.start:t.stop - rows.start + 1], every[1])
                  for t in tiles]
    total, done = len(rows) * len(by_layer), 0
    acc = torch.zeros(trace.num_layers, trace.num_heads, len(HEAD_SUMS), dtype=torch.float64)
    groups = None
    if getattr(trace, "groups", None) is not None:  # merged tokens: their pieces' offsets
        groups = _offsets(torch.tensor([len(g) for g in trace.groups]))
    for layer, heads in by_layer.items():
        hd = torch.tensor(heads, dtype=torch.long)
        q = trace.layer_tensor("q", layer)
        k = trace.layer_tensor("k", layer)
        lse = trace.layer_tensor("lse", layer)
        for tile, pairs in zip(tiles, pair_lists):
            if not head_sums(q, k, lse, shapes[layer], heads=hd, rows=tile, sums=acc[layer],
                             pooled=None if pooled is None else pooled[layer],
                             pool_block=pool_block or 0, pairs=pairs, groups=groups):
                raise RuntimeError(f"the compiled kernel refused layer {layer}'s head sums")
            done += len(tile)
            if on_tile is not None:
                on_tile(done, total)
    sums += acc[..., _FROM_KERNEL]


@dataclass(frozen=True)
class TakenSums:
    """What :meth:`ForwardSums.attach` gives a trace: :func:`scan`'s result over every row
    and head with pooling blocks of ``block`` (sums (L, H, len(SUMS)) float64; pooled
    (L, H, nb, nb), the mean over each block's rows)."""

    block: int
    sums: Tensor
    pooled: Tensor
    with_ids: bool


class ForwardSums:
    """The head sums of a traced forward, taken in its attention: the
    :class:`~attnlab.tracing.forward_sums.SumsTaker` that computes each recorded call's
    output, log-sum-exp and head sums in one pass of the compiled kernel
    (:func:`~attnlab.core.weights.attention_head_sums`: the scores, the weights and their
    sums once, instead of the forward's attention and then :func:`scan`'s pass computing
    them again). Given to :func:`~attnlab.tracing.tracer.trace` as ``sums=``, then
    :meth:`attach` to the trace it returns (:func:`attnlab.analysis.heads.traced_with_sums`
    does both): :func:`scan` of every row and head with pooling blocks of
    ``block(heads, lq, lk)`` returns them. Declines (the capture computes the call as
    without it) where the kernel or the call does not fit, and then attaches nothing."""

    def __init__(self, block: Callable[[int, int, int], int]) -> None:
        self._block = block
        self._num_layers: int | None = None
        self._pieces = self._n = 0
        self._groups = torch.zeros(1, dtype=torch.long)
        self._pairs: tuple[Tensor, Tensor] | None = None
        self._with_ids = False
        self.taken = 0
        self.declined = True  # until prepared
        self.block = 0
        self.sums: Tensor | None = None
        self.pooled: Tensor | None = None

    def prepare(self, *, pieces: int, groups: list[list[int]] | None,
                token_ids: Sequence[int] | None, num_layers: int | None) -> None:
        self._num_layers, self._pieces = num_layers, pieces
        sizes = (torch.ones(pieces, dtype=torch.long) if groups is None
                 else torch.tensor([len(g) for g in groups], dtype=torch.long))
        self._n = int(sizes.numel())
        self._groups = _offsets(sizes)
        ids = None if groups is not None or token_ids is None or len(token_ids) != pieces else (
            torch.as_tensor(list(token_ids), dtype=torch.long))
        self._pairs = None if ids is None else _pair_lists([Occurrences(ids)],
                                                           torch.arange(self._n))
        self._with_ids = ids is not None
        self.taken, self.declined, self.sums, self.pooled = 0, num_layers is None, None, None

    def attention(self, q: Tensor, k: Tensor, v: Tensor, *, scale: float,
                  causal: bool) -> tuple[Tensor, Tensor] | None:
        nl = self._num_layers
        if (self.declined or nl is None or self.taken >= nl or q.shape[1] != self._pieces
                or (self.sums is not None and q.shape[0] != self.sums.shape[1])):
            self.declined = True
            return None
        if self.sums is None or self.pooled is None:
            h, n = q.shape[0], self._n
            self.block = self._block(nl * h, n, n)
            nb = -(-n // self.block)
            self.sums = torch.zeros(nl, h, len(HEAD_SUMS), dtype=torch.float64)
            self.pooled = torch.zeros(nl, h, nb, nb)
        got = attention_head_sums(q, k, v, scale=scale, causal=causal, groups=self._groups,
                                  sums=self.sums[self.taken], pooled=self.pooled[self.taken],
                                  pool_block=self.block, pairs=self._pairs)
        if got is None:
            self.declined = True
            return None
        self.taken += 1
        return got

    def attach(self, trace: Any) -> bool:
        """Give ``trace`` (the one traced with this taker) the sums, as
        ``trace.forward_sums``; False, giving nothing, unless every layer was taken."""
        if (self.declined or self.sums is None or self.pooled is None
                or self.taken != self._num_layers or not hasattr(trace, "forward_sums")
                or (trace.num_layers, trace.num_heads) != tuple(self.sums.shape[:2])
                or trace.seq_len != self._n or trace.key_len != self._n):
            return False
        nb = self.pooled.shape[-1]
        counts = _rows_per_block(range(self._n), self.block, nb)
        trace.forward_sums = TakenSums(self.block, self.sums[..., _FROM_KERNEL].contiguous(),
                                       self.pooled / counts.clamp_min(1.0)[:, None],
                                       self._with_ids)
        return True


@overload
def scan(trace: Any, *, queries: range | slice | None = None,
         token_ids: Sequence[int] | Tensor | None = None, tile_rows: int | None = None,
         pool_block: int, on_tile: Callable[[int, int], Any] | None = None,
         heads: Sequence[tuple[int, int]] | None = None
         ) -> tuple[Tensor, Tensor, bool]: ...
@overload
def scan(trace: Any, *, queries: range | slice | None = None,
         token_ids: Sequence[int] | Tensor | None = None, tile_rows: int | None = None,
         pool_block: None = None, on_tile: Callable[[int, int], Any] | None = None,
         heads: Sequence[tuple[int, int]] | None = None
         ) -> tuple[Tensor, None, bool]: ...
def scan(trace: Any, *, queries: range | slice | None = None,
         token_ids: Sequence[int] | Tensor | None = None, tile_rows: int | None = None,
         pool_block: int | None = None, on_tile: Callable[[int, int], Any] | None = None,
         heads: Sequence[tuple[int, int]] | None = None
         ) -> tuple[Tensor, Tensor | None, bool]:
    """One pass over the query rows of every head (or of the ``(layer, head)`` pairs in
    ``heads``: the others' sums and pooled patterns stay zero, so that the passes of
    processes given disjoint heads add up to the one pass, exactly).

    Returns the sums (L, H, len(:data:`~attnlab.analysis.sums.SUMS`)) in float64 (turned
    into scores by :func:`~attnlab.analysis.sums.scores_from_sums`), the pooled patterns
    (L, H, nq, nk) in float32 with blocks of ``pool_block`` rows/keys (or None), and
    whether token ids were used.
    ``on_tile(done, total)`` is called after each tile of rows (progress, in rows; on the
    kernel's pass, which goes layer by layer, in rows of each layer).
    """
    check_trace(trace)
    nl, nh, lq, lk = trace.num_layers, trace.num_heads, trace.seq_len, trace.key_len
    taken = getattr(trace, "forward_sums", None)
    if (isinstance(taken, TakenSums) and queries is None and token_ids is None
            and heads is None and pool_block in (None, taken.block)):
        if on_tile is not None:
            on_tile(lq * nl, lq * nl)
        return (taken.sums.clone(), None if pool_block is None else taken.pooled.clone(),
                taken.with_ids)
    rows = _query_range(queries, lq)
    ids = _key_ids(trace, token_ids)
    occ = None if ids is None else [Occurrences(ids)]
    off = lk - lq
    sums = torch.zeros(nl, nh, len(SUMS), dtype=torch.float64)
    pooled = None
    if pool_block is not None:
        nq, nk = -(-lq // pool_block), -(-lk // pool_block)
        pooled = torch.zeros(nl, nh, nq, nk)
        counts = torch.zeros(nq)
    pairs = [(layer, head) for layer in range(nl) for head in range(nh)]
    if heads is not None:
        pairs = _check_heads(heads, nl, nh)
    shapes = _kernel_shapes(trace)
    if shapes is not None:
        if pooled is not None and pool_block is not None:
            counts += _rows_per_block(rows, pool_block, counts.numel())
        _kernel_scan(trace, shapes, rows, occ, tile_rows, pool_block, on_tile, pairs, sums,
                     pooled)
        if pooled is not None:
            pooled /= counts.clamp_min(1.0)[:, None]  # mean over each block's queries
        return sums, pooled, ids is not None
    causal = _causal_everywhere(trace)
    for t0, t1 in row_tiles(len(rows), lk, tile_rows):
        r0, r1 = rows.start + t0, rows.start + t1
        # a causal tile's keys after its last row's position hold no weight: not computed
        width = min(r1 + off, lk) if causal else lk
        tile = TileTargets(r0, r1, off, lk, occ, stride=width)
        if pooled is not None and pool_block is not None:
            qb = torch.arange(r0, r1) // pool_block
            q0 = int(qb[0])
            # (query blocks met, T) one-hot: summing rows into blocks is a small matmul
            pool_rows = (qb[None, :] == torch.arange(q0, int(qb[-1]) + 1)[:, None]).float()
            counts[q0:q0 + pool_rows.shape[0]] += pool_rows.sum(1)
        for layer, head in pairs:
            if causal:
                w = trace.weights_tile(layer, head, range(r0, r1), range(width))
            else:
                w = trace.weights_rows(layer, head, range(r0, r1))  # (T, Lk)
            w = w.float()
            sums[layer, head] += tile_sums(w, tile)
            if pooled is not None and pool_block is not None:
                # (query blocks met, key blocks of the tile's width)
                part = pool_rows @ _block_sums(w, pool_block)
                nqb, nkb = part.shape
                pooled[layer, head, q0:q0 + nqb, :nkb] += part
        if on_tile is not None:
            on_tile(t1, len(rows))
    if pooled is not None:
        pooled /= counts.clamp_min(1.0)[:, None]  # mean over each block's queries
    return sums, pooled, ids is not None


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
            :data:`attnlab.core.scores.TILE_BYTES` of float32 weights hold; on the compiled
            kernel, which writes no weight, :data:`KERNEL_TILE_ROWS`); memory is
            O(tile_rows x Lk), the result does not depend on it.

    >>> from attnlab.tracing.attention import AttentionTrace
    >>> w = torch.eye(4).expand(1, 1, 4, 4)  # every token attends to itself
    >>> s = head_scores(AttentionTrace(tokens=list("abab"), weights=w, token_ids=[0, 1, 0, 1]))
    >>> s["diagonal"].item(), s["previous"].item(), s["entropy"].item(), s["duplicate"].item()
    (1.0, 0.0, 0.0, 0.0)
    """
    sums, _, with_ids = scan(trace, queries=queries, token_ids=token_ids,
                             tile_rows=tile_rows)
    return scores_from_sums(sums, with_ids)


def pool_block(lq: int, lk: int, max_blocks: int) -> int:
    """The side of the square blocks that pool an (lq, lk) pattern to at most
    ``max_blocks`` a side."""
    check_int("max_blocks", max_blocks, minimum=1)
    return max(1, -(-max(lq, lk) // max_blocks))


def pattern_cosine(pooled: Tensor, *, block_rows: int = 1024,
                   share: tuple[int, int] = (0, 1)) -> Tensor:
    """(L·H, L·H) float32 cosine similarity of pooled patterns (L, H, nq, nk), computed in
    float64 ``block_rows`` heads at a time: beside the patterns' float64 copy it holds the
    float32 result and one (block_rows, L·H) float64 block, not an (L·H)² float64 matrix.

    ``share=(rank, world)``: only this process's rows of the matrix, the ``rank``-th of
    ``world`` equal runs of rows, the others left zero (for ``world`` processes that sum
    their matrices: each row is computed as one process computes it, and the patterns are
    non-negative, so no cosine is ``-0.0`` and the sum is the one process's matrix to the
    bit).

    >>> pooled = torch.rand(2, 3, 4, 4)
    >>> whole = pattern_cosine(pooled)
    >>> parts = [pattern_cosine(pooled, share=(r, 4)) for r in range(4)]
    >>> bool(torch.equal(sum(parts), whole)), bool((parts[0][2:] == 0).all())
    (True, True)
    """
    rank, world = share
    flat = pooled.reshape(pooled.shape[0] * pooled.shape[1], -1).double()  # (L·H, nq·nk)
    flat /= flat.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    n = flat.shape[0]
    lo, hi = n * rank // world, n * (rank + 1) // world
    out = (torch.empty if world == 1 else torch.zeros)(n, n, dtype=torch.float32)
    for r0 in range(lo, hi, block_rows):
        r1 = min(r0 + block_rows, hi)
        out[r0:r1] = flat[r0:r1] @ flat.T
    return out


def pattern_similarity(trace: Any, *, max_blocks: int = 256,
                       tile_rows: int | None = None) -> Tensor:
    """(L·H, L·H) cosine similarity of the heads' attention patterns, head index l·H + h.

    The patterns are pooled (each block: mean over its queries of the sum over its keys,
    so rows still sum to 1) with square blocks of ``ceil(max(Lq, Lk) / max_blocks)``
    tokens: up to ``max_blocks`` tokens that is the exact pattern, beyond it a map of at
    most ``max_blocks`` x ``max_blocks`` blocks: the memory per head stays
    O(max_blocks²) whatever the length.
    """
    check_trace(trace)
    block = pool_block(trace.seq_len, trace.key_len, max_blocks)
    _, pooled, _ = scan(trace, tile_rows=tile_rows, pool_block=block)
    return pattern_cosine(pooled)
