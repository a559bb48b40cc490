"""Conversions between attnlab modules and their ``torch.nn`` counterparts.

The pairs compute the same function; tests check outputs, per-head weights and gradients.
"""

from __future__ import annotations

import torch
from torch import nn

from attnlab.nn.attention import MultiHeadAttention

__all__ = ["mha_from_torch", "mha_to_torch"]


def mha_from_torch(m: nn.MultiheadAttention) -> MultiHeadAttention:
    """attnlab ``MultiHeadAttention`` with the weights of ``m`` (batch-first regardless)."""
    if not isinstance(m, nn.MultiheadAttention):
        raise TypeError(f"m must be a torch.nn.MultiheadAttention, got {type(m).__name__}")
    if m.bias_k is not None or m.bias_v is not None:
        raise ValueError("add_bias_kv=True is not supported (extra learned key/value rows)")
    if m.add_zero_attn:
        raise ValueError("add_zero_attn=True is not supported")
    bias = m.in_proj_bias is not None
    ours = MultiHeadAttention(
        m.embed_dim, m.num_heads, bias=bias, kdim=m.kdim, vdim=m.vdim, dropout=m.dropout
    )
    ref = m.in_proj_weight if m.in_proj_weight is not None else m.q_proj_weight
    ours = ours.to(device=ref.device, dtype=ref.dtype)
    e = m.embed_dim
    with torch.no_grad():
        if ours.fused_qkv:
            if m._qkv_same_embed_dim:
                ours.qkv_proj.weight.copy_(m.in_proj_weight)
            else:
                ours.qkv_proj.weight.copy_(
                    torch.cat([m.q_proj_weight, m.k_proj_weight, m.v_proj_weight], 0)
                )
            if bias:
                ours.qkv_proj.bias.copy_(m.in_proj_bias)
        else:
            ours.q_proj.weight.copy_(m.q_proj_weight)
            ours.k_proj.weight.copy_(m.k_proj_weight)
            ours.v_proj.weight.copy_(m.v_proj_weight)
            if bias:
                bq, bk, bv = m.in_proj_bias.split([e, e, e])
                ours.q_proj.bias.copy_(bq)
                ours.k_proj.bias.copy_(bk)
                ours.v_proj.bias.copy_(bv)
        ours.out_proj.weight.copy_(m.out_proj.weight)
        if bias:
            ours.out_proj.bias.copy_(m.out_proj.bias)
    ours.train(m.training)
    return ours


def mha_to_torch(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    """``nn.MultiheadAttention(batch_first=True)`` computing the same function as ``ours``.

    Grouped-query attention is expanded: each shared key/value head is repeated for its
    query heads, which leaves the function unchanged.
    """
    if not isinstance(ours, MultiHeadAttention):
        raise TypeError(f"expected an attnlab MultiHeadAttention, got {type(ours).__name__}")
    if ours.rotary is not None:
        raise ValueError("a module with rotary embeddings has no nn.MultiheadAttention twin")
    e, h, d = ours.embed_dim, ours.num_heads, ours.head_dim
    kv = ours.num_kv_heads * d
    if ours.fused_qkv:
        w = ours.qkv_proj.weight
        wq, wk, wv = w.split([e, kv, kv], 0)
        b = ours.qkv_proj.bias
        bq, bk, bv = (None, None, None) if b is None else b.split([e, kv, kv])
    else:
        wq, wk, wv = ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight
        bq, bk, bv = ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias
    group = h // ours.num_kv_heads

    def expand(t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None or group == 1:
            return t
        t = t.reshape(ours.num_kv_heads, d, *t.shape[1:])
        return t.repeat_interleave(group, dim=0).reshape(h * d, *t.shape[2:])

    wk, wv, bk, bv = expand(wk), expand(wv), expand(bk), expand(bv)
    m = nn.MultiheadAttention(
        e, h, dropout=ours.dropout, bias=ours.bias, kdim=ours.kdim, vdim=ours.vdim,
        batch_first=True, device=w.device if ours.fused_qkv else wq.device,
        dtype=wq.dtype,
    )
    with torch.no_grad():
        if m._qkv_same_embed_dim:
            m.in_proj_weight.copy_(torch.cat([wq, wk, wv], 0))
        else:
            m.q_proj_weight.copy_(wq)
            m.k_proj_weight.copy_(wk)
            m.v_proj_weight.copy_(wv)
        if ours.bias:
            m.in_proj_bias.copy_(torch.cat([bq, bk, bv], 0))
            m.out_proj.bias.copy_(ours.out_proj.bias)
        m.out_proj.weight.copy_(ours.out_proj.weight)
    m.train(ours.training)
    return m
