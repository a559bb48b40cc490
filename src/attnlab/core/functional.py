"""Scaled dot-product attention, exactly and with its weights when asked.

    Attention(Q, K, V) = softmax(Q Kᵀ · scale + M) V,    scale = 1/√d_k by default

Shape legend::

    q       (..., Lq, d)     queries
    k       (..., Lk, d)     keys
    v       (..., Lk, dv)    values
    mask    broadcastable to (..., Lq, Lk); bool: True where a query MAY attend a key,
            float: added to the scores
    out     (..., Lq, dv)
    weights (..., Lq, Lk)    softmax probabilities before dropout; each row sums to 1,
                             or is all 0 when every key of that row is masked

Reference (what every backend computes)::

    scores = q @ k.transpose(-2, -1) * scale + mask      # bool mask: -inf where False
    weights = softmax(scores, dim=-1)                    # fully-masked row -> zeros
    out = weights @ v
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "scaled_dot_product_attention",
    "BACKENDS",
    "capture_active",
    "weights_requested",
    "why_not_fused",
]

BACKENDS = ("auto", "fused", "explicit", "chunked", "linear")

# Number of active capture contexts. While positive, attention computes its weights on the
# explicit path so that observers (see ``attnlab.trace``) can record them.
_CAPTURE_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("attnlab_capture", default=0)


def capture_active() -> bool:
    """True while some ``attnlab.capture`` context wants attention weights."""
    return _CAPTURE_DEPTH.get() > 0


@contextlib.contextmanager
def weights_requested() -> Iterator[None]:
    """Within this context every attnlab attention computes (and exposes) its weights."""
    token = _CAPTURE_DEPTH.set(_CAPTURE_DEPTH.get() + 1)
    try:
        yield
    finally:
        _CAPTURE_DEPTH.reset(token)


# --------------------------------------------------------------------------------------
# argument checking (public boundary)
# --------------------------------------------------------------------------------------


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(
                f"{name} must have shape (..., L, d) with at least 2 dims, got shape "
                f"{tuple(t.shape)}"
            )
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k, v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dim d, got q {tuple(q.shape)} and k "
            f"{tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length Lk (dim -2), got k {tuple(k.shape)} and v "
            f"{tuple(v.shape)}"
        )
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"batch dims of q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} "
            f"do not broadcast"
        ) from None


def _check_mask(mask: Tensor, scores_shape: tuple[int, ...]) -> None:
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(
            f"mask must be bool (True = may attend) or floating (added to the scores), got "
            f"dtype {mask.dtype}"
        )
    try:
        shape = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        shape = None
    if shape != torch.Size(scores_shape):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"(..., Lq, Lk) = {tuple(scores_shape)}"
        )


def _scores_shape(q: Tensor, k: Tensor, v: Tensor) -> tuple[int, ...]:
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    return (*batch, q.shape[-2], k.shape[-2])


# --------------------------------------------------------------------------------------
# masks as the backends need them
# --------------------------------------------------------------------------------------


def _causal_bool(lq: int, lk: int, device: torch.device) -> Tensor:
    """(Lq, Lk) bool, bottom-right aligned: query i may see key j iff j <= i + (Lk - Lq)."""
    return torch.ones(lq, lk, dtype=torch.bool, device=device).tril(diagonal=lk - lq)


def _merged_mask(
    mask: Tensor | None, causal: bool, lq: int, lk: int, dtype: torch.dtype, device: torch.device
) -> Tensor | None:
    """One mask (bool, or float of ``dtype``) equivalent to ``mask`` and ``causal`` together."""
    if causal:
        c = _causal_bool(lq, lk, device)
        if mask is None:
            return c
        if mask.dtype == torch.bool:
            return mask & c
        return mask.to(dtype).masked_fill(~c, float("-inf"))
    if mask is not None and mask.dtype != torch.bool and mask.dtype != dtype:
        return mask.to(dtype)
    return mask


def _dead_rows(mask: Tensor | None) -> Tensor | None:
    """Bool (..., Lq, 1): rows where no key may be attended, or None when there are none."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        dead = ~mask.any(dim=-1, keepdim=True)
    else:
        dead = (mask == float("-inf")).all(dim=-1, keepdim=True)
    return dead if bool(dead.any()) else None


