"""FlashAttention's online softmax in plain PyTorch: exact attention in O(N·d) memory.

The N x N score matrix never exists. Keys are visited one tile at a time; each query row
keeps a running maximum ``m``, a running sum ``l`` and an accumulator ``acc`` that are
rescaled whenever the maximum grows::

    S_j   = scale · Q K_jᵀ + M_j                       one tile of scores (bq x bk)
    m'    = max(m, rowmax S_j)
    P_j   = exp(S_j − m')
    l     = l · exp(m − m') + rowsum P_j
    acc   = acc · exp(m − m') + P_j V_j
    out   = acc / l,      lse = m + log l              after the last tile

``lse`` (the per-row logsumexp of the scores) is all that is needed to rebuild any
weight exactly later, ``P = exp(S − lse)`` (see :mod:`attnlab.core.weights`), and it is
what the backward pass uses to recompute each tile instead of storing it.

Shape legend (grouped heads: k and v may have ``H_kv`` heads with ``H % H_kv == 0``;
the G query heads of one key head share each key tile, k and v are never repeated)::

    q    (..., H, Lq, d)      k   (..., H_kv, Lk, d)      v   (..., H_kv, Lk, dv)
    out  (..., H, Lq, dv)     lse (..., H, Lq)            -inf for a row with no visible key

>>> q, k, v = torch.randn(3, 1, 2, 300, 16).unbind(0)
>>> out, lse = chunked_attention(q, k, v, causal=True, block_q=64, block_k=64)
>>> ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
>>> bool(torch.allclose(out, ref, atol=1e-5)), tuple(lse.shape)
(True, (1, 2, 300))
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.core._checks import check_optional_int
from attnlab.core._tiles import (
    _check_dropout,
    _check_flag,
    _check_inputs,
    _check_qkv,
    _check_scale,
    _finite_split,
    _flatten,
    _fold,
    _keys_undo_mask,
    _masked_scores,
    _MaskTiles,
    _merged_mask,
    _scores,
    _work_dtype,
)

__all__ = ["chunked_attention"]

#: Bytes of one score tile (all heads x block_q x block_k). Small enough to stay in the
#: last-level cache between its GEMM, its exponentials and its sums (measured: 4 MiB
#: tiles run 1.6x faster than 64 MiB ones at N = 8192), large enough that the per-call
#: cost of ~10 tensor ops per tile stays small. With the O(N·d) state it is the only
#: memory beyond the inputs.
_CHUNK_BYTES = 4 << 20
#: Default key tile: long enough for an efficient GEMM, short enough that enough query
#: rows fit in one tile.
_BLOCK_K = 512


def _blocks(n: int, lq: int, lk: int, itemsize: int, block_q: int | None,
            block_k: int | None) -> tuple[int, int]:
    bk = block_k or min(max(lk, 1), _BLOCK_K)
    bq = block_q or max(16, _CHUNK_BYTES // max(1, n * bk * itemsize))
    return max(1, min(bq, max(lq, 1))), max(1, bk)


def _key_range(r0: int, r1: int, lk: int, causal: bool, offset: int) -> int:
    """Number of leading keys some query row in [r0, r1) may see."""
    return max(0, min(lk, r1 + offset)) if causal else lk


def _flash_forward(
    q4: Tensor, k: Tensor, v: Tensor, tiles: _MaskTiles, causal: bool, scale: float,
    bq: int, bk: int, dropout_p: float = 0.0, k_bad: bool = False,
) -> tuple[Tensor, Tensor]:
    """The online-softmax forward on q4 (n_kv, G, Lq, d), k (n_kv, Lk, d), v (n_kv, Lk, dv)
    -> out (n_kv, G, Lq, dv), lse (n_kv, G, Lq)."""
    n, group, lq, _ = q4.shape
    lk, dv = v.shape[-2:]
    offset = lk - lq
    v_clean, bad = _finite_split(v)
    out = q4.new_empty(n, group, lq, dv)  # (n_kv, G, Lq, dv)
    lse = q4.new_empty(n, group, lq)  # (n_kv, G, Lq)
    h = slice(0, n)
    triangles: dict = {}
    neg_inf = -math.inf
    for r0 in range(0, lq, bq):
        r1 = min(lq, r0 + bq)
        rows = group * (r1 - r0)  # the G heads of a key head, one after the other
        qt = _fold(q4[:, :, r0:r1])  # (n_kv, G·rows, d)
        m = q4.new_full((n, rows, 1), neg_inf)  # running max
        l = q4.new_zeros(n, rows, 1)  # running sum of exp(S - m)
        acc = q4.new_zeros(n, rows, dv)  # running sum of exp(S - m) V
        raw = touched = None
        if bad is not None:
            raw, touched = q4.new_zeros(n, rows, dv), q4.new_zeros(n, rows, dv)
        for c0 in range(0, _key_range(r0, r1, lk, causal, offset), bk):
            c1 = min(lk, c0 + bk)
            s = _scores(q4, k, tiles, h, r0, r1, c0, c1, causal, offset, scale, triangles,
                        q_tile=qt, k_bad=k_bad)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            m_safe = m_new.masked_fill(m_new == neg_inf, 0.0)  # all blocked so far: no NaN
            rescale = torch.exp(m - m_safe)  # (n, rows, 1)
            p = s.sub_(m_safe).exp_()  # P_j, in place of S_j
            l.mul_(rescale).add_(p.sum(dim=-1, keepdim=True))
            pd = F.dropout(p, p=dropout_p) if dropout_p > 0.0 else p
            acc.mul_(rescale).baddbmm_(pd, v_clean[:, c0:c1])
            if bad is not None and raw is not None and touched is not None:
                raw.mul_(rescale).baddbmm_(pd, v[:, c0:c1])
                touched.baddbmm_((pd > 0).to(p.dtype), bad[:, c0:c1].to(p.dtype))
            m = m_new
        alive = l > 0
        res = acc.div_(torch.where(alive, l, torch.ones_like(l)))
        if raw is not None and touched is not None:  # (v holds non-finite values)
            res = torch.where(touched > 0, raw / l, res)
        out[:, :, r0:r1] = res.view(n, group, r1 - r0, dv)
        # l == 0: no visible key (-inf); a NaN score leaves l NaN, and the lse NaN too
        lse[:, :, r0:r1] = torch.where(l == 0, neg_inf, m + torch.log(l)).view(
            n, group, r1 - r0)
    return out, lse


class _ChunkedAttention(torch.autograd.Function):
    """Forward keeps (q, k, v, out, lse); backward recomputes each tile of P from lse::

        P_ij = exp(S_ij − lse_i),    D_i = rowsum(dO_i ∘ O_i) − dlse_i
        dV_j += P_ijᵀ dO_i,    dS_ij = P_ij ∘ (dO_i V_jᵀ − D_i)
        dQ_i += scale · dS_ij K_j,    dK_j += scale · dS_ijᵀ Q_i
    """

    @staticmethod
    def forward(ctx, q4, k, v, tiles, causal, scale, bq, bk, dropout_p, k_bad):
        out, lse = _flash_forward(q4, k, v, tiles, causal, scale, bq, bk, dropout_p, k_bad)
        ctx.save_for_backward(q4, k, v, out, lse)
        ctx.args = (tiles, causal, scale, bq, bk, k_bad)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, d_lse):
        q4, k, v, out, lse = ctx.saved_tensors
        tiles, causal, scale, bq, bk, k_bad = ctx.args
        n, group, lq, _ = q4.shape
        lk = k.shape[-2]
        offset = lk - lq
        v = _finite_split(v)[0]
        k_clean = _finite_split(k)[0]
        dq, dk, dv = torch.zeros_like(q4), torch.zeros_like(k), torch.zeros_like(v)
        nothing = (None,) * 7
        if d_out is None and d_lse is None:
            return dq, dk, dv, *nothing
        if d_out is None:
            d_out = torch.zeros_like(out)
        d = (d_out * out.nan_to_num(0.0, 0.0, 0.0)).sum(dim=-1, keepdim=True)  # (n, G, Lq, 1)
        if d_lse is not None:
            d = d - d_lse.unsqueeze(-1)
        lse_safe = lse.masked_fill(lse == -math.inf, math.inf).unsqueeze(-1)
        h = slice(0, n)
        triangles: dict = {}
        for r0 in range(0, lq, bq):
            r1 = min(lq, r0 + bq)
            do, qi = _fold(d_out[:, :, r0:r1]), _fold(q4[:, :, r0:r1])  # (n, G·rows, .)
            di, lse_i = _fold(d[:, :, r0:r1]), _fold(lse_safe[:, :, r0:r1])
            dqi = torch.zeros_like(qi)  # contiguous: GEMMs into strided views are slow
            for c0 in range(0, _key_range(r0, r1, lk, causal, offset), bk):
                c1 = min(lk, c0 + bk)
                s = _scores(q4, k, tiles, h, r0, r1, c0, c1, causal, offset, scale, triangles,
                            q_tile=qi, k_bad=k_bad)
                p = s.sub_(lse_i).exp_()  # (n, G·rows, cols), exact weights
                dv[:, c0:c1] += torch.bmm(p.transpose(1, 2), do)
                ds = torch.bmm(do, v[:, c0:c1].transpose(1, 2)).sub_(di).mul_(p)
                dqi.baddbmm_(ds, k_clean[:, c0:c1], alpha=scale)
                dk[:, c0:c1] += torch.bmm(ds.transpose(1, 2), qi).mul_(scale)
            dq[:, :, r0:r1] = dqi.view(n, group, r1 - r0, -1)
        return dq, dk, dv, *nothing


def _why_not_chunked(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                     dropout_p: float) -> str | None:
    """Why the chunked path cannot take these inputs, or None: its backward treats the mask
    as a constant and has no dropout."""
    if mask is not None and mask.requires_grad and torch.is_grad_enabled():
        return ("the chunked backend treats mask as a constant; got a mask that requires grad "
                "(use backend='explicit')")
    if dropout_p > 0.0 and torch.is_grad_enabled() and (
        q.requires_grad or k.requires_grad or v.requires_grad
    ):
        return ("the chunked backend has no dropout in its backward; got "
                f"dropout_p={dropout_p} with inputs that require grad")
    return None


def _chunked(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, scale: float,
    dropout_p: float = 0.0, block_q: int | None = None, block_k: int | None = None, *,
    batch: tuple[int, ...] | None = None, group: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Checked-input core of :func:`chunked_attention` (also the ``"chunked"`` backend);
    ``batch`` and ``group`` as :func:`attnlab.core._tiles._check_qkv` returns them."""
    if batch is None or group is None:
        batch, group = _check_qkv(q, k, v)
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    dtype = q.dtype
    why = _why_not_chunked(q, k, v, mask, dropout_p)
    if why is not None:
        raise ValueError(why)
    work = _work_dtype(dtype)
    q, k, v = q.to(work), k.to(work), v.to(work)  # running sums in >= fp32, as FlashAttention
    q4, k3, v3 = _flatten(q, k, v, batch, group)
    k_bad = _keys_undo_mask(mask, k3)
    tiles = _MaskTiles(mask, batch, work)
    bq, bk = _blocks(math.prod(batch), lq, lk, q.element_size(), block_q, block_k)
    out, lse = _ChunkedAttention.apply(q4, k3, v3, tiles, causal, scale, bq, bk, dropout_p,
                                       k_bad)
    return out.view(*batch, lq, dv).to(dtype), lse.view(*batch, lq)


