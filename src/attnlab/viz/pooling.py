"""Pooled attention maps: blocks of tokens, the exact merging of pooled blocks into coarser
ones, and the pooling of a head in blocks of one size for queries and another for keys.

A pooled block is the mean over its queries of the sum over its keys, so that pooled rows
still sum to 1 (as :meth:`AttentionTrace.pooled`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnlab._errors import check_int
from attnlab.tracing.attention import AttentionTrace

__all__ = ["block_spans", "coarsen_pooled", "pooled_maps", "block_label"]


def block_spans(n: int, size: int) -> list[tuple[int, int]]:
    """``[(0, size), (size, 2·size), ..., (.., n)]``: blocks of ``size`` tokens, last one short.

    >>> block_spans(10, 4)
    [(0, 4), (4, 8), (8, 10)]
    """
    check_int("size", size, minimum=1)
    return [(s, min(s + size, n)) for s in range(0, n, size)]


def coarsen_pooled(pooled: Tensor, row_spans: Sequence[tuple[int, int]],
                   col_spans: Sequence[tuple[int, int]], factor: int
                   ) -> tuple[Tensor, list[tuple[int, int]], list[tuple[int, int]]]:
    """Pooled maps (..., R, C) over blocks ``factor`` times larger, exactly.

    A pooled block is the mean over its queries of the sum over its keys, so merging
    blocks sums the key blocks and averages the query blocks *weighted by their number of
    queries* (the last block may be short). Returns the maps and the merged spans.

    This merges maps already pooled; it reads no weight. The page's maps come from the one
    pass of the diagnostics, at their block size, and the block size that fits the page is
    found by trying coarser and coarser ones: :meth:`AttentionTrace.pooled` would read every
    weight of every head again for each size tried.

    >>> w = torch.softmax(torch.randn(6, 6), -1)
    >>> fine = torch.stack([torch.stack([w[a:b, c:d].sum(-1).mean() for c, d in
    ...     block_spans(6, 1)]) for a, b in block_spans(6, 1)])
    >>> p, rows, cols = coarsen_pooled(fine, block_spans(6, 1), block_spans(6, 1), 4)
    >>> rows, bool(torch.allclose(p[1, 0], w[4:, :4].sum(-1).mean()))
    ([(0, 4), (4, 6)], True)
    """
    check_int("factor", factor, minimum=1)
    if pooled.shape[-2:] != (len(row_spans), len(col_spans)):
        raise ValueError(f"pooled has shape {tuple(pooled.shape)}, expected (..., "
                         f"{len(row_spans)}, {len(col_spans)}) for the spans given")
    p = pooled.double()
    n_r, n_c = len(row_spans), len(col_spans)
    g_r, g_c = -(-n_r // factor), -(-n_c // factor)
    # keys: each group of `factor` column blocks summed (the last group zero-padded)
    by_key = torch.nn.functional.pad(p, (0, g_c * factor - n_c))
    by_key = by_key.reshape(*p.shape[:-1], g_c, factor).sum(-1)  # (..., R, C')
    # queries: each block weighted by its share of its group's queries, then summed
    counts = torch.tensor([b - a for a, b in row_spans], dtype=torch.float64)
    padded = torch.nn.functional.pad(counts, (0, g_r * factor - n_r)).reshape(g_r, factor)
    share = (padded / padded.sum(-1, keepdim=True)).reshape(-1)[:n_r]  # (R,)
    weighted = torch.nn.functional.pad(by_key * share[:, None], (0, 0, 0, g_r * factor - n_r))
    out = weighted.reshape(*p.shape[:-2], g_r, factor, g_c).sum(-2).to(pooled.dtype)
    groups_r = [(g, min(g + factor, n_r) - 1) for g in range(0, n_r, factor)]
    groups_c = [(g, min(g + factor, n_c) - 1) for g in range(0, n_c, factor)]
    rows = [(row_spans[a][0], row_spans[b][1]) for a, b in groups_r]
    cols = [(col_spans[a][0], col_spans[b][1]) for a, b in groups_c]
    return out, rows, cols


def block_label(tokens: Sequence[str], a: int, b: int) -> str:
    """The label of block ``[a, b)``: its span and first token, or the token of a one-token
    block.

    >>> block_label(["x", " cat", "y"], 1, 3), block_label(["x"], 0, 1)
    ('1–2 cat…', 'x')
    """
    first = tokens[a].strip() or tokens[a]
    return f"{a}–{b - 1} {first}…" if b - a > 1 else tokens[a]


def pooled_maps(trace: AttentionTrace, row_block: int, col_block: int) -> Tensor:
    """(L, H, nq, nk) pooled maps in blocks of ``row_block`` queries × ``col_block`` keys:
    the mean over a block's queries of the sum over its keys (rows still sum to 1).

    One block size for both: :meth:`AttentionTrace.pooled`, head by head. Two sizes
    (cross-attention: a short target over a long source keeps one row per target token)
    are pooled here, one head at a time by tiles of rows, because
    :meth:`AttentionTrace.pooled` takes one block size (or one list of spans) for queries
    and keys alike.

    >>> w = torch.softmax(torch.randn(1, 1, 3, 5), -1)
    >>> t = AttentionTrace(tokens=list("xyz"), key_tokens=list("abcde"), weights=w)
    >>> p = pooled_maps(t, 1, 2)
    >>> p.shape, bool(torch.allclose(p[0, 0, 1, 2], w[0, 0, 1, 4].double()))
    (torch.Size([1, 1, 3, 3]), True)
    >>> bool(torch.allclose(pooled_maps(t, 2, 2)[0, 0], t.pooled(0, 0, 2).double()))
    True
    """
    nl, nh, lq, lk = trace.num_layers, trace.num_heads, trace.seq_len, trace.key_len
    if row_block == col_block:
        return torch.stack([torch.stack([trace.pooled(layer, head, row_block)
                                         for head in range(nh)]) for layer in range(nl)]
                           ).double()
    rows, cols = block_spans(lq, row_block), block_spans(lk, col_block)
    col_of = torch.arange(lk) // col_block
    counts = torch.tensor([b - a for a, b in rows], dtype=torch.float64)
    out = torch.zeros(nl, nh, len(rows), len(cols), dtype=torch.float64)
    for layer in range(nl):
        for head in range(nh):
            for r0, r1, w in trace.iter_row_tiles(layer, head):
                by_key = torch.zeros(r1 - r0, len(cols), dtype=torch.float64)
                by_key.index_add_(1, col_of, w.double())
                out[layer, head].index_add_(0, torch.arange(r0, r1) // row_block, by_key)
    return out / counts[:, None]
