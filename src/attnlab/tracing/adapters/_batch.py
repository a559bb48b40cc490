"""One batch element of what an attention call was given: the adapters build one
:class:`~attnlab.core.scores.ScoreShape` per batch element from these.

A call's masks, biases and sink logits come batched, (B, ...), or with a batch of one
that serves every element, (1, ...); a key mask in which every key is real is no mask.
"""

from __future__ import annotations

from torch import Tensor

__all__ = ["batch_item", "key_mask_of"]


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
