"""The masks of the Hugging Face adapter (:mod:`attnlab.tracing.adapters.huggingface`): what
its mask function hands a model, and what its attention function later knows of it.

:func:`model_mask` recognises the rule a model's mask function follows
(:func:`infer_rule`: bidirectional, causal, causal sliding window, or a band around each
query as ModernBERT's local layers use), checked exactly tile by tile, and returns the
model's own eager mask, or above a size only the (B, 1, 1, Lk) key mask (a *compact* mask);
a mask no rule describes is the model's own eager mask, kept densely.

What is known of a mask handed out is a :class:`MaskLabel` (the rule, the real keys, and
whether the mask is compact). It is not attached to the tensor: transformers gives the two
functions nothing in common but the model's config (the mask function's ``config``
argument, the attention function's ``module.config``: the same object), so the labels are
kept in a :class:`MaskLabels` that the capture owns (made when the adapter attaches, gone
when its handles are removed) and that :data:`ROUTES` finds from the config for as long as
that capture routes it to attnlab. A label is held by weak reference to its mask: it lives
as long as the model holds the mask, that is for the forward that uses it. So the attention
function reads a mask by its label (or by the label of the mask it is an equal-shaped view
of: models slice masks), and a mask without one was built by the model itself; while a
compact mask of the same capture is still held, the model built it from that compact mask,
which lacks the rule, and the adapter refuses the model rather than read it wrongly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

from attnlab.core.scores import ScoreShape, row_tiles
from attnlab.tracing.adapters._base import Restore

__all__ = ["ROUTES", "MaskLabel", "MaskLabels", "Routes", "infer_rule", "model_mask"]

#: A mask rule as :func:`infer_rule` finds it: (causal, window), window None for no window.
Rule = tuple[bool, int | None]


@dataclass(frozen=True)
class MaskLabel:
    """What attnlab knows of a mask its mask function handed to a model.

    ``rule`` is the ``(causal, window)`` rule the model's mask function was checked to
    follow exactly, or None for a mask no rule describes (the model's own dense mask, read
    as it is); ``keys`` (B, Lk) bool marks the real keys (False: padding); ``compact`` says
    the mask is only the (B, 1, 1, Lk) key mask, not the model's own (B, 1, Lq, Lk) one."""

    rule: Rule | None
    keys: Tensor
    compact: bool


class MaskLabels:
    """The labels of the masks handed out while one capture routes its models' configs to
    attnlab, each kept as long as its mask lives (a weak reference to the tensor, keyed by
    its identity: a tensor's ``==`` compares entries)."""

    def __init__(self) -> None:
        self._labels: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def label(self, mask: Tensor, label: MaskLabel) -> Tensor:
        """``mask``, with ``label`` kept for it while it lives."""
        self._labels[mask] = label
        return mask

    def label_of(self, mask: Tensor) -> MaskLabel | None:
        """The label of ``mask``, or of the mask it is an equal-shaped view of (a model
        that cuts its mask to the keys it has slices all of it); None for a mask the model
        built itself."""
        label = self._labels.get(mask)
        base = mask._base
        if label is None and base is not None and base.shape == mask.shape:
            label = self._labels.get(base)
        return label

    def compact_in_use(self) -> bool:
        """Whether a compact mask handed out under these labels is still held by a model
        (whose forward is then still running)."""
        return any(label.compact for label in list(self._labels.values()))


class Routes:
    """Which :class:`MaskLabels` each config routed to attnlab uses: those of the innermost
    capture that routes it, from :meth:`route` until the handle it returns is removed.
    Configs are known by identity (they compare by value and are not hashable); a routed
    config is held by its handle, so its identity is not reused meanwhile."""

    def __init__(self) -> None:
        self._labels: dict[int, list[MaskLabels]] = {}

    def route(self, config: Any, labels: MaskLabels) -> Restore:
        """``labels`` for ``config``'s masks, until the handle is removed."""
        self._labels.setdefault(id(config), []).append(labels)
        return Restore(lambda: self._unroute(config, labels))

    def _unroute(self, config: Any, labels: MaskLabels) -> None:
        stack = self._labels.get(id(config), [])
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is labels:
                del stack[i]
                break
        if not stack:
            self._labels.pop(id(config), None)

    def labels_for(self, config: Any) -> MaskLabels | None:
        """The labels of ``config``'s masks, or None when no capture routes it."""
        stack = self._labels.get(id(config))
        return stack[-1] if stack else None


#: The labels of every config a capture routes to attnlab (entries live as long as the
#: routes: :meth:`Routes.route`).
ROUTES = Routes()


