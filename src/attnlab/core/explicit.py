"""The explicit path: scores and weights materialised, one cache-sized tile at a time.

For each tile of query rows (several heads at once for short maps)::

    S_t = scale · Q_t Kᵀ + M_t          one GEMM, written straight into the weights tensor
    P_t = softmax(S_t)                  in place; a row with no allowed key -> zeros
    O_t = P_t V                         while P_t is still in cache
    lse_t = max S_t − log max P_t       only when asked: at the row maximum P = 1/Σ exp(S − max)

No N x N temporary exists besides the weights themselves. Under ``causal`` only the keys
some row of a tile may see are multiplied. The backward pass goes tile by tile through the
saved weights (:class:`_ExplicitAttention`); dropout in training and masks that require
grad take the plain-autograd formula instead (:func:`_explicit_reference`).

Where it can, this path runs attnlab's compiled CPU kernel instead (:mod:`attnlab.core._kernel`,
the same tiles in C++: per thread and tile one GEMM into a cache-sized buffer, masking and a
vectorised exp there, the weights written once, ``E V`` while E is in cache; its backward
likewise): CPU float32/float64 tensors without dropout, whenever the kernel is built.
:func:`_why_not_kernel` says why not otherwise; the results agree to rounding.

Shape legend (grouped heads: k and v may have ``H_kv`` heads with ``H % H_kv == 0``)::

    q (..., H, Lq, d)   k (..., H_kv, Lk, d)   v (..., H_kv, Lk, dv)
    out (..., H, Lq, dv)   weights (..., H, Lq, Lk)   lse (..., H, Lq)

This is the ``backend="explicit"`` of the dispatcher:

>>> from attnlab.core.functional import scaled_dot_product_attention
>>> q = torch.randn(1, 4, 6, 8)
>>> k = v = torch.randn(1, 2, 6, 8)  # two key/value heads, each shared by two query heads
>>> out, w, lse = scaled_dot_product_attention(
...     q, k, v, causal=True, backend="explicit", return_weights=True, return_lse=True)
>>> tuple(w.shape), bool(torch.allclose(w.sum(-1), torch.ones(1, 4, 6)))
((1, 4, 6, 6), True)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.core import _kernel
from attnlab.core._tiles import (
    _finite_split,
    _flatten,
    _fold,
    _keys_undo_mask,
    _masked_scores,
    _MaskTiles,
    _merged_mask,
    _scores,
    _tile_grid,
    _work_dtype,
)

__all__: list[str] = []


def _explicit_forward(
    q4: Tensor,
    k3: Tensor,
    v3: Tensor,
    tiles: _MaskTiles,
    causal: bool,
    scale: float,
    dropout_p: float = 0.0,
    want_lse: bool = False,
    k_bad: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Output (n_kv, G, Lq, dv), weights (n_kv, G, Lq, Lk) and, if asked, the logsumexp
    (n_kv, G, Lq), tile by tile, no autograd.

    Half precision: the weights are stored in it, but each tile is computed in float32
    (and the logsumexp stays float32).
    """
    n_kv, group, lq, _ = q4.shape
    lk, dv = v3.shape[-2:]
    dtype = q4.dtype
    work = _work_dtype(dtype)
    low = work != dtype  # half precision: each tile in float32
    q4, k3, v3 = q4.to(work), k3.to(work), v3.to(work)
    weights = q4.new_empty(n_kv, group, lq, lk, dtype=dtype)  # (n_kv, G, Lq, Lk)
    out = q4.new_empty(n_kv, group, lq, dv)  # (n_kv, G, Lq, dv)
    lse = q4.new_empty(n_kv, group, lq) if want_lse else None  # (n_kv, G, Lq)
    masked = tiles.mask is not None or causal
    v_clean, bad = _finite_split(v3) if masked else (v3, None)
    offset = lk - lq  # bottom-right causal alignment
    may_die = tiles.mask is not None or (causal and lq > lk)
    triangles: dict = {}
    for h0, h1, r0, r1 in _tile_grid(n_kv, lq, lk, q4.element_size() * group, causal):
        g, rows = h1 - h0, r1 - r0
        c = max(0, min(lk, r1 + offset)) if causal else lk  # keys some row here may see
        w = weights[h0:h1, :, r0:r1]  # (g, G, rows, Lk); contiguous unless causal
        o = out[h0:h1, :, r0:r1]  # (g, G, rows, dv)
        if c == 0:
            w.zero_()
            o.zero_()
            if lse is not None:
                lse[h0:h1, :, r0:r1] = -math.inf
            continue
        # In place in the weights when the tile is one contiguous block; otherwise in a
        # tile-sized scratch (torch's GEMMs into strided outputs take a slow path).
        in_place = w.is_contiguous() and c == lk and not low
        s = _scores(q4, k3, tiles, slice(h0, h1), r0, r1, 0, c, causal, offset, scale,
                    triangles, out=w.view(g, group * rows, lk) if in_place else None,
                    k_bad=k_bad)  # (g, G·rows, c)
        top = s.amax(dim=-1, keepdim=True) if may_die or lse is not None else None
        dead = None
        if may_die and top is not None:  # (top: computed when may_die)
            dead = top == -math.inf  # (g, G·rows, 1)
            if not bool(dead.any()):
                dead = None
        torch.softmax(s, dim=-1, out=s)
        if dead is not None:
            s.masked_fill_(dead, 0.0)
        if lse is not None and top is not None:  # (top: computed when lse is wanted)
            row = top - torch.log(s.amax(dim=-1, keepdim=True))  # max S − log P_max
            if dead is not None:
                row.masked_fill_(dead, -math.inf)
            lse[h0:h1, :, r0:r1] = row.view(g, group, rows)
        if not in_place:
            w[..., :c] = s.view(g, group, rows, c)
            if c < lk:
                w[..., c:] = 0.0
        p = F.dropout(s, p=dropout_p) if dropout_p > 0.0 else s
        if bad is None:
            if o.is_contiguous():
                torch.bmm(p, v3[h0:h1, :c], out=o.view(g, group * rows, dv))
            else:
                o[...] = torch.bmm(p, v3[h0:h1, :c]).view(g, group, rows, dv)
        else:
            # 0 * NaN = NaN: use the zeroed values, except in rows that really give a
            # non-finite value weight > 0, which get the true (non-finite) result.
            clean = torch.bmm(p, v_clean[h0:h1, :c])
            touched = torch.bmm((p > 0).to(p.dtype), bad[h0:h1, :c].to(p.dtype)) > 0
            res = torch.where(touched, torch.bmm(p, v3[h0:h1, :c]), clean)
            o[...] = res.view(g, group, rows, dv)
    return out.to(dtype), weights, lse


