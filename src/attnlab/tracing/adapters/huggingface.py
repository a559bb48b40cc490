"""Reading Hugging Face transformers models (BERT, GPT-2, Llama, SmolLM2, ... families).

Modern transformers models call their attention through ``ALL_ATTENTION_FUNCTIONS``,
keyed by ``config._attn_implementation``, and build their masks through
``ALL_MASK_ATTENTION_FUNCTIONS`` under the same key. This adapter registers one
implementation named ``"attnlab"`` in both (inert for every model whose config does not
name it) and, while capturing, points the configs of the observed attention modules at it
and marks those modules. Then, for each attention call:

* the **mask function** (called once per forward and mask kind) does not build the
  N x N mask. It recognises the model's rule (bidirectional, causal, causal sliding
  window), checks it exactly against the model's own mask function tile by tile, and
  returns only the (B, 1, 1, Lk) key mask from the 2-D padding mask, labelled with the
  rule. A mask no rule describes is built densely as the model would (short inputs only);
* the **attention function** computes the attention without an N x N tensor: up to
  :data:`EAGER_ORDER_MAX_TOKENS` tokens in the eager path's own order of operations, by
  tiles of rows (:func:`_eager_order`: the model's outputs equal its eager outputs bit for
  bit), beyond that with attnlab's
  :func:`~attnlab.core.functional.scaled_dot_product_attention` (``return_lse=True``:
  torch's fused CPU kernel or the chunked backend, O(N·d) memory, float32 rounding that
  differs from eager's as the model's own ``sdpa`` path does). Grouped key/value heads are
  never repeated. It records q, k, v (after RoPE), the log-sum-exp and the
  :class:`~attnlab.core.scores.ScoreShape` for the captures that marked the module, and
  returns the output the model expects; while captured, the model returns no attention
  weights (``output_attentions``).

Everything is put back in ``finally``. The helpers that describe a Hugging Face model
(:func:`is_causal_config`, :func:`max_length`, :func:`describe_model`) live here too, so
that :mod:`attnlab.models` and the tracer share them.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.core.functional import default_scale, scaled_dot_product_attention
from attnlab.core.masks import causal as causal_mask
from attnlab.core.masks import combine, from_torch_key_padding_mask
from attnlab.core.scores import ScoreShape, row_tiles
from attnlab.tracing.adapters._base import (
    AttentionRecord,
    Handle,
    Restore,
    Sink,
    dense_weights,
    detached,
)

__all__ = ["ADAPTER", "CAUSAL_TYPES", "EAGER_ORDER_MAX_TOKENS", "IMPLEMENTATION",
           "describe_model", "is_causal_config", "is_hf_model", "max_length"]

#: The name under which attnlab registers its attention and mask functions.
IMPLEMENTATION = "attnlab"
#: Hugging Face model types that are decoder-only (causal) when no architecture says so.
CAUSAL_TYPES = frozenset({"gpt2", "llama", "mistral", "qwen2", "gpt_neox", "gptj", "opt",
                          "phi", "phi3", "gemma", "gemma2", "smollm3", "olmo", "falcon",
                          "bloom"})
_OBSERVERS = "_attnlab_observers"  # attribute on an observed attention module
_RULE = "_attnlab_rule"  # attribute on a key mask our mask function returned


# -- describing a model ---------------------------------------------------------------------


def is_hf_model(model: object) -> bool:
    """A Hugging Face model: it has a ``config`` with a ``model_type``."""
    return hasattr(model, "config") and hasattr(model.config, "model_type")


def is_causal_config(config: Any) -> bool:
    """Whether a Hugging Face config describes a decoder (causal) model."""
    archs = getattr(config, "architectures", None) or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return True
    return bool(getattr(config, "is_decoder", False)) or config.model_type in CAUSAL_TYPES


def max_length(config: Any, tokenizer: Any) -> int:
    """The longest input the model (and its tokenizer) accepts."""
    n = None
    for attr in ("max_position_embeddings", "n_positions", "n_ctx"):
        n = getattr(config, attr, None)
        if isinstance(n, int) and n > 0:
            break
    tok_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < 1_000_000:
        n = tok_max if n is None else min(n, tok_max)
    return int(n or 512)


def describe_model(model: nn.Module, tokenizer: Any = None,
                   causal: bool | None = None) -> dict[str, Any]:
    """causal/layers/heads/head_dim/max_length/model_type of a Hugging Face model."""
    c = model.config
    heads = c.num_attention_heads
    kv = getattr(c, "num_key_value_heads", None) or heads
    hidden = getattr(c, "hidden_size", None) or c.n_embd
    head_dim = getattr(c, "head_dim", None) or hidden // heads
    return {"causal": is_causal_config(c) if causal is None else causal,
            "num_layers": c.num_hidden_layers, "num_heads": heads, "num_kv_heads": kv,
            "head_dim": head_dim, "max_length": max_length(c, tokenizer),
            "model_type": c.model_type}


# -- the mask function ------------------------------------------------------------------------


def _mask_rows(fn: Any, b: int, lk: int, q_off: int, kv_off: int, r0: int, r1: int) -> Tensor:
    """(B, R, Lk) bool: the model's mask function over rows [r0, r1), no padding."""
    bi = torch.arange(b)[:, None, None, None]
    hi = torch.zeros(1, 1, 1, 1, dtype=torch.long)
    qi = (torch.arange(r0, r1) + q_off)[None, None, :, None]
    kv = (torch.arange(lk) + kv_off)[None, None, None, :]
    return torch.as_tensor(fn(bi, hi, qi, kv)).expand(b, 1, r1 - r0, lk)[:, 0]