# --------------------------------------------------------------------------------------
# backends
# --------------------------------------------------------------------------------------


def why_not_fused(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    return_weights: bool = False,
    mask: Tensor | None = None,
    causal: bool = False,
) -> str | None:
    """Why the ``auto`` backend would not take torch's fused kernel, or None if it would.

    >>> q = k = v = torch.randn(1, 1, 4, 8)
    >>> why_not_fused(q, k, v) is None
    True
    >>> why_not_fused(q, k, v, return_weights=True)
    'weights were requested (the fused kernel never returns them)'
    """
    if return_weights:
        return "weights were requested (the fused kernel never returns them)"
    if capture_active():
        return "an attnlab.capture context is recording weights"
    if (mask is not None or causal) and not _all_finite(v):
        return "v holds NaN/inf; the explicit path keeps them out of rows that mask them"
    return None


def _fused(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
) -> Tensor:
    lq, lk = q.shape[-2], k.shape[-2]
    if causal and lq == lk and mask is None:
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale
        )
    merged = _merged_mask(mask, causal, lq, lk, q.dtype, q.device)
    dead = _dead_rows(merged)
    if dead is not None:
        # Give fully-masked rows something finite to attend, then zero them: no NaN forward
        # or backward.
        if merged.dtype == torch.bool:
            merged = merged | dead
        else:
            merged = merged.masked_fill(dead, 0.0)
    if q.shape[:-2] != k.shape[:-2] or q.shape[:-2] != v.shape[:-2]:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        q = q.expand(*batch, *q.shape[-2:])
        k = k.expand(*batch, *k.shape[-2:])
        v = v.expand(*batch, *v.shape[-2:])
    extra = 4 - q.dim()
    if extra > 0:
        # torch's fast CPU kernels take only 4-D input; 3-D drops to its slow math path
        # (about 25x slower at N = 8192). Leading 1s change nothing, masks still broadcast.
        ones = (1,) * extra
        q, k, v = (t.reshape(*ones, *t.shape) for t in (q, k, v))
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=merged, dropout_p=dropout_p, scale=scale
    )
    if extra > 0:
        out = out.reshape(out.shape[extra:])
    if dead is not None:
        out = out.masked_fill(dead, 0.0)
    return out


# --------------------------------------------------------------------------------------
# the explicit path: scores and weights materialized, tile by tile
# --------------------------------------------------------------------------------------

#: Bytes of scores per tile. Each tile is a view into the weights tensor, written once by
#: one GEMM, masked and softmaxed in place and multiplied by V while it is still hot, so
#: the size costs no memory; it trades cache residency (small) against the per-call cost
#: of torch's thread pool (large), which dominates on a busy machine.
_TILE_BYTES = 32 << 20
#: Fewer rows than this per tile costs more in per-call overhead than cache misses save.
_MIN_ROWS = 32
#: Under ``causal`` the rows are cut into this many blocks (all heads at once), so that
#: the keys no row of a block may see (about 3/8 of them) are neither multiplied nor
#: exponentiated.
_CAUSAL_BLOCKS = 4


