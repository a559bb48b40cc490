"""Transformers built only from attnlab's attention: encoder/decoder layers, an
encoder-decoder ``Transformer`` and a decoder-only ``GPT``.

Read top to bottom: FeedForward -> TransformerEncoderLayer -> TransformerDecoderLayer ->
Transformer -> GPT. Sizes use one vocabulary everywhere: ``embed_dim`` (E), ``num_heads``
(H), ``num_kv_heads`` (H_kv, grouped-query attention), ``head_dim`` (d = E / H),
``ff_dim`` (the feed-forward width), ``num_layers``. Layer arguments otherwise mirror
``torch.nn.TransformerEncoderLayer``, so weights move across with
:meth:`TransformerEncoderLayer.from_torch` and :meth:`TransformerDecoderLayer.from_torch`.
Like every attnlab module, the attention inside takes ``need_weights=`` and exposes its hook
points (see :mod:`attnlab.nn.attention`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab._errors import ArgumentError, ArgumentTypeError
from attnlab.core._checks import check_instance, check_int, check_optional_int, check_real
from attnlab.core.positional import RotaryEmbedding, SinusoidalPositionalEncoding
from attnlab.nn.attention import (
    KVCache,
    MultiHeadAttention,
    _check_bool,
    _check_dropout,
    _check_heads,
)

__all__ = [
    "FeedForward",
    "TransformerEncoderLayer",
    "TransformerDecoderLayer",
    "TransformerConfig",
    "Transformer",
    "GPTConfig",
    "GPT",
]

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _activation(name: object):
    if not isinstance(name, str) or name not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {name!r}")
    return _ACTIVATIONS[name]


def _torch_activation(layer: nn.Module) -> str:
    """The name of a torch Transformer layer's activation; only relu and gelu are known."""
    act = layer.activation
    name = getattr(act, "__name__", type(act).__name__).lower()
    if name not in _ACTIVATIONS:
        raise ValueError(f"unsupported activation {name!r}; expected relu or gelu")
    return name


def _check_eps(name: str, value: object) -> float:
    return check_real(name, value, low=0.0, low_open=True)


class FeedForward(nn.Module):
    """linear1 -> activation -> dropout -> linear2 (names as in torch's layers)."""

    def __init__(self, embed_dim: int, ff_dim: int, dropout: float, activation: str,
                 bias: bool = True) -> None:
        super().__init__()
        check_int("embed_dim", embed_dim, minimum=1)
        check_int("ff_dim", ff_dim, minimum=1)
        self.linear1 = nn.Linear(embed_dim, ff_dim, bias=bias)
        self.linear2 = nn.Linear(ff_dim, embed_dim, bias=bias)
        self.dropout = nn.Dropout(_check_dropout("dropout", dropout))
        self.act = _activation(activation)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.act(self.linear1(x))))