def _infer_rule(fn: Any, b: int, lq: int, lk: int, q_off: int, kv_off: int
                ) -> tuple[bool, int | None] | None:
    """(causal, window) if the mask function is exactly that rule, else None."""
    try:
        first = _mask_rows(fn, b, lk, q_off, kv_off, 0, 1)[:, 0]  # (B, Lk)
        last = _mask_rows(fn, b, lk, q_off, kv_off, lq - 1, lq)[:, 0]
    except Exception:  # a mask function that needs vmap or data we cannot index
        return None
    seen = int(last[0].sum())
    candidates = [(False, None), (True, None)]
    if 0 < seen < lk:
        candidates.append((True, seen))
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


def _mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0,
          kv_offset: int = 0, mask_function: Any = None, attention_mask: Tensor | None = None,
          use_vmap: bool = False, device: Any = "cpu", **kwargs: Any) -> Tensor:
    """transformers' mask interface: a labelled key mask, or the dense mask as a fallback."""
    from transformers.masking_utils import causal_mask_function, prepare_padding_mask, sdpa_mask

    fn = mask_function if mask_function is not None else causal_mask_function
    q_offset, kv_offset = int(q_offset), int(kv_offset)
    rule = None if use_vmap else _infer_rule(fn, batch_size, q_length, kv_length, q_offset,
                                             kv_offset)
    if rule is None:
        return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length,
                         q_offset=q_offset, kv_offset=kv_offset, mask_function=fn,
                         attention_mask=attention_mask, allow_is_causal_skip=False,
                         allow_is_bidirectional_skip=False, use_vmap=use_vmap, device=device)
    padding = prepare_padding_mask(attention_mask, kv_length, kv_offset)
    if padding is None:
        km = torch.ones(batch_size, kv_length, dtype=torch.bool, device=device)
    else:
        km = padding[:, kv_offset: kv_offset + kv_length].to(device=device, dtype=torch.bool)
    km = km[:, None, None, :].clone()  # (B, 1, 1, Lk): ours, so the label stays ours
    setattr(km, _RULE, rule)
    return km