class _ExplicitAttention(torch.autograd.Function):
    """The tiled explicit path with a tiled backward through the saved weights.

    With ``P`` the weights and ``dO``, ``dP``, ``dlse`` the incoming gradients::

        dV = Pᵀ dO
        dS = P ∘ (dP' − rowsum(P ∘ dP')) + P ∘ dlse,   dP' = dO Vᵀ + dP
        dQ = scale · dS K,   dK = scale · dSᵀ Q
    """

    @staticmethod
    def forward(ctx, q4, k3, v3, tiles, causal, scale, want_lse, k_bad):
        out, weights, lse = _explicit_forward(q4, k3, v3, tiles, causal, scale, 0.0,
                                              want_lse, k_bad)
        ctx.save_for_backward(q4, k3, v3, weights)
        ctx.causal, ctx.scale = causal, scale
        ctx.set_materialize_grads(False)
        return out, weights, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, d_weights, d_lse):
        q4, k3, v3, weights = ctx.saved_tensors
        causal, scale = ctx.causal, ctx.scale
        n_kv, group, lq, d = q4.shape
        lk = v3.shape[-2]
        k_clean, v_clean = _finite_split(k3)[0], _finite_split(v3)[0]
        dq, dk, dv = torch.zeros_like(q4), torch.zeros_like(k3), torch.zeros_like(v3)
        offset = lk - lq
        if d_out is not None or d_weights is not None or d_lse is not None:
            for h0, h1, r0, r1 in _tile_grid(n_kv, lq, lk, q4.element_size() * group, causal):
                c = max(0, min(lk, r1 + offset)) if causal else lk
                if c == 0:
                    continue
                hs = slice(h0, h1)
                p = _fold(weights[hs, :, r0:r1, :c])  # (g, G·rows, c)
                if d_out is not None:
                    do = _fold(d_out[hs, :, r0:r1])  # (g, G·rows, dv)
                    dv[hs, :c] += torch.bmm(p.transpose(1, 2), do)
                    ds = torch.bmm(do, v_clean[hs, :c].transpose(1, 2))  # dP' (g, G·rows, c)
                    if d_weights is not None:
                        ds.add_(_fold(d_weights[hs, :, r0:r1, :c]))
                elif d_weights is not None:
                    ds = _fold(d_weights[hs, :, r0:r1, :c]).clone()
                else:
                    ds = torch.zeros_like(p)
                ds.mul_(p)
                ds.addcmul_(p, ds.sum(dim=-1, keepdim=True), value=-1.0)  # dS
                if d_lse is not None:
                    ds.addcmul_(p, _fold(d_lse[hs, :, r0:r1, None]))
                qt = _fold(q4[hs, :, r0:r1])  # (g, G·rows, d)
                dq[hs, :, r0:r1] = torch.bmm(ds, k_clean[hs, :c]).mul_(scale).view(
                    h1 - h0, group, r1 - r0, d)
                dk[hs, :c] += torch.bmm(ds.transpose(1, 2), qt).mul_(scale)
        need = ctx.needs_input_grad
        return (
            dq if need[0] else None,
            dk if need[1] else None,
            dv if need[2] else None,
            None, None, None, None, None,
        )


