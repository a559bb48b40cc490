"""Scaled dot-product attention, exactly, with its weights or its logsumexp when asked.

    Attention(Q, K, V) = softmax(Q Kᵀ · scale + M) V,    scale = 1/√d_k by default

Shape legend::

    q       (..., H, Lq, d)      queries
    k       (..., H_kv, Lk, d)   keys: H_kv = H, or a divisor of H (grouped-query
                                 attention: query head h reads key head h // (H / H_kv))
    v       (..., H_kv, Lk, dv)  values
    mask    broadcastable to (..., H, Lq, Lk); bool: True where a query MAY attend a key,
            float: added to the scores (finite values or -inf)
    out     (..., H, Lq, dv)
    weights (..., H, Lq, Lk)     softmax probabilities before dropout; each row sums to 1,
                                 or is all 0 when every key of that row is masked
    lse     (..., H, Lq)         logsumexp of each row's scores (float32; float64 for
                                 float64 inputs); -inf for a row with no allowed key

Reference (what every softmax backend computes)::

    scores = q @ k.transpose(-2, -1) * scale + mask      # bool mask: -inf where False
    weights = softmax(scores, dim=-1)                    # fully-masked row -> zeros
    out = weights @ v
    lse = logsumexp(scores, dim=-1)

Backends (``backend=``)::

    "fused"     torch's kernel (F.scaled_dot_product_attention; for the logsumexp, its CPU
                flash kernel), O(N·d) memory, never weights
    "explicit"  scores and weights materialised tile by tile (attnlab.core.explicit): on
                CPU float32/float64, attnlab's compiled kernel when it is built
                (:func:`kernel_status`, :func:`why_not_kernel`), else PyTorch tiles
    "chunked"   FlashAttention's online softmax in PyTorch, O(N·d) memory, exact
                logsumexp (attnlab.core.chunked)
    "linear"    elu+1 linear attention: a different function (attnlab.core.linear)
    "auto"      "fused" unless :func:`why_not_fused` says why not; then "chunked" for a
                logsumexp without weights, else "explicit"

Masked-out keys and values (bool False, float -inf, or beyond the causal diagonal)
contribute exactly 0 on every backend, even when they hold NaN or inf; a row that does
attend a NaN gets NaN, as the formula says.
"""

from __future__ import annotations

import math
from typing import Any, Literal, cast, overload

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from attnlab.core._kernel import kernel_status
from attnlab.core._kernel import release_memory as release_kernel_memory
from attnlab.core._layout import aligned
from attnlab.core._tiles import (
    _all_finite,
    _check_dropout,
    _check_flag,
    _check_inputs,
    _check_scale,
    _dead_rows,
    _kv_batch,
    _merged_mask,
    default_scale,
)
from attnlab.core.chunked import _chunked, _weights_from_lse, _why_not_chunked
from attnlab.core.explicit import _explicit, _why_not_kernel
from attnlab.core.linear import _linear
from attnlab.core.masks import to_additive

__all__ = [
    "scaled_dot_product_attention",
    "BACKENDS",
    "default_scale",
    "why_not_fused",
    "why_not_kernel",
    "kernel_status",
    "count_flops",
    "release_kernel_memory",
]

BACKENDS = ("auto", "fused", "explicit", "chunked", "linear")

_flash_cpu = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


# --------------------------------------------------------------------------------------
# the fused path
# --------------------------------------------------------------------------------------


def _why_not_fused_lse(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, dropout_p: float
) -> str | None:
    """Why torch's CPU flash kernel cannot give the exact logsumexp here, or None."""
    why = "the logsumexp was requested, and torch's CPU flash kernel "
    if q.device.type != "cpu":
        return why + f"runs on CPU only (got {q.device})"
    if v.shape[-1] != q.shape[-1]:
        return why + f"needs dv == d (got dv={v.shape[-1]}, d={q.shape[-1]})"
    if max(q.dim(), k.dim(), v.dim()) > 4:
        return why + "takes at most 4 dims (B, H, L, d)"
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        return why + "needs non-empty sequences"
    if dropout_p > 0.0:
        return why + "would give it with dropout"
    if torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (q, k, v, mask)
    ):
        return why + "does not differentiate it (inputs require grad)"
    if causal and (mask is not None or q.shape[-2] != k.shape[-2]):
        return why + "would need the causal mask materialised as (Lq, Lk) floats"
    return None


