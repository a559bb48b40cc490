"""Reading ``torch.nn.MultiheadAttention`` (also inside ``nn.TransformerEncoder``,
``nn.TransformerDecoder`` and ``nn.Transformer``, whose encoder self-, decoder self- and
cross-attention calls :func:`attnlab.tracing.capture.stack_table` keeps apart).

A forward pre-hook computes the per-head q, k, v from the module's own projection weights
and the log-sum-exp of each row from q and k in tiles of rows (O(tile · N) memory); the
module itself runs exactly as its caller asked (``need_weights`` is left alone, so torch
keeps its fused path). Masks are read from the call: ``key_padding_mask`` becomes the key
mask (through :func:`attnlab.core.masks.from_torch_key_padding_mask`), an ``attn_mask``
that is the causal mask becomes ``causal=True``, any other ``attn_mask`` a dense bias
(short inputs only).

``nn.TransformerEncoder`` may turn its input into a nested tensor, which skips the
attention module's hooks; the adapter switches that off on the encoders it observes, and
back afterwards. (``nn.TransformerEncoderLayer`` itself leaves its fused path whenever its
modules have hooks.)
"""

from __future__ import annotations

from typing import TypedDict, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.core.functional import default_scale
from attnlab.core.masks import causal as causal_mask
from attnlab.core.masks import from_torch_key_padding_mask, to_additive
from attnlab.core.scores import ScoreShape, attend, row_logsumexp
from attnlab.tracing.adapters._base import (
    AttentionRecord,
    Handle,
    Restore,
    Sink,
    attach_each,
    dense_weights,
)
from attnlab.tracing.adapters._batch import batch_item, key_mask_of

__all__ = ["ADAPTER"]

_ARGS = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
         "average_attn_weights", "is_causal")


class _Call(TypedDict, total=False):
    """The arguments of one ``nn.MultiheadAttention`` call, by the names of its
    ``forward``'s parameters (:data:`_ARGS`, in order); a call leaves out those it does not
    give."""

    #: (B, Lq, E) with ``batch_first``, else (Lq, B, E); (Lq, E) unbatched.
    query: Tensor
    #: (B, Lk, E), (Lk, B, E) or (Lk, E), as ``query``.
    key: Tensor
    value: Tensor
    #: (B, Lk) or (Lk,): bool True, or an additive float, where a key is padding.
    key_padding_mask: Tensor | None
    need_weights: bool
    #: (Lq, Lk) or (B·H, Lq, Lk): bool True where a key is hidden, or an additive float.
    attn_mask: Tensor | None
    average_attn_weights: bool
    is_causal: bool


def _project(m: nn.MultiheadAttention, query: Tensor, key: Tensor, value: Tensor
             ) -> tuple[Tensor, Tensor, Tensor]:
    """Per-head q (B, H, Lq, d), k (B, H, Lk, d), v (B, H, Lk, d) as the module computes."""
    b, lq, e = query.shape
    lk = key.shape[1]
    h = m.num_heads
    d = e // h
    if m._qkv_same_embed_dim:
        wq, wk, wv = m.in_proj_weight.split([e, e, e])
    else:
        wq, wk, wv = m.q_proj_weight, m.k_proj_weight, m.v_proj_weight
    bq = bk = bv = None
    if m.in_proj_bias is not None:
        bq, bk, bv = m.in_proj_bias.split([e, e, e])
    with torch.no_grad():
        q = F.linear(query, wq, bq).view(b, lq, h, d).transpose(1, 2)
        k = F.linear(key, wk, bk).view(b, lk, h, d).transpose(1, 2)
        v = F.linear(value, wv, bv).view(b, lk, h, d).transpose(1, 2)
    return q, k, v


