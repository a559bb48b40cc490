"""Mask constructors, all in attnlab's one convention; the only place masks are built.

* A **bool** mask is True where a query MAY attend a key.
* A **float** mask is added to the scores (0 = keep, -inf = block).
* A **key mask** ``(B, Lk)`` is True for real tokens (the opposite of torch's
  ``key_padding_mask``, on purpose: True always means "visible").
* Causal masks with ``Lq < Lk`` are bottom-right aligned: the last query sees every key
  (query ``i`` sits at key position ``i + Lk − Lq``, as when decoding with a KV cache).

Shape legend::

    causal(lq, lk)        (Lq, Lk) bool
    padding(lengths, L)   (B, L) bool key mask
    key_mask_to_attn_mask (B, Lk) -> (B, 1, 1, Lk), broadcastable to (B, H, Lq, Lk)

>>> causal(2, 4).int()
tensor([[1, 1, 1, 0],
        [1, 1, 1, 1]], dtype=torch.int32)
>>> causal(4, window=2).int()
tensor([[1, 0, 0, 0],
        [1, 1, 0, 0],
        [0, 1, 1, 0],
        [0, 0, 1, 1]], dtype=torch.int32)
>>> padding(torch.tensor([2, 3]), 3).int()
tensor([[1, 1, 0],
        [1, 1, 1]], dtype=torch.int32)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from attnlab.core._checks import broadcast_shapes, check_int, check_optional_int

__all__ = [
    "causal",
    "padding",
    "key_mask_to_attn_mask",
    "combine",
    "to_additive",
    "from_torch_key_padding_mask",
]

#: A float ``key_padding_mask`` entry at or below this counts as padding: torch writes
#: -inf, Hugging Face ``torch.finfo(dtype).min``, older BERT code -10000.
_PAD_AT_MOST = -1e4


def _band(
    rows: int,
    cols: int,
    diagonal: int,
    window: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """(rows, cols) bool: True where ``0 <= i + diagonal − j < window`` (no lower bound when
    ``window`` is None). ``diagonal = Lk − Lq`` gives the bottom-right causal mask; the
    backends take tiles of it with other diagonals."""
    allowed = torch.ones(rows, cols, dtype=torch.bool, device=device).tril(diagonal)
    if window is not None:
        allowed = allowed.triu(diagonal - window + 1)
    return allowed


def causal(
    lq: int,
    lk: int | None = None,
    *,
    window: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """(Lq, Lk) bool: query i may attend key j iff ``j <= i + (Lk − Lq)``.

    With ``Lq == Lk`` this is the lower triangle; with ``Lq < Lk`` (decoding with a KV
    cache) it is aligned to the bottom-right so the last query sees every key. With
    ``window`` (sliding-window attention) a query sees only its last ``window`` keys,
    itself included: ``0 <= i + (Lk − Lq) − j < window``.

    >>> causal(3).int()
    tensor([[1, 0, 0],
            [1, 1, 0],
            [1, 1, 1]], dtype=torch.int32)
    >>> causal(1, 3, window=2).tolist()
    [[False, True, True]]
    """
    lq = check_int("lq", lq)
    lk = lq if lk is None else check_int("lk", lk)
    window = check_optional_int("window", window, minimum=1)
    return _band(lq, lk, lk - lq, window, device)


def padding(lengths: Tensor | Sequence[int], max_len: int | None = None) -> Tensor:
    """(B, max_len) bool key mask: True for the first ``lengths[b]`` positions (real tokens).

    >>> padding([1, 0], 2).tolist()
    [[True, False], [False, False]]
    """
    try:
        lengths = torch.as_tensor(lengths)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"lengths must be a 1-D integer tensor or a sequence of ints, got "
            f"{type(lengths).__name__}"
        ) from None
    if lengths.dim() != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise ValueError(
            f"lengths must be a 1-D integer tensor (B,), got shape {tuple(lengths.shape)} "
            f"dtype {lengths.dtype}"
        )
    if bool((lengths < 0).any()):
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    longest = int(lengths.max()) if lengths.numel() else 0
    if max_len is None:
        max_len = longest
    max_len = check_int("max_len", max_len)
    if longest > max_len:
        raise ValueError(
            f"max_len={max_len} is shorter than the longest length {longest}; refusing to "
            f"truncate"
        )
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def key_mask_to_attn_mask(key_mask: Tensor) -> Tensor:
    """(B, Lk) key mask -> (B, 1, 1, Lk) bool mask broadcastable to (B, H, Lq, Lk).

    >>> key_mask_to_attn_mask(padding([1, 2])).shape
    torch.Size([2, 1, 1, 2])
    """
    if not isinstance(key_mask, Tensor) or key_mask.dtype != torch.bool or key_mask.dim() != 2:
        got = (
            f"shape {tuple(key_mask.shape)} dtype {key_mask.dtype}"
            if isinstance(key_mask, Tensor)
            else type(key_mask).__name__
        )
        raise ValueError(f"key_mask must be a bool tensor (B, Lk), True = real token; got {got}")
    return key_mask[:, None, None, :]


def from_torch_key_padding_mask(key_padding_mask: Tensor) -> Tensor:
    """torch's ``key_padding_mask`` (B, Lk) or (Lk,) -> attnlab's key mask (True = real).

    The one conversion of torch's convention. A bool mask is True where a key is padding;
    a float mask is added to the scores, so 0 keeps a key and -inf (or a very negative
    value, at most -1e4, such as ``torch.finfo(dtype).min``) marks padding. Any other
    float (a partial penalty, NaN, +inf) has no key-mask meaning and raises ``ValueError``.

    >>> from_torch_key_padding_mask(torch.tensor([[False, True]])).tolist()
    [[True, False]]
    >>> from_torch_key_padding_mask(torch.tensor([0.0, float("-inf"), -1e9])).tolist()
    [True, False, False]
    """
    if not isinstance(key_padding_mask, Tensor):
        raise TypeError(
            f"key_padding_mask must be a torch.Tensor, got {type(key_padding_mask).__name__}"
        )
    if key_padding_mask.dim() not in (1, 2):
        raise ValueError(
            f"key_padding_mask must have shape (B, Lk) or (Lk,), got "
            f"{tuple(key_padding_mask.shape)}"
        )
    if key_padding_mask.dtype == torch.bool:
        return ~key_padding_mask
    if not key_padding_mask.is_floating_point():
        raise TypeError(
            f"key_padding_mask must be bool (True = padding) or floating (0 = keep, -inf = "
            f"padding), got dtype {key_padding_mask.dtype}"
        )
    keep = key_padding_mask == 0
    pad = key_padding_mask <= _PAD_AT_MOST
    odd = ~(keep | pad)
    if bool(odd.any()):
        bad = key_padding_mask[odd].flatten()[:5].tolist()
        raise ValueError(
            f"key_padding_mask holds float values that are neither 0 (keep) nor -inf or at "
            f"most {_PAD_AT_MOST:g} (padding), e.g. {bad}"
        )
    return keep


def to_additive(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Bool mask -> float mask with 0 where allowed and -inf where blocked.

    >>> to_additive(torch.tensor([True, False])).tolist()
    [0.0, -inf]
    """
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        ~mask, -math.inf
    )


