"""Linear attention (Katharopoulos et al., 2020): the exponential kernel replaced by φ(q)ᵀφ(k).

With the feature map ``φ(x) = elu(x) + 1`` (positive, so every weight is > 0)::

    out_i = Σ_j φ(q_i)ᵀφ(k_j) v_j / Σ_j φ(q_i)ᵀφ(k_j)
          = φ(q_i)ᵀ (Σ_j φ(k_j) v_jᵀ) / φ(q_i)ᵀ (Σ_j φ(k_j))

The second line costs O(N·d·dv) instead of O(N²·d): the sums over keys are shared by every
query. Under ``causal`` they become running sums, a recurrence
``S_t = S_{t-1} + φ(k_t) v_tᵀ``, ``z_t = z_{t-1} + φ(k_t)``, computed here chunk by chunk
(the "recurrent" form; ``chunk=1`` is the step-by-step RNN). The "parallel" form builds the
N x N matrix ``A = φ(Q)φ(K)ᵀ`` and normalizes its rows: the same numbers, quadratic cost,
and the only form that takes an arbitrary mask or returns weights.

Masks follow attnlab's convention: a bool mask zeroes ``A`` where False; a float mask
``M`` multiplies it by ``exp(M)`` (so -inf blocks, as in softmax attention). A row with
no visible key (or no key at all) gives 0. ``scale`` has no role here: the normalization
cancels any uniform factor and the feature map replaces the exponential. k and v may have
fewer heads than q (grouped-query: ``H % H_kv == 0``); the recurrent form then shares one
state per key head. Keys or values holding NaN/inf take the parallel form, which keeps
them out of every row that does not see them.

Shape legend::

    q (..., H, Lq, d)   k (..., H_kv, Lk, d)   v (..., H_kv, Lk, dv)
    out (..., H, Lq, dv)   weights (..., H, Lq, Lk)

>>> q, k, v = torch.randn(3, 1, 2, 50, 8).unbind(0)
>>> a = linear_attention(q, k, v, causal=True, form="parallel")
>>> b = linear_attention(q, k, v, causal=True, form="recurrent", chunk=16)
>>> bool(torch.allclose(a, b, atol=1e-5))
True
"""

from __future__ import annotations

from typing import Literal, overload

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.core._checks import check_int
from attnlab.core._tiles import (
    _all_finite,
    _check_flag,
    _check_inputs,
    _finite_split,
    _flatten,
    _kv_batch,
)
from attnlab.core.masks import causal as causal_mask

__all__ = ["linear_attention", "elu_feature_map"]

FORMS = ("auto", "parallel", "recurrent")


def elu_feature_map(x: Tensor) -> Tensor:
    """φ(x) = elu(x) + 1 > 0.

    >>> elu_feature_map(torch.tensor([-100.0, 0.0, 2.0])).tolist()
    [0.0, 1.0, 3.0]
    """
    return F.elu(x) + 1.0


def _safe_div(num: Tensor, den: Tensor) -> Tensor:
    return num / torch.where(den > 0, den, torch.ones_like(den))


def _parallel(
    fq4: Tensor, fk3: Tensor, v3: Tensor, mask: Tensor | None, causal: bool,
    batch: tuple[int, ...], k_bad: bool,
) -> tuple[Tensor, Tensor]:
    """The N x N form: A = φ(Q)φ(K)ᵀ masked, rows normalised, times V."""
    n, group, lq, f = fq4.shape
    lk, dv = v3.shape[-2:]
    a = torch.matmul(fq4.reshape(n, group * lq, f), fk3.transpose(1, 2))
    a = a.view(*batch, lq, lk)  # (..., H, Lq, Lk), > 0
    if causal:
        a = a.masked_fill(~causal_mask(lq, lk, device=a.device), 0.0)
    if mask is not None:
        if mask.dtype == torch.bool:
            a = a.masked_fill(~mask, 0.0)
        else:
            factor = torch.exp(mask.to(a.dtype))
            a = a * factor
            if k_bad:  # NaN · 0 is NaN: blocked keys are blocked whatever they hold
                a = a.masked_fill(factor == 0, 0.0)
    w = _safe_div(a, a.sum(dim=-1, keepdim=True))  # rows sum to 1, or are all 0
    w3 = w.reshape(n, group * lq, lk)
    v_clean, bad = _finite_split(v3)
    if bad is None:
        out = w3 @ v3
    else:  # as in the explicit path: only rows that give a bad value weight > 0 see it
        touched = ((w3 > 0).to(v3.dtype) @ bad.to(v3.dtype)) > 0
        out = torch.where(touched, w3 @ v3, w3 @ v_clean)
    return out.view(*batch, lq, dv), w


