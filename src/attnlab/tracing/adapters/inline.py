"""Reading Hugging Face attention modules that compute their softmax inline (BLOOM, MPT,
Falcon, GPT-Neo, GPT-NeoX-Japanese, XGLM, OpenAI GPT, FSMT, MVP, TrOCR; the encoders XLM,
FlauBERT, Megatron-BERT, RemBERT, TAPAS, RoFormer, MPNet and I-BERT).

These modules have no attention interface to take over: their ``forward`` multiplies q and
k, adds an ALiBi bias and the mask, and takes the softmax itself. A forward pre-hook reads
the call's arguments (hidden states, the encoder's states for cross-attention, ALiBi bias,
mask) and recomputes q, k and v with the module's own projections, exactly as its
``forward`` does; a causal or local window the module keeps in a buffer of its own is
compared with attnlab's rule and becomes a ``causal`` flag and a ``window``; the ALiBi bias
becomes one slope
per head (it is ``slope_h · j`` up to a constant per row, which no softmax sees) and the
mask a causal rule with a key mask, so the record stays O(N·d); a bias or a mask no rule
describes is kept as it is (a (H, 1, Lk) bias, or a dense mask for short inputs), and so is
a model's own additive bias per head (MPNet's relative positions, (H, Lq, Lk)); rotary
positions applied inline (RoFormer) are in the q and k recorded. The
log-sum-exp of each row is computed from q and k in tiles of rows. The module runs
untouched; a forward hook then compares the weights it returns with attnlab's on the first
rows and raises :class:`~attnlab.tracing.adapters._base.UnreadableAttentionError` if they
differ, so a module read wrongly is refused, never traced wrongly. A module that returns its
weights only when asked (``output_attentions``) is asked for the call, and the weights are
taken out of its output again when its caller did not ask (:data:`OUTPUTS` knows the
modules whose output is not ``(output, weights, ...)``).

The encoder–decoder families (FSMT, MVP) need nothing more: capture tells their encoder,
decoder and cross-attention modules apart by module path
(:func:`attnlab.tracing.capture.stack_table`), and a cross-attention call's keys are the
encoder's states the reader projects.

Each module class has a reader (:data:`READERS`, keyed by the class's module and name:
OpenAI GPT and FSMT both call theirs ``Attention``); supporting another inline module is one
more reader.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable
from typing import Any, cast, overload

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
from attnlab.tracing.adapters._batch import alibi_slopes, batch_item, key_mask_of, visible_rule
from attnlab.tracing.adapters._inline_records import CallArguments, InlineReading

__all__ = ["ADAPTER", "ASKED_FOR_WEIGHTS", "OUTPUTS", "READERS", "STILL_INLINE"]

# A reader's ``module`` is ``Any``: a Hugging Face attention module of one of many classes,
# each read through the attributes its own ``forward`` uses.

#: Rows of each call whose weights are compared with the module's own.
CHECK_ROWS = 32


def _no_past(module: Any, cache: Any) -> None:
    """Refuse a call whose KV cache already holds keys of this layer (they are not in the
    call's hidden states); an empty cache, as a first forward pass fills, is fine."""
    if cache is None:
        return
    layer = getattr(module, "layer_idx", None)
    if layer is None:
        layer = getattr(module, "layer_id", None)  # GPT-Neo's name for it
    try:
        seen = cache.get_seq_length(layer) if layer is not None else cache.get_seq_length()
    except Exception:  # a cache that cannot say: assume it holds keys
        seen = 1
    if seen > 0:
        raise UnreadableAttentionError(
            f"{type(module).__name__} is called with keys from a KV cache; attnlab reads it "
            "without one (trace the whole text at once)")


def _no_past_kv(module: Any, cache: Any, cross: bool) -> None:
    """:func:`_no_past` for a module that keeps self- and cross-attention keys in an
    ``EncoderDecoderCache``: a cross-attention call that would reuse the cached encoder keys
    is refused too."""
    if cache is None:
        return
    if hasattr(cache, "self_attention_cache") and hasattr(cache, "is_updated"):
        if cross:
            if cache.is_updated.get(getattr(module, "layer_idx", None)):
                raise UnreadableAttentionError(
                    f"{type(module).__name__} is called with keys from a KV cache; attnlab "
                    "reads it without one (trace the whole text at once)")
            return
        cache = cache.self_attention_cache
    _no_past(module, cache)


def _heads(x: Tensor, heads: int) -> Tensor:
    """(B, L, H·d) -> (B, H, L, d)."""
    b, n, _ = x.shape
    return x.reshape(b, n, heads, -1).transpose(1, 2)


@overload
def _seen(module: Any, mask: Tensor, b: int, lq: int, lk: int) -> Tensor: ...
@overload
def _seen(module: Any, mask: None, b: int, lq: int, lk: int) -> None: ...
def _seen(module: Any, mask: Tensor | None, b: int, lq: int, lk: int) -> Tensor | None:
    """Which keys an additive float mask broadcastable to (B, 1, Lq, Lk) leaves visible,
    (B, Lq, Lk) bool; None without a mask."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        seen = mask
    else:
        seen = mask > torch.finfo(mask.dtype).min / 2
    while seen.dim() < 4:
        seen = seen[None]
    if seen.shape[1] != 1:
        raise UnreadableAttentionError(
            f"{type(module).__name__} gets an attention mask of shape {tuple(mask.shape)} "
            "that hides other keys in each head")
    return seen[:, 0].expand(b, lq, lk)


def _bloom(module: Any, a: CallArguments) -> InlineReading:
    """BloomAttention: fused q, k, v; scores ``beta · alibi + q·k / √d``; float mask."""
    _no_past(module, a.get("layer_past"))
    if float(module.beta) != 1.0:
        raise UnreadableAttentionError(
            f"{type(module).__name__} weighs its ALiBi bias by beta={module.beta}, not 1")
    h = a["hidden_states"]
    q, k, v = module._reshape(module.query_key_value(h))  # (B, H, L, d) each
    b, heads, lq, _ = q.shape
    given = a.get("alibi")
    if given is None:
        raise UnreadableAttentionError(
            f"{type(module).__name__} is called without the ALiBi bias its scores add")
    alibi = given.reshape(b, heads, 1, -1)
    m = a.get("attention_mask")
    visible = None if m is None else (m[:, 0] > torch.finfo(m.dtype).min / 2)
    return {"q": q, "k": k, "v": v, "scale": float(module.inv_norm_factor), "alibi": alibi,
            "visible": visible}


def _mpt(module: Any, a: CallArguments) -> InlineReading:
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


def _falcon(module: Any, a: CallArguments) -> InlineReading:
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


def _own_rule(module: Any, own: Tensor, window: int | None) -> Tensor:
    """The keys the module's own causal buffer ``own`` (Lq, Lk, nonzero = visible) lets each
    row see, checked to be attnlab's causal rule (within ``window``)."""
    lq, lk = own.shape
    seen = own.bool() if own.dtype != torch.bool else own
    rule = ScoreShape(scale=1.0, causal=True, window=window).visible(
        torch.arange(lq, device=own.device), None, lq=lq, lk=lk)
    if rule is None or not torch.equal(seen, rule) or (own.dtype != torch.bool and not bool(
            ((own == 0) | (own == 1)).all())):
        raise UnreadableAttentionError(
            f"{type(module).__name__} keeps a causal mask that is not attnlab's causal rule"
            + ("" if window is None else f" with a window of {window}"))
    return seen


def _gpt_neo(module: Any, a: CallArguments) -> InlineReading:
    """GPTNeoSelfAttention: scores ``q·k`` (no scaling), the causal mask of its own buffer
    (a local window on its ``local`` layers), then the model's mask added."""
    _no_past(module, a.get("layer_past"))
    h = a["hidden_states"]
    q, k, v = (_heads(p(h), module.num_heads)
               for p in (module.q_proj, module.k_proj, module.v_proj))
    b, _, lq, _ = q.shape
    lk = k.shape[2]
    window = None
    if module.attention_type == "local":
        window = int(module.config.window_size)
    elif module.attention_type != "global":
        raise UnreadableAttentionError(
            f"{type(module).__name__} has attention type {module.attention_type!r}, not "
            "'global' or 'local'")
    own = _own_rule(module, module.bias[0, 0, lk - lq: lk, :lk], window)
    seen = _seen(module, a.get("attention_mask"), b, lq, lk)
    visible = own[None].expand(b, lq, lk) if seen is None else own[None] & seen
    return {"q": q.float(), "k": k.float(), "v": v, "scale": 1.0, "visible": visible,
            "window": window}


def _openai(module: Any, a: CallArguments) -> InlineReading:
    """OpenAI GPT's Attention: fused q, k, v (Conv1D); scores ``q·k`` (over √d when built
    with ``scale``), the causal mask of its own buffer (``-1e4`` on hidden keys), the
    model's mask added."""
    x = a["x"]
    query, key, value = module.c_attn(x).split(module.split_size, dim=2)
    q, k, v = (_heads(t, module.n_head) for t in (query, key, value))
    b, _, lq, d = q.shape
    lk = k.shape[2]
    own = _own_rule(module, module.bias[0, 0, :lq, :lk], None)
    seen = _seen(module, a.get("attention_mask"), b, lq, lk)
    visible = own[None].expand(b, lq, lk) if seen is None else own[None] & seen
    scale = 1.0 / math.sqrt(d) if module.scale else 1.0
    return {"q": q, "k": k, "v": v, "scale": scale, "visible": visible}


def _gpt_neox_japanese(module: Any, a: CallArguments) -> InlineReading:
    """GPTNeoXJapaneseAttention: fused q, k, v per head; rotary positions on the first
    ``rotary_ndims`` of each head; scores ``q·k / norm_factor`` plus the model's mask."""
    _no_past(module, a.get("layer_past"))
    h = a["hidden_states"]
    b, n, _ = h.shape
    d = module.head_size
    qkv = module.query_key_value(h).view(b, n, module.num_attention_heads, 3 * d)
    q, k, v = (qkv[..., i * d: (i + 1) * d].permute(0, 2, 1, 3) for i in range(3))
    rot = module.rotary_ndims
    rotate = sys.modules[type(module).__module__].apply_rotary_pos_emb
    cos, sin = a["position_embeddings"]
    qr, kr = rotate(q[..., :rot], k[..., :rot], cos, sin)
    q = torch.cat((qr, q[..., rot:]), dim=-1)
    k = torch.cat((kr, k[..., rot:]), dim=-1)
    return {"q": q, "k": k, "v": v, "scale": 1.0 / float(module.norm_factor),
            "visible": _seen(module, a.get("attention_mask"), b, n, n)}


def _bart_like(module: Any, a: CallArguments) -> InlineReading:
    """XGLMAttention, MvpAttention, TrOCRAttention (the BART-style module): scores
    ``q·k · scaling`` plus the model's additive mask; keys and values from the encoder's
    states (``key_value_states``) in cross-attention."""
    kv = a.get("key_value_states")
    _no_past_kv(module, a.get("cache"), kv is not None)
    if a.get("attn_prompt") is not None:
        raise UnreadableAttentionError(
            f"{type(module).__name__} prepends prompt keys of its own (use_prompt); attnlab "
            "reads keys that are the input's tokens")
    h = a["hidden_states"]
    src = h if kv is None else kv
    q = _heads(module.q_proj(h), module.num_heads)
    k = _heads(module.k_proj(src), module.num_heads)
    v = _heads(module.v_proj(src), module.num_heads)
    b, _, lq, _ = q.shape
    return {"q": q, "k": k, "v": v, "scale": float(module.scaling),
            "visible": _seen(module, a.get("attention_mask"), b, lq, k.shape[2])}


def _fsmt(module: Any, a: CallArguments) -> InlineReading:
    """FSMT's Attention: (L, B, D) inputs; scores ``q·k · scaling`` plus the causal
    ``attn_mask`` (Lq, Lk) of the decoder, keys where ``key_padding_mask`` is True hidden;
    keys and values from ``key`` (the encoder's states) in cross-attention."""
    cross = bool(module.encoder_decoder_attention)
    _no_past_kv(module, a.get("layer_state"), cross)
    query = a["query"]
    src = a["key"] if cross else query
    lq, b, _ = query.shape
    q, k, v = (_heads(t.transpose(0, 1), module.num_heads) for t in (
        module.q_proj(query), module.k_proj(src), module.v_proj(src)))
    lk = k.shape[2]
    visible = torch.ones(b, lq, lk, dtype=torch.bool, device=q.device)
    m = a.get("attn_mask")
    if m is not None:
        visible = visible & _seen(module, m, b, lq, lk)
    pad = a.get("key_padding_mask")
    if pad is not None and pad.dim() != 0:
        visible = visible & ~pad.bool()[:, None, :]
    return {"q": q, "k": k, "v": v, "scale": float(module.scaling), "visible": visible}


def _bert_like(module: Any, a: CallArguments) -> InlineReading:
    """The BERT-style self-attention of Megatron-BERT, RemBERT and TAPAS: scores
    ``q·k / √d`` plus the model's additive mask; keys and values from the encoder's states
    (``encoder_hidden_states``) in cross-attention."""
    kv = a.get("encoder_hidden_states")
    _no_past_kv(module, a.get("cache"), kv is not None)
    h = a["hidden_states"]
    src = h if kv is None else kv
    heads = module.num_attention_heads
    q = _heads(module.query(h), heads)
    k, v = _heads(module.key(src), heads), _heads(module.value(src), heads)
    b, _, lq, d = q.shape
    return {"q": q, "k": k, "v": v, "scale": 1.0 / math.sqrt(d),
            "visible": _seen(module, a.get("attention_mask"), b, lq, k.shape[2])}


def _roformer(module: Any, a: CallArguments) -> InlineReading:
    """RoFormerSelfAttention: :func:`_bert_like` with rotary positions (``sinusoidal_pos``)
    applied by the module's own rotation to q and k (and to v when ``rotary_value``) in
    self-attention; q and k are recorded after the rotation."""
    read = _bert_like(module, a)
    pos = a.get("sinusoidal_pos")
    if a.get("encoder_hidden_states") is None and pos is not None:
        rotate = module.apply_rotary_position_embeddings
        if module.rotary_value:
            read["q"], read["k"], read["v"] = rotate(pos, read["q"], read["k"], read["v"])
        else:
            read["q"], read["k"] = rotate(pos, read["q"], read["k"])
    return read


def _mpnet(module: Any, a: CallArguments) -> InlineReading:
    """MPNetSelfAttention: scores ``q·k / √d`` plus the model's relative position bias
    (one additive (Lq, Lk) term per head, kept as it is) plus the model's additive mask."""
    h = a["hidden_states"]
    heads = module.num_attention_heads
    q, k, v = (_heads(p(h), heads) for p in (module.q, module.k, module.v))
    b, _, lq, d = q.shape
    pb = a.get("position_bias")
    bias = None
    if pb is not None:
        bias = pb.detach().float()
        while bias.dim() < 4:
            bias = bias[None]
    return {"q": q, "k": k, "v": v, "scale": 1.0 / math.sqrt(d), "bias": bias,
            "visible": _seen(module, a.get("attention_mask"), b, lq, k.shape[2])}


def _xlm(module: Any, a: CallArguments) -> InlineReading:
    """XLM's and FlauBERT's MultiHeadAttention: scores ``(q / √d)·k``; ``mask`` (B, Lk) or
    (B, Lq, Lk) hides the keys where it is 0; keys and values from ``kv`` when given."""
    kv = a.get("kv")
    _no_past_kv(module, a.get("cache"), kv is not None)
    h = a["input"]
    src = h if kv is None else kv
    q, k, v = (_heads(p(x), module.n_heads) for p, x in (
        (module.q_lin, h), (module.k_lin, src), (module.v_lin, src)))
    b, _, lq, d = q.shape
    lk = k.shape[2]
    m = a.get("mask")
    visible = None
    if m is not None:
        seen = m != 0
        if seen.dim() == 2:
            seen = seen[:, None, :]
        visible = seen.expand(b, lq, lk)
    return {"q": q, "k": k, "v": v, "scale": 1.0 / math.sqrt(d), "visible": visible}


def _ibert(module: Any, a: CallArguments) -> InlineReading:
    """IBertSelfAttention outside its integer-only mode: its quantising layers are then
    plain linear maps and identities, and the scores ``q·k / √d`` plus the model's mask go
    through a float softmax. With ``quant_mode`` (integer softmax) it is refused."""
    if any(getattr(m, "quant_mode", False) for m in module.modules()):
        raise UnreadableAttentionError(
            f"{type(module).__name__} runs in integer-only mode (quant_mode): its integer "
            "softmax approximates the weights attnlab computes")
    h = a["hidden_states"]
    heads = module.num_attention_heads
    q, k, v = (_heads(p(h, None)[0], heads) for p in (module.query, module.key, module.value))
    b, _, lq, d = q.shape
    return {"q": q, "k": k, "v": v, "scale": 1.0 / math.sqrt(d),
            "visible": _seen(module, a.get("attention_mask"), b, lq, k.shape[2])}


_HF = "transformers.models."
#: ``module.ClassName`` -> reader of a call's q, k, v, scale and visible keys (and, where the
#: module has them, ALiBi bias and window).
READERS: dict[str, Callable[[nn.Module, CallArguments], InlineReading]] = {
    _HF + "bloom.modeling_bloom.BloomAttention": _bloom,
    _HF + "mpt.modeling_mpt.MptAttention": _mpt,
    _HF + "falcon.modeling_falcon.FalconAttention": _falcon,
    _HF + "gpt_neo.modeling_gpt_neo.GPTNeoSelfAttention": _gpt_neo,
    _HF + "xglm.modeling_xglm.XGLMAttention": _bart_like,
    _HF + "gpt_neox_japanese.modeling_gpt_neox_japanese.GPTNeoXJapaneseAttention":
        _gpt_neox_japanese,
    _HF + "openai.modeling_openai.Attention": _openai,
    _HF + "fsmt.modeling_fsmt.Attention": _fsmt,
    _HF + "mvp.modeling_mvp.MvpAttention": _bart_like,
    _HF + "trocr.modeling_trocr.TrOCRAttention": _bart_like,
    _HF + "xlm.modeling_xlm.MultiHeadAttention": _xlm,
    _HF + "flaubert.modeling_flaubert.MultiHeadAttention": _xlm,
    _HF + "megatron_bert.modeling_megatron_bert.MegatronBertSelfAttention": _bert_like,
    _HF + "rembert.modeling_rembert.RemBertSelfAttention": _bert_like,
    _HF + "tapas.modeling_tapas.TapasSelfAttention": _bert_like,
    _HF + "roformer.modeling_roformer.RoFormerSelfAttention": _roformer,
    _HF + "mpnet.modeling_mpnet.MPNetSelfAttention": _mpnet,
    _HF + "ibert.modeling_ibert.IBertSelfAttention": _ibert,
}

#: The modules of :data:`READERS` that return their weights only when called with
#: ``output_attentions=True``.
ASKED_FOR_WEIGHTS = frozenset({
    _HF + "openai.modeling_openai.Attention", _HF + "fsmt.modeling_fsmt.Attention",
    _HF + "mvp.modeling_mvp.MvpAttention", _HF + "trocr.modeling_trocr.TrOCRAttention",
    _HF + "xlm.modeling_xlm.MultiHeadAttention",
    _HF + "flaubert.modeling_flaubert.MultiHeadAttention",
    _HF + "tapas.modeling_tapas.TapasSelfAttention",
    _HF + "mpnet.modeling_mpnet.MPNetSelfAttention",
    _HF + "ibert.modeling_ibert.IBertSelfAttention"})


def _ibert_weights(output: Any) -> Any:
    """I-BERT returns ``((context, weights), (scales...))``: the weights when asked."""
    outs = output[0] if isinstance(output, tuple) and output else ()
    return outs[1] if isinstance(outs, tuple) and len(outs) > 1 else None


def _ibert_unask(output: Any) -> Any:
    return (output[0][:1], output[1][:1])


#: ``module.ClassName`` -> (the module's own weights in its output, its output without them)
#: for the modules whose output is not ``(output, weights, ...)``.
OUTPUTS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    _HF + "ibert.modeling_ibert.IBertSelfAttention": (_ibert_weights, _ibert_unask),
}


