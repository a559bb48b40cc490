"""Attention weights on demand, from the per-row logsumexp that chunked attention returns.

Chunked (FlashAttention) attention never stores the N x N weights, but it returns
``lse_i = log Σ_j exp(S_ij)``, and with it any weight is one exponential away::

    P_ij = exp(S_ij − lse_i),    S = the shaped scores (scale · q_i·k_j + mask, ...)

:func:`attention_weights` rebuilds exactly the rows and heads asked for;
:func:`shaped_weights` does the same for one head's tile under a
:class:`~attnlab.core.scores.ScoreShape` (soft-cap, ALiBi, window, key mask);
:func:`pooled_attention_map` rebuilds the whole map tile by tile and keeps only one number
per block, so a 100k-token sequence gives, say, a 512 x 512 picture in bounded memory.

**Pooled** means one thing in attnlab: a block of queries x keys becomes the *mean over
the block's queries of the sum over the block's keys*, so each pooled row still sums to 1.

>>> q, k, v = torch.randn(3, 1, 4, 1000, 16).unbind(0)
>>> out, lse = chunked_attention(q, k, v, causal=True)
>>> w = attention_weights(q, k, lse, rows=[0, 999], heads=2, causal=True)
>>> tuple(w.shape), bool(torch.allclose(w.sum(-1), torch.ones(1, 1, 2)))
((1, 1, 2, 1000), True)
>>> p = pooled_attention_map(q, k, lse, size=100, causal=True)
>>> tuple(p.shape), bool(torch.allclose(p.sum(-1), torch.ones(1, 4, 100)))
((1, 4, 100, 100), True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from attnlab.core import _kernel
from attnlab.core._checks import broadcast_shapes, check_int
from attnlab.core._layout import aligned
from attnlab.core._tiles import _check_mask, _MaskTiles, _scores, default_scale
from attnlab.core.chunked import _chunked, chunked_attention  # noqa: F401 (doctest)
from attnlab.core.masks import causal as causal_mask
from attnlab.core.scores import ScoreShape, _as_positions

__all__ = ["HEAD_SUMS", "attention_head_sums", "attention_weights", "head_sums",
           "pooled_attention_map", "shaped_weights", "why_not_kernel_rows"]

Index = int | slice | Sequence[int] | Tensor | None

#: Bytes of scores computed at once while pooling.
_POOL_BYTES = 64 << 20


def _float_tensor(name: str, t: object) -> Tensor:
    """``t`` itself, checked: a floating-point tensor."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be floating point, got dtype {t.dtype}")
    return t


def _check_qk_lse(q: object, k: object, lse: object) -> tuple[int, ...]:
    """Checks q (..., Lq, d), k (..., Lk, d) and lse (..., Lq); the batch dims q and k
    broadcast to."""
    q, k, lse = _float_tensor("q", q), _float_tensor("k", k), _float_tensor("lse", lse)
    if q.dim() < 2 or k.dim() < 2 or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q (..., Lq, d) and k (..., Lk, d) must share d, got q {tuple(q.shape)} and k "
            f"{tuple(k.shape)}"
        )
    try:
        batch = broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except ValueError:
        raise ValueError(
            f"batch dims of q {tuple(q.shape)} and k {tuple(k.shape)} do not broadcast"
        ) from None
    want = (*batch, q.shape[-2])
    if tuple(lse.shape) != want:
        raise ValueError(
            f"lse must have shape (..., Lq) = {want} (one logsumexp per query row), got "
            f"{tuple(lse.shape)}"
        )
    return batch


def _as_index(name: str, idx: Index, size: int, device: torch.device) -> Tensor:
    """Any row/head selector -> 1-D long tensor of positions in [0, size)."""
    if idx is None:
        return torch.arange(size, device=device)
    if isinstance(idx, slice):
        return torch.arange(size, device=device)[idx]
    if isinstance(idx, bool):
        raise TypeError(f"{name} must be an int, slice, sequence of ints or None, got bool")
    t = torch.as_tensor([idx] if isinstance(idx, int) else idx, device=device)
    if t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool:
        raise TypeError(
            f"{name} must be an int, slice, sequence of ints or None, got {t.dtype} of shape "
            f"{tuple(t.shape)}"
        )
    if t.numel() and (int(t.min()) < -size or int(t.max()) >= size):
        raise ValueError(f"{name} must index [0, {size}), got {t.tolist()}")
    return t % size if size else t