class _Layer(nn.Module):
    """What encoder and decoder layers share: torch's arguments, the self-attention (and,
    in a decoder, the cross-attention), the feed-forward, and a LayerNorm and a dropout
    per residual branch (``norm1``/``dropout1``, ...)."""

    _cross = False  # a decoder layer also attends to the encoder's memory

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        ff_dim: int = 2048,
        dropout: float = 0.1,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        bias: bool = True,
        num_kv_heads: int | None = None,
    ) -> None:
        super().__init__()
        _check_heads(embed_dim, num_heads)
        dropout = _check_dropout("dropout", dropout)
        eps = _check_eps("layer_norm_eps", layer_norm_eps)
        self.self_attn = MultiHeadAttention(embed_dim, num_heads, bias=bias, dropout=dropout,
                                            num_kv_heads=num_kv_heads)
        if self._cross:
            self.cross_attn = MultiHeadAttention(embed_dim, num_heads, bias=bias,
                                                 dropout=dropout, num_kv_heads=num_kv_heads)
        self.ff = FeedForward(embed_dim, ff_dim, dropout, activation, bias)
        self.norm1 = nn.LayerNorm(embed_dim, eps=eps, bias=bias)
        self.norm2 = nn.LayerNorm(embed_dim, eps=eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        if self._cross:
            self.norm3 = nn.LayerNorm(embed_dim, eps=eps, bias=bias)
            self.dropout3 = nn.Dropout(dropout)
        self.norm_first = _check_bool("norm_first", norm_first)


class TransformerEncoderLayer(_Layer):
    """Self-attention + feed-forward, each in a residual branch; pre-LN (``norm_first``)
    or post-LN (the original Transformer).

    Args: ``embed_dim``, ``num_heads``, ``ff_dim``, ``dropout``, ``activation`` (relu or
    gelu), ``layer_norm_eps``, ``norm_first``, ``bias``, ``num_kv_heads`` (grouped-query
    attention), as ``torch.nn.TransformerEncoderLayer`` names them.

    >>> layer = TransformerEncoderLayer(embed_dim=16, num_heads=4, ff_dim=32)
    >>> layer(torch.randn(2, 5, 16)).shape
    torch.Size([2, 5, 16])
    """

    def _sa(self, x: Tensor, mask: Tensor | None, key_mask: Tensor | None, causal: bool) -> Tensor:
        out, _ = self.self_attn(x, mask=mask, key_mask=key_mask, causal=causal)
        return self.dropout1(out)

    def forward(self, x: Tensor, mask: Tensor | None = None, key_mask: Tensor | None = None,
                causal: bool = False) -> Tensor:
        if self.norm_first:
            x = x + self._sa(self.norm1(x), mask, key_mask, causal)
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            x = self.norm1(x + self._sa(x, mask, key_mask, causal))
            x = self.norm2(x + self.dropout2(self.ff(x)))
        return x

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> TransformerEncoderLayer:
        """Copy a ``torch.nn.TransformerEncoderLayer`` (its activation must be relu/gelu)."""
        return _from_torch_layer(cls, layer, nn.TransformerEncoderLayer, norms=2)


class TransformerDecoderLayer(_Layer):
    """Causal self-attention, cross-attention over the encoder memory, feed-forward.

    ``self_cache`` and ``cross_cache`` are two :class:`KVCache` objects for step-by-step
    decoding; each is bound to its attention and its role, so swapping them raises. Takes
    the arguments of :class:`TransformerEncoderLayer`.
    """

    _cross = True

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        *,
        key_mask: Tensor | None = None,
        memory_key_mask: Tensor | None = None,
        causal: bool = True,
        self_cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
    ) -> Tensor:
        def sa(h: Tensor) -> Tensor:
            out, _ = self.self_attn(h, key_mask=key_mask, causal=causal, cache=self_cache)
            return self.dropout1(out)

        def ca(h: Tensor) -> Tensor:
            out, _ = self.cross_attn(h, memory, key_mask=memory_key_mask, cache=cross_cache)
            return self.dropout2(out)

        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + ca(self.norm2(x))
            x = x + self.dropout3(self.ff(self.norm3(x)))
        else:
            x = self.norm1(x + sa(x))
            x = self.norm2(x + ca(x))
            x = self.norm3(x + self.dropout3(self.ff(x)))
        return x

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> TransformerDecoderLayer:
        """Copy a ``torch.nn.TransformerDecoderLayer`` (its activation must be relu/gelu);
        torch's ``multihead_attn`` becomes ``cross_attn``.

        torch's ``tgt_mask`` (causal) and ``tgt_key_padding_mask`` /
        ``memory_key_padding_mask`` (True = padding) correspond to ``causal=True`` and
        ``key_mask`` / ``memory_key_mask`` (True = real token) here.
        """
        ours = _from_torch_layer(cls, layer, nn.TransformerDecoderLayer, norms=3)
        ours.cross_attn = MultiHeadAttention.from_torch(layer.multihead_attn).to(
            device=layer.linear1.weight.device, dtype=layer.linear1.weight.dtype)
        return ours.train(layer.training)


def _from_torch_layer(
    cls: type, layer: nn.Module,
    kind: type[nn.TransformerEncoderLayer] | type[nn.TransformerDecoderLayer], norms: int,
) -> Any:
    """An attnlab layer of ``cls`` with the self-attention, feed-forward and ``norms``
    LayerNorms of torch's ``layer`` (an instance of ``kind``), on its device and dtype."""
    if not isinstance(layer, kind):
        raise TypeError(f"layer must be a torch.nn.{kind.__name__}, got {type(layer).__name__}")
    sa = layer.self_attn
    ours = cls(
        sa.embed_dim, sa.num_heads, layer.linear1.out_features, float(layer.dropout.p),
        _torch_activation(layer), float(layer.norm1.eps), bool(layer.norm_first),
        bias=sa.in_proj_bias is not None,
    )
    ours.self_attn = MultiHeadAttention.from_torch(sa)
    ours.ff.linear1.load_state_dict(layer.linear1.state_dict())
    ours.ff.linear2.load_state_dict(layer.linear2.state_dict())
    for i in range(1, norms + 1):
        getattr(ours, f"norm{i}").load_state_dict(getattr(layer, f"norm{i}").state_dict())
    ref = layer.linear1.weight
    return ours.to(device=ref.device, dtype=ref.dtype).train(layer.training)