def _mask_rows(fn: Any, b: int, lk: int, q_off: int, kv_off: int, r0: int, r1: int) -> Tensor:
    """(B, R, Lk) bool: the model's mask function over rows [r0, r1), no padding."""
    bi = torch.arange(b)[:, None, None, None]
    hi = torch.zeros(1, 1, 1, 1, dtype=torch.long)
    qi = (torch.arange(r0, r1) + q_off)[None, None, :, None]
    kv = (torch.arange(lk) + kv_off)[None, None, None, :]
    # on the host whatever the mask function indexes (a padding mask on the model's device)
    return torch.as_tensor(fn(bi, hi, qi, kv)).to("cpu").expand(b, 1, r1 - r0, lk)[:, 0]


def infer_rule(fn: Any, b: int, lq: int, lk: int, q_off: int, kv_off: int) -> Rule | None:
    """(causal, window) if the mask function ``fn`` (transformers' ``mask_function``: batch,
    head, query and key indices -> visible) is exactly that rule over ``b`` x ``lq`` x ``lk``
    with those offsets, else None."""
    try:
        first = _mask_rows(fn, b, lk, q_off, kv_off, 0, 1)[:, 0]  # (B, Lk)
        last = _mask_rows(fn, b, lk, q_off, kv_off, lq - 1, lq)[:, 0]
    except Exception:  # a mask function that needs vmap or data we cannot index
        return None
    seen_last, seen_first = int(last[0].sum()), int(first[0].sum())
    candidates: list[Rule] = [(False, None), (True, None)]
    if 0 < seen_last < lk:
        candidates.append((True, seen_last))
    if 0 < seen_first < lk:  # a band around each query (bidirectional local attention)
        candidates.append((False, seen_first))
    for causal, window in candidates:
        rule = ScoreShape(scale=1.0, causal=causal, window=window)
        ok = True
        for r0, r1, got in ((0, 1, first[:, None]), (lq - 1, lq, last[:, None])):
            want = rule.visible(torch.arange(r0, r1), None, lq=lq, lk=lk)
            if not bool((got == (True if want is None else want)).all()):
                ok = False
                break
        if not ok:
            continue
        for r0, r1 in row_tiles(lq, lk):  # exactly, every row, one tile at a time
            want = rule.visible(torch.arange(r0, r1), None, lq=lq, lk=lk)
            got = _mask_rows(fn, b, lk, q_off, kv_off, r0, r1)
            if not bool((got == (True if want is None else want)).all()):
                ok = False
                break
        if ok:
            return causal, window
    return None


def model_mask(labels: MaskLabels | None, dense_max_entries: int, *, batch_size: int,
               q_length: int, kv_length: int, q_offset: int, kv_offset: int,
               mask_function: Any, attention_mask: Tensor | None, use_vmap: bool,
               device: Any, dtype: torch.dtype) -> Tensor:
    """The mask handed to the model, additive in ``dtype`` (0 = visible, the dtype's most
    negative number = hidden), labelled in ``labels``: the model's own eager mask
    (B, 1, Lq, Lk), or, when a rule describes it and it would have more than
    ``dense_max_entries`` entries (batch x queries x keys), only the compact key mask
    (B, 1, 1, Lk). The other arguments are those of transformers' mask interface. Without
    ``labels`` (no capture routes the model's config) it is the model's own eager mask,
    unlabelled, whatever its size: a compact mask is only read through its label."""
    from transformers.masking_utils import causal_mask_function, eager_mask, prepare_padding_mask

    fn = mask_function if mask_function is not None else causal_mask_function
    q_offset, kv_offset = int(q_offset), int(kv_offset)
    rule = None if use_vmap or labels is None else infer_rule(
        fn, batch_size, q_length, kv_length, q_offset, kv_offset)
    padding = prepare_padding_mask(attention_mask, kv_length, kv_offset)
    if padding is None:
        keys = torch.ones(batch_size, kv_length, dtype=torch.bool, device=device)
    else:
        keys = padding[:, kv_offset: kv_offset + kv_length].to(device=device, dtype=torch.bool)
    compact = rule is not None and batch_size * q_length * kv_length > dense_max_entries
    if compact:
        m = torch.zeros(batch_size, 1, 1, kv_length, dtype=dtype, device=device)
        m.masked_fill_(~keys[:, None, None, :], torch.finfo(dtype).min)
    else:
        m = eager_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length,
                       q_offset=q_offset, kv_offset=kv_offset, mask_function=fn,
                       attention_mask=attention_mask, dtype=dtype, use_vmap=use_vmap,
                       device=device)
    if labels is None:
        return m
    return labels.label(m, MaskLabel(rule=rule, keys=keys, compact=compact))