# -- the attention function -------------------------------------------------------------------


def _read_mask(module: nn.Module, m: Tensor | None, is_causal: bool | None,
               sliding_window: int | None, lk: int
               ) -> tuple[bool, int | None, Tensor | None, Tensor | None]:
    """(causal, window, key mask (B, Lk) or None, the model's own dense float mask
    (B, H|1, Lq, Lk), 0 = visible, very negative = hidden, or None)."""
    flash_causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal",
                                                                         False))
    window = sliding_window if flash_causal and sliding_window else None
    if m is None:
        return flash_causal, window, None, None
    rule = getattr(m, _RULE, None)
    if rule is not None:
        return rule[0], rule[1], m[:, 0, 0, :lk], None
    if m.dim() == 2:  # a 2-D padding mask, as flash attention receives it
        return flash_causal, window, m[:, -lk:].bool(), None
    if m.dim() == 4 and m.shape[-2] == 1:  # (B, 1, 1, Lk): a key mask only
        km = m[:, 0, 0, :lk]
        return flash_causal, window, (km if km.dtype == torch.bool
                                      else from_torch_key_padding_mask(km.float())), None
    m = m[..., :lk]
    if m.dtype == torch.bool:  # as eager_mask turns it into floats
        m = torch.zeros(m.shape, device=m.device).masked_fill_(~m, torch.finfo(torch.float32).min)
    return False, None, None, m


def _shapes(scale: float, causal: bool, window: int | None, key_mask: Tensor | None,
            softcap: float | None, dense: Tensor | None, b: int) -> list[ScoreShape]:
    """One ScoreShape per batch element (a dense mask's hidden entries become -inf)."""
    bias = None
    if dense is not None:
        d = dense.detach().cpu().float()
        bias = d.masked_fill(d <= torch.finfo(d.dtype).min / 2, float("-inf"))
    out = []
    for bi in range(b):
        km = None
        if key_mask is not None:
            km = key_mask[bi if key_mask.shape[0] > 1 else 0].detach().cpu()
            km = None if bool(km.all()) else km
        bb = None if bias is None else bias[bi if bias.shape[0] > 1 else 0]
        out.append(ScoreShape(scale=scale, causal=causal, window=window, key_mask=km,
                              softcap=softcap, bias=bb))
    return out