def _check_tokens(name: str, idx: object, vocab: int) -> Tensor:
    if not isinstance(idx, Tensor):
        raise TypeError(f"{name} must be an integer tensor (B, N) of token ids, got "
                        f"{type(idx).__name__}")
    if idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor (B, N) of token ids, got dtype "
                        f"{idx.dtype}")
    if idx.dim() != 2:
        raise ValueError(f"{name} must be an integer tensor (B, N) of token ids, got shape "
                         f"{tuple(idx.shape)}")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= vocab):
        raise ValueError(
            f"{name} holds ids in [{int(idx.min())}, {int(idx.max())}], outside the vocabulary "
            f"[0, {vocab})"
        )
    return idx


@dataclass(frozen=True)
class TransformerConfig:
    """The encoder-decoder ``Transformer``; checked on creation.

    >>> c = TransformerConfig(embed_dim=64, num_heads=4)
    >>> c.head_dim
    16
    >>> TransformerConfig(embed_dim=64, num_heads=0)
    Traceback (most recent call last):
    ...
    attnlab.ArgumentError: num_heads must be a positive int, got 0
    """

    src_vocab_size: int = 64  # small synthetic vocabularies are the use case
    tgt_vocab_size: int = 64
    embed_dim: int = 128  # tiny enough to train on a laptop CPU in minutes
    num_heads: int = 4  # head_dim 32
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    ff_dim: int = 512  # 4 x embed_dim, as in the original
    dropout: float = 0.0  # synthetic tasks do not overfit in the few steps we train
    max_len: int = 512  # sinusoidal table length
    norm_first: bool = True  # pre-LN trains without warmup

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "num_encoder_layers",
                     "num_decoder_layers", "ff_dim", "max_len"):
            check_int(name, getattr(self, name), minimum=1)
        _check_heads(self.embed_dim, self.num_heads)
        if self.embed_dim % 2:
            raise ValueError(f"embed_dim must be even (sinusoidal positions), got {self.embed_dim}")
        _check_dropout("dropout", self.dropout)
        _check_bool("norm_first", self.norm_first)

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads


class Transformer(nn.Module):
    """Encoder-decoder Transformer with sinusoidal positions (Vaswani et al.)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = self.config = check_instance("config", config, TransformerConfig)
        self.src_embed = nn.Embedding(c.src_vocab_size, c.embed_dim)
        self.tgt_embed = nn.Embedding(c.tgt_vocab_size, c.embed_dim)
        self.pos = SinusoidalPositionalEncoding(c.embed_dim, c.max_len, dropout=c.dropout)
        args = (c.embed_dim, c.num_heads, c.ff_dim, c.dropout, "relu", 1e-5, c.norm_first)
        self.encoder = nn.ModuleList(TransformerEncoderLayer(*args)
                                     for _ in range(c.num_encoder_layers))
        self.decoder = nn.ModuleList(TransformerDecoderLayer(*args)
                                     for _ in range(c.num_decoder_layers))
        self.enc_norm = nn.LayerNorm(c.embed_dim) if c.norm_first else nn.Identity()
        self.dec_norm = nn.LayerNorm(c.embed_dim) if c.norm_first else nn.Identity()
        self.lm_head = nn.Linear(c.embed_dim, c.tgt_vocab_size, bias=False)
        for emb in (self.src_embed, self.tgt_embed):  # x sqrt(embed_dim) in forward -> unit scale
            nn.init.normal_(emb.weight, std=1 / math.sqrt(c.embed_dim))

    def encode(self, src: Tensor, src_key_mask: Tensor | None = None) -> Tensor:
        _check_tokens("src", src, self.config.src_vocab_size)
        x = self.pos(self.src_embed(src) * math.sqrt(self.config.embed_dim))
        for layer in self.encoder:
            x = layer(x, key_mask=src_key_mask)
        return self.enc_norm(x)  # (B, Ns, E)

    def decode(self, tgt: Tensor, memory: Tensor, memory_key_mask: Tensor | None = None,
               tgt_key_mask: Tensor | None = None) -> Tensor:
        _check_tokens("tgt", tgt, self.config.tgt_vocab_size)
        x = self.pos(self.tgt_embed(tgt) * math.sqrt(self.config.embed_dim))
        for layer in self.decoder:
            x = layer(x, memory, key_mask=tgt_key_mask, memory_key_mask=memory_key_mask)
        return self.lm_head(self.dec_norm(x))  # (B, Nt, V)

    def forward(self, src: Tensor, tgt: Tensor, src_key_mask: Tensor | None = None,
                tgt_key_mask: Tensor | None = None) -> Tensor:
        memory = self.encode(src, src_key_mask)
        return self.decode(tgt, memory, src_key_mask, tgt_key_mask)


@dataclass(frozen=True)
class GPTConfig:
    """The decoder-only ``GPT``; checked on creation.

    >>> GPTConfig(embed_dim=64, num_heads=4, num_kv_heads=2).head_dim
    16
    >>> GPTConfig(embed_dim=10, num_heads=3)
    Traceback (most recent call last):
    ...
    ValueError: embed_dim=10 must be divisible by num_heads=3 (head_dim = embed_dim / num_heads)
    """

    vocab_size: int = 64  # synthetic tasks use small vocabularies
    block_size: int = 256  # longest context the position table covers
    num_layers: int = 2  # two layers suffice for an induction circuit
    num_heads: int = 4  # enough heads to watch them specialize
    embed_dim: int = 128  # head_dim 32
    num_kv_heads: int | None = None  # None = num_heads (plain multi-head); fewer = GQA
    dropout: float = 0.0  # tiny models on synthetic data do not need it
    bias: bool = True  # biases in Linear and LayerNorm, like GPT-2
    positional: str = "learned"  # "learned" (GPT-2) or "rope"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "num_layers"):
            check_int(name, getattr(self, name), minimum=1)
        _check_heads(self.embed_dim, self.num_heads)
        if self.num_kv_heads is not None:
            check_int("num_kv_heads", self.num_kv_heads, minimum=1)
            if self.num_heads % self.num_kv_heads:
                raise ValueError(f"num_kv_heads={self.num_kv_heads} must divide "
                                 f"num_heads={self.num_heads}")
        _check_dropout("dropout", self.dropout)
        _check_bool("bias", self.bias)
        if self.positional not in ("learned", "rope"):
            raise ValueError(f"positional must be 'learned' or 'rope', got {self.positional!r}")
        if self.positional == "rope" and self.head_dim % 2:
            raise ValueError(f"positional='rope' needs an even head_dim, got head_dim="
                             f"{self.head_dim} (embed_dim={self.embed_dim} / "
                             f"num_heads={self.num_heads})")

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads


class _Block(nn.Module):
    def __init__(self, c: GPTConfig, rotary: RotaryEmbedding | None) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.embed_dim, bias=c.bias)
        self.attn = MultiHeadAttention(
            c.embed_dim, c.num_heads, bias=c.bias, dropout=c.dropout,
            num_kv_heads=c.num_kv_heads, rotary=rotary,
        )
        self.ln_2 = nn.LayerNorm(c.embed_dim, bias=c.bias)
        self.mlp = FeedForward(c.embed_dim, 4 * c.embed_dim, c.dropout, "gelu", c.bias)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        a, _ = self.attn(self.ln_1(x), causal=True, cache=cache)
        x = x + self.dropout(a)
        return x + self.dropout(self.mlp(self.ln_2(x)))


class GPT(nn.Module):
    """Decoder-only Transformer (pre-LN, tied embeddings), as in nanoGPT.

    >>> cfg = GPTConfig(vocab_size=10, block_size=16, num_layers=1, num_heads=2, embed_dim=8)
    >>> model = GPT(cfg)
    >>> model(torch.zeros(2, 5, dtype=torch.long)).shape
    torch.Size([2, 5, 10])
    >>> model.generate(torch.zeros(1, 3, dtype=torch.long), 4, greedy=True).shape
    torch.Size([1, 7])
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        c = self.config = check_instance("config", config, GPTConfig)
        self.wte = nn.Embedding(c.vocab_size, c.embed_dim)
        self.wpe = nn.Embedding(c.block_size, c.embed_dim) if c.positional == "learned" else None
        rotary = RotaryEmbedding(c.head_dim) if c.positional == "rope" else None
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(_Block(c, rotary) for _ in range(c.num_layers))
        self.ln_f = nn.LayerNorm(c.embed_dim, bias=c.bias)
        self.lm_head = nn.Linear(c.embed_dim, c.vocab_size, bias=False)
        self.apply(self._init_weights)
        self.lm_head.weight = self.wte.weight  # tied: the same matrix reads and writes tokens

    def attention(self, layer: int) -> MultiHeadAttention:
        """Block ``layer``'s attention module (negative counts from the last block).

        >>> GPT(GPTConfig(vocab_size=10, block_size=8, num_layers=2, num_heads=2,
        ...               embed_dim=8)).attention(-1).num_heads
        2
        """
        n = len(self.blocks)
        layer = check_int("layer", layer, minimum=-n, maximum=n - 1)
        block = self.blocks[layer]
        if not isinstance(block, _Block):
            raise ArgumentTypeError(f"block {layer} is {type(block).__name__}, not a GPT "
                                    "block (the model's blocks were replaced)")
        return block.attn

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        """Logits (B, N, V) for token ids ``idx`` (B, N); ``caches``: one KVCache per block."""
        _check_tokens("idx", idx, self.config.vocab_size)
        if caches is not None and (
            not isinstance(caches, (list, tuple)) or len(caches) != len(self.blocks)
            or not all(isinstance(c, KVCache) for c in caches)
        ):
            got = (f"{len(caches)} items" if isinstance(caches, (list, tuple))
                   else type(caches).__name__)
            raise TypeError(f"caches must be a list of {len(self.blocks)} KVCache (one per "
                            f"block) or None, got {got}")
        b, n = idx.shape
        past = len(caches[0]) if caches else 0
        if past + n > self.config.block_size:
            raise ValueError(
                f"sequence of {past + n} tokens exceeds block_size={self.config.block_size}"
            )
        x = self.wte(idx)  # (B, N, E)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(past, past + n, device=idx.device))
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.lm_head(self.ln_f(x))  # (B, N, V)

    @torch.no_grad()
    def generate(
        self,
        idx: Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        greedy: bool = False,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Append ``max_new_tokens`` tokens to the prompt ``idx`` (B, N), N >= 1.

        Each step samples from ``softmax(logits / temperature)`` restricted to the
        ``top_k`` most likely tokens (all when None; a ``top_k`` above the vocabulary size
        keeps them all), or takes the most likely one with ``greedy=True``.
        ``temperature`` must be a finite number > 0: 0 is refused rather than read as
        greedy, which has its own flag. ``use_cache`` decodes with one KV cache per block
        (same tokens as without it, faster). Bad arguments raise ``TypeError`` (wrong type)
        or ``ValueError`` (wrong value) naming the argument.
        """
        _check_tokens("idx", idx, self.config.vocab_size)
        if idx.shape[1] < 1:
            raise ValueError(f"idx must hold a prompt of at least one token per row, got "
                             f"shape {tuple(idx.shape)}")
        check_int("max_new_tokens", max_new_tokens)
        if idx.shape[1] + max_new_tokens > self.config.block_size:
            raise ValueError(
                f"{idx.shape[1]} prompt + {max_new_tokens} new tokens (max_new_tokens) exceed "
                f"block_size={self.config.block_size}"
            )
        try:
            t = check_real("temperature", temperature, low=0.0, low_open=True)
        except ArgumentTypeError:
            raise
        except ArgumentError as e:
            raise ArgumentError(f"{e} (greedy=True picks the most likely token)") from None
        check_optional_int("top_k", top_k, minimum=1)
        _check_bool("greedy", greedy)
        _check_bool("use_cache", use_cache)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got "
                            f"{type(generator).__name__}")
        caches = [KVCache() for _ in self.blocks] if use_cache else None
        step_input = idx
        for _ in range(max_new_tokens):
            logits = self(step_input if use_cache else idx, caches)[:, -1, :]  # (B, V)
            # shift the best logit to 0 first: a tiny temperature then gives -inf, never NaN
            logits = (logits - logits.amax(dim=-1, keepdim=True)) / t
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            if greedy:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                probs = torch.softmax(logits, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
            step_input = nxt
        return idx