def _causal_scan(fq: Tensor, fk: Tensor, v: Tensor, chunk: int, s0: Tensor, z0: Tensor) -> Tensor:
    """Causal linear attention with Lq == Lk and initial state (s0, z0), chunk by chunk.

    fq (n, G, L, f) (G query heads per key head); fk (n, L, f); v (n, L, dv);
    s0 (n, f, dv); z0 (n, f) -> (n, G, L, dv).
    """
    n, group, length, f = fq.shape
    dv = v.shape[-1]
    pad = (-length) % chunk
    if pad:  # padded keys have φ(k) = 0 and add nothing
        fq = F.pad(fq, (0, 0, 0, pad))
        fk = F.pad(fk, (0, 0, 0, pad))
        v = F.pad(v, (0, 0, 0, pad))
    t = fk.shape[1] // chunk
    qc = fq.reshape(n, group, t, chunk, f)
    kc = fk.reshape(n, t, chunk, f)
    vc = v.reshape(n, t, chunk, dv)
    kv = kc.transpose(-2, -1) @ vc  # (n, T, f, dv): each chunk's Σ φ(k) vᵀ
    s_prev = torch.cumsum(kv, dim=1) - kv + s0[:, None]  # state entering each chunk
    zc = kc.sum(dim=2)  # (n, T, f)
    z_prev = torch.cumsum(zc, dim=1) - zc + z0[:, None]
    intra = (qc @ kc.transpose(-2, -1)[:, None]).tril()  # (n, G, T, C, C)
    num = intra @ vc[:, None] + qc @ s_prev[:, None]  # (n, G, T, C, dv)
    den = intra.sum(dim=-1, keepdim=True) + (qc * z_prev[:, None, :, None]).sum(-1, keepdim=True)
    return _safe_div(num, den).reshape(n, group, t * chunk, dv)[:, :, :length]


def _recurrent(
    fq4: Tensor, fk3: Tensor, v3: Tensor, key_factor: Tensor | None, causal: bool, chunk: int
) -> Tensor:
    """The O(N·d·dv) form on fq4 (n, G, Lq, f), fk3 (n, Lk, f), v3 (n, Lk, dv), with
    ``key_factor`` (n, Lk, 1) scaling each key's φ(k) -> (n, G, Lq, dv)."""
    n, group, lq, f = fq4.shape
    lk, dv = v3.shape[-2:]
    if key_factor is not None:
        fk3 = fk3 * key_factor
    if not causal:
        s = fk3.transpose(1, 2) @ v3  # (n, f, dv)
        z = fk3.sum(dim=1)  # (n, f)
        fq = fq4.reshape(n, group * lq, f)
        out = _safe_div(fq @ s, (fq * z[:, None]).sum(-1, keepdim=True))
        return out.view(n, group, lq, dv)
    offset = lk - lq
    if offset >= 0:  # the first `offset` keys are seen by every query: the initial state
        s0 = fk3[:, :offset].transpose(1, 2) @ v3[:, :offset]
        z0 = fk3[:, :offset].sum(dim=1)
        return _causal_scan(fq4, fk3[:, offset:], v3[:, offset:], chunk, s0, z0)
    out = fq4.new_zeros(n, group, lq, dv)
    if lk > 0:  # the first -offset queries see no key: output 0
        s0, z0 = fq4.new_zeros(n, f, dv), fq4.new_zeros(n, f)
        out[:, :, -offset:] = _causal_scan(fq4[:, :, -offset:], fk3, v3, chunk, s0, z0)
    return out


