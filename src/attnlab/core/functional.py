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
    q: Tensor, k: Tensor, v: Tensor, *, return_weights: bool = False
) -> str | None:
    """Why the ``auto`` backend would not take torch's fused kernel, or None if it would."""
    if return_weights:
        return "weights were requested (the fused kernel never returns them)"
    if capture_active():
        return "an attnlab.capture context is recording weights"
    if not bool(torch.isfinite(v).all()):
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
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=merged, dropout_p=dropout_p, scale=scale
    )
    if dead is not None:
        out = out.masked_fill(dead, 0.0)
    return out


def _explicit(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
) -> tuple[Tensor, Tensor]:
    lq, lk = q.shape[-2], k.shape[-2]
    merged = _merged_mask(mask, causal, lq, lk, q.dtype, q.device)
    scores = torch.matmul(q, k.transpose(-2, -1)).mul_(scale)  # (..., Lq, Lk)
    if merged is not None:
        if merged.dtype == torch.bool:
            scores = scores.masked_fill(~merged, float("-inf"))
        else:
            scores = scores + merged
    dead = (scores == float("-inf")).all(dim=-1, keepdim=True)  # (..., Lq, 1)
    any_dead = bool(dead.any())
    if any_dead:
        scores = scores.masked_fill(dead, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if any_dead:
        weights = weights.masked_fill(dead, 0.0)
    p = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    finite_v = bool(torch.isfinite(v).all())
    if finite_v:
        out = torch.matmul(p, v)
    else:
        # 0 * NaN = NaN: compute with the non-finite entries zeroed, and keep the true
        # (non-finite) result only in rows that really give such a value weight > 0.
        bad = ~torch.isfinite(v)
        clean = torch.matmul(p, v.masked_fill(bad, 0.0))
        touched = torch.matmul((p > 0).to(v.dtype), bad.to(v.dtype)) > 0
        out = torch.where(touched, torch.matmul(p, v), clean)
    return out, weights


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
            or an ``attnlab.capture`` is recording); ``"fused"``, ``"explicit"``,
            ``"chunked"`` and ``"linear"`` force one.

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
    if backend == "fused" or (backend == "auto" and why_not_fused(q, k, v) is None
                              and not return_weights):
        return _fused(q, k, v, mask, causal, scale, dropout_p)
    out, weights = _explicit(q, k, v, mask, causal, scale, dropout_p)
    return (out, weights) if return_weights else out
