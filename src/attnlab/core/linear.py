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
no visible key gives 0. ``scale`` has no role here: the normalization cancels any
uniform factor and the feature map replaces the exponential.

>>> q, k, v = torch.randn(3, 1, 2, 50, 8).unbind(0)
>>> a = linear_attention(q, k, v, causal=True, form="parallel")
>>> b = linear_attention(q, k, v, causal=True, form="recurrent", chunk=16)
>>> bool(torch.allclose(a, b, atol=1e-5))
True
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.core.functional import _check_mask, _check_qkv, _scores_shape

__all__ = ["linear_attention", "elu_feature_map"]

FORMS = ("auto", "parallel", "recurrent")


def elu_feature_map(x: Tensor) -> Tensor:
    """φ(x) = elu(x) + 1 > 0."""
    return F.elu(x) + 1.0


def _mask_factor(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """The multiplicative form of a mask: bool -> 0/1, float M -> exp(M)."""
    return mask.to(dtype) if mask.dtype == torch.bool else torch.exp(mask.to(dtype))


def _safe_div(num: Tensor, den: Tensor) -> Tensor:
    return num / torch.where(den > 0, den, torch.ones_like(den))


def _parallel(
    fq: Tensor, fk: Tensor, v: Tensor, mask: Tensor | None, causal: bool
) -> tuple[Tensor, Tensor]:
    lq, lk = fq.shape[-2], fk.shape[-2]
    a = fq @ fk.transpose(-2, -1)  # (..., Lq, Lk), > 0
    if causal:
        allowed = torch.ones(lq, lk, dtype=torch.bool, device=a.device).tril(lk - lq)
        a = a.masked_fill(~allowed, 0.0)
    if mask is not None:
        a = a * _mask_factor(mask, a.dtype)
    w = _safe_div(a, a.sum(dim=-1, keepdim=True))  # rows sum to 1, or are all 0
    return w @ v, w


def _causal_scan(fq: Tensor, fk: Tensor, v: Tensor, chunk: int, s0: Tensor, z0: Tensor) -> Tensor:
    """Causal linear attention with Lq == Lk and initial state (s0, z0), chunk by chunk.

    fq, fk (n, L, f); v (n, L, dv); s0 (n, f, dv); z0 (n, f).
    """
    n, length, f = fq.shape
    dv = v.shape[-1]
    pad = (-length) % chunk
    if pad:  # padded keys have φ(k) = 0 and add nothing
        fq = F.pad(fq, (0, 0, 0, pad))
        fk = F.pad(fk, (0, 0, 0, pad))
        v = F.pad(v, (0, 0, 0, pad))
    t = fq.shape[1] // chunk
    qc = fq.view(n, t, chunk, f)
    kc = fk.view(n, t, chunk, f)
    vc = v.view(n, t, chunk, dv)
    kv = kc.transpose(-2, -1) @ vc  # (n, T, f, dv): each chunk's Σ φ(k) vᵀ
    s_prev = torch.cumsum(kv, dim=1) - kv + s0[:, None]  # state entering each chunk
    zc = kc.sum(dim=2)  # (n, T, f)
    z_prev = torch.cumsum(zc, dim=1) - zc + z0[:, None]
    intra = (qc @ kc.transpose(-2, -1)).tril()  # (n, T, C, C)
    num = intra @ vc + qc @ s_prev  # (n, T, C, dv)
    den = intra.sum(dim=-1, keepdim=True) + (qc * z_prev[:, :, None]).sum(-1, keepdim=True)
    return _safe_div(num, den).reshape(n, t * chunk, dv)[:, :length]


def _recurrent(
    fq: Tensor, fk: Tensor, v: Tensor, key_factor: Tensor | None, causal: bool, chunk: int
) -> Tensor:
    batch = torch.broadcast_shapes(fq.shape[:-2], fk.shape[:-2], v.shape[:-2])
    lq, f = fq.shape[-2:]
    lk, dv = v.shape[-2:]
    fq = fq.expand(*batch, lq, f).reshape(-1, lq, f)
    fk = fk.expand(*batch, lk, f).reshape(-1, lk, f)
    v = v.expand(*batch, lk, dv).reshape(-1, lk, dv)
    if key_factor is not None:  # (..., 1, Lk) -> scales each key's φ(k)
        kf = key_factor.expand(*batch, 1, lk).reshape(-1, lk, 1)
        fk = fk * kf
    n = fq.shape[0]
    if not causal:
        s = fk.transpose(1, 2) @ v  # (n, f, dv)
        z = fk.sum(dim=1)  # (n, f)
        out = _safe_div(fq @ s, (fq * z[:, None]).sum(-1, keepdim=True))
        return out.view(*batch, lq, dv)
    offset = lk - lq
    out = fq.new_zeros(n, lq, dv)
    if offset >= 0:  # the first `offset` keys are seen by every query: the initial state
        s0 = fk[:, :offset].transpose(1, 2) @ v[:, :offset]
        z0 = fk[:, :offset].sum(dim=1)
        out = _causal_scan(fq, fk[:, offset:], v[:, offset:], chunk, s0, z0)
    elif lk > 0:  # the first -offset queries see no key: output 0
        s0, z0 = fq.new_zeros(n, f, dv), fq.new_zeros(n, f)
        out[:, -offset:] = _causal_scan(fq[:, -offset:], fk, v, chunk, s0, z0)
    return out.view(*batch, lq, dv)


def _linear(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
    return_weights: bool = False, form: str = "auto", chunk: int = 64,
) -> Tensor | tuple[Tensor, Tensor]:
    fq, fk = elu_feature_map(q), elu_feature_map(k)
    key_only = mask is None or mask.dim() < 2 or mask.shape[-2] == 1
    if form == "recurrent" and not key_only:
        raise ValueError(
            "form='recurrent' takes only key masks (broadcastable to (..., 1, Lk)); got mask "
            f"of shape {tuple(mask.shape)}; use form='parallel'"
        )
    if return_weights or form == "parallel" or (form == "auto" and not key_only):
        out, w = _parallel(fq, fk, v, mask, causal)
        return (out, w) if return_weights else out
    factor = None if mask is None else _mask_factor(mask, q.dtype)
    if factor is not None and factor.dim() < 2:
        factor = factor.reshape(1, -1)
    return _recurrent(fq, fk, v, factor, causal, chunk)


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
        q: ``(..., Lq, d)``. k: ``(..., Lk, d)``. v: ``(..., Lk, dv)``.
        mask: bool or float, broadcastable to ``(..., Lq, Lk)``.
        causal: bottom-right aligned, as everywhere in attnlab.
        form: ``"recurrent"`` (O(N·d·dv), key masks only), ``"parallel"`` (O(N²), any mask,
            the only form with weights), ``"auto"`` (recurrent when it can).
        chunk: rows per chunk of the recurrent causal scan.
    """
    _check_qkv(q, k, v)
    if mask is not None:
        _check_mask(mask, _scores_shape(q, k, v))
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive int, got {chunk!r}")
    return _linear(q, k, v, mask, causal, return_weights, form, chunk)