def _shapes(m: nn.MultiheadAttention, call: _Call, b: int, lq: int, lk: int
            ) -> list[ScoreShape]:
    scale = default_scale(m.head_dim)
    causal, bias = False, None
    attn_mask = call.get("attn_mask")
    if attn_mask is not None:
        allowed = ~attn_mask if attn_mask.dtype == torch.bool else attn_mask  # attnlab's way
        allowed = allowed.detach().cpu()
        rule = causal_mask(lq, lk)
        if allowed.dim() == 2 and (
                torch.equal(allowed, rule) if allowed.dtype == torch.bool
                else torch.equal(to_additive(rule, allowed.dtype), allowed)):
            causal = True
        else:
            bias = to_additive(allowed, torch.float32)
            # (B|1, H|1, Lq, Lk): torch's (Lq, Lk) or (B·H, Lq, Lk)
            bias = bias[None, None] if bias.dim() == 2 else bias.view(b, m.num_heads, lq, lk)
    kpm = call.get("key_padding_mask")
    key_mask = None
    if kpm is not None:
        key_mask = from_torch_key_padding_mask(kpm.detach().cpu())
        key_mask = key_mask[None] if key_mask.dim() == 1 else key_mask
    shapes = []
    for bi in range(b):
        shapes.append(ScoreShape(scale=scale, causal=causal, key_mask=key_mask_of(key_mask, bi),
                                 bias=batch_item(bias, bi)))
    return shapes


class _TorchMHAAdapter:
    name = "torch"

    def matches(self, module: nn.Module) -> bool:
        return isinstance(module, (nn.MultiheadAttention, nn.TransformerEncoder))

    def attach(self, cap: Sink, modules: list[nn.Module]) -> list[Handle]:
        for m in modules:
            if isinstance(m, nn.MultiheadAttention) and (
                    m.bias_k is not None or m.add_zero_attn):
                raise ValueError(
                    f"{cap.name_of(m)}: nn.MultiheadAttention with add_bias_kv or "
                    "add_zero_attn adds keys of its own; attnlab cannot read it")
        return attach_each(modules, lambda m: (  # (the modules matches() took: two classes)
            [self._no_nested(m)] if isinstance(m, nn.TransformerEncoder)
            else self._attach_one(cap, cast(nn.MultiheadAttention, m))))

    @staticmethod
    def _no_nested(enc: nn.TransformerEncoder) -> Handle:
        before = enc.__dict__.get("use_nested_tensor", None)
        enc.use_nested_tensor = False

        def undo() -> None:
            if before is None:
                enc.__dict__.pop("use_nested_tensor", None)
            else:
                enc.use_nested_tensor = before
        return Restore(undo)

    def _attach_one(self, cap: Sink, m: nn.MultiheadAttention) -> list[Handle]:
        pending: list[AttentionRecord] = []
        name = cap.name_of(m)

        def pre(_mod, args, kwargs):
            named = dict(zip(_ARGS, args))
            named.update(kwargs)
            # trusted to be _Call: named by the parameters of torch's own forward
            call = cast(_Call, named)
            query, key, value = call["query"], call["key"], call["value"]
            if not m.batch_first and query.dim() == 3:
                query, key, value = (t.transpose(0, 1) for t in (query, key, value))
            if query.dim() == 2:
                query, key, value = query[None], key[None], value[None]
            q, k, v = _project(m, query, key, value)
            q, k, v = (t.detach().to("cpu", torch.float32) for t in (q, k, v))
            b, _, lq, _ = q.shape
            shapes = _shapes(m, call, b, lq, k.shape[2])
            ctx = None
            if cap.context:
                outs = [attend(q[bi], k[bi], v[bi], shapes[bi]) for bi in range(b)]
                ctx = torch.stack([o for o, _ in outs])
                lse = torch.stack([s for _, s in outs])
            else:
                lse = torch.stack([row_logsumexp(q[bi], k[bi], shapes[bi]) for bi in range(b)])
            if cap.qkv:
                rec = AttentionRecord(name=name, source=self.name, shapes=shapes, q=q, k=k,
                                      v=v, lse=lse, context=ctx)
            else:
                rec = AttentionRecord(name=name, source=self.name, shapes=shapes,
                                      weights=dense_weights(q, k, lse, shapes), context=ctx)
            pending.append(rec)

        def post(_mod, _args, _out):
            if pending:
                cap.add(pending.pop())

        return [m.register_forward_pre_hook(pre, with_kwargs=True),
                m.register_forward_hook(post), Restore(pending.clear)]


#: The adapter for ``torch.nn.MultiheadAttention``.
ADAPTER = _TorchMHAAdapter()
