"""Attention layers: article 000's SelfAttention and article 001's MultiHeadAttention.

Both are thin owners of parameters over
:func:`attnlab.core.functional.scaled_dot_product_attention`, and both are
weight-compatible with their ``torch.nn`` counterparts where one exists
(:meth:`MultiHeadAttention.from_torch`, :meth:`MultiHeadAttention.to_torch`).

**The weights flag.** Modules take ``need_weights=`` (the name ``torch.nn`` modules use);
the functions of :mod:`attnlab.core` take ``return_weights=`` (and ``return_lse=``).
A module asks the core for dense weights only when it must return them.

**Observation.** Each module has named :class:`HookPoint` children, plain identities on
which an observer (``attnlab.tracing.capture``) registers forward hooks:

=================  ==================  ============================================
hook point         shape               what passes through it
=================  ==================  ============================================
``hook_q``         (B, H, Lq, d)       queries per head, after any rotary embedding
``hook_k``         (B, H_kv, Lk, d)    keys (grouped heads stored once, not repeated)
``hook_v``         (B, H_kv, Lk, dv)   values (grouped heads stored once)
``hook_weights``   (B, H, Lq, Lk)      softmax probabilities before dropout
``hook_lse``       (B, H, Lq)          float32 log-sum-exp of each row of scores
``hook_context``   (B, H, Lq, dv)      per-head output, before ``out_proj``
=================  ==================  ============================================

A hook point is *observed* when it has forward hooks (:attr:`HookPoint.observed`). The
module computes dense weights only when ``need_weights=True`` or ``hook_weights`` is
observed, asks the core for the log-sum-exp (O(N·d) memory) only when ``hook_lse`` is
observed, and otherwise takes the core's fastest path. Observing one module never changes
another's path. Every module has a float attribute ``scale`` (= ``default_scale(head_dim)``),
the factor its scores are multiplied by.
"""

from __future__ import annotations

import weakref
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab._errors import Error
from attnlab.core._checks import check_int, check_real
from attnlab.core.functional import default_scale, scaled_dot_product_attention
from attnlab.core.masks import combine
from attnlab.core.positional import RotaryEmbedding

__all__ = ["HookPoint", "SelfAttention", "MultiHeadAttention", "KVCache"]


class HookPoint(nn.Module):
    """A named identity: the place where an observer reads a tensor (TransformerLens style).

    >>> hp = HookPoint()
    >>> hp.observed
    False
    >>> handle = hp.register_forward_hook(lambda mod, inp, out: None)
    >>> hp.observed
    True
    >>> handle.remove()
    >>> hp.observed
    False
    """

    @property
    def observed(self) -> bool:
        """True while this point has forward hooks: someone reads what passes through it."""
        return bool(self._forward_hooks)

    def forward(self, x: Tensor) -> Tensor:
        return x


# -- argument checks (shared with attnlab.nn.transformer) -----------------------------------


def _check_heads(embed_dim: object, num_heads: object) -> tuple[int, int]:
    """Both positive ints and head_dim = embed_dim // num_heads a positive integer."""
    embed_dim = check_int("embed_dim", embed_dim, minimum=1)
    num_heads = check_int("num_heads", num_heads, minimum=1)
    if embed_dim % num_heads:
        raise ValueError(
            f"embed_dim={embed_dim} must be divisible by num_heads={num_heads} "
            f"(head_dim = embed_dim / num_heads)"
        )
    return embed_dim, num_heads


def _check_dropout(name: str, value: object) -> float:
    return check_real(name, value, low=0.0, high=1.0, high_open=True)


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
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


