"""Reading attnlab's own attention modules (``MultiHeadAttention``, ``SelfAttention``).

The modules follow attnlab's observation protocol (see :mod:`attnlab.nn.attention`): their
``HookPoint`` children ``hook_q``, ``hook_k``, ``hook_v`` (grouped heads not repeated),
``hook_lse``, ``hook_weights`` and ``hook_context`` are identities, and a module asks the
core for the log-sum-exp only while ``hook_lse`` is observed, for dense weights only while
``hook_weights`` is. So with ``qkv=True`` this adapter observes q, k, v and lse (the module
then runs in O(N·d) memory, e.g. through the chunked backend); with ``qkv=False`` it
observes the weights. What shapes the scores is read from the call's arguments in a
forward pre-hook (``mask``, ``key_mask``, ``causal``, ``window``) and from the module's
``scale`` attribute.

A module run in half precision (bfloat16, float16) reports a log-sum-exp (and weights)
computed from its scores rounded in its dtype; the trace stores q and k as float32 and
recomputes scores in float32, so for such a call the adapter computes the log-sum-exp in
float32 from the float32 q and k it records (by tiles of rows), and with ``qkv=False``
observes q and k too and records the weights ``exp(s − lse)`` from them: every row of the
trace sums to 1 within float32 rounding whatever the module's dtype (the module's own result
is untouched).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, TypedDict, cast

import torch
from torch import Tensor, nn

from attnlab.core.masks import causal as causal_mask
from attnlab.core.masks import to_additive
from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.nn.attention import MultiHeadAttention, SelfAttention
from attnlab.nn.transformer import GPT
from attnlab.tracing.adapters._base import (
    AttentionRecord,
    Handle,
    ModelShape,
    Restore,
    Sink,
    attach_each,
    dense_weights,
    detached,
    exact_lse,
)
from attnlab.tracing.adapters._batch import batch_item, key_mask_of
from attnlab.tracing.precision import is_half

__all__ = ["ADAPTER", "describe_model"]


class _Call(TypedDict, total=False):
    """The arguments of one call of an attnlab attention module that shape its scores, by
    the names of its ``forward``'s parameters (a ``SelfAttention``'s positional ``mask``
    among them); a call leaves out those it does not give."""

    #: Bool (True = may attend) or additive: (Lq, Lk), (B, Lq, Lk) or (B, H, Lq, Lk).
    mask: Tensor | None
    #: (B, Lk) bool, True = a real key.
    key_mask: Tensor | None
    causal: bool
    window: int | None


#: The hook points a capture observes on an attnlab module, by the name after ``hook_``.
_Observed = Literal["q", "k", "v", "lse", "weights"]


@dataclass
class _Pending:
    """What the hooks of one module call have seen so far: the call's arguments, then the
    tensor of each observed hook point (q, k (B, H_kv, Lk, d), v, lse (B, H, Lq), weights
    (B, H, Lq, Lk)); cleared when the call's record is made."""

    call: _Call = field(default_factory=_Call)
    seen: dict[_Observed, Tensor] = field(default_factory=dict)

    def clear(self) -> None:
        self.call = {}
        self.seen.clear()


def describe_model(model: nn.Module) -> ModelShape:
    """causal/layers/heads/max_length of a model built from attnlab attention modules
    (causal: a :class:`~attnlab.nn.transformer.GPT`, or a model whose ``config.causal`` is
    true).

    Raises ``TypeError`` when ``model`` holds no attnlab attention module.
    """
    attns = [m for m in model.modules() if isinstance(m, (MultiHeadAttention, SelfAttention))]
    if not attns:
        raise TypeError(f"{type(model).__name__} contains no attnlab attention module")
    first = attns[0]
    config = getattr(model, "config", None)
    causal = isinstance(model, GPT) or bool(getattr(config, "causal", False))
    max_length = int(getattr(config, "block_size", None) or getattr(config, "max_len", 0)
                     or 1 << 20)
    return {"causal": causal, "num_layers": len(attns), "num_heads": first.num_heads,
            "num_kv_heads": getattr(first, "num_kv_heads", first.num_heads),
            "head_dim": first.head_dim, "max_length": max_length}


def _bias(mask: Tensor, bi: int) -> Tensor:
    """Batch element ``bi`` of a module-level mask as a (H|1, Lq|1, Lk|1) float bias."""
    if mask.dim() == 2:
        return to_additive(mask.detach().cpu()[None], torch.float32)
    m = batch_item(mask, bi)  # from (B|1, Lq, Lk) or (B|1, H, Lq, Lk)
    return to_additive(m[None] if mask.dim() == 3 else m, torch.float32)


