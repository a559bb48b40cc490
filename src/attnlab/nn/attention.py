"""Attention layers: article 000's SelfAttention and article 001's MultiHeadAttention.

Both are thin owners of parameters over
:func:`attnlab.core.functional.scaled_dot_product_attention`.
Each exposes named capture points (:class:`HookPoint`) for ``q``, ``k``, ``v`` (per head, after
any rotary embedding), the attention ``weights`` and the per-head ``context``; they are plain
identities unless someone (``attnlab.capture``) registers a hook on them.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.core.functional import capture_active, scaled_dot_product_attention
from attnlab.core.masks import combine
from attnlab.core.positional import RotaryEmbedding

__all__ = ["HookPoint", "SelfAttention", "MultiHeadAttention", "KVCache"]


class HookPoint(nn.Module):
    """A named identity: the place where capture reads a tensor (TransformerLens style)."""

    def forward(self, x: Tensor) -> Tensor:
        return x


def _check_positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _check_x(name: str, x: object, dim: int | None) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 3:
        raise ValueError(f"{name} must have shape (B, N, E), got {tuple(x.shape)}")
    if dim is not None and x.shape[-1] != dim:
        raise ValueError(
            f"{name} must have last dim {dim}, got shape {tuple(x.shape)}"
        )
    if not x.is_floating_point():
        raise TypeError(f"{name} must be floating point, got dtype {x.dtype}")
    return x


def _module_mask(
    mask: Tensor | None, key_mask: Tensor | None, b: int, h: int, lq: int, lk: int
) -> Tensor | None:
    """Normalize the module-level masks to one (B|1, H|1, Lq, Lk) mask.

    ``mask`` may be (Lq, Lk), (B, Lq, Lk) or (B, H, Lq, Lk); bool (True = may attend) or
    float (added). ``key_mask`` is bool (B, Lk), True = real token.
    """
    out = None
    if mask is not None:
        if not isinstance(mask, Tensor):
            raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
        if mask.dtype != torch.bool and not mask.is_floating_point():
            raise TypeError(
                f"mask must be bool (True = may attend) or float (added), got dtype {mask.dtype}"
            )
        allowed = {2: (lq, lk), 3: (b, lq, lk), 4: (b, h, lq, lk)}
        want = allowed.get(mask.dim())
        ok = want is not None and all(m in (w, 1) for m, w in zip(mask.shape, want))
        if not ok:
            raise ValueError(
                f"mask must have shape (Lq, Lk)=({lq}, {lk}), (B, Lq, Lk)=({b}, {lq}, {lk}) or "
                f"(B, H, Lq, Lk)=({b}, {h}, {lq}, {lk}); got {tuple(mask.shape)}"
            )
        out = mask if mask.dim() != 3 else mask[:, None]
    if key_mask is not None:
        if not isinstance(key_mask, Tensor) or key_mask.dtype != torch.bool:
            got = key_mask.dtype if isinstance(key_mask, Tensor) else type(key_mask).__name__
            raise TypeError(f"key_mask must be a bool tensor (B, Lk), True = real token; got {got}")
        if key_mask.shape != (b, lk):
            raise ValueError(
                f"key_mask must have shape (B, Lk)=({b}, {lk}), got {tuple(key_mask.shape)}"
            )
        out = combine(out, key_mask[:, None, None, :])
    return out


class SelfAttention(nn.Module):
    """Article 000's pure self-attention: separate bias-free W_q, W_k, W_v, W_o.

    ``forward(x, mask=None) -> (out, weights)`` with x (B, N, E), out (B, N, E) and
    weights (B, H, N, N). ``mask`` follows attnlab's convention (bool True = may attend).

    >>> attn = SelfAttention(embed_dim=512, num_heads=8)
    >>> out, w = attn(torch.randn(2, 10, 512))
    >>> tuple(out.shape), tuple(w.shape)
    ((2, 10, 512), (2, 8, 10, 10))
    """

    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        _check_positive("embed_dim", embed_dim)
        _check_positive("num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(
                f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.W_q = nn.Linear(embed_dim, embed_dim, bias=False)
        self.W_k = nn.Linear(embed_dim, embed_dim, bias=False)
        self.W_v = nn.Linear(embed_dim, embed_dim, bias=False)
        self.W_o = nn.Linear(embed_dim, embed_dim, bias=False)
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_weights, self.hook_context = HookPoint(), HookPoint()

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        _check_x("x", x, self.embed_dim)
        b, n, e = x.shape
        h, d = self.num_heads, self.head_dim
        q = self.hook_q(self.W_q(x).view(b, n, h, d).transpose(1, 2))  # (B, H, N, d)
        k = self.hook_k(self.W_k(x).view(b, n, h, d).transpose(1, 2))  # (B, H, N, d)
        v = self.hook_v(self.W_v(x).view(b, n, h, d).transpose(1, 2))  # (B, H, N, d)
        m = _module_mask(mask, None, b, h, n, n)
        ctx, weights = scaled_dot_product_attention(q, k, v, m, return_weights=True)
        weights = self.hook_weights(weights)  # (B, H, N, N)
        ctx = self.hook_context(ctx)  # (B, H, N, d)
        out = self.W_o(ctx.transpose(1, 2).reshape(b, n, e))  # (B, N, E)
        return out, weights


class KVCache:
    """Keys and values of one attention layer, grown one step at a time while decoding.

    A cache belongs to the first layer that uses it; passing it to another layer raises.
    For cross-attention the projected memory is stored once and reused.

    >>> mha = MultiHeadAttention(16, 4)
    >>> cache = KVCache()
    >>> x = torch.randn(1, 5, 16)
    >>> steps = [mha(x[:, t : t + 1], causal=True, cache=cache)[0] for t in range(5)]
    >>> full, _ = mha(x, causal=True)
    >>> bool(torch.allclose(torch.cat(steps, 1), full, atol=1e-5))
    True
    >>> len(cache)
    5
    """

    def __init__(self) -> None:
        self.k: Tensor | None = None  # (B, H_kv, L, d)
        self.v: Tensor | None = None  # (B, H_kv, L, d)
        self._owner: weakref.ref[nn.Module] | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def bind(self, module: nn.Module) -> None:
        owner = None if self._owner is None else self._owner()
        if owner is None:
            self._owner = weakref.ref(module)
        elif owner is not module:
            raise ValueError(
                "cache belongs to another attention layer; give each layer its own KVCache"
            )

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.k is None:
            self.k, self.v = k, v
        else:
            if k.shape[0] != self.k.shape[0] or k.shape[1] != self.k.shape[1]:
                raise ValueError(
                    f"cache holds keys of shape {tuple(self.k.shape)} (B, H_kv, L, d); new "
                    f"keys {tuple(k.shape)} do not match in batch or heads"
                )
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v

    def reset(self) -> None:
        self.k = self.v = None


class MultiHeadAttention(nn.Module):
    """Multi-head attention (article 001), batch-first, weight-compatible with torch.

    One fused QKV projection ``qkv_proj`` when ``kdim == vdim == embed_dim`` (the weight
    is split for cross-attention, exactly as ``nn.MultiheadAttention`` does), otherwise
    separate ``q_proj``, ``k_proj``, ``v_proj``. ``num_kv_heads < num_heads`` gives grouped
    query attention: each group of ``num_heads // num_kv_heads`` query heads shares one
    key/value head.

    ``forward(query, key=None, value=None, *, mask=None, key_mask=None, causal=False,
    need_weights=False, average_weights=False, cache=None) -> (out, weights_or_None)``

    * ``query`` (B, Lq, E); ``key`` (B, Lk, kdim) and ``value`` (B, Lk, vdim) default to
      ``query`` (self-attention); ``value`` defaults to ``key``.
    * ``mask``: (Lq, Lk), (B, Lq, Lk) or (B, H, Lq, Lk), bool True = may attend, or float.
    * ``key_mask``: bool (B, Lk), True = a real token (torch's ``key_padding_mask`` is the
      opposite).
    * ``causal``: bottom-right aligned, so it stays right when decoding with ``cache``.
    * weights: (B, H, Lq, Lk), or (B, Lq, Lk) averaged over heads with ``average_weights``.

    >>> mha = MultiHeadAttention(embed_dim=64, num_heads=8)
    >>> out, w = mha(torch.randn(2, 10, 64), need_weights=True)
    >>> tuple(out.shape), tuple(w.shape)
    ((2, 10, 64), (2, 8, 10, 10))
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        dropout: float = 0.0,
        num_kv_heads: int | None = None,
        rotary: RotaryEmbedding | None = None,
        init_gain: float | None = None,
    ) -> None:
        super().__init__()
        _check_positive("embed_dim", embed_dim)
        _check_positive("num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(
                f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}"
            )
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        _check_positive("num_kv_heads", num_kv_heads)
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads}"
            )
        kdim = embed_dim if kdim is None else _check_positive("kdim", kdim)
        vdim = embed_dim if vdim is None else _check_positive("vdim", vdim)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = embed_dim // num_heads  # d_k
        self.kdim, self.vdim = kdim, vdim
        self.dropout = dropout
        self.bias = bias
        kv_dim = num_kv_heads * self.head_dim
        self.fused_qkv = kdim == embed_dim and vdim == embed_dim
        if self.fused_qkv:
            self.qkv_proj = nn.Linear(embed_dim, embed_dim + 2 * kv_dim, bias=bias)
        else:
            self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
            self.k_proj = nn.Linear(kdim, kv_dim, bias=bias)
            self.v_proj = nn.Linear(vdim, kv_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.rotary = rotary
        if rotary is not None and rotary.head_dim != self.head_dim:
            raise ValueError(
                f"rotary.head_dim={rotary.head_dim} must equal head_dim={self.head_dim}"
            )
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_weights, self.hook_context = HookPoint(), HookPoint()
        self.reset_parameters(init_gain)

    def reset_parameters(self, gain: float | None = None) -> None:
        """Xavier-uniform projections and zero biases (torch's scheme); ``gain`` rescales.

        Article 001's tip: a small gain (e.g. 0.02) gives near-uniform initial attention.
        """
        g = 1.0 if gain is None else gain
        for lin in self._projections():
            nn.init.xavier_uniform_(lin.weight, gain=g)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)

    def _projections(self) -> list[nn.Linear]:
        if self.fused_qkv:
            return [self.qkv_proj]
        return [self.q_proj, self.k_proj, self.v_proj]

    # -- projections ----------------------------------------------------------------------

    def _project(
        self, query: Tensor, key: Tensor, value: Tensor, self_attn: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        e, kv_dim = self.embed_dim, self.num_kv_heads * self.head_dim
        if self.fused_qkv:
            w, b = self.qkv_proj.weight, self.qkv_proj.bias
            if self_attn:
                q, k, v = self.qkv_proj(query).split([e, kv_dim, kv_dim], dim=-1)
            else:
                wq, wk, wv = w.split([e, kv_dim, kv_dim], dim=0)
                bq, bk, bv = (None, None, None) if b is None else b.split([e, kv_dim, kv_dim])
                q = F.linear(query, wq, bq)
                k = F.linear(key, wk, bk)
                v = F.linear(value, wv, bv)
        else:
            q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        return q, k, v

    def _split_heads(self, x: Tensor, heads: int) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, heads, self.head_dim).transpose(1, 2)  # (B, heads, N, d)

    # -- forward --------------------------------------------------------------------------

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        key_mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
        average_weights: bool = False,
        cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        _check_x("query", query, self.embed_dim)
        self_attn = key is None and value is None
        if key is None:
            key = query
        if value is None:
            value = key
        _check_x("key", key, self.kdim)
        _check_x("value", value, self.vdim)
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(
                f"key and value must share (B, Lk), got key {tuple(key.shape)} and value "
                f"{tuple(value.shape)}"
            )
        if key.shape[0] != query.shape[0]:
            raise ValueError(
                f"query and key must share batch size B, got query {tuple(query.shape)} and "
                f"key {tuple(key.shape)}"
            )
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be an attnlab KVCache, got {type(cache).__name__}")

        b, lq, _ = query.shape
        h, h_kv = self.num_heads, self.num_kv_heads
        static_cross = cache is not None and not self_attn and len(cache) > 0
        if cache is not None:
            cache.bind(self)
        if static_cross:
            # cross-attention memory was projected on the first step; reuse it.
            q = self._split_heads(self._project(query, key, value, False)[0], h)
            k, v = cache.k, cache.v
        else:
            q, k, v = self._project(query, key, value, self_attn)
            q = self._split_heads(q, h)  # (B, H, Lq, d)
            k = self._split_heads(k, h_kv)  # (B, H_kv, Lk_new, d)
            v = self._split_heads(v, h_kv)  # (B, H_kv, Lk_new, d)
            if self.rotary is not None:
                past = len(cache) if (cache is not None and self_attn) else 0
                q = self.rotary(q, offset=past)
                k = self.rotary(k, offset=past)
            if cache is not None:
                k, v = cache.append(k, v)  # (B, H_kv, Lk, d)
        lk = k.shape[-2]
        if key_mask is not None and cache is not None and self_attn and key_mask.shape[-1] != lk:
            raise ValueError(
                f"key_mask must cover all {lk} cached + new keys, got {tuple(key_mask.shape)}"
            )
        if h_kv != h:
            k = k.repeat_interleave(h // h_kv, dim=1)  # (B, H, Lk, d)
            v = v.repeat_interleave(h // h_kv, dim=1)
        m = _module_mask(mask, key_mask, b, h, lq, lk)
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        want_weights = need_weights or capture_active()
        dropout_p = self.dropout if self.training else 0.0
        weights = None
        if want_weights:
            ctx, weights = scaled_dot_product_attention(
                q, k, v, m, causal=causal, dropout_p=dropout_p, return_weights=True
            )
            weights = self.hook_weights(weights)  # (B, H, Lq, Lk)
        else:
            ctx = scaled_dot_product_attention(q, k, v, m, causal=causal, dropout_p=dropout_p)
        ctx = self.hook_context(ctx)  # (B, H, Lq, d)
        out = self.out_proj(ctx.transpose(1, 2).reshape(b, lq, self.embed_dim))  # (B, Lq, E)
        if not need_weights:
            return out, None
        return out, (weights.mean(dim=1) if average_weights else weights)

    # -- interop --------------------------------------------------------------------------

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy an ``nn.MultiheadAttention`` (any batch_first/bias/kdim/vdim)."""
        from attnlab.nn.interop import mha_from_torch

        return mha_from_torch(m)

    def to_torch(self) -> nn.MultiheadAttention:
        """An equivalent ``nn.MultiheadAttention(batch_first=True)`` with the same weights."""
        from attnlab.nn.interop import mha_to_torch

        return mha_to_torch(self)

    def extra_repr(self) -> str:
        s = f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"
        if self.num_kv_heads != self.num_heads:
            s += f", num_kv_heads={self.num_kv_heads}"
        if not self.fused_qkv:
            s += f", kdim={self.kdim}, vdim={self.vdim}"
        return s + f", head_dim={self.head_dim}"