#: ``module.ClassName`` -> whether this module's class is still the one :data:`READERS`
#: reads, for the classes that transformers later moved onto its attention interface (the
#: Hugging Face adapter reads them then).
STILL_INLINE: dict[str, Callable[[nn.Module], bool]] = {
    # transformers < 5.25 splits Falcon's fused q, k, v itself (``_split_heads``) and
    # computes the softmax inline; from 5.25 it calls the attention interface
    _HF + "falcon.modeling_falcon.FalconAttention": lambda m: hasattr(m, "_split_heads"),
}


def _key(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _shapes(read: InlineReading) -> list[ScoreShape]:
    """One ScoreShape per batch element from a reader's output."""
    q, k = read["q"], read["k"]
    b, _, lq, _ = q.shape
    lk = k.shape[2]
    alibi = read.get("alibi")
    vis = read["visible"]
    window = read.get("window")
    own = read.get("bias")
    rule = None if vis is None else visible_rule(vis, window)
    out = []
    for bi in range(b):
        slopes, alibi_bias = None, None
        if alibi is not None:  # each batch element on its own (padding shifts positions)
            one = alibi.shape[0] == 1
            slopes, alibi_bias = alibi_slopes(alibi[0:1] if one else alibi[bi: bi + 1])
        causal, rule_window, key_mask, bias = False, None, None, None
        if vis is not None and rule is None:  # no rule: the mask itself (short inputs)
            bias = torch.zeros(1, lq, lk).masked_fill_(~vis[bi].cpu()[None], float("-inf"))
        elif rule is not None:
            causal, rule_window, key_mask = rule[0], window, key_mask_of(rule[1], bi)
        if slopes is None and alibi_bias is not None:
            extra = alibi_bias[0].cpu()  # (H, 1, Lk)
            bias = extra if bias is None else bias + extra
        if own is not None:  # a model's own additive term, kept as it is
            extra = batch_item(own, bi)  # (H, Lq|1, Lk)
            bias = extra if bias is None else bias + extra
        out.append(ScoreShape(scale=read["scale"], causal=causal, window=rule_window,
                              key_mask=key_mask, alibi_slopes=slopes, bias=bias))
    return out


class _InlineAdapter:
    name = "inline"

    def matches(self, module: nn.Module) -> bool:
        key = _key(type(module))
        return key in READERS and STILL_INLINE.get(key, lambda m: True)(module)

    def attach(self, cap: Sink, modules: list[nn.Module]) -> list[Handle]:
        def attach_one(m: nn.Module) -> list[Handle]:
            sig = inspect.signature(m.forward)
            reader = READERS[_key(type(m))]
            ask = _key(type(m)) in ASKED_FOR_WEIGHTS
            own = OUTPUTS.get(_key(type(m)))
            pending: list[tuple[AttentionRecord, Tensor, Tensor, Tensor, bool]] = []

            def pre(mod: nn.Module, args: tuple, kwargs: dict) -> Any:
                bound = sig.bind_partial(*args, **kwargs)
                # the arguments by the parameter names of the module's own forward: its
                # class (the key of its reader) fixes which they are and what they hold
                call = cast(CallArguments, dict(bound.arguments))
                with torch.no_grad():
                    read = reader(mod, call)
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
                # each head's output: its weights times its values
                if cap.context and w is not None:
                    rec.context = w @ v.repeat_interleave(w.shape[1] // v.shape[1], dim=1)
                asked = bool(bound.arguments.get("output_attentions"))
                pending.append((rec, q, k, lse, asked))
                if ask and not asked:  # the module returns its weights only when asked
                    bound.arguments["output_attentions"] = True
                    return bound.args, bound.kwargs
                return None

            def post(mod: nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
                if not pending:
                    return None
                rec, q, k, lse, asked = pending.pop()
                if own is not None:  # an output of its own shape
                    _check(mod, rec, q, k, lse, own[0](output))
                    cap.add(rec)
                    return own[1](output) if ask and not asked else None
                listed = isinstance(output, (tuple, list))
                theirs = output[1] if listed and len(output) > 1 else None
                _check(mod, rec, q, k, lse, theirs)
                cap.add(rec)
                if ask and not asked and listed and len(output) > 1:  # as the caller asked
                    if isinstance(output, list):  # a list grows by the weights when asked
                        return [output[0], *output[2:]]
                    return (output[0], None, *output[2:])
                return None

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
