"""The precision a model runs in, and how far its own attention weights may then be from
the trace's.

A trace keeps each head's q and k as float32 (exact copies of the model's values, whatever
its dtype) and each row's log-sum-exp, computed in float32 from those very q and k under
the recorded score shape, so ``exp(s − lse)`` sums to 1 within float32 rounding for a model
run in any dtype. The model itself, run in a half-precision dtype (bfloat16, float16),
rounds its scores before its softmax; its weights then differ from the trace's exact ones
by more than float32 rounding. This module states by how much.

**The rule** (:func:`weight_bound`, :func:`half_tolerance`). Let ``u`` be the dtype's unit
roundoff (:func:`unit_roundoff`: ``2⁻⁸`` for bfloat16, ``2⁻¹¹`` for float16): rounding
``x`` to the dtype gives ``x(1 + δ)`` with ``|δ| ≤ u``, and ``|x − rd(x)| ≤ u·|rd(x)|``
too (round to nearest). transformers' eager path computes

    s̃ = rd(rd(q·k)·scale) (+ mask),   p̃ = rd(softmax_f32(s̃))

(the matmul accumulates in float32 and rounds once; the product by the scale rounds again;
adding 0 for a visible key is exact). The trace computes ``s = (q·k)·scale`` in float32 from
the same q, k and ``p = exp(s − lse) = softmax(s)``.

1. *Scores.* Each rounding multiplies by ``1 + δ``, so with ``c`` roundings
   ``|s̃_j − s_j| ≤ ((1 + u)^c − 1)·M ≤ c·u·(1 + u)·M`` for ``c·u ≤ 1``, ``M`` the largest
   magnitude a rounded value of the row takes (``|q·k·scale|`` or ``|s|`` of a visible
   key). ``c`` (:func:`score_roundings`) is 2 for ``q·k`` and the scale, +3 for a
   soft-cap (divide, tanh, multiply: a rounding before the tanh moves its output by at most
   ``u·|x|·sech²(x) ≤ u·|x|``, so ``M`` over the pre-cap scores covers it), +1 for a
   dense term or ALiBi added in the dtype, +2 for sink logits (the row's maximum is
   subtracted in the dtype: ``|s − max| ≤ 2M``). The two float32 computations of ``q·k``
   differ by at most ``2·γ_d·|q|·|k|·scale`` (``γ_d = d·2⁻²⁴``, Cauchy–Schwarz), added to
   ``ε`` (:func:`row_score_error`). So ``ε = max_j |s̃_j − s_j| ≤ c·u·(1 + u)·M +
   2·γ_d·|q|·max_j|k_j|·scale``.
2. *Softmax.* ``softmax(s̃)_j / softmax(s)_j = e^{η_j} / Σ_k p_k e^{η_k}`` with
   ``η = s̃ − s``, ``|η| ≤ ε``: between ``e^{−2ε}`` and ``e^{2ε}``, so
   ``|softmax(s̃)_j − p_j| ≤ p_j·(e^{2ε} − 1)``.
3. *Rounding the weights.* ``|p̃_j − softmax(s̃)_j| ≤ u·p̃_j``.
4. *float32.* The model's float32 softmax and the trace's ``exp(s − lse)`` each round in
   float32: the float32 rule's :data:`~attnlab.tracing.verify.EXACT_TOL` (scaled by the
   row's log-sum-exp, :func:`attnlab.tracing.verify.tolerance`) covers both.

Hence, entry by entry, ``|p̃_j − p_j| ≤ p_j·(e^{2ε} − 1) + u·p̃_j + tol₃₂``; over a whole
trace (``p, p̃ ≤ 1``) at most ``e^{2ε} − 1 + u + tol₃₂`` (:func:`half_tolerance`). A model in
float32 or float64 is held to the float32 rule alone.

:func:`precision_of` says which rule applies to a model (``meta["precision"]``).
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

import torch
from torch import Tensor, nn

from attnlab.core.scores import ScoreShape, row_tiles

__all__ = ["EXACT_RULE", "HALF_RULE", "ROUNDINGS", "Precision", "dtype_named", "is_half",
           "precision_of", "half_tolerance", "row_score_error", "score_roundings",
           "unit_roundoff", "weight_bound"]

#: ``meta["precision"]["rule"]`` of a model run in float32 or float64: the trace's weights
#: equal the model's within float32 rounding (:func:`attnlab.tracing.verify.tolerance`).
EXACT_RULE = "float32: |p̃ − p| ≤ EXACT_TOL · max(1, max|lse| / 8)"
#: ``meta["precision"]["rule"]`` of a model run in a half-precision dtype (this module's
#: docstring).
HALF_RULE = "half: |p̃ − p| ≤ p·(e^{2ε} − 1) + u·p̃ + float32 term, ε ≤ c·u·max|s|"
#: Roundings of a score in transformers' eager path without soft-cap, dense term or sinks:
#: the matmul's result and its product by the scale (``c`` of the rule).
ROUNDINGS = 2
_EXACT = (torch.float32, torch.float64)
_F32_U = 2.0 ** -24


def _check_dtype(dtype: Any, name: str = "dtype") -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating torch.dtype (torch.bfloat16, "
                        f"torch.float16, torch.float32, ...), got {dtype!r}")
    return dtype


def unit_roundoff(dtype: torch.dtype) -> float:
    """The unit roundoff ``u`` of a floating dtype (half its machine epsilon): rounding to
    it changes a value by a factor ``1 + δ``, ``|δ| ≤ u``.

    >>> unit_roundoff(torch.bfloat16), unit_roundoff(torch.float16)
    (0.00390625, 0.00048828125)
    """
    return float(torch.finfo(_check_dtype(dtype)).eps) / 2


def is_half(dtype: torch.dtype) -> bool:
    """Whether the half-precision rule applies: any floating dtype but float32 and float64.

    >>> is_half(torch.bfloat16), is_half(torch.float32)
    (True, False)
    """
    return _check_dtype(dtype) not in _EXACT


def dtype_named(name: Any) -> torch.dtype:
    """The torch dtype called ``name`` (``"bfloat16"``, ``"float16"``, ...), as
    ``meta["precision"]["dtype"]`` records it.

    >>> dtype_named("bfloat16")
    torch.bfloat16
    >>> dtype_named("int8")
    Traceback (most recent call last):
    ...
    ValueError: dtype name must name a floating torch dtype (bfloat16, float16, float32, float64), got 'int8'
    """  # noqa: E501
    dt = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dt, torch.dtype) or not dt.is_floating_point:
        raise ValueError(f"dtype name must name a floating torch dtype (bfloat16, float16, "
                         f"float32, float64), got {name!r}")
    return dt


def _attention_modules(model: nn.Module) -> list[nn.Module]:
    # by class name, as the adapters recognise them (transformers' ...Attention / ...MLA,
    # attnlab's MultiHeadAttention / SelfAttention, torch's MultiheadAttention)
    return [m for m in model.modules()
            if type(m).__name__.endswith(("Attention", "MLA", "MultiheadAttention"))]


def _floating_dtypes(module: nn.Module) -> list[torch.dtype]:
    return [p.dtype for p in module.parameters() if p.dtype.is_floating_point]


class Precision(TypedDict):
    """What a trace's ``meta["precision"]`` says of the model's dtype (:func:`precision_of`)."""

    #: The dtype the attention computes in, torch's name without ``torch.``
    #: (``"bfloat16"``).
    dtype: str
    #: :data:`HALF_RULE` or :data:`EXACT_RULE`: the rule that holds the model's own weights
    #: to the trace's.
    rule: str
    #: ``u`` of ``dtype`` (2⁻²⁴ for float32 and float64).
    unit_roundoff: float


def precision_of(model: nn.Module) -> Precision:
    """Which rule holds the model's own attention weights to the trace's, for
    ``meta["precision"]``: ``{"dtype": "bfloat16", "rule": HALF_RULE, "unit_roundoff":
    0.00390625}``, or for a model in float32/float64 ``{"dtype": "float32", "rule":
    EXACT_RULE, "unit_roundoff": 2⁻²⁴}``.

    The dtype is that of the attention modules' floating parameters (the least precise one
    when they differ), else of the model's, else float32 (a model without parameters
    computes in its input's dtype, which attnlab's tracer gives as float32).

    >>> precision_of(nn.MultiheadAttention(8, 2).to(torch.bfloat16))["dtype"]
    'bfloat16'
    >>> precision_of(nn.Linear(2, 2))["rule"] == EXACT_RULE
    True
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    dtypes = [dt for m in _attention_modules(model) for dt in _floating_dtypes(m)]
    dtypes = dtypes or _floating_dtypes(model) or [torch.float32]
    dtype = max(dtypes, key=unit_roundoff)
    half = is_half(dtype)
    return {"dtype": str(dtype).removeprefix("torch."),
            "rule": HALF_RULE if half else EXACT_RULE,
            "unit_roundoff": unit_roundoff(dtype) if half else _F32_U}