def _attend(
    m: SelfAttention | MultiHeadAttention,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    *,
    causal: bool,
    dropout_p: float,
    need_weights: bool,
) -> tuple[Tensor, Tensor | None]:
    """Run the core on per-head q (B, H, Lq, d), k, v (B, H_kv, Lk, d) through ``m``'s hooks.

    Returns the per-head context (B, H, Lq, dv) and the weights (B, H, Lq, Lk) when they
    were computed (``need_weights`` or ``hook_weights`` observed), else None.
    """
    q, k, v = m.hook_q(q), m.hook_k(k), m.hook_v(v)
    want_weights = need_weights or m.hook_weights.observed
    want_lse = m.hook_lse.observed
    res = scaled_dot_product_attention(
        q, k, v, mask, causal=causal, scale=m.scale, dropout_p=dropout_p,
        return_weights=want_weights, return_lse=want_lse,
    )
    weights = lse = None
    # (res holds what was asked for, in this order)
    if want_weights and want_lse:
        ctx, weights, lse = cast("tuple[Tensor, Tensor, Tensor]", res)
    elif want_weights:
        ctx, weights = cast("tuple[Tensor, Tensor]", res)
    elif want_lse:
        ctx, lse = cast("tuple[Tensor, Tensor]", res)
    else:
        ctx = cast(Tensor, res)
    if weights is not None:
        weights = m.hook_weights(weights)  # (B, H, Lq, Lk)
    if lse is not None:
        m.hook_lse(lse)  # (B, H, Lq)
    return m.hook_context(ctx), weights  # (B, H, Lq, dv)


class SelfAttention(nn.Module):
    """Article 000's pure self-attention: separate bias-free W_q, W_k, W_v, W_o.

    ``forward(x, mask=None, *, need_weights=True) -> (out, weights)`` with x (B, N, E),
    out (B, N, E) and weights (B, H, N, N) (None with ``need_weights=False``: article 000
    returns its weights, so here they are on by default). ``mask`` follows attnlab's
    convention (bool True = may attend, float added), shaped (N, N), (B, N, N) or
    (B, H, N, N).

    >>> attn = SelfAttention(embed_dim=512, num_heads=8)
    >>> out, w = attn(torch.randn(2, 10, 512))
    >>> tuple(out.shape), tuple(w.shape), attn.scale == 1 / 8
    ((2, 10, 512), (2, 8, 10, 10), True)
    """

    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        _check_heads(embed_dim, num_heads)
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.num_kv_heads = num_heads
        self.head_dim = embed_dim // num_heads  # d_k
        self.scale = default_scale(self.head_dim)
        self.W_q = nn.Linear(embed_dim, embed_dim, bias=False)
        self.W_k = nn.Linear(embed_dim, embed_dim, bias=False)
        self.W_v = nn.Linear(embed_dim, embed_dim, bias=False)
        self.W_o = nn.Linear(embed_dim, embed_dim, bias=False)
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_weights, self.hook_lse, self.hook_context = HookPoint(), HookPoint(), HookPoint()

    def forward(
        self, x: Tensor, mask: Tensor | None = None, *, need_weights: bool = True
    ) -> tuple[Tensor, Tensor | None]:
        _check_x("x", x, self.embed_dim)
        _check_bool("need_weights", need_weights)
        b, n, e = x.shape
        h, d = self.num_heads, self.head_dim
        q = self.W_q(x).view(b, n, h, d).transpose(1, 2)  # (B, H, N, d)
        k = self.W_k(x).view(b, n, h, d).transpose(1, 2)  # (B, H, N, d)
        v = self.W_v(x).view(b, n, h, d).transpose(1, 2)  # (B, H, N, d)
        m = _module_mask(mask, None, b, h, n, n)
        ctx, weights = _attend(self, q, k, v, m, causal=False, dropout_p=0.0,
                               need_weights=need_weights)
        out = self.W_o(ctx.transpose(1, 2).reshape(b, n, e))  # (B, N, E)
        return out, (weights if need_weights else None)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, head_dim={self.head_dim}"


