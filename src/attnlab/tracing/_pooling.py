"""Pooled attention maps: block means of one head's weights, read in tiles of rows.

A pooled block is the mean over its query rows of the sum over its key columns, so the
pooled rows still sum to 1. The weights come from ``tile(r0, r1)``: rows ``[r0, r1)`` of
the head as a float32 (R, Lk) tensor, so a whole head is visited in O(step · Lk) memory.
:meth:`attnlab.tracing.attention.AttentionTrace.pooled` is the way in.

>>> import torch
>>> w = torch.softmax(torch.randn(5, 5), -1)
>>> tile = lambda r0, r1: w[r0:r1]
>>> p = pooled_blocks(tile, 5, 5, 2, step=3)
>>> p.shape, bool(torch.allclose(p, pooled_spans(tile, *spans(2, 5, 5), step=3)))
(torch.Size([3, 3]), True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["pooled_blocks", "pooled_spans", "spans"]

#: Rows ``[r0, r1)`` of one head's weights, float32 (r1 - r0, Lk).
Tile = Callable[[int, int], Tensor]


def spans(blocks: int | Sequence[tuple[int, int]], lq: int, lk: int
          ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(row starts, row stops, col starts, col stops) of the pooled blocks: ``blocks`` an
    int block size (the last block may be shorter), or ``(start, stop)`` token spans used
    for both queries and keys (self-attention only)."""
    if isinstance(blocks, int) and not isinstance(blocks, bool):
        if blocks < 1:
            raise ValueError(f"blocks must be a positive int or a list of (start, stop) "
                             f"spans, got {blocks}")
        rs = torch.arange(0, lq, blocks)
        cs = torch.arange(0, lk, blocks)
        return rs, (rs + blocks).clamp_max(lq), cs, (cs + blocks).clamp_max(lk)
    try:
        if isinstance(blocks, bool):  # (not a block size: refused as below)
            raise TypeError
        given = [(int(a), int(b)) for a, b in blocks]
    except (TypeError, ValueError):
        raise TypeError(f"blocks must be a positive int or a list of (start, stop) spans, "
                        f"got {blocks!r}") from None
    if lq != lk:
        raise ValueError(f"spans need Lq == Lk (self-attention), got {lq} and {lk}")
    bad = [s for s in given if not 0 <= s[0] < s[1] <= lq]
    if not given or bad:
        raise ValueError(f"spans must be non-empty (start, stop) with 0 <= start < stop <= "
                         f"{lq}, got {bad or given}")
    st = torch.tensor([a for a, _ in given])
    en = torch.tensor([b for _, b in given])
    return st, en, st, en


def pooled_spans(tile: Tile, rs: Tensor, re: Tensor, cs: Tensor, ce: Tensor, step: int, *,
                 device: torch.device | str | None = None) -> Tensor:
    """The pooled map of the blocks ``[rs, re) x [cs, ce)`` (as :func:`spans` gives them, on
    the host), ``step`` rows at a time, by cumulative sums in float64; float32 (n_rows,
    n_cols) on ``device`` (the tiles' device; default the CPU)."""
    lo_row, hi_row = int(rs.min()), int(re.max())  # read on the host
    acc = torch.zeros(rs.shape[0], cs.shape[0], dtype=torch.float64, device=device)
    rs, re, cs, ce = (t.to(acc.device) for t in (rs, re, cs, ce))
    for r0 in range(lo_row, hi_row, step):
        r1 = min(hi_row, r0 + step)
        w = tile(r0, r1).double()  # (R, Lk)
        ccum = F.pad(w.cumsum(1), (1, 0))  # (R, Lk + 1)
        colsum = ccum[:, ce] - ccum[:, cs]  # (R, n_col_blocks): keys summed
        rcum = F.pad(colsum.cumsum(0), (0, 0, 1, 0))
        lo = (rs - r0).clamp(0, r1 - r0)
        hi = (re - r0).clamp(0, r1 - r0)
        acc += rcum[hi] - rcum[lo]
    return (acc / (re - rs).to(acc.dtype)[:, None]).float()  # queries averaged


def pooled_blocks(tile: Tile, lq: int, lk: int, b: int, step: int, *,
                  device: torch.device | str | None = None) -> Tensor:
    """The pooled map of equal blocks of ``b`` tokens (the last may be shorter): tiles of
    whole row blocks (about ``step`` rows), keys summed block by block in one reshape;
    float32 (n_row_blocks, n_col_blocks) on ``device`` (the tiles' device; default the
    CPU)."""
    nbq, nbk = -(-lq // b), -(-lk // b)
    acc = torch.zeros(nbq, nbk, dtype=torch.float64, device=device)
    step = max(1, step // b) * b
    for r0 in range(0, lq, step):
        r1 = min(lq, r0 + step)
        w = tile(r0, r1)  # (R, Lk)
        # keys summed block by block in float32 (b terms each; no copy of the tile),
        # the last, shorter block apart; only the (R, nbk) sums become float64
        full = lk // b * b
        colsum = torch.empty(r1 - r0, nbk, dtype=torch.float64, device=acc.device)
        colsum[:, : lk // b] = w[:, :full].reshape(r1 - r0, lk // b, b).sum(-1)
        if full < lk:
            colsum[:, -1] = w[:, full:].sum(-1)
        nb = -(-(r1 - r0) // b)
        colsum = F.pad(colsum, (0, 0, 0, nb * b - (r1 - r0)))
        acc[r0 // b: r0 // b + nb] += colsum.view(nb, b, nbk).sum(1)
    rows_in = torch.full((nbq,), float(b), dtype=torch.float64, device=acc.device)
    rows_in[-1] = lq - b * (nbq - 1)
    return (acc / rows_in[:, None]).float()  # queries averaged