def score_roundings(shape: ScoreShape) -> int:
    """``c``: how many times the eager path rounds a score in the model's dtype under this
    score shape (see the module docstring).

    >>> score_roundings(ScoreShape(scale=0.125)), score_roundings(ScoreShape(scale=1.0,
    ...                                                                     softcap=50.0))
    (2, 5)
    """
    c = ROUNDINGS
    if shape.softcap is not None:
        c += 3
    if shape.bias is not None or getattr(shape, "alibi_slopes", None) is not None:
        c += 1
    if shape.sinks is not None:
        c += 2
    return c


def row_score_error(q: Tensor, k: Tensor, shape: ScoreShape, dtype: torch.dtype, *,
                    tile_rows: int | None = None) -> Tensor:
    """(H, Lq) float64: ``ε`` of each row, the most its scores rounded in ``dtype`` (as
    the model's eager path rounds them) can differ from the float32 scores the trace
    computes from ``q`` (H, Lq, d) and ``k`` (H_kv, Lk, d): ``c·u·(1 + u)·M +
    2·γ_d·|q|·max|k|·scale`` (module docstring), ``M`` over the row's visible keys (its
    sink logit included). 0 for a row without a visible key; O(tile·Lk) memory.

    >>> q, k = torch.ones(1, 2, 4), torch.ones(1, 3, 4)
    >>> row_score_error(q, k, ScoreShape(scale=0.5), torch.bfloat16)[0, 0].item() > 2 * 2 / 256
    True
    """
    dtype = _check_dtype(dtype)
    h, lq, d = q.shape
    h_kv, lk = k.shape[0], k.shape[1]
    if h % h_kv:
        raise ValueError(f"q's heads ({h}) must be a multiple of k's ({h_kv})")
    u = unit_roundoff(dtype)
    c = score_roundings(shape)
    qf, kf = q.float(), k.float()
    gamma = 2 * d * _F32_U * abs(shape.scale)
    out = torch.zeros(h, lq, dtype=torch.float64)
    knorm = kf.norm(dim=-1).amax(dim=-1)  # (H_kv,)
    for hd in range(h):
        kh = kf[hd // (h // h_kv)]
        for r0, r1 in row_tiles(lq, lk, tile_rows):
            rows = torch.arange(r0, r1)
            s = shape.scores(qf[hd, r0:r1], kh, rows=rows, head=hd, lq=lq, lk=lk)
            raw = (qf[hd, r0:r1] @ kh.T) * shape.scale
            seen = torch.isfinite(s)
            big = torch.maximum(s.abs(), raw.abs()).masked_fill(~seen, 0.0).amax(-1)
            if shape.sinks is not None:
                sk = shape.sinks.float()
                sk = sk[hd] if sk.dim() == 1 else sk[hd, r0:r1]
                big = torch.maximum(big, sk.abs().expand_as(big))
            err = c * u * (1 + u) * big.double() + gamma * (
                qf[hd, r0:r1].norm(dim=-1).double() * float(knorm[hd // (h // h_kv)]))
            out[hd, r0:r1] = err.masked_fill(~seen.any(-1), 0.0)
    return out


def weight_bound(p: Tensor, p_model: Tensor, eps: Tensor | float, dtype: torch.dtype,
                 base: float) -> Tensor:
    """Entry by entry, how far the model's weights ``p_model`` (computed in ``dtype``) may
    be from the trace's exact ``p``: ``p·(e^{2ε} − 1) + u·p̃ + base``, with ``eps`` each
    row's ``ε`` (a number, or a tensor of ``p``'s shape without its last dimension; see
    :func:`row_score_error`) and ``base`` the float32 rule's tolerance. In float64.

    >>> p = torch.tensor([[0.5, 0.5]])
    >>> weight_bound(p, p, 0.0, torch.bfloat16, 1e-6).tolist()
    [[0.001954125, 0.001954125]]
    """
    dtype = _check_dtype(dtype)
    u = unit_roundoff(dtype)
    e = torch.as_tensor(eps, dtype=torch.float64)
    if e.dim():
        e = e[..., None]
    return p.double() * torch.expm1(2 * e) + u * p_model.double().abs() + base


def half_tolerance(dtype: torch.dtype, scores_max: float, *, roundings: int = ROUNDINGS,
                   base: float = 0.0) -> float:
    """The most any entry of a model's weights computed in ``dtype`` may differ from the
    trace's exact ones when no rounded score exceeds ``scores_max`` in size:
    ``e^{2ε} − 1 + u + base`` with ``ε = c·u·(1 + u)·scores_max`` (``c`` = ``roundings``;
    ``p, p̃ ≤ 1`` in :func:`weight_bound`). ``base`` is the float32 rule's tolerance (and
    the float32 rounding of the scores). For float32 and float64 it is ``base``.

    >>> round(half_tolerance(torch.bfloat16, 10.0), 4)
    0.1737
    >>> half_tolerance(torch.float32, 10.0, base=1e-6)
    1e-06
    """
    dtype = _check_dtype(dtype)
    if not (isinstance(scores_max, (int, float)) and math.isfinite(scores_max)
            and scores_max >= 0):
        raise ValueError(f"scores_max must be a finite number >= 0, got {scores_max!r}")
    if not is_half(dtype):
        return float(base)
    u = unit_roundoff(dtype)
    eps = roundings * u * (1 + u) * scores_max
    return math.expm1(2 * eps) + u + base