def _explicit_reference(
    q4: Tensor,
    k3: Tensor,
    v3: Tensor,
    mask: Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    batch: tuple[int, ...],
    want_lse: bool,
    k_bad: bool,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """The formula with plain autograd ops: for dropout in training and learned masks."""
    n_kv, group, lq, _ = q4.shape
    lk, dv = v3.shape[-2:]
    merged = _merged_mask(mask, causal, lq, lk, q4.dtype, q4.device)
    scores = _masked_scores(q4, k3, merged, scale, batch, refill=k_bad)  # (..., H, Lq, Lk)
    dead = scores.detach().amax(dim=-1, keepdim=True) == -math.inf  # (..., Lq, 1)
    any_dead = bool(dead.any())
    if any_dead:
        scores = scores.masked_fill(dead, 0.0)
    weights = torch.softmax(scores, dim=-1)
    lse = None
    if want_lse:
        lse = torch.logsumexp(scores if scores.dtype == torch.float64 else scores.float(), -1)
        if any_dead:
            lse = lse.masked_fill(dead.squeeze(-1), -math.inf)
    if any_dead:
        weights = weights.masked_fill(dead, 0.0)
    p = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    p3 = p.reshape(n_kv, group * lq, lk)
    v_clean, bad = _finite_split(v3)
    if bad is None:
        out = torch.matmul(p3, v3)
    else:
        clean = torch.matmul(p3, v_clean)
        touched = torch.matmul((p3.detach() > 0).to(v3.dtype), bad.to(v3.dtype)) > 0
        out = torch.where(touched, torch.matmul(p3, v3), clean)
    return out.view(*batch, lq, dv), weights, lse


#: Query rows per kernel tile; 0 lets the kernel choose (about 1 MiB of scores per tile).
_KERNEL_ROWS = 0


def _why_not_kernel(q: Tensor, mask: Tensor | None, dropout_p: float, build: bool = True
                    ) -> str | None:
    """Why the explicit path would not run the compiled kernel here, or None if it would.

    ``build=False`` answers without building the kernel (an unbuilt kernel is then "not
    built yet")."""
    if q.device.type != "cpu":
        return f"the tensors are on {q.device}, the kernel is CPU-only"
    if q.dtype not in (torch.float32, torch.float64):
        return f"the kernel takes float32 and float64 (got {q.dtype})"
    if dropout_p > 0.0:
        return "the kernel has no dropout"
    if (torch.is_grad_enabled() and mask is not None and mask.requires_grad):
        return "the mask requires grad (the kernel does not differentiate it)"
    if (_kernel.get() if build else _kernel._state["ops"]) is not None:
        return None
    return f"the kernel is unavailable: {_kernel.kernel_status()['reason']}"


def _five(t: Tensor, full: tuple[int, ...], h_kv: int, group: int) -> Tensor:
    """``t`` broadcast to ``full`` = (..., H, rows, x), as (outer, H_kv, G, rows, x): a view
    (broadcast dims as 0 strides) unless its outer dims cannot merge or its last dim is
    not unit-strided, then a copy."""
    rows, x = full[-2:]
    t = t.reshape((1,) * (len(full) - t.dim()) + tuple(t.shape))
    if x > 1 and (t.shape[-1] != x or t.stride(-1) != 1):  # unit stride along the last dim
        t = t.expand(*t.shape[:-1], x).contiguous()
    t = t.expand(full)
    shape = (math.prod(full[:-3]), h_kv, group, rows, x)
    try:
        return t.view(shape)
    except RuntimeError:
        return t.reshape(shape)


def _kernel_views(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                  batch: tuple[int, ...], group: int
                  ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """q (outer, H_kv, G, Lq, d), k (outer, H_kv, Lk, d), v (outer, H_kv, Lk, dv) and the
    mask (outer, H_kv, G, Lq, Lk) as the kernel takes them: views of the caller's tensors."""
    lq, lk = q.shape[-2], k.shape[-2]
    full = batch if batch else (1,)
    heads = full[-1]
    h_kv = heads // group
    kv_full = (*full[:-1], h_kv)
    q5 = _five(q, (*full, lq, q.shape[-1]), h_kv, group)
    k4 = _five(k, (*kv_full, lk, k.shape[-1]), h_kv, 1)[:, :, 0]
    v4 = _five(v, (*kv_full, lk, v.shape[-1]), h_kv, 1)[:, :, 0]
    m5 = None
    if mask is not None:
        m = mask if mask.dtype == torch.bool else mask.to(q.dtype)
        m5 = _five(m, (*full, lq, lk), h_kv, group)
    return q5, k4, v4, m5


class _KernelAttention(torch.autograd.Function):
    """The compiled kernel's forward and its backward through the saved weights (the same
    formulas as :class:`_ExplicitAttention`)."""

    @staticmethod
    def forward(ctx, q5, k4, v4, mask5, v_raw, bad_keys, causal, scale, want_lse,
                heads_inner):
        out, weights, lse = _kernel.loaded().forward(q5, k4, v4, mask5, v_raw, bad_keys, causal,
                                                  scale, want_lse, _KERNEL_ROWS, heads_inner)
        ctx.save_for_backward(q5, k4, v4, weights)
        ctx.causal, ctx.scale = causal, scale
        ctx.set_materialize_grads(False)
        return out, weights, lse if want_lse else None

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, d_weights, d_lse):
        q5, k4, v4, weights = ctx.saved_tensors
        k_clean, v_clean = _finite_split(k4)[0], _finite_split(v4)[0]
        if d_out is not None and d_out.stride(-1) != 1:
            d_out = d_out.contiguous()
        d_weights = None if d_weights is None else d_weights.contiguous()
        d_lse = None if d_lse is None else d_lse.contiguous()
        dq, dk, dv = _kernel.loaded().backward(q5, k_clean, v_clean, weights, d_out, d_weights,
                                            d_lse, ctx.causal, ctx.scale, _KERNEL_ROWS)
        need = ctx.needs_input_grad
        return (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None,
                None, None, None, None, None, None, None)


def _explicit_kernel(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
                     scale: float, batch: tuple[int, ...], group: int, want_lse: bool,
                     grad: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """The explicit path on the compiled kernel -> (out, weights, lse or None) in the
    caller's shapes. The output takes q's layout: heads inside rows (as a (B, L, E)
    projection split into heads is) or contiguous."""
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    q5, k4, v4, mask5 = _kernel_views(q, k, v, mask, batch, group)
    heads_inner = q.dim() >= 3 and q.shape[-3] > 1 and lq > 1 and q.stride(-3) < q.stride(-2)
    v_raw = bad_keys = None
    if mask is not None or causal:  # blocked non-finite values must contribute exactly 0
        v_clean, bad = _finite_split(v4)
        if bad is not None:
            v_raw, v4, bad_keys = v4.contiguous(), v_clean, bad.any(-1).contiguous()
    if grad:
        out, weights, lse = _KernelAttention.apply(q5, k4, v4, mask5, v_raw, bad_keys, causal,
                                                   scale, want_lse, heads_inner)
    else:
        out, weights, lse = _kernel.loaded().forward(q5, k4, v4, mask5, v_raw, bad_keys, causal,
                                                  scale, want_lse, _KERNEL_ROWS, heads_inner)
    return (out.view(*batch, lq, dv), weights.view(*batch, lq, lk),
            lse.view(*batch, lq) if want_lse else None)


def _explicit(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    *,
    batch: tuple[int, ...],
    group: int,
    return_lse: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Checked-input explicit attention -> (out, weights, lse or None) in the caller's shapes."""
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (q, k, v, mask)
    )
    if _why_not_kernel(q, mask, dropout_p) is None:
        return _explicit_kernel(q, k, v, mask, causal, scale, batch, group, return_lse, grad)
    q4, k3, v3 = _flatten(q, k, v, batch, group)
    k_bad = _keys_undo_mask(mask, k3)
    if grad and (dropout_p > 0.0 or (mask is not None and mask.requires_grad)):
        return _explicit_reference(q4, k3, v3, mask, causal, scale, dropout_p, batch,
                                   return_lse, k_bad)
    tiles = _MaskTiles(mask, batch, _work_dtype(q.dtype))
    if grad:
        out, weights, lse = _ExplicitAttention.apply(q4, k3, v3, tiles, causal, scale,
                                                     return_lse, k_bad)
    else:
        out, weights, lse = _explicit_forward(q4, k3, v3, tiles, causal, scale, dropout_p,
                                              return_lse, k_bad)
    return (
        out.view(*batch, lq, dv),
        weights.view(*batch, lq, lk),
        None if lse is None else lse.view(*batch, lq),
    )