def _weights_from_lse(
    q: Tensor, k: Tensor, lse: Tensor, mask: Tensor | None, causal: bool, scale: float
) -> Tensor:
    """All weights exp(S − lse), built in place in one (..., Lq, Lk) tensor."""
    s = torch.matmul(q, k.transpose(-2, -1)).mul_(scale)  # (..., Lq, Lk)
    lq, lk = s.shape[-2:]
    if mask is not None:
        if mask.dtype == torch.bool:
            s.masked_fill_(~mask, float("-inf"))
        else:
            s.add_(mask.to(s.dtype))
    if causal:
        s.masked_fill_(~causal_mask(lq, lk, device=s.device), float("-inf"))
    lse_safe = lse.masked_fill(lse == float("-inf"), float("inf"))
    return s.sub_(lse_safe.unsqueeze(-1)).exp_()


def attention_weights(
    q: Tensor,
    k: Tensor,
    lse: Tensor,
    *,
    rows: Index = None,
    heads: Index = None,
    mask: Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """Exact weight rows ``P = exp(S·scale + M − lse)`` for the rows and heads asked.

    Args:
        q: ``(..., H, Lq, d)``; k: ``(..., H, Lk, d)``; lse: ``(..., H, Lq)`` as returned by
            :func:`attnlab.core.chunked.chunked_attention`.
        rows: query positions (int, slice, sequence, 1-D tensor; None = all).
        heads: head positions along dim -3 (same forms; None = all).
        mask, causal, scale: those the lse was computed with.

    Returns:
        ``(..., len(heads), len(rows), Lk)``: dims are kept even for an int selector.
    """
    batch = _check_qk_lse(q, k, lse)
    q, k = aligned(q), aligned(k)  # rounding independent of where the bytes live
    if scale is None:
        scale = default_scale(q.shape[-1])
    lq, lk = q.shape[-2], k.shape[-2]
    if mask is not None:
        _check_mask(mask, (*batch, lq, lk))
    r = _as_index("rows", rows, lq, q.device)
    if mask is not None:
        ndim = len(batch) + 2
        mask = mask.reshape((1,) * (ndim - mask.dim()) + tuple(mask.shape))
        if mask.shape[-2] > 1:
            mask = mask.index_select(-2, r)
    q, lse = q.index_select(-2, r), lse.index_select(-1, r)
    if heads is not None:
        if q.dim() < 3:
            raise ValueError(f"heads needs q of shape (..., H, Lq, d), got {tuple(q.shape)}")
        hsel = _as_index("heads", heads, batch[-1], q.device)
        q = q.expand(*batch, *q.shape[-2:]).index_select(-3, hsel)
        k = k.expand(*batch, *k.shape[-2:]).index_select(-3, hsel)
        lse = lse.index_select(-2, hsel)
        if mask is not None and mask.shape[-3] > 1:
            mask = mask.index_select(-3, hsel)
    s = torch.matmul(q, k.transpose(-2, -1)) * scale  # (..., h, R, Lk)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    if causal:
        allowed = torch.arange(lk, device=s.device)[None, :] <= (r[:, None] + (lk - lq))
        s = s.masked_fill(~allowed, float("-inf"))
    lse_safe = lse.masked_fill(lse == float("-inf"), float("inf"))
    return torch.exp(s - lse_safe.unsqueeze(-1))


def pooled_attention_map(
    q: Tensor,
    k: Tensor,
    v_or_lse: Tensor,
    *,
    block: int | tuple[int, int] | None = None,
    size: int = 512,
    mask: Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """The pooled attention map over ``block`` x ``block`` squares, in bounded memory.

    Args:
        q: ``(..., Lq, d)``; k: ``(..., Lk, d)``.
        v_or_lse: the values ``(..., Lk, dv)`` (the logsumexp is then computed by chunked
            attention) or the logsumexp ``(..., Lq)`` itself.
        block: rows x keys per cell (int or pair); by default ``ceil(L / size)``, so the
            map is at most ``size x size``.
        mask, causal, scale: as in :func:`attnlab.scaled_dot_product_attention`.

    Returns:
        ``(..., ceil(Lq / bq), ceil(Lk / bk))``: each cell the mean over the block's queries
        of the sum over the block's keys (a partial block at the end has fewer of either),
        so each row of the map sums to 1 (0 for blocks of fully masked rows).
    """
    if not isinstance(v_or_lse, Tensor):
        raise TypeError(f"v_or_lse must be a torch.Tensor, got {type(v_or_lse).__name__}")
    if scale is None and isinstance(q, Tensor):
        scale = default_scale(q.shape[-1])
    if isinstance(q, Tensor) and isinstance(k, Tensor):
        q, k = aligned(q), aligned(k)  # rounding independent of where the bytes live
    if isinstance(q, Tensor) and v_or_lse.dim() == q.dim():  # values: get the lse first
        with torch.no_grad():
            lse = _chunked(q, k, v_or_lse, mask, causal, float(scale))[1]
    else:
        lse = v_or_lse
    batch = _check_qk_lse(q, k, lse)
    lq, lk = q.shape[-2], k.shape[-2]
    if mask is not None:
        _check_mask(mask, (*batch, lq, lk))
    size = check_int("size", size, minimum=1)
    if block is None:
        bq, bk = max(1, -(-lq // size)), max(1, -(-lk // size))
    elif isinstance(block, int):
        bq = bk = check_int("block", block, minimum=1)
    else:
        bq, bk = (check_int(f"block[{i}]", b, minimum=1) for i, b in enumerate(block))
    n = math.prod(batch)
    gq, gk = -(-lq // bq), -(-lk // bk)
    if n == 0 or gq == 0 or gk == 0:
        return q.new_zeros(*batch, gq, gk)
    q3 = q.expand(*batch, lq, q.shape[-1]).reshape(n, lq, -1)
    k3 = k.expand(*batch, lk, k.shape[-1]).reshape(n, lk, -1)
    lse3 = lse.reshape(n, lq, 1).masked_fill(lse.reshape(n, lq, 1) == float("-inf"),
                                             float("inf"))
    tiles = _MaskTiles(mask, batch, q.dtype)
    # tiles of whole blocks: tc keys x tr rows over all heads within the byte budget
    tc = bk * max(1, min(gk, 4096 // bk if bk < 4096 else 1))
    tr = bq * max(1, min(gq, _POOL_BYTES // max(1, n * tc * q.element_size() * bq)))
    sums = q.new_zeros(n, gq, gk)
    triangles: dict = {}
    h = slice(0, n)
    # plain float32 maps: the compiled kernel's one pass (GEMM tile, mask, subtract, exp)
    ops = _kernel.get() if mask is None and q.dtype == torch.float32 == k.dtype \
        and q.device.type == "cpu" else None
    if ops is not None:
        q3, k3 = q3.contiguous(), k3.contiguous()
        lse_k = lse.reshape(n, lq).float().contiguous()
    with torch.no_grad():
        for r0 in range(0, lq, tr):
            r1 = min(lq, r0 + tr)
            for c0 in range(0, lk, tc):
                c1 = min(lk, c0 + tc)
                if ops is not None:
                    p = ops.exp_rows(q3[:, r0:r1].contiguous(), k3[:, c0:c1].contiguous(),
                                     lse_k[:, r0:r1].contiguous(), torch.arange(r0, r1), c0,
                                     lq, lk, causal, 0, None, float(scale))
                else:
                    s = _scores(q3, k3, tiles, h, r0, r1, c0, c1, causal, lk - lq,
                                float(scale), triangles)
                    p = s.sub_(lse3[:, r0:r1]).exp_()  # (n, rows, cols)
                pr, pc = (-(r1 - r0)) % bq, (-(c1 - c0)) % bk
                if pr or pc:
                    p = torch.nn.functional.pad(p, (0, pc, 0, pr))
                cell = p.view(n, p.shape[1] // bq, bq, p.shape[2] // bk, bk).sum(dim=(2, 4))
                i, j = r0 // bq, c0 // bk
                sums[:, i: i + cell.shape[1], j: j + cell.shape[2]] = cell
    rows_in = torch.full((gq,), float(bq), dtype=q.dtype, device=q.device)
    rows_in[-1] = lq - bq * (gq - 1)
    return (sums / rows_in[:, None]).view(*batch, gq, gk)


def shaped_weights(q_rows: Tensor, k: Tensor, lse_rows: Tensor, shape: ScoreShape, *,
                   rows: Sequence[int] | Tensor | range, cols: Sequence[int] | Tensor | range
                   | None = None, head: int | Sequence[int] | Tensor = 0, lq: int, lk: int
                   ) -> Tensor:
    """Exact weights ``exp(s − lse)`` in float32 under a :class:`ScoreShape`: (R, C) for
    one head, (h, R, C) for several.

    Args:
        q_rows: (R, d) the queries of ``rows`` (or (h, R, d)); k: (C, d) the keys of
            ``cols``, all Lk keys when ``cols`` is None (or (h, C, d)); lse_rows: (R,) the
            rows' logsumexp (or (h, R)).
        rows, cols, head, lq, lk: as in :meth:`ScoreShape.scores`.

    A row whose lse is ``-inf`` (no visible key) is all zeros.

    >>> from attnlab.core.scores import row_logsumexp
    >>> q, k = torch.randn(2, 1, 6, 4).unbind(0)
    >>> shape = ScoreShape(scale=0.5, causal=True, window=3, softcap=5.0)
    >>> lse = row_logsumexp(q, k, shape)[0]
    >>> w = shaped_weights(q[0, 2:4], k[0], lse[2:4], shape, rows=[2, 3], lq=6, lk=6)
    >>> bool(torch.allclose(w.sum(-1), torch.ones(2))), (w > 0).sum(-1).tolist()
    (True, [3, 3])
    """
    if not isinstance(lse_rows, Tensor) or tuple(lse_rows.shape) != tuple(q_rows.shape[:-1]):
        got = tuple(lse_rows.shape) if isinstance(lse_rows, Tensor) else type(lse_rows).__name__
        raise ValueError(f"lse_rows must have shape {tuple(q_rows.shape[:-1])} (one per row of "
                         f"q_rows), got {got}")
    if isinstance(q_rows, Tensor) and isinstance(k, Tensor):
        q_rows, k = aligned(q_rows), aligned(k)  # rounding independent of placement
    fast = _kernel_rows(q_rows, k, lse_rows, shape, rows, cols, lq, lk)
    if fast is not None:
        return fast
    s = shape.scores(q_rows, k, rows=rows, cols=cols, head=head, lq=lq, lk=lk)
    lse = lse_rows.float()
    return s.sub_(lse.masked_fill(lse == float("-inf"), float("inf"))[..., None]).exp_()


def _kernel_rows(q_rows: Tensor, k: Tensor, lse_rows: Tensor, shape: ScoreShape,
                 rows: Sequence[int] | Tensor | range, cols: Sequence[int] | Tensor | range
                 | None, lq: int, lk: int) -> Tensor | None:
    """:func:`shaped_weights` on the compiled kernel (one pass: GEMM tile, mask, subtract,
    exp) for plain shapes (scale, causal, window, key mask, sinks) over contiguous keys on
    the CPU; None where it does not apply (:func:`why_not_kernel_rows` says why), or the
    kernel is not there."""
    if (q_rows.dim() not in (2, 3) or k.dim() != q_rows.dim()
            or q_rows.shape[-1] != k.shape[-1]
            or (q_rows.dim() == 3 and k.shape[0] != q_rows.shape[0])):
        return None  # (shape errors are reported by the PyTorch path)
    if why_not_kernel_rows(q_rows, k, shape) is not None:
        return None
    ops = _kernel.get()
    if ops is None:  # (why_not_kernel_rows has said it is there)
        return None
    r = _as_positions("rows", rows, lq, q_rows.device)
    col0, n_cols = 0, lk
    if cols is not None:
        c = _as_positions("cols", cols, lk, k.device)
        n_cols = c.shape[0]
        col0 = int(c[0]) if n_cols else 0
        if n_cols and not torch.equal(c, torch.arange(col0, col0 + n_cols)):
            return None  # keys out of order: the PyTorch path
    if r.shape[0] != q_rows.shape[-2] or k.shape[-2] != n_cols:
        return None
    km = None
    if shape.key_mask is not None:
        km = shape.key_mask.to(torch.bool)[col0:col0 + n_cols].contiguous()
    one = q_rows.dim() == 2
    q3 = (q_rows[None] if one else q_rows).float().contiguous()  # aligned by the caller
    k3 = (k[None] if one else k).float().contiguous()
    lse = (lse_rows[None] if one else lse_rows).float().contiguous()
    out = ops.exp_rows(q3, k3, lse, r.contiguous(), col0, lq, lk, shape.causal,
                       shape.window or 0, km, float(shape.scale))
    return out[0] if one else out


def why_not_kernel_rows(q: Tensor, k: Tensor, shape: ScoreShape, *, build: bool = True
                        ) -> str | None:
    """Why :func:`shaped_weights` (a trace's on-demand weights) would not run attnlab's
    compiled CPU kernel for queries ``q`` and keys ``k`` under ``shape``, or None if it would
    (keys asked out of order take the PyTorch path too). ``build=False`` never builds the
    kernel (an unbuilt one is then "not built or loaded yet").

    >>> why_not_kernel_rows(torch.zeros(2, 4, device="meta"), torch.zeros(3, 4,
    ...                     device="meta"), ScoreShape(scale=0.5))
    'the tensors are on meta, the kernel is CPU-only'
    >>> why_not_kernel_rows(torch.zeros(2, 4), torch.zeros(3, 4),
    ...                     ScoreShape(scale=0.5, softcap=30.0), build=False)
    'the kernel has no soft-cap'
    """
    for name, t in (("q", q), ("k", k)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if q.device.type != "cpu" or k.device.type != "cpu":
        where = q.device if q.device.type != "cpu" else k.device
        return f"the tensors are on {where}, the kernel is CPU-only"
    if shape.softcap is not None:
        return "the kernel has no soft-cap"
    if shape.alibi_slopes is not None:
        return "the kernel has no ALiBi slopes"
    if shape.bias is not None:
        return "the kernel takes no dense bias"
    if (_kernel.get() if build else _kernel._state["ops"]) is not None:
        return None
    return f"the kernel is unavailable: {_kernel.kernel_status()['reason']}"


#: The sums :func:`head_sums` adds to, per head, in this order (the last axis); the
#: names are those of :data:`attnlab.analysis.sums.SUMS`.
HEAD_SUMS = ("mass", "entropy", "max_weight", "distance", "first", "previous", "diagonal",
             "duplicate", "induction", "sink", "sink_mass")


def head_sums(q: Tensor, k: Tensor, lse: Tensor, shape: ScoreShape, *, heads: Tensor,
              rows: range, sums: Tensor, pooled: Tensor | None = None, pool_block: int = 0,
              pairs: tuple[Tensor, Tensor] | None = None, groups: Tensor | None = None
              ) -> bool:
    """Add one layer's sums for the head scores to ``sums`` (and its pooled blocks to
    ``pooled``) on the compiled kernel, straight from q, k and the logsumexp, without
    writing a weight. Returns False, touching nothing, where the kernel does not apply (a
    soft-cap, ALiBi slopes or a dense bias; not float32 on the CPU; no kernel).

    Args:
        q: (H, Lq, d) the layer's queries; k: (H_kv, Lk, d) its keys (query head ``h``
            reads key head ``h // (H / H_kv)``); lse: (H, Lq) the rows' logsumexp.
        shape: the layer's :class:`ScoreShape` (scale, causal, window, key mask; sinks are
            in the lse).
        heads: (hs,) int64, the query heads to sum; rows: the query rows, consecutive.
        sums: (H, len(HEAD_SUMS)) float64, contiguous: each asked head's row gets, row by
            row, the sums named by :data:`HEAD_SUMS` over its weights ``p_j = exp(s_j −
            lse)`` (``s`` the shaped scores, ``pos = row + Lk − Lq`` the row's key position):
            the mass ``Σ_j p_j``; the entropy ``−Σ_j p_j log p_j``, taken as ``−Σ_j p_j
            (s_j − lse)`` (no log); the largest weight; ``Σ_j p_j |pos − j|``; the weights
            on key 0, on ``pos − 1`` and on ``pos``; the weights on the row's pair keys and
            on the keys right after them; and, over the rows with ``pos >= 1`` only, the
            weight on key 0 and the mass.
        pooled: (H, nq, ceil(Lk / pool_block)) float32, contiguous, with ``pool_block > 0``:
            each row's sums over blocks of ``pool_block`` keys are added to its block of
            rows ``row // pool_block``.
        pairs: ``(ptr (len(rows) + 1), keys)`` int64: row ``rows[r]``'s pair keys are
            ``keys[ptr[r]:ptr[r + 1]]``, ascending (its duplicate-token keys).
        groups: ``(n + 1,)`` int64, for merged tokens: q, k and lse hold ``Lq = Lk``
            pieces, token ``t`` is pieces ``groups[t]:groups[t + 1]``, and the sums are those
            of the merged weights ``w[a, b] = mean_{i in a} sum_{j in b} p_ij`` (the rule of
            :meth:`~attnlab.tracing.attention.AttentionTrace.merge_tokens`); rows, positions,
            pair keys and pooled blocks are then in tokens, and a merged row's entropy is
            ``−Σ_b w log w``: where ``w`` is one piece's ``p`` (a token of one piece against a
            token of one piece), ``log w`` is taken as ``s − lse`` as above; elsewhere ``w``
            is clamped to float32's smallest normal, as the other pass does, and its log taken.

    The weights are those :func:`shaped_weights` gives (the same GEMM, scale, subtraction
    and exponential); mass and distance are summed in float64, the entropy in float32
    over at most 1024 keys at a time, then in float64.
    """
    if (shape.softcap is not None or shape.alibi_slopes is not None or shape.bias is not None
            or q.device.type != "cpu" or q.dtype != torch.float32 or k.dtype != torch.float32
            or lse.dtype != torch.float32):
        return False
    ops = _kernel.get()
    if ops is None or not hasattr(ops, "head_sums" if groups is None else "merged_head_sums"):
        return False
    if not isinstance(rows, range) or rows.step != 1:
        raise ValueError(f"rows must be a range of consecutive rows, got {rows!r}")
    km = None if shape.key_mask is None else shape.key_mask.contiguous()
    ptr = keys = None
    if pairs is not None:
        ptr, keys = pairs
    q, k, lse = aligned(q).contiguous(), aligned(k).contiguous(), lse.contiguous()
    if groups is not None:
        ops.merged_head_sums(q, k, lse, heads, groups, rows.start, len(rows), shape.causal,
                             shape.window or 0, km, float(shape.scale), ptr, keys,
                             int(pool_block), sums, pooled)
    else:
        ops.head_sums(q, k, lse, heads, rows.start, len(rows), shape.causal,
                      shape.window or 0, km, float(shape.scale), ptr, keys, int(pool_block),
                      sums, pooled)
    return True


def attention_head_sums(q: Tensor, k: Tensor, v: Tensor, *, scale: float, causal: bool,
                        groups: Tensor, sums: Tensor, pooled: Tensor | None = None,
                        pool_block: int = 0, pairs: tuple[Tensor, Tensor] | None = None
                        ) -> tuple[Tensor, Tensor] | None:
    """One layer's self-attention and its head sums in one pass of the compiled kernel:
    ``(out (H, L, dv), lse (H, L))`` float32, with the sums of every head over every row
    added to ``sums`` (and ``pooled``) as :func:`head_sums` adds them given that ``lse``
    and ``groups`` (``torch.arange(L + 1)``: one piece a token). Each row's scores ``q·kᵀ ·
    scale`` (causal or not; no window, key mask, bias or soft-cap) are computed once, for
    its log-sum-exp, its weights ``exp(s − lse)``, the output ``P·V`` and the sums: the
    work of an attention forward and of :func:`head_sums`'s pass in one. None, touching
    nothing, where the kernel does not apply (not float32 on the CPU; no kernel).

    Args:
        q: (H, L, d); k: (H_kv, L, d); v: (H_kv, L, dv): one sequence's queries, keys and
            values (query head ``h`` reads key head ``h // (H / H_kv)``).
        groups, sums, pooled, pool_block, pairs: as :func:`head_sums` (rows: every token).
    """
    if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in (q, k, v)):
        return None
    ops = _kernel.get()
    if ops is None or not hasattr(ops, "attention_head_sums"):
        return None
    h, length = q.shape[0], q.shape[1]
    out = torch.empty(h, length, v.shape[-1])
    lse = torch.empty(h, length)
    ptr = keys = None
    if pairs is not None:
        ptr, keys = pairs
    q, k, v = (aligned(t).contiguous() for t in (q, k, v))
    ops.attention_head_sums(q, k, v, groups, bool(causal), float(scale), ptr, keys,
                            int(pool_block), out, lse, sums, pooled)
    return out, lse
