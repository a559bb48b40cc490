"""One batch element of what an attention call was given: the adapters build one
:class:`~attnlab.core.scores.ScoreShape` per batch element from these.

A call's masks, biases and sink logits come batched, (B, ...), or with a batch of one
that serves every element, (1, ...); a key mask in which every key is real is no mask.
"""

from __future__ import annotations

from typing import overload

import torch
from torch import Tensor

from attnlab.core.scores import ScoreShape

__all__ = ["alibi_slopes", "batch_item", "key_mask_of", "split_dense_mask", "visible_rule"]


@overload
def batch_item(t: Tensor, bi: int) -> Tensor: ...
@overload
def batch_item(t: None, bi: int) -> None: ...
def batch_item(t: Tensor | None, bi: int) -> Tensor | None:
    """Batch element ``bi`` of a (B|1, ...) tensor (a batch of one serves every element),
    detached, on the CPU; None stays None.

    >>> import torch
    >>> batch_item(torch.arange(3)[None], 2).tolist(), batch_item(None, 0)
    ([0, 1, 2], None)
    """
    return None if t is None else t[bi if t.shape[0] > 1 else 0].detach().cpu()


def key_mask_of(key_mask: Tensor | None, bi: int) -> Tensor | None:
    """Batch element ``bi`` of a (B|1, Lk) key mask (True for a real key) as a bool CPU
    tensor, or None when every key is real (a trace keeps no mask then).

    >>> import torch
    >>> km = torch.tensor([[True, True], [True, False]])
    >>> key_mask_of(km, 0), key_mask_of(km, 1).tolist()
    (None, [True, False])
    """
    km = batch_item(key_mask, bi)
    if km is None:
        return None
    km = km.bool()
    return None if bool(km.all()) else km


def visible_rule(visible: Tensor, window: int | None = None) -> tuple[bool, Tensor] | None:
    """(causal, key mask (B, Lk)) when ``visible`` (B, Lq, Lk) is exactly that rule (within
    ``window`` when one is given): every real key (one some row sees), to the left of the
    row or not; None when no such rule gives ``visible``.

    >>> import torch
    >>> causal = torch.ones(3, 3, dtype=torch.bool).tril()[None]
    >>> visible_rule(causal)[0], visible_rule(causal.mT)
    (True, None)
    """
    b, lq, lk = visible.shape
    rows = torch.arange(lq, device=visible.device)
    keys = visible.any(1)  # a key some row sees is a real one
    for causal in (True, False):
        rule = ScoreShape(scale=1.0, causal=causal, window=window).visible(
            rows, None, lq=lq, lk=lk)
        want = keys[:, None, :].expand(b, lq, lk) if rule is None else rule[None] & keys[
            :, None, :]
        if torch.equal(visible, want):
            return causal, keys
    return None


def alibi_slopes(bias: Tensor) -> tuple[Tensor | None, Tensor]:
    """(slopes (H,) or None, the bias (B|1, H, 1, Lk) float32): slopes when every row of the
    bias is ``slope_h · j`` plus one constant (what ALiBi adds, up to what no softmax sees).

    >>> import torch
    >>> slopes, _ = alibi_slopes(torch.tensor([0.5, 0.25])[None, :, None, None] * torch.arange(4.))
    >>> slopes.tolist()
    [0.5, 0.25]
    """
    bias = bias.detach().float()
    lk = bias.shape[-1]
    if lk < 2:
        return None, bias
    slopes = bias[0, :, 0, 1] - bias[0, :, 0, 0]
    j = torch.arange(lk, device=bias.device, dtype=torch.float32)
    want = slopes[None, :, None, None] * j + bias[..., :1]
    tol = 1e-6 * (1.0 + float(bias.abs().max()))
    if bool(((want - bias).abs() <= tol).all()):
        return slopes.cpu(), bias
    return None, bias


def split_dense_mask(mask: Tensor) -> tuple[Tensor, Tensor] | None:
    """A dense float mask (B, H|1, Lq, Lk), added to the scores (0 or a bias where a key is
    seen, very negative where it is hidden), as (visible (B, Lq, Lk), a term per key
    (B, H|1, 1, Lk)) when it is one: the same keys hidden in every head, and on the keys a
    row sees the very same value in every row (as a model that adds ALiBi to its causal
    mask makes it); None otherwise. The term is 0 where no row sees the key.

    >>> import torch
    >>> low = torch.finfo(torch.float32).min
    >>> causal = torch.zeros(3, 3).masked_fill(torch.ones(3, 3).triu(1).bool(), low)
    >>> visible, term = split_dense_mask((causal + torch.arange(3.))[None, None])
    >>> visible[0].int().tolist(), term.flatten().tolist()
    ([[1, 0, 0], [1, 1, 0], [1, 1, 1]], [0.0, 1.0, 2.0])
    >>> split_dense_mask(torch.randn(1, 1, 3, 3)) is None  # values that vary along the rows
    True
    """
    if mask.dim() != 4 or not mask.is_floating_point():
        return None
    seen = mask > torch.finfo(mask.dtype).min / 2  # (B, H|1, Lq, Lk)
    if not torch.equal(seen, seen[:, :1].expand_as(seen)):
        return None  # other keys hidden in some heads
    values = mask.masked_fill(~seen, 0.0)
    first = seen.int().argmax(-2, keepdim=True)  # the first row that sees each key
    term = values.gather(-2, first)  # (B, H|1, 1, Lk): 0 where no row sees the key
    if not torch.equal(values, term.expand_as(values).masked_fill(~seen, 0.0)):
        return None
    return seen[:, 0], term