def combine(*masks: Tensor | None) -> Tensor | None:
    """Combine masks so that a key is visible only if every mask allows it.

    Bool masks are and-ed; if any mask is float, the result is float (blocked = -inf and
    float masks added). ``None`` entries are skipped; all masks must broadcast together.

    >>> combine(causal(3), torch.tensor([True, True, False])).int()
    tensor([[1, 0, 0],
            [1, 1, 0],
            [1, 1, 0]], dtype=torch.int32)
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    for i, m in enumerate(present):
        if not isinstance(m, Tensor):
            raise TypeError(f"masks[{i}] must be a torch.Tensor, got {type(m).__name__}")
        if m.dtype != torch.bool and not m.is_floating_point():
            raise TypeError(f"masks[{i}] must be bool or floating, got dtype {m.dtype}")
    try:
        broadcast_shapes(*(m.shape for m in present))
    except ValueError:
        raise ValueError(
            f"masks do not broadcast together: shapes {[tuple(m.shape) for m in present]}"
        ) from None
    if all(m.dtype == torch.bool for m in present):
        out = present[0]
        for m in present[1:]:
            out = out & m
        return out
    dtype = next(m.dtype for m in present if m.dtype != torch.bool)
    total: Tensor | None = None
    for m in present:
        add = to_additive(m, dtype)
        total = add if total is None else total + add
    return total
