"""Mask constructors, all in attnlab's one convention.

* A **bool** mask is True where a query MAY attend a key.
* A **float** mask is added to the scores (0 = keep, -inf = block).
* A **key mask** ``(B, Lk)`` is True for real tokens (the opposite of torch's
  ``key_padding_mask``, on purpose: True always means "visible").
* Causal masks with ``Lq < Lk`` are bottom-right aligned: the last query sees every key.

>>> causal(2, 4).int()
tensor([[1, 1, 1, 0],
        [1, 1, 1, 1]], dtype=torch.int32)
>>> padding(torch.tensor([2, 3]), 3).int()
tensor([[1, 1, 0],
        [1, 1, 1]], dtype=torch.int32)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "causal",
    "padding",
    "key_mask_to_attn_mask",
    "sliding_window",
    "combine",
    "to_additive",
    "from_torch_key_padding_mask",
]


def _check_len(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def causal(lq: int, lk: int | None = None, *, device: torch.device | str | None = None) -> Tensor:
    """(Lq, Lk) bool: query i may attend key j iff ``j <= i + (Lk - Lq)``.

    With ``Lq == Lk`` this is the lower triangle; with ``Lq < Lk`` (decoding with a KV
    cache) it is aligned to the bottom-right so the last query sees every key.
    """
    lq = _check_len("lq", lq)
    lk = lq if lk is None else _check_len("lk", lk)
    return torch.ones(lq, lk, dtype=torch.bool, device=device).tril(diagonal=lk - lq)


def padding(lengths: Tensor | Sequence[int], max_len: int | None = None) -> Tensor:
    """(B, max_len) bool key mask: True for the first ``lengths[b]`` positions (real tokens).

    >>> padding([1, 0], 2).tolist()
    [[True, False], [False, False]]
    """
    lengths = torch.as_tensor(lengths)
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
    max_len = _check_len("max_len", max_len)
    if longest > max_len:
        raise ValueError(
            f"max_len={max_len} is shorter than the longest length {longest}; refusing to "
            f"truncate"
        )
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def key_mask_to_attn_mask(key_mask: Tensor) -> Tensor:
    """(B, Lk) key mask -> (B, 1, 1, Lk) bool mask broadcastable to (B, H, Lq, Lk)."""
    if not isinstance(key_mask, Tensor) or key_mask.dtype != torch.bool or key_mask.dim() != 2:
        got = (
            f"shape {tuple(key_mask.shape)} dtype {key_mask.dtype}"
            if isinstance(key_mask, Tensor)
            else type(key_mask).__name__
        )
        raise ValueError(f"key_mask must be a bool tensor (B, Lk), True = real token; got {got}")
    return key_mask[:, None, None, :]


def from_torch_key_padding_mask(key_padding_mask: Tensor) -> Tensor:
    """torch's ``key_padding_mask`` (True = ignore) -> attnlab's key mask (True = real)."""
    if key_padding_mask.dtype != torch.bool:
        return key_padding_mask == 0
    return ~key_padding_mask


def sliding_window(
    lq: int,
    lk: int | None = None,
    *,
    window: int,
    causal: bool = True,
    device: torch.device | str | None = None,
) -> Tensor:
    """(Lq, Lk) bool: each query sees keys within ``window`` positions.

    Positions are bottom-right aligned like :func:`causal` (query i sits at key position
    ``i + Lk - Lq``). With ``causal=True`` query at position p sees keys ``p-window+1 .. p``
    (``window`` keys including itself); otherwise ``|p - j| < window``.

    >>> sliding_window(4, window=2).int()
    tensor([[1, 0, 0, 0],
            [1, 1, 0, 0],
            [0, 1, 1, 0],
            [0, 0, 1, 1]], dtype=torch.int32)
    """
    lq = _check_len("lq", lq)
    lk = lq if lk is None else _check_len("lk", lk)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    pos_q = torch.arange(lq, device=device)[:, None] + (lk - lq)
    pos_k = torch.arange(lk, device=device)[None, :]
    delta = pos_q - pos_k
    if causal:
        return (delta >= 0) & (delta < window)
    return delta.abs() < window


def to_additive(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Bool mask -> float mask with 0 where allowed and -inf where blocked."""
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        ~mask, float("-inf")
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
        torch.broadcast_shapes(*(m.shape for m in present))
    except RuntimeError:
        raise ValueError(
            f"masks do not broadcast together: shapes {[tuple(m.shape) for m in present]}"
        ) from None
    if all(m.dtype == torch.bool for m in present):
        out = present[0]
        for m in present[1:]:
            out = out & m
        return out
    dtype = next(m.dtype for m in present if m.dtype != torch.bool)
    out = None
    for m in present:
        add = to_additive(m, dtype)
        out = add if out is None else out + add
    return out