def _eager_order(query: Tensor, key: Tensor, value: Tensor, rule: ScoreShape,
                 key_mask: Tensor | None, dense: Tensor | None, dropout: float
                 ) -> tuple[Tensor, Tensor]:
    """Attention in the order of transformers' eager path, one tile of rows at a time.

    ``(q·kᵀ)·scale`` (soft-capped), plus the mask (hidden keys at the dtype's most negative
    number, as eager's float mask), softmax in float32, times v: the same operations on
    the same numbers as ``eager_attention_forward`` of Llama- and BERT-style models, so the
    output is theirs bit for bit, in O(tile · Lk) memory. The row's log-sum-exp comes from
    the tile: ``lse = max_j s_ij − log max_j p_ij``; ``-inf`` for a row with no visible key.
    ``rule`` gives the scale, soft-cap, causal and window; ``key_mask`` (B, Lk) the padding;
    ``dense`` the model's own float mask, used instead of both. Returns out (B, H, Lq, dv)
    and lse (B, H, Lq) float32.
    """
    b, h, lq, d = query.shape
    h_kv, lk = key.shape[1], key.shape[2]
    g = h // h_kv
    low = torch.finfo(query.dtype).min
    kt = key.transpose(2, 3)  # (B, H_kv, d, Lk)
    out = query.new_empty(b, h, lq, value.shape[-1])
    lse = torch.empty(b, h, lq, device=query.device)
    for r0, r1 in row_tiles(lq, lk, max(1, _EAGER_TILE_BYTES // (4 * lk * h * b))):
        rows = r1 - r0
        qt = query[:, :, r0:r1].reshape(b, h_kv, g * rows, d)  # a group's heads, stacked
        s = torch.matmul(qt, kt).view(b, h, rows, lk).mul_(rule.scale)
        if rule.softcap is not None:
            s = torch.tanh(s / rule.softcap).mul_(rule.softcap)
        if dense is not None:
            s = s + dense[..., r0:r1, :]
        else:
            _hide_(s, rule, r0, r1, lq, lk, low)
            if key_mask is not None:
                s.masked_fill_(~key_mask[:, None, None, :], low)
        p = torch.softmax(s, dim=-1, dtype=torch.float32)
        m, at = s.max(dim=-1)  # the row's largest score and where: p there is 1 / Σ exp
        tile_lse = m.float() - torch.log(p.gather(-1, at[..., None])[..., 0])
        lse[:, :, r0:r1] = tile_lse.masked_fill_(m <= low / 2, float("-inf"))
        p = p.to(query.dtype)
        if dropout > 0.0:
            p = torch.nn.functional.dropout(p, p=dropout, training=True)
        o = torch.matmul(p.view(b, h_kv, g * rows, lk), value)  # (B, H_kv, G·rows, dv)
        out[:, :, r0:r1] = o.view(b, h, rows, -1)
    return out, lse


#: Bytes of float32 scores in one tile of the eager-order path (all heads): large tiles mean
#: few operations, which matters more than cache residency on a busy machine.
_EAGER_TILE_BYTES = 64 << 20


def _hide_(s: Tensor, rule: ScoreShape, r0: int, r1: int, lq: int, lk: int,
           low: float) -> None:
    """Set the scores of keys hidden by the causal/window rule to ``low``, in place, for a
    tile of rows [r0, r1): whole column ranges at once, the rule itself only on the
    columns where rows of the tile disagree (at most 2 x rows of them)."""
    if not rule.causal:
        return
    c0, c1 = rule.key_range(r0, r1, lq=lq, lk=lk)
    s[..., :c0].fill_(low)
    s[..., c1:].fill_(low)
    off = lk - lq
    seen_by_all_from = max(c0, r1 - 1 + off - rule.window + 1) if rule.window else c0
    seen_by_all_to = max(seen_by_all_from, min(c1, r0 + off + 1))
    rows = torch.arange(r0, r1, device=s.device)
    for a, b in ((c0, seen_by_all_from), (seen_by_all_to, c1)):
        if b > a:
            keep = rule.visible(rows, torch.arange(a, b, device=s.device), lq=lq, lk=lk)
            s[..., a:b].masked_fill_(~keep, low)


#: Up to this many tokens (queries and keys) the attention of a captured Hugging Face model
#: is computed in the eager order (:func:`_eager_order`: the model's outputs equal its eager
#: path's bit for bit); above it, by attnlab's core attention (torch's fused CPU kernel or
#: the chunked backend), whose float32 rounding differs from eager's as the model's own
#: ``sdpa`` path does, and whose cost does not grow with a materialised tile of scores.
EAGER_ORDER_MAX_TOKENS = 2048


def _attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
               attention_mask: Tensor | None, dropout: float = 0.0,
               scaling: float | None = None, is_causal: bool | None = None,
               sliding_window: int | None = None, softcap: float | None = None,
               position_bias: Tensor | None = None, **kwargs: Any) -> tuple[Tensor, None]:
    """transformers' attention interface: q (B, H, Lq, d), k, v (B, H_kv, Lk, .) ->
    output (B, Lq, H, dv), computed by attnlab, and recorded for the observers."""
    b, h, lq, d = query.shape
    lk = key.shape[2]
    scale = float(scaling) if scaling is not None else default_scale(d)
    causal, window, key_mask, dense = _read_mask(module, attention_mask, is_causal,
                                                 sliding_window, lk)
    if position_bias is not None:  # T5-style relative bias: (B|1, H, Lq, Lk), added
        pb = position_bias[..., :lk]
        dense = pb if dense is None else dense + pb
    if key_mask is not None and bool(key_mask.all()):
        key_mask = None
    shapes = _shapes(scale, causal, window, key_mask, softcap, dense, b)
    dropout = float(dropout)
    if softcap is not None or dense is not None or max(lq, lk) <= EAGER_ORDER_MAX_TOKENS:
        rule = ScoreShape(scale=scale, causal=causal, window=window, softcap=softcap)
        out, lse = _eager_order(query, key, value, rule, key_mask, dense, dropout)
    else:
        mask = None if key_mask is None else key_mask[:, None, None, :]
        if window is not None:
            mask = combine(mask, causal_mask(lq, lk, window=window, device=query.device))
        out, lse = scaled_dot_product_attention(query, key, value, mask, causal=causal,
                                                scale=scale, dropout_p=dropout,
                                                return_lse=True)
    for cap in list(module.__dict__.get(_OBSERVERS, ())):
        _record(cap, module, query, key, value, lse, out, shapes)
    return out.transpose(1, 2).contiguous(), None


def _record(cap: Sink, module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
            lse: Tensor, out: Tensor, shapes: list[ScoreShape]) -> None:
    q, k, lse32 = detached(query), detached(key), detached(lse)
    if cap.qkv:
        rec = AttentionRecord(name=cap.name_of(module), source=ADAPTER.name, shapes=shapes,
                              q=q, k=k, v=detached(value), lse=lse32)
    else:
        rec = AttentionRecord(name=cap.name_of(module), source=ADAPTER.name, shapes=shapes,
                              weights=dense_weights(q, k, lse32, shapes))
    if cap.context:
        rec.context = detached(out)
    cap.add(rec)


def _register() -> None:
    """Register attnlab's attention and mask functions with transformers (once)."""
    from transformers.masking_utils import AttentionMaskInterface
    from transformers.modeling_utils import AttentionInterface

    if AttentionInterface._global_mapping.get(IMPLEMENTATION) is not _attention:
        AttentionInterface.register(IMPLEMENTATION, _attention)
    if AttentionMaskInterface._global_mapping.get(IMPLEMENTATION) is not _mask:
        AttentionMaskInterface.register(IMPLEMENTATION, _mask)


class _HuggingFaceAdapter:
    name = "huggingface"

    def matches(self, module: nn.Module) -> bool:
        cls = type(module)
        if not cls.__name__.endswith("Attention"):
            return False
        config = getattr(module, "config", None)
        if config is None or not hasattr(config, "_attn_implementation_internal"):
            return False
        mod = sys.modules.get(cls.__module__)
        return mod is not None and hasattr(mod, "ALL_ATTENTION_FUNCTIONS")

    def attach(self, cap: Sink, modules: list[nn.Module]) -> list[Handle]:
        _register()
        handles: list[Handle] = []
        try:
            for m in modules:
                observers = m.__dict__.setdefault(_OBSERVERS, [])
                observers.append(cap)
                handles.append(Restore(lambda m=m: _unobserve(m, cap)))
            configs = {id(m.config): m.config for m in modules}
            for c in configs.values():
                before = c._attn_implementation_internal
                c._attn_implementation_internal = IMPLEMENTATION
                handles.append(Restore(
                    lambda c=c, before=before: setattr(c, "_attn_implementation_internal",
                                                       before)))
        except BaseException:
            for hnd in reversed(handles):
                hnd.remove()
            raise
        return handles


def _unobserve(m: nn.Module, cap: Sink) -> None:
    observers = m.__dict__.get(_OBSERVERS, [])
    if cap in observers:
        observers.remove(cap)
    if not observers:
        m.__dict__.pop(_OBSERVERS, None)


#: The adapter for Hugging Face models.
ADAPTER = _HuggingFaceAdapter()