def _why_not_fused(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
    return_weights: bool, return_lse: bool, dropout_p: float,
) -> str | None:
    if return_weights:
        return "weights were requested (the fused kernel never returns them)"
    if (mask is not None or causal) and not (_all_finite(k) and _all_finite(v)):
        return "k or v holds NaN/inf; the exact paths keep them out of rows that mask them"
    if return_lse:
        return _why_not_fused_lse(q, k, v, mask, causal, dropout_p)
    return None


def why_not_fused(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    return_weights: bool = False,
    return_lse: bool = False,
    dropout_p: float = 0.0,
) -> str | None:
    """Why ``backend="auto"`` would not take torch's fused kernel, or None if it would.

    >>> q = k = v = torch.randn(1, 1, 4, 8)
    >>> why_not_fused(q, k, v) is None
    True
    >>> why_not_fused(q, k, v, return_weights=True)
    'weights were requested (the fused kernel never returns them)'
    >>> why_not_fused(q, k, v[..., :4], return_lse=True)
    "the logsumexp was requested, and torch's CPU flash kernel needs dv == d (got dv=4, d=8)"
    """
    _check_inputs(q, k, v, mask)
    return _why_not_fused(q, k, v, mask, _check_flag("causal", causal),
                          _check_flag("return_weights", return_weights),
                          _check_flag("return_lse", return_lse), _check_dropout(dropout_p))


def why_not_kernel(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    dropout_p: float = 0.0,
    build: bool = True,
) -> str | None:
    """Why the explicit path (weights returned) would not run attnlab's compiled CPU kernel
    here, or None if it would. ``build=True`` (default) builds the kernel first if this
    process has not tried yet (about ten seconds the first time on a machine, then cached);
    ``build=False`` never does. :func:`kernel_status` tells how the kernel stands.

    >>> q = k = v = torch.randn(1, 1, 4, 8)
    >>> why_not_kernel(q.half(), k.half(), v.half(), build=False)
    'the kernel takes float32 and float64 (got torch.float16)'
    >>> why_not_kernel(q, k, v, dropout_p=0.1, build=False)
    'the kernel has no dropout'
    """
    _check_inputs(q, k, v, mask)
    return _why_not_kernel(q, mask, _check_dropout(dropout_p),
                           build=_check_flag("build", build))


def _fused(
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
) -> tuple[Tensor, Tensor | None]:
    """torch's kernels -> (out, lse or None); ``return_lse`` only where
    :func:`_why_not_fused_lse` allows it."""
    lq, lk = q.shape[-2], k.shape[-2]
    kv_batch = _kv_batch(batch, group)
    q = q.expand(*batch, *q.shape[-2:])
    k = k.expand(*kv_batch, *k.shape[-2:])
    v = v.expand(*kv_batch, *v.shape[-2:])
    extra = 4 - q.dim()
    if extra > 0:
        # torch's fast CPU kernels take only 4-D input; 3-D drops to its slow math path
        # (about 25x slower at N = 8192). Leading 1s change nothing, masks still broadcast.
        ones = (1,) * extra
        q, k, v = (t.reshape(*ones, *t.shape) for t in (q, k, v))
    square_causal = causal and lq == lk and mask is None
    if square_causal:
        merged = dead = None
    else:
        merged = _merged_mask(mask, causal, lq, lk, q.dtype, q.device)
        if return_lse and merged is not None and merged.dtype == torch.bool:
            merged = to_additive(merged, q.dtype)  # the flash kernel takes float masks only
        dead = _dead_rows(merged)
        if dead is not None and merged is not None:  # (dead rows: a mask)
            # Give fully-masked rows something finite to attend, then zero them: no NaN
            # forward or backward.
            merged = merged | dead if merged.dtype == torch.bool else merged.masked_fill(dead, 0.0)
    lse = None
    if return_lse:
        if merged is not None and merged.dim() != 4:  # the flash kernel takes 2-D or 4-D
            merged = merged.reshape((1,) * (4 - merged.dim()) + tuple(merged.shape))
        out, lse = _flash_cpu(q, k, v, 0.0, square_causal, attn_mask=merged, scale=scale)
    else:
        kw = {"enable_gqa": True} if group > 1 else {}
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=merged, dropout_p=dropout_p, is_causal=square_causal,
            scale=scale, **kw,
        )
    if dead is not None:
        out = out.masked_fill(dead, 0.0)
        if lse is not None:
            lse = lse.masked_fill(dead.squeeze(-1), -math.inf)
    if extra > 0:
        out = out.reshape(out.shape[extra:])
        lse = None if lse is None else lse.reshape(lse.shape[extra:])
    return out, lse