def _weights_from_lse(
    q: Tensor, k: Tensor, lse: Tensor, mask: Tensor | None, causal: bool, scale: float, *,
    batch: tuple[int, ...], group: int,
) -> Tensor:
    """Every weight ``exp(S − lse)`` (..., H, Lq, Lk), with plain (differentiable) ops.

    This is N x N again: only for a caller who asked for the weights.
    """
    lq, lk = q.shape[-2], k.shape[-2]
    work = lse.dtype
    q4, k3, _ = _flatten(q.to(work), k.to(work), None, batch, group)
    s = _masked_scores(q4, k3, _merged_mask(mask, causal, lq, lk, work, q.device), scale,
                       batch)
    lse_safe = lse.masked_fill(lse == -math.inf, math.inf)
    return torch.exp(s - lse_safe.unsqueeze(-1)).to(q.dtype)


def chunked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    block_q: int | None = None,
    block_k: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Exact attention by tiles of keys (FlashAttention), returning ``(out, lse)``.

    Same arguments and conventions as
    :func:`attnlab.core.functional.scaled_dot_product_attention` (bool mask True = may
    attend, float mask added, causal bottom-right aligned, a row with no visible key gives
    0 and ``lse = -inf``, NaN/inf in masked keys or values does not leak, k and v may have
    fewer heads than q). ``block_q`` / ``block_k`` set the tile; by default one tile holds
    about 4 MiB of scores over all heads. Differentiable in ``q``, ``k``, ``v`` (the
    backward recomputes the tiles); ``lse`` is differentiable too.

    Args:
        q: ``(..., H, Lq, d)``. k: ``(..., H_kv, Lk, d)``. v: ``(..., H_kv, Lk, dv)``.
        mask: broadcastable to ``(..., H, Lq, Lk)``; sliced per tile, never expanded.

    Returns:
        ``out (..., H, Lq, dv)`` and ``lse (..., H, Lq)``, the logsumexp of each row's
        scores (float32 for half-precision inputs, whose running sums are kept in float32).
    """
    batch, group = _check_inputs(q, k, v, mask)
    causal = _check_flag("causal", causal)
    scale = _check_scale(scale, q.shape[-1])
    dropout_p = _check_dropout(dropout_p)
    block_q = check_optional_int("block_q", block_q, minimum=1)
    block_k = check_optional_int("block_k", block_k, minimum=1)
    return _chunked(q, k, v, mask, causal, scale, dropout_p, block_q, block_k, batch=batch,
                    group=group)