def _linear(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
    return_weights: bool = False, form: str = "auto", chunk: int = 64, *,
    batch: tuple[int, ...], group: int,
) -> Tensor | tuple[Tensor, Tensor]:
    """Checked-input core of :func:`linear_attention` (also the ``"linear"`` backend)."""
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    fq4, fk3, v3 = _flatten(elu_feature_map(q), elu_feature_map(k), v, batch, group)
    m = None
    if mask is not None:  # (..., H or 1, Lq or 1, Lk or 1): as many dims as the scores
        m = mask.reshape((1,) * (len(batch) + 2 - mask.dim()) + tuple(mask.shape))
    # the recurrent form shares one state per key head: a key mask, the same for a group
    key_only = m is None or (m.shape[-2] == 1 and (group == 1 or m.shape[-3] == 1))
    if form == "recurrent" and not key_only and mask is not None:  # (not key_only: a mask)
        raise ValueError(
            "form='recurrent' takes only key masks (broadcastable to (..., 1, Lk), the same "
            f"for the query heads that share a key head); got mask of shape "
            f"{tuple(mask.shape)}; use form='parallel'"
        )
    finite = _all_finite(fk3) and _all_finite(v3)
    if return_weights or form == "parallel" or not key_only or not finite:
        out, w = _parallel(fq4, fk3, v3, mask, causal, batch, k_bad=not finite)
        return (out, w) if return_weights else out
    factor = None
    if m is not None:
        kv_batch = _kv_batch(batch, group)
        m = m if m.dtype == torch.bool else torch.exp(m.to(q.dtype))
        factor = m.to(q.dtype).expand(*kv_batch, 1, lk).reshape(fk3.shape[0], lk, 1)
    out = _recurrent(fq4, fk3, v3, factor, causal, chunk)  # (n_kv, G, Lq, dv)
    return out.view(*batch, lq, dv)


@overload
def linear_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = ..., *, causal: bool = ...,
    return_weights: Literal[False] = ..., form: str = ..., chunk: int = ...,
) -> Tensor: ...


@overload
def linear_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = ..., *, causal: bool = ...,
    return_weights: Literal[True], form: str = ..., chunk: int = ...,
) -> tuple[Tensor, Tensor]: ...


@overload
def linear_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = ..., *, causal: bool = ...,
    return_weights: bool = ..., form: str = ..., chunk: int = ...,
) -> Tensor | tuple[Tensor, Tensor]: ...


def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    return_weights: bool = False,
    form: str = "auto",
    chunk: int = 64,
) -> Tensor | tuple[Tensor, Tensor]:
    """elu+1 linear attention; ``(out, weights)`` with ``return_weights``.

    Args:
        q: ``(..., H, Lq, d)``. k: ``(..., H_kv, Lk, d)``. v: ``(..., H_kv, Lk, dv)``.
        mask: bool or float, broadcastable to ``(..., H, Lq, Lk)``.
        causal: bottom-right aligned, as everywhere in attnlab.
        return_weights: also return the normalised weights ``(..., H, Lq, Lk)``.
        form: ``"recurrent"`` (O(N·d·dv), key masks only), ``"parallel"`` (O(N²), any mask,
            the only form with weights), ``"auto"`` (recurrent when it can).
        chunk: rows per chunk of the recurrent causal scan.

    Returns:
        ``out (..., H, Lq, dv)``, or ``(out, weights)``. An empty sequence gives an empty
        output (``Lq = 0``) or zeros (``Lk = 0``: no key to attend).
    """
    batch, group = _check_inputs(q, k, v, mask)
    causal = _check_flag("causal", causal)
    return_weights = _check_flag("return_weights", return_weights)
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    chunk = check_int("chunk", chunk, minimum=1)
    return _linear(q, k, v, mask, causal, return_weights, form, chunk, batch=batch,
                   group=group)