class KVCache:
    """Keys and values of one attention layer, grown one step at a time while decoding.

    A cache is bound on first use to one layer and one role: ``"self"`` (self-attention:
    each call appends its new keys and values) or ``"cross"`` (cross-attention: the
    projected memory is stored once and reused while the same memory is given). Using it
    with another layer, in the other role, or with another memory raises ``ValueError``;
    :meth:`reset` empties it (and frees the role) for a new sequence on the same layer.

    >>> mha = MultiHeadAttention(16, 4)
    >>> cache = KVCache()
    >>> x = torch.randn(1, 5, 16)
    >>> steps = [mha(x[:, t : t + 1], causal=True, cache=cache)[0] for t in range(5)]
    >>> full, _ = mha(x, causal=True)
    >>> bool(torch.allclose(torch.cat(steps, 1), full, atol=1e-5))
    True
    >>> len(cache), cache.role
    (5, 'self')
    """

    def __init__(self) -> None:
        self.k: Tensor | None = None  # (B, H_kv, L, d)
        self.v: Tensor | None = None  # (B, H_kv, L, dv)
        self._owner: weakref.ref[nn.Module] | None = None
        self._role: str | None = None
        self._memory: tuple[Tensor, Tensor] | None = None  # what a cross cache projected

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    @property
    def role(self) -> str | None:
        """``"self"``, ``"cross"``, or None while the cache is empty and unused."""
        return self._role

    def reset(self) -> None:
        """Empty the cache for a new sequence (it stays bound to its layer)."""
        self.k = self.v = None
        self._role = None
        self._memory = None

    def _bind(self, module: nn.Module, role: str) -> None:
        owner = None if self._owner is None else self._owner()
        if owner is None:
            self._owner = weakref.ref(module)
        elif owner is not module:
            raise ValueError(
                "cache belongs to another attention layer; give each layer its own KVCache"
            )
        if self._role is None:
            self._role = role
        elif self._role != role:
            raise ValueError(
                f"cache holds {self._role}-attention keys and values but was passed to a "
                f"{role}-attention call; give each role its own KVCache (or reset() it)"
            )

    def _check_memory(self, key: Tensor, value: Tensor) -> None:
        """Refuse a cross-attention call whose memory is not the one this cache projected."""
        if self._memory is None:
            raise ValueError("cache holds keys and values that were not projected from a memory")
        for name, new, old in (("key", key, self._memory[0]), ("value", value, self._memory[1])):
            same = new is old or (
                new.shape == old.shape and new.device == old.device and torch.equal(new, old)
            )
            if not same:
                raise ValueError(
                    f"cache holds the projection of another memory ({name} of shape "
                    f"{tuple(old.shape)}); this call's {name} has shape {tuple(new.shape)} and "
                    "other values. Use a new KVCache (or reset() it) for a new memory"
                )

    def _append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.k is None or self.v is None:
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

    def _kv(self) -> tuple[Tensor, Tensor]:
        """The keys and values held; refused while the cache is empty."""
        if self.k is None or self.v is None:
            raise Error("cache is empty: it holds no keys and values yet")
        return self.k, self.v

    def _store_memory(self, key: Tensor, value: Tensor, k: Tensor, v: Tensor) -> None:
        self.k, self.v, self._memory = k, v, (key, value)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (article 001), batch-first, weight-compatible with torch.

    One fused QKV projection ``qkv_proj`` when ``kdim == vdim == embed_dim`` (the weight
    is split for cross-attention, exactly as ``nn.MultiheadAttention`` does), otherwise
    separate ``q_proj``, ``k_proj``, ``v_proj``. ``num_kv_heads < num_heads`` gives grouped
    query attention: each group of ``num_heads // num_kv_heads`` query heads shares one
    key/value head (the core receives the grouped keys and values, never repeated copies).

    ``forward(query, key=None, value=None, *, mask=None, key_mask=None, causal=False,
    need_weights=False, average_weights=False, cache=None) -> (out, weights_or_None)``

    * ``query`` (B, Lq, E); ``key`` (B, Lk, kdim) and ``value`` (B, Lk, vdim) default to
      ``query`` (self-attention, also when ``key is query``); ``value`` defaults to ``key``.
    * ``mask``: (Lq, Lk), (B, Lq, Lk) or (B, H, Lq, Lk), bool True = may attend, or float.
    * ``key_mask``: bool (B, Lk), True = a real token (torch's ``key_padding_mask`` is the
      opposite).
    * ``causal``: bottom-right aligned, so it stays right when decoding with ``cache``.
    * ``need_weights``: also return the weights (B, H, Lq, Lk), or (B, Lq, Lk) averaged over
      heads with ``average_weights``; off by default, so the core takes its fast path.
    * ``cache``: a :class:`KVCache` for step-by-step decoding.

    >>> mha = MultiHeadAttention(embed_dim=64, num_heads=8)
    >>> out, w = mha(torch.randn(2, 10, 64), need_weights=True)
    >>> tuple(out.shape), tuple(w.shape), round(mha.scale, 4)  # 1 / sqrt(head_dim=8)
    ((2, 10, 64), (2, 8, 10, 10), 0.3536)
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
        _check_heads(embed_dim, num_heads)
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_int("num_kv_heads", num_kv_heads, minimum=1)
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads}"
            )
        kdim = embed_dim if kdim is None else check_int("kdim", kdim, minimum=1)
        vdim = embed_dim if vdim is None else check_int("vdim", vdim, minimum=1)
        dropout = _check_dropout("dropout", dropout)
        _check_bool("bias", bias)
        if rotary is not None and not isinstance(rotary, RotaryEmbedding):
            raise TypeError(
                f"rotary must be an attnlab RotaryEmbedding or None, got {type(rotary).__name__}"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = embed_dim // num_heads  # d_k
        self.scale = default_scale(self.head_dim)
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
        self.hook_weights, self.hook_lse, self.hook_context = HookPoint(), HookPoint(), HookPoint()
        self.reset_parameters(init_gain)

    def reset_parameters(self, gain: float | None = None) -> None:
        """Xavier-uniform projections and zero biases (torch's scheme); ``gain`` rescales.

        Article 001's tip: a small gain (e.g. 0.02) gives near-uniform initial attention.
        """
        g = 1.0 if gain is None else check_real("init_gain", gain, low=0.0, low_open=True)
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

    def _split_qkv_weights(
        self,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None, Tensor | None]:
        """(W_q, W_k, W_v, b_q, b_k, b_v) whatever the layout of the projections."""
        if self.fused_qkv:
            e, kv = self.embed_dim, self.num_kv_heads * self.head_dim
            wq, wk, wv = self.qkv_proj.weight.split([e, kv, kv], dim=0)
            b = self.qkv_proj.bias
            bq, bk, bv = (None, None, None) if b is None else b.split([e, kv, kv])
            return wq, wk, wv, bq, bk, bv
        return (self.q_proj.weight, self.k_proj.weight, self.v_proj.weight,
                self.q_proj.bias, self.k_proj.bias, self.v_proj.bias)

    # -- projections ----------------------------------------------------------------------

    def _project_q(self, query: Tensor) -> Tensor:
        if not self.fused_qkv:
            return self.q_proj(query)
        wq, _, _, bq, _, _ = self._split_qkv_weights()
        return F.linear(query, wq, bq)

    def _project(
        self, query: Tensor, key: Tensor, value: Tensor, self_attn: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        if self.fused_qkv and self_attn:
            e, kv_dim = self.embed_dim, self.num_kv_heads * self.head_dim
            q, k, v = self.qkv_proj(query).split([e, kv_dim, kv_dim], dim=-1)
            return q, k, v
        if self.fused_qkv:
            wq, wk, wv, bq, bk, bv = self._split_qkv_weights()
            return F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)
        return self.q_proj(query), self.k_proj(key), self.v_proj(value)

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
        self_attn = (key is None or key is query) and (value is None or value is key)
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
        for name, flag in (("causal", causal), ("need_weights", need_weights),
                           ("average_weights", average_weights)):
            _check_bool(name, flag)
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be an attnlab KVCache, got {type(cache).__name__}")

        b, lq, _ = query.shape
        h, h_kv = self.num_heads, self.num_kv_heads
        if cache is not None:
            cache._bind(self, "self" if self_attn else "cross")
        if cache is not None and not self_attn and len(cache) > 0:
            # cross-attention memory was projected on the first step; reuse it.
            cache._check_memory(key, value)
            q = self._split_heads(self._project_q(query), h)  # (B, H, Lq, d)
            k, v = cache._kv()  # (B, H_kv, Lk, d)
        else:
            q, k, v = self._project(query, key, value, self_attn)
            q = self._split_heads(q, h)  # (B, H, Lq, d)
            k = self._split_heads(k, h_kv)  # (B, H_kv, Lk_new, d)
            v = self._split_heads(v, h_kv)  # (B, H_kv, Lk_new, d)
            if self.rotary is not None:
                past = len(cache) if (cache is not None and self_attn) else 0
                q = self.rotary(q, offset=past)
                k = self.rotary(k, offset=past)
            if cache is not None and self_attn:
                k, v = cache._append(k, v)  # (B, H_kv, Lk, d)
            elif cache is not None:
                cache._store_memory(key, value, k, v)
        lk = k.shape[-2]
        if key_mask is not None and cache is not None and self_attn and key_mask.shape[-1] != lk:
            raise ValueError(
                f"key_mask must cover all {lk} cached + new keys, got {tuple(key_mask.shape)}"
            )
        m = _module_mask(mask, key_mask, b, h, lq, lk)
        dropout_p = self.dropout if self.training else 0.0
        ctx, weights = _attend(self, q, k, v, m, causal=causal, dropout_p=dropout_p,
                               need_weights=need_weights)
        out = self.out_proj(ctx.transpose(1, 2).reshape(b, lq, self.embed_dim))  # (B, Lq, E)
        if not need_weights or weights is None:
            return out, None
        return out, (weights.mean(dim=1) if average_weights else weights)

    # -- torch.nn.MultiheadAttention ------------------------------------------------------

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> MultiHeadAttention:
        """attnlab ``MultiHeadAttention`` with the weights of ``m`` (batch-first regardless).

        Any ``batch_first``/``bias``/``kdim``/``vdim``; ``add_bias_kv`` and ``add_zero_attn``
        have no attnlab counterpart and are refused.
        """
        if not isinstance(m, nn.MultiheadAttention):
            raise TypeError(f"m must be a torch.nn.MultiheadAttention, got {type(m).__name__}")
        if m.bias_k is not None or m.bias_v is not None:
            raise ValueError("add_bias_kv=True is not supported (extra learned key/value rows)")
        if m.add_zero_attn:
            raise ValueError("add_zero_attn=True is not supported")
        bias = m.in_proj_bias is not None
        ours = cls(m.embed_dim, m.num_heads, bias=bias, kdim=m.kdim, vdim=m.vdim,
                   dropout=float(m.dropout))
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

    def to_torch(self) -> nn.MultiheadAttention:
        """``nn.MultiheadAttention(batch_first=True)`` computing the same function.

        Grouped-query attention is expanded: each shared key/value head is repeated for its
        query heads, which leaves the function unchanged. A module with rotary embeddings
        has no ``nn.MultiheadAttention`` twin and is refused.
        """
        if self.rotary is not None:
            raise ValueError("a module with rotary embeddings has no nn.MultiheadAttention twin")
        e, h, d = self.embed_dim, self.num_heads, self.head_dim
        wq, wk, wv, bq, bk, bv = self._split_qkv_weights()
        group = h // self.num_kv_heads

        def expand(t: Tensor) -> Tensor:
            if group == 1:
                return t
            t = t.reshape(self.num_kv_heads, d, *t.shape[1:])
            return t.repeat_interleave(group, dim=0).reshape(h * d, *t.shape[2:])

        wk, wv = expand(wk), expand(wv)
        bk = None if bk is None else expand(bk)
        bv = None if bv is None else expand(bv)
        m = nn.MultiheadAttention(
            e, h, dropout=self.dropout, bias=self.bias, kdim=self.kdim, vdim=self.vdim,
            batch_first=True, device=wq.device, dtype=wq.dtype,
        )
        with torch.no_grad():
            if m._qkv_same_embed_dim:
                m.in_proj_weight.copy_(torch.cat([wq, wk, wv], 0))
            else:
                m.q_proj_weight.copy_(wq)
                m.k_proj_weight.copy_(wk)
                m.v_proj_weight.copy_(wv)
            if self.bias:
                if bq is None or bk is None or bv is None:
                    raise Error("the module has bias=True but its q/k/v projections lack a bias")
                m.in_proj_bias.copy_(torch.cat([bq, bk, bv], 0))
                m.out_proj.bias.copy_(self.out_proj.bias)
            m.out_proj.weight.copy_(self.out_proj.weight)
        m.train(self.training)
        return m

    def extra_repr(self) -> str:
        s = f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"
        if self.num_kv_heads != self.num_heads:
            s += f", num_kv_heads={self.num_kv_heads}"
        if not self.fused_qkv:
            s += f", kdim={self.kdim}, vdim={self.vdim}"
        return s + f", head_dim={self.head_dim}"