def _tile_grid(
    n: int, lq: int, lk: int, itemsize: int, causal: bool = False
) -> Iterator[tuple[int, int, int, int]]:
    """(h0, h1, r0, r1): heads [h0, h1) x query rows [r0, r1).

    Small maps go several heads at a time (all rows); large ones one head and a block of
    rows at a time, so that ``weights[h0:h1, r0:r1]`` is one contiguous piece (softmax in
    place). Under ``causal`` every head goes at once, in a few blocks of rows.
    """
    per_head = max(1, lq * lk * itemsize)
    if causal and lq >= _CAUSAL_BLOCKS * _MIN_ROWS:
        rows = min(-(-lq // _CAUSAL_BLOCKS), _TILE_BYTES // max(1, n * lk * itemsize))
        rows = max(_MIN_ROWS, rows)
        for r0 in range(0, lq, rows):
            yield 0, n, r0, min(lq, r0 + rows)
        return
    if per_head <= _TILE_BYTES:
        g = max(1, _TILE_BYTES // per_head)
        for h0 in range(0, n, g):
            yield h0, min(n, h0 + g), 0, lq
        return
    rows = max(_MIN_ROWS, _TILE_BYTES // max(1, lk * itemsize))
    for h in range(n):
        for r0 in range(0, lq, rows):
            yield h, h + 1, r0, min(lq, r0 + rows)


class _MaskTiles:
    """Hands out the piece of a broadcastable mask under one tile, without expanding it."""

    def __init__(self, mask: Tensor | None, batch: tuple[int, ...], dtype: torch.dtype) -> None:
        self.mask = None
        self.is_bool = False
        if mask is None:
            return
        self.is_bool = mask.dtype == torch.bool
        if not self.is_bool and mask.dtype != dtype:
            mask = mask.to(dtype)
        m = mask.reshape((1,) * (len(batch) + 2 - mask.dim()) + tuple(mask.shape))
        self.shared = all(s == 1 for s in m.shape[:-2])
        self.mask = m.reshape(m.shape[-2:]) if self.shared else m.expand(*batch, *m.shape[-2:])
        self.batch = batch
        self._flat: Tensor | None = None

    def tile(self, h0: int, h1: int, r0: int, r1: int, c1: int, c0: int = 0) -> Tensor | None:
        """The mask under heads [h0, h1), rows [r0, r1), keys [c0, c1); broadcastable."""
        m = self.mask
        if m is None:
            return None
        rows = slice(r0, r1) if m.shape[-2] > 1 else slice(None)
        cols = slice(c0, c1) if m.shape[-1] > 1 else slice(None)
        if self.shared:
            return m[rows, cols]
        if h1 - h0 == 1:
            idx, h = [], h0
            for s in reversed(self.batch):
                idx.append(h % s)
                h //= s
            return m[tuple(reversed(idx))][rows, cols]
        if h0 == 0 and h1 == math.prod(self.batch):
            piece = m[..., rows, cols]
            return piece.reshape(-1, *piece.shape[-2:])  # copies at most one tile
        if self._flat is None:
            self._flat = m.reshape(-1, *m.shape[-2:])
        return self._flat[h0:h1, rows, cols]


def _all_finite(v: Tensor) -> bool:
    """No NaN/inf in v. One reduction, no temporary: a NaN or inf anywhere makes the sum
    non-finite; only then (or on overflow) is each entry checked."""
    return bool(torch.isfinite(v.sum())) or bool(torch.isfinite(v).all())


def _finite_split(v: Tensor) -> tuple[Tensor, Tensor | None]:
    """(v with NaN/inf zeroed, bool map of where they were) or (v, None) if all finite."""
    if _all_finite(v):
        return v, None
    bad = ~torch.isfinite(v)
    return v.masked_fill(bad, 0.0), bad


def _causal_fill_(s: Tensor, r0: int, offset: int, cache: dict) -> None:
    """Set -inf where key j > query i + offset, for a tile of rows [r0, ...) and keys [0, c).

    Only the last columns of a tile hold blocked keys, and with equal-sized row blocks
    their pattern repeats: ``cache`` keeps each triangle once per call.
    """
    rows, c = s.shape[-2], s.shape[-1]
    first = max(0, r0 + offset + 1)  # first key column any row of this tile must not see
    if first < c:
        key = (rows, c - first, r0 + offset - first + 1)
        blocked = cache.get(key)
        if blocked is None:
            blocked = torch.ones(rows, c - first, dtype=torch.bool, device=s.device)
            blocked = cache[key] = blocked.triu(key[2])
        s[..., first:].masked_fill_(blocked, float("-inf"))


def _explicit_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Weights and output, one cache-sized tile of score rows at a time, no autograd.

    Per tile: ``S = scale·Q_tile Kᵀ (+ float mask)`` by one GEMM written straight into
    the weights tensor (``baddbmm`` with alpha; under ``causal`` only the keys some row
    of the tile may see), blocked entries set to -inf in place, softmax in place, and
    ``out_tile = P_tile V`` while the tile is still in cache. No N x N temporary exists
    besides the weights themselves.
    """
    batch = tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    lq, d = q.shape[-2:]
    lk, dv = v.shape[-2:]
    n = math.prod(batch)
    # half precision: weights are stored in it, but each tile is computed in float32
    low = q.dtype in (torch.float16, torch.bfloat16)
    work = torch.float32 if low else q.dtype
    q3 = q.expand(*batch, lq, d).reshape(n, lq, d).to(work)  # (n, Lq, d)
    k3 = k.expand(*batch, lk, d).reshape(n, lk, d).to(work)  # (n, Lk, d)
    v3 = v.expand(*batch, lk, dv).reshape(n, lk, dv).to(work)  # (n, Lk, dv)
    weights = q.new_empty(n, lq, lk)  # (n, Lq, Lk)
    out = q3.new_empty(n, lq, dv)  # (n, Lq, dv)
    masked = mask is not None or causal
    v_clean, bad = _finite_split(v3) if masked else (v3, None)
    tiles = _MaskTiles(mask, batch, work)
    offset = lk - lq  # bottom-right causal alignment
    may_die = mask is not None or (causal and lq > lk)
    triangles: dict = {}
    for h0, h1, r0, r1 in _tile_grid(n, lq, lk, q3.element_size(), causal):
        c = max(0, min(lk, r1 + offset)) if causal else lk  # keys some row here may see
        w = weights[h0:h1, r0:r1]  # (g, rows, Lk); contiguous unless causal
        if c == 0 or lk == 0:
            w.zero_()
            out[h0:h1, r0:r1].zero_()
            continue
        m = tiles.tile(h0, h1, r0, r1, c)
        kt = k3[h0:h1, :c].transpose(1, 2)  # (g, d, c)
        # In place in the weights when the tile is one contiguous block; otherwise in a
        # tile-sized scratch (torch's GEMMs into strided outputs take a slow path).
        in_place = w.is_contiguous() and c == lk and not low
        if in_place:
            s = w
            if m is not None and not tiles.is_bool:
                torch.baddbmm(m, q3[h0:h1, r0:r1], kt, alpha=scale, out=s)
            else:
                torch.baddbmm(s, q3[h0:h1, r0:r1], kt, beta=0.0, alpha=scale, out=s)
        elif m is not None and not tiles.is_bool:
            s = torch.baddbmm(m, q3[h0:h1, r0:r1], kt, alpha=scale)  # (g, rows, c)
        else:
            s = torch.bmm(q3[h0:h1, r0:r1], kt).mul_(scale)  # (g, rows, c)
        if m is not None and tiles.is_bool:
            s.masked_fill_(~m, float("-inf"))
        if causal:
            _causal_fill_(s, r0, offset, triangles)
        dead = None
        if may_die:
            dead = s.amax(dim=-1, keepdim=True) == float("-inf")  # (g, rows, 1)
            if not bool(dead.any()):
                dead = None
        torch.softmax(s, dim=-1, out=s)
        if dead is not None:
            s.masked_fill_(dead, 0.0)
        if not in_place:
            w[..., :c] = s
            if c < lk:
                w[..., c:] = 0.0
        p = F.dropout(s, p=dropout_p) if dropout_p > 0.0 else s
        o = out[h0:h1, r0:r1]
        if bad is None:
            if o.is_contiguous():
                torch.bmm(p, v3[h0:h1, :c], out=o)
            else:
                o[...] = torch.bmm(p, v3[h0:h1, :c])
        else:
            # 0 * NaN = NaN: use the zeroed values, except in rows that really give a
            # non-finite value weight > 0, which get the true (non-finite) result.
            clean = torch.bmm(p, v_clean[h0:h1, :c])
            touched = torch.bmm((p > 0).to(p.dtype), bad[h0:h1, :c].to(p.dtype)) > 0
            o[...] = torch.where(touched, torch.bmm(p, v3[h0:h1, :c]), clean)
    return out.view(*batch, lq, dv).to(q.dtype), weights.view(*batch, lq, lk)


class _ExplicitAttention(torch.autograd.Function):
    """The tiled explicit path with a tiled backward through the saved weights.

    With ``P`` the weights and ``dO``, ``dP`` the incoming gradients::

        dV = Pᵀ dO
        dS = P ∘ (dP' − rowsum(P ∘ dP')),   dP' = dO Vᵀ + dP
        dQ = scale · dS K,   dK = scale · dSᵀ Q
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, scale):  # type: ignore[override]
        out, weights = _explicit_forward(q, k, v, mask, causal, scale)
        ctx.save_for_backward(q, k, v, weights)
        ctx.mask, ctx.causal, ctx.scale = mask, causal, scale
        ctx.set_materialize_grads(False)
        return out, weights

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, d_weights):  # type: ignore[override]
        q, k, v, weights = ctx.saved_tensors
        causal, scale = ctx.causal, ctx.scale
        lq, d = q.shape[-2:]
        lk, dv = v.shape[-2:]
        n = math.prod(q.shape[:-2])
        q3, k3 = q.reshape(n, lq, d), k.reshape(n, lk, d)
        v3 = _finite_split(v.reshape(n, lk, dv))[0]
        p3 = weights.view(n, lq, lk)
        do3 = None if d_out is None else d_out.reshape(n, lq, dv)
        dw3 = None if d_weights is None else d_weights.reshape(n, lq, lk)
        dq, dk, dv_ = torch.zeros_like(q3), torch.zeros_like(k3), torch.zeros_like(v3)
        offset = lk - lq
        for h0, h1, r0, r1 in _tile_grid(n, lq, lk, q3.element_size(), causal):
            c = max(0, min(lk, r1 + offset)) if causal else lk
            if c == 0 or (do3 is None and dw3 is None):
                continue
            p = p3[h0:h1, r0:r1, :c]  # (g, rows, c)
            if do3 is not None:
                do = do3[h0:h1, r0:r1]  # (g, rows, dv)
                dv_[h0:h1, :c] += torch.bmm(p.transpose(1, 2), do)
                ds = torch.bmm(do, v3[h0:h1, :c].transpose(1, 2))  # dP' (g, rows, c)
                if dw3 is not None:
                    ds.add_(dw3[h0:h1, r0:r1, :c])
            else:
                ds = dw3[h0:h1, r0:r1, :c].clone()
            ds.mul_(p)
            ds.addcmul_(p, ds.sum(dim=-1, keepdim=True), value=-1.0)  # dS
            dq[h0:h1, r0:r1] = torch.bmm(ds, k3[h0:h1, :c]).mul_(scale)
            dk[h0:h1, :c] += torch.bmm(ds.transpose(1, 2), q3[h0:h1, r0:r1]).mul_(scale)
        need = ctx.needs_input_grad
        return (
            dq.view(q.shape) if need[0] else None,
            dk.view(k.shape) if need[1] else None,
            dv_.view(v.shape) if need[2] else None,
            None,
            None,
            None,
        )


def _explicit_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
) -> tuple[Tensor, Tensor]:
    """The formula with plain autograd ops: for dropout in training and learned masks."""
    lq, lk = q.shape[-2], k.shape[-2]
    merged = _merged_mask(mask, causal, lq, lk, q.dtype, q.device)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (..., Lq, Lk)
    if merged is not None:
        if merged.dtype == torch.bool:
            scores = scores.masked_fill(~merged, float("-inf"))
        else:
            scores = scores + merged
    dead = scores.detach().amax(dim=-1, keepdim=True) == float("-inf")  # (..., Lq, 1)
    any_dead = bool(dead.any())
    if any_dead:
        scores = scores.masked_fill(dead, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if any_dead:
        weights = weights.masked_fill(dead, 0.0)
    p = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    v_clean, bad = _finite_split(v)
    if bad is None:
        return torch.matmul(p, v), weights
    clean = torch.matmul(p, v_clean)
    touched = torch.matmul((p.detach() > 0).to(v.dtype), bad.to(v.dtype)) > 0
    return torch.where(touched, torch.matmul(p, v), clean), weights


def _explicit(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
) -> tuple[Tensor, Tensor]:
    grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (q, k, v, mask)
    )
    if not grad:
        return _explicit_forward(q, k, v, mask, causal, scale, dropout_p)
    if dropout_p > 0.0 or (mask is not None and mask.requires_grad):
        return _explicit_reference(q, k, v, mask, causal, scale, dropout_p)
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    q = q.expand(*batch, *q.shape[-2:])
    k = k.expand(*batch, *k.shape[-2:])
    v = v.expand(*batch, *v.shape[-2:])
    return _ExplicitAttention.apply(q, k, v, mask, causal, scale)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
    backend: str = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(q kᵀ · scale + mask) v, never NaN for a fully-masked row.

    Args:
        q: queries ``(..., Lq, d)``.
        k: keys ``(..., Lk, d)``.
        v: values ``(..., Lk, dv)``.
        mask: bool (True = may attend) or float (added to the scores), broadcastable to
            ``(..., Lq, Lk)``.
        causal: query i may attend key j only if ``j <= i + (Lk - Lq)`` (bottom-right
            aligned, the KV-cache case). Combined with ``mask`` by logical and.
        scale: multiplies the scores; default ``1/sqrt(d)``.
        dropout_p: dropout on the weights applied to v (the returned weights are before
            dropout).
        return_weights: also return the weights ``(..., Lq, Lk)``.
        backend: ``"auto"`` takes torch's fused kernel unless weights are needed (asked for,
            or an ``attnlab.capture`` is recording), then ``"explicit"``. Or force one:
            ``"fused"`` (torch's SDPA; never weights), ``"explicit"`` (scores and weights
            materialized tile by tile, each written once), ``"chunked"`` (FlashAttention's
            online softmax, O(N·d) memory; see :func:`attnlab.chunked_attention` for the
            logsumexp), ``"linear"`` (elu+1 linear attention: a different function, see
            :func:`attnlab.linear_attention`).

    Returns:
        ``out`` of shape ``(..., Lq, dv)``, or ``(out, weights)`` if ``return_weights``.

    A row whose keys are all masked gives output 0 and weights 0; NaN/inf sitting in masked
    positions of v does not reach rows that mask it.

    >>> q = k = v = torch.randn(2, 4, 5, 8)
    >>> out, w = scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)
    >>> out.shape, w.shape
    (torch.Size([2, 4, 5, 8]), torch.Size([2, 4, 5, 5]))
    >>> bool(torch.allclose(w.sum(-1), torch.ones(2, 4, 5)))
    True
    """
    _check_qkv(q, k, v)
    shape = _scores_shape(q, k, v)
    if mask is not None:
        _check_mask(mask, shape)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    elif not isinstance(scale, (int, float)) or isinstance(scale, bool):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    scale = float(scale)

    if backend in ("chunked", "linear"):
        from attnlab.core import _backends  # grown by the fast-backends module

        return _backends.dispatch(
            backend, q, k, v, mask, causal=causal, scale=scale, dropout_p=dropout_p,
            return_weights=return_weights,
        )
    if backend == "fused" and return_weights:
        raise ValueError("backend='fused' cannot return weights; use 'explicit' or 'auto'")
    if backend == "fused" or (
        backend == "auto"
        and why_not_fused(q, k, v, return_weights=return_weights, mask=mask, causal=causal) is None
    ):
        return _fused(q, k, v, mask, causal, scale, dropout_p)
    out, weights = _explicit(q, k, v, mask, causal, scale, dropout_p)
    return (out, weights) if return_weights else out
