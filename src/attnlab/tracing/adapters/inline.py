"""Reading Hugging Face attention modules that compute their softmax inline (BLOOM, MPT,
Falcon).

These modules have no attention interface to take over: their ``forward`` multiplies q and
k, adds an ALiBi bias and the mask, and takes the softmax itself. A forward pre-hook reads
the call's arguments (hidden states, ALiBi bias, mask) and recomputes q, k and v with the
module's own projection, exactly as its ``forward`` does; the ALiBi bias becomes one slope
per head (it is ``slope_h · j`` up to a constant per row, which no softmax sees) and the
mask a causal rule with a key mask, so the record stays O(N·d); a bias or a mask no rule
describes is kept as it is (a (H, 1, Lk) bias, or a dense mask for short inputs). The
log-sum-exp of each row is computed from q and k in tiles of rows. The module runs
untouched; a forward hook then compares the weights it returns with attnlab's on the first
rows and raises :class:`~attnlab.tracing.adapters._base.UnreadableAttentionError` if they
differ, so a module read wrongly is refused, never traced wrongly.

Each module class has a reader (:data:`READERS`); supporting another inline module is one
more reader.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.core.weights import shaped_weights
from attnlab.tracing.adapters._base import (
    AttentionRecord,
    Handle,
    Sink,
    UnreadableAttentionError,
    attach_each,
    dense_weights,
    detached,
)

__all__ = ["ADAPTER", "READERS"]

#: Rows of each call whose weights are compared with the module's own.
CHECK_ROWS = 32


def _visible_rule(visible: Tensor) -> tuple[bool, Tensor] | None:
    """(causal, key mask (B, Lk)) when ``visible`` (B, Lq, Lk) is exactly that rule."""
    b, lq, lk = visible.shape
    rows = torch.arange(lq, device=visible.device)
    tri = ScoreShape(scale=1.0, causal=True).visible(rows, None, lq=lq, lk=lk)
    keys = visible[:, -1, :]
    if torch.equal(visible, tri[None] & keys[:, None, :]):
        return True, keys
    keys = visible[:, 0, :]
    if torch.equal(visible, keys[:, None, :].expand(b, lq, lk)):
        return False, keys
    return None


def _alibi(bias: Tensor) -> tuple[Tensor | None, Tensor]:
    """(slopes (H,) or None, the bias (B|1, H, 1, Lk) float32): slopes when every row of the
    bias is ``slope_h · j`` plus one constant (what ALiBi adds, up to what no softmax sees)."""
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


def _no_past(module: nn.Module, cache: Any) -> None:
    """Refuse a call whose KV cache already holds keys of this layer (they are not in the
    call's hidden states); an empty cache, as a first forward pass fills, is fine."""
    if cache is None:
        return
    layer = getattr(module, "layer_idx", None)
    try:
        seen = cache.get_seq_length(layer) if layer is not None else cache.get_seq_length()
    except Exception:  # a cache that cannot say: assume it holds keys
        seen = 1
    if seen > 0:
        raise UnreadableAttentionError(
            f"{type(module).__name__} is called with keys from a KV cache; attnlab reads it "
            "without one (trace the whole text at once)")


def _bloom(module: nn.Module, a: dict[str, Any]) -> dict[str, Any]:
    """BloomAttention: fused q, k, v; scores ``beta · alibi + q·k / √d``; float mask."""
    _no_past(module, a.get("layer_past"))
    if float(module.beta) != 1.0:
        raise UnreadableAttentionError(
            f"{type(module).__name__} weighs its ALiBi bias by beta={module.beta}, not 1")
    h = a["hidden_states"]
    q, k, v = module._reshape(module.query_key_value(h))  # (B, H, L, d) each
    b, heads, lq, _ = q.shape
    alibi = a["alibi"].reshape(b, heads, 1, -1)
    m = a.get("attention_mask")
    visible = None if m is None else (m[:, 0] > torch.finfo(m.dtype).min / 2)
    return {"q": q, "k": k, "v": v, "scale": float(module.inv_norm_factor), "alibi": alibi,
            "visible": visible}


def _mpt(module: nn.Module, a: dict[str, Any]) -> dict[str, Any]:
    """MptAttention: fused (clipped) q, k, v; scores ``q·k · scale + position_bias``; a
    bool mask, True where a key is hidden."""
    _no_past(module, a.get("cache"))
    h = a["hidden_states"]
    b, n, _ = h.shape
    qkv = module.Wqkv(h)
    if module.clip_qkv:
        qkv = qkv.clamp(min=-module.clip_qkv, max=module.clip_qkv)
    q, k, v = (t.reshape(b, n, module.n_heads, module.head_dim).transpose(1, 2)
               for t in qkv.chunk(3, dim=2))
    pb = a.get("position_bias")
    alibi = None
    if pb is not None:
        alibi = pb[:, max(0, pb.shape[1] - n):, max(0, pb.shape[2] - n):][None]
        if alibi.shape[-2] != 1:
            raise UnreadableAttentionError(
                f"{type(module).__name__} gets a position bias of shape {tuple(pb.shape)} "
                "that varies along the queries; attnlab reads ALiBi biases (H, 1, Lk)")
    m = a.get("attention_mask")
    visible = None if m is None else ~m[:, 0].bool()
    return {"q": q, "k": k, "v": v, "scale": float(module.softmax_scale), "alibi": alibi,
            "visible": visible}


def _falcon(module: nn.Module, a: dict[str, Any]) -> dict[str, Any]:
    """FalconAttention: fused q, k, v (grouped or multi-query keys); with rotary positions
    ``q·k / √d + mask``; with ALiBi ``(q·k + alibi) / √d + mask``, where the model's mask
    carries ``alibi / √d`` once more on the keys a row sees (so the bias counts twice)."""
    _no_past(module, a.get("layer_past"))
    h = a["hidden_states"]
    q, k, v = module._split_heads(module.query_key_value(h))  # (B, L, heads, d)
    b, n = q.shape[:2]
    kv_heads = module.num_heads if module.new_decoder_architecture else module.num_kv_heads
    d = module.head_dim
    q = q.transpose(1, 2).reshape(b, module.num_heads, n, d)
    k = k.transpose(1, 2).reshape(b, kv_heads, n, d)
    v = v.transpose(1, 2).reshape(b, kv_heads, n, d)
    alibi = a.get("alibi")
    if alibi is None:
        rotate = sys.modules[type(module).__module__].apply_rotary_pos_emb
        cos, sin = a["position_embeddings"]
        q, k = rotate(q, k, cos, sin)
        scale, extra = 1.0 / math.sqrt(d), None
    else:
        scale = float(module.inv_norm_factor)
        extra = alibi.reshape(b, module.num_heads, 1, -1).float() * scale
    m = a.get("attention_mask")
    visible = None
    if m is not None:
        low = torch.finfo(m.dtype).min / 2
        seen = m > low  # (B, H|1, Lq, Lk)
        if not torch.equal(seen, seen[:, :1].expand_as(seen)):
            raise UnreadableAttentionError(
                f"{type(module).__name__} gets a mask that hides other keys in each head")
        visible = seen[:, 0]
        values = m.float().masked_fill(~seen, 0.0)
        if bool(values.any()):  # an additive term riding on the mask: the same in every row
            row = values.sum(-2, keepdim=True) / seen.sum(-2, keepdim=True).clamp_min(1)
            if not bool(((values - row * seen).abs() <= 1e-6 * (1 + float(
                    values.abs().max()))).all()):
                raise UnreadableAttentionError(
                    f"{type(module).__name__} gets a mask whose values vary along the queries")
            extra = row if extra is None else extra + row
    return {"q": q, "k": k, "v": v, "scale": scale, "alibi": extra, "visible": visible}


#: Module class name -> reader of a call's q, k, v, scale, ALiBi bias and visible keys.
READERS: dict[str, Callable[[nn.Module, dict[str, Any]], dict[str, Any]]] = {
    "BloomAttention": _bloom,
    "MptAttention": _mpt,
    "FalconAttention": _falcon,
}
_MODULES = {"BloomAttention": "transformers.models.bloom.modeling_bloom",
            "MptAttention": "transformers.models.mpt.modeling_mpt",
            "FalconAttention": "transformers.models.falcon.modeling_falcon"}


def _shapes(read: dict[str, Any]) -> list[ScoreShape]:
    """One ScoreShape per batch element from a reader's output."""
    q, k = read["q"], read["k"]
    b, _, lq, _ = q.shape
    lk = k.shape[2]
    alibi = read["alibi"]
    vis = read["visible"]
    rule = None if vis is None else _visible_rule(vis)
    out = []
    for bi in range(b):
        slopes, bias = None, None
        if alibi is not None:  # each batch element on its own (padding shifts positions)
            one = alibi.shape[0] == 1
            slopes, bias = _alibi(alibi[0:1] if one else alibi[bi: bi + 1])
        kw: dict[str, Any] = {"scale": read["scale"]}
        if vis is not None and rule is None:  # no rule: the mask itself (short inputs)
            dense = torch.zeros(1, lq, lk).masked_fill_(~vis[bi].cpu()[None], float("-inf"))
            kw["bias"] = dense
        elif rule is not None:
            kw["causal"] = rule[0]
            keys = rule[1][bi].cpu()
            kw["key_mask"] = None if bool(keys.all()) else keys
        if slopes is not None:
            kw["alibi_slopes"] = slopes
        elif bias is not None:
            extra = bias[0].cpu()  # (H, 1, Lk)
            kw["bias"] = extra if "bias" not in kw else kw["bias"] + extra
        out.append(ScoreShape(**kw))
    return out


class _InlineAdapter:
    name = "inline"

    def matches(self, module: nn.Module) -> bool:
        cls = type(module)
        return cls.__name__ in READERS and cls.__module__ == _MODULES.get(cls.__name__)

    def attach(self, cap: Sink, modules: list[nn.Module]) -> list[Handle]:
        def attach_one(m: nn.Module) -> list[Handle]:
            sig = inspect.signature(m.forward)
            reader = READERS[type(m).__name__]
            pending: list[tuple[AttentionRecord, Tensor, Tensor, Tensor]] = []

            def pre(mod: nn.Module, args: tuple, kwargs: dict) -> None:
                bound = sig.bind_partial(*args, **kwargs)
                with torch.no_grad():
                    read = reader(mod, dict(bound.arguments))
                shapes = _shapes(read)
                q, k, v = detached(read["q"]), detached(read["k"]), detached(read["v"])
                lse = torch.stack([row_logsumexp(q[bi], k[bi], s)
                                   for bi, s in enumerate(shapes)])
                w = dense_weights(q, k, lse, shapes) if (cap.context or not cap.qkv) else None
                if cap.qkv:
                    rec = AttentionRecord(name=cap.name_of(mod), source=self.name,
                                          shapes=shapes, q=q, k=k, v=v, lse=lse)
                else:
                    rec = AttentionRecord(name=cap.name_of(mod), source=self.name,
                                          shapes=shapes, weights=w)
                if cap.context:  # each head's output: its weights times its values
                    rec.context = w @ v.repeat_interleave(w.shape[1] // v.shape[1], dim=1)
                pending.append((rec, q, k, lse))

            def post(mod: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
                if not pending:
                    return
                rec, q, k, lse = pending.pop()
                theirs = output[1] if isinstance(output, tuple) and len(output) > 1 else None
                _check(mod, rec, q, k, lse, theirs)
                cap.add(rec)

            return [m.register_forward_pre_hook(pre, with_kwargs=True),
                    m.register_forward_hook(post, with_kwargs=True)]

        return attach_each(modules, attach_one)


def _check(module: nn.Module, rec: AttentionRecord, q: Tensor, k: Tensor, lse: Tensor,
           theirs: Any) -> None:
    """The module's own weights on its first :data:`CHECK_ROWS` rows must equal attnlab's."""
    name = type(module).__name__
    if not isinstance(theirs, Tensor) or theirs.dim() != 4:
        raise UnreadableAttentionError(
            f"{name} returns no attention weights (B, H, Lq, Lk) for attnlab to check its "
            "reading against")
    b, h, lq, _ = q.shape
    lk = k.shape[2]
    n = min(lq, CHECK_ROWS)
    rows = torch.arange(n)
    ref = detached(theirs)[:, :, :n]
    worst = 0.0
    for bi in range(b):
        w = shaped_weights(q[bi, :, :n], k[bi].repeat_interleave(h // k.shape[1], 0),
                           lse[bi, :, :n], rec.shapes[bi], rows=rows, head=list(range(h)),
                           lq=lq, lk=lk)
        seen = torch.isfinite(lse[bi, :, :n])[..., None]  # rows with no key are 0 here
        worst = max(worst, float((w - ref[bi] * seen).abs().max()))
    tol = 1e-5
    if not worst <= tol:
        raise UnreadableAttentionError(
            f"{name} shapes its attention in a way attnlab does not record: on the first {n} "
            f"rows attnlab's weights differ from the module's own by {worst:.3g} (allowed "
            f"{tol:g}); tracing it is refused rather than wrong")


#: The adapter for inline-softmax Hugging Face modules.
ADAPTER = _InlineAdapter()