def _shapes(module: MultiHeadAttention | SelfAttention, call: _Call, b: int, lq: int,
            lk: int) -> list[ScoreShape]:
    """One ScoreShape per batch element from the call's arguments."""
    causal = bool(call.get("causal", False))
    window = call.get("window")
    mask, key_mask = call.get("mask"), call.get("key_mask")
    if mask is not None and mask.dtype == torch.bool and mask.dim() == 2 and not causal:
        # the commonest hand-made mask is the causal one: keep the rule, not the N x N copy
        if tuple(mask.shape) == (lq, lk) and torch.equal(mask.cpu(), causal_mask(lq, lk)):
            mask, causal = None, True
    shapes = []
    for bi in range(b):
        shapes.append(ScoreShape(
            scale=float(module.scale), causal=causal, window=window,
            key_mask=key_mask_of(key_mask, bi), bias=None if mask is None else _bias(mask, bi)))
    return shapes


class _AttnlabAdapter:
    name = "attnlab"

    def matches(self, module: nn.Module) -> bool:
        return isinstance(module, (MultiHeadAttention, SelfAttention))

    def attach(self, cap: Sink, modules: list[nn.Module]) -> list[Handle]:
        # (the modules matches() took: attnlab's attention modules)
        return attach_each(modules, lambda m: self._attach_one(
            cap, cast("MultiHeadAttention | SelfAttention", m)))

    def _attach_one(self, cap: Sink, m: MultiHeadAttention | SelfAttention) -> list[Handle]:
        pending = _Pending()
        name = cap.name_of(m)
        is_self = isinstance(m, SelfAttention)

        def pre(_mod, args, kwargs):
            pending.clear()
            # the keyword arguments of the module's forward, whose parameters attnlab's
            # own modules fix (mask, key_mask, causal, ...)
            call = cast(_Call, dict(kwargs))
            if is_self and len(args) > 1:
                call["mask"] = args[1]
            pending.call = call

        def keep(key: _Observed) -> Callable[[nn.Module, object, Tensor], None]:
            def hook(_mod: nn.Module, _inp: object, out: Tensor) -> None:
                pending.seen[key] = out.detach()
            return hook

        def done(_mod, _inp, out):
            call = pending.call
            q, k = pending.seen.get("q"), pending.seen.get("k")
            half = q is not None and is_half(q.dtype)
            if cap.qkv or half:
                if q is None or k is None:
                    return
                b, _, lq, _ = q.shape
                shapes = _shapes(m, call, b, lq, k.shape[2])
                q32, k32 = detached(q), detached(k)
                lse = pending.seen.get("lse")
                if half:  # the module's own lse comes from scores rounded in its dtype
                    lse = exact_lse(q32, k32, shapes)
                elif lse is None:  # the module did not report it: compute it in tiles
                    lse = torch.stack([row_logsumexp(q[bi], k[bi], shapes[bi])
                                       for bi in range(b)])
                if cap.qkv:
                    rec = AttentionRecord(
                        name=name, source=self.name, shapes=shapes, q=q32, k=k32,
                        v=detached(pending.seen.get("v")), lse=detached(lse))
                else:
                    rec = AttentionRecord(name=name, source=self.name, shapes=shapes,
                                          weights=dense_weights(q32, k32, lse, shapes))
            else:
                w = pending.seen.get("weights")
                if w is None:
                    return
                b, _, lq, lk = w.shape
                rec = AttentionRecord(name=name, source=self.name,
                                      shapes=_shapes(m, call, b, lq, lk), weights=detached(w))
            if cap.context:
                rec.context = detached(out)
            pending.clear()
            cap.add(rec)

        handles: list[Handle] = [m.register_forward_pre_hook(pre, with_kwargs=True)]
        # a module in half precision: q and k too, for weights exp(s − lse) in float32
        half = any(is_half(p.dtype) for p in m.parameters() if p.dtype.is_floating_point)
        observed: tuple[_Observed, ...] = ("q", "k", "v", "lse") if cap.qkv else (
            ("weights", "q", "k") if half else ("weights",))
        for key in observed:
            handles.append(getattr(m, f"hook_{key}").register_forward_hook(keep(key)))
        handles.append(m.hook_context.register_forward_hook(done))
        handles.append(Restore(pending.clear))
        return handles


#: The adapter for attnlab modules.
ADAPTER = _AttnlabAdapter()