# --------------------------------------------------------------------------------------
# the dispatcher
# --------------------------------------------------------------------------------------


@overload
def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = ..., *, causal: bool = ...,
    scale: float | None = ..., dropout_p: float = ..., backend: str = ...,
    return_weights: Literal[False] = ..., return_lse: Literal[False] = ...,
) -> Tensor: ...


@overload
def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = ..., *, causal: bool = ...,
    scale: float | None = ..., dropout_p: float = ..., backend: str = ...,
    return_weights: Literal[True], return_lse: Literal[False] = ...,
) -> tuple[Tensor, Tensor]: ...


@overload
def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = ..., *, causal: bool = ...,
    scale: float | None = ..., dropout_p: float = ..., backend: str = ...,
    return_weights: Literal[False] = ..., return_lse: Literal[True],
) -> tuple[Tensor, Tensor]: ...


@overload
def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = ..., *, causal: bool = ...,
    scale: float | None = ..., dropout_p: float = ..., backend: str = ...,
    return_weights: Literal[True], return_lse: Literal[True],
) -> tuple[Tensor, Tensor, Tensor]: ...


@overload
def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = ..., *, causal: bool = ...,
    scale: float | None = ..., dropout_p: float = ..., backend: str = ...,
    return_weights: bool = ..., return_lse: bool = ...,
) -> Tensor | tuple[Tensor, Tensor] | tuple[Tensor, Tensor, Tensor]: ...


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    backend: str = "auto",
    return_weights: bool = False,
    return_lse: bool = False,
) -> Tensor | tuple[Tensor, Tensor] | tuple[Tensor, Tensor, Tensor]:
    """softmax(q kᵀ · scale + mask) v, never NaN for a fully-masked row.

    Args:
        q: queries ``(..., H, Lq, d)``.
        k: keys ``(..., H_kv, Lk, d)``; ``H_kv`` may divide ``H`` (grouped-query
            attention, k and v are never repeated in memory).
        v: values ``(..., H_kv, Lk, dv)``.
        mask: bool (True = may attend) or float (added to the scores; finite or -inf),
            broadcastable to ``(..., H, Lq, Lk)``.
        causal: query i may attend key j only if ``j <= i + (Lk - Lq)`` (bottom-right
            aligned, the KV-cache case). Combined with ``mask`` by logical and.
        scale: multiplies the scores: a finite, non-zero float; default
            :func:`default_scale` ``(d) = 1/sqrt(d)``.
        dropout_p: dropout on the weights applied to v, in [0, 1) (the returned weights
            and logsumexp are before dropout).
        backend: ``"auto"`` (default), ``"fused"``, ``"explicit"``, ``"chunked"`` or
            ``"linear"``; see the module's table. ``"fused"`` with inputs it would get
            wrong (NaN/inf in masked k or v) or a logsumexp its kernel cannot give exactly
            takes the chunked path (explicit under dropout or a mask that requires grad).
        return_weights: also return the weights ``(..., H, Lq, Lk)``.
        return_lse: also return the logsumexp ``(..., H, Lq)`` of each row's scores; without
            ``return_weights`` the ``(Lq, Lk)`` scores are never held for all rows at once.

    Returns:
        ``out (..., H, Lq, dv)``, then ``weights`` if ``return_weights``, then ``lse`` if
        ``return_lse``: ``out``, ``(out, weights)``, ``(out, lse)`` or
        ``(out, weights, lse)``.

    A row whose keys are all masked gives output 0, weights 0 and logsumexp -inf. Masked
    keys and values contribute exactly 0, whatever they hold (NaN and inf included).

    >>> q = k = v = torch.randn(2, 4, 5, 8)
    >>> out, w = scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)
    >>> out.shape, w.shape
    (torch.Size([2, 4, 5, 8]), torch.Size([2, 4, 5, 5]))
    >>> bool(torch.allclose(w.sum(-1), torch.ones(2, 4, 5)))
    True
    >>> from attnlab.core.masks import causal as causal_mask
    >>> out, lse = scaled_dot_product_attention(q, k, v, causal=True, return_lse=True)
    >>> scores = q @ k.transpose(-2, -1) * default_scale(8)
    >>> ref = torch.logsumexp(scores.masked_fill(~causal_mask(5), float("-inf")), dim=-1)
    >>> bool(torch.allclose(lse, ref, atol=1e-5))
    True
    """
    batch, group = _check_inputs(q, k, v, mask)
    q, k, v = aligned(q), aligned(k), aligned(v)  # rounding independent of placement
    causal = _check_flag("causal", causal)
    return_weights = _check_flag("return_weights", return_weights)
    return_lse = _check_flag("return_lse", return_lse)
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    scale = _check_scale(scale, q.shape[-1])
    dropout_p = _check_dropout(dropout_p)

    weights = lse = None
    if backend == "linear":
        if return_lse:
            raise ValueError("backend='linear' has no logsumexp (it has no softmax); "
                             "return_lse=True needs 'auto', 'fused', 'explicit' or 'chunked'")
        if dropout_p > 0.0:
            raise ValueError(f"the linear backend has no dropout; got dropout_p={dropout_p}")
        return _linear(q, k, v, mask, causal, return_weights, batch=batch, group=group)
    if backend == "fused" and return_weights:
        raise ValueError("backend='fused' cannot return weights; use 'explicit' or 'auto'")
    if backend in ("auto", "fused") and _why_not_fused(
        q, k, v, mask, causal, return_weights, return_lse, dropout_p
    ) is not None:
        exact_lse = backend == "fused" or (return_lse and not return_weights)
        backend = "chunked" if exact_lse and _why_not_chunked(q, k, v, mask, dropout_p) is None \
            else "explicit"
    if backend in ("auto", "fused"):
        out, lse = _fused(q, k, v, mask, causal, scale, dropout_p, batch=batch, group=group,
                          return_lse=return_lse)
    elif backend == "chunked":
        out, lse = _chunked(q, k, v, mask, causal, scale, dropout_p, batch=batch, group=group)
        if return_weights:
            weights = _weights_from_lse(q, k, lse, mask, causal, scale, batch=batch,
                                        group=group)
    else:
        out, weights, lse = _explicit(q, k, v, mask, causal, scale, dropout_p, batch=batch,
                                      group=group, return_lse=return_lse)
    res = (out,) + ((weights,) if return_weights else ()) + ((lse,) if return_lse else ())
    # (the backends above set the weights and the lse wherever they are asked for)
    return cast("Tensor | tuple[Tensor, Tensor] | tuple[Tensor, Tensor, Tensor]",
                res[0] if len(res) == 1 else res)


def count_flops(fn: Any, *args: Any, **kwargs: Any) -> int:
    """The FLOPs of ``fn(*args, **kwargs)`` (run without gradients) as
    ``torch.utils.flop_counter`` counts them: every matmul, torch's attention kernels, and
    the compiled kernel's ops (each (query, key) pair, masked or not, as torch counts its
    own attention). The kernel is loaded first, since the counter reads its table of
    formulas when it is made.

    >>> q = k = v = torch.randn(1, 2, 8, 4)   # (B, H, N, d): 2·8·8 (query, key) pairs
    >>> count_flops(scaled_dot_product_attention, q, k, v, return_weights=True)
    2048
    >>> 2 * (2 * 8 * 8) * (4 + 4)             # 2·d for q·k, 2·dv for the output, per pair
    2048
    """
    kernel_status(build=True)
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        fn(*args, **kwargs)
    return int(fc.get_total_flops())
