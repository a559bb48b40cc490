"""Transformers built only from attnlab's attention: encoder/decoder layers, an
encoder-decoder ``Transformer`` and a decoder-only ``GPT``.

Read top to bottom: FeedForward -> TransformerEncoderLayer -> TransformerDecoderLayer ->
Transformer -> GPT. Layer arguments mirror ``torch.nn.TransformerEncoderLayer`` so weights
move across with :meth:`TransformerEncoderLayer.from_torch`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.core.positional import RotaryEmbedding, SinusoidalPositionalEncoding
from attnlab.nn.attention import KVCache, MultiHeadAttention

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


def _activation(name: str):
    if name not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {name!r}")
    return _ACTIVATIONS[name]


class FeedForward(nn.Module):
    """linear1 -> activation -> dropout -> linear2 (names as in torch's layers)."""

    def __init__(self, d_model: int, dim_feedforward: int, dropout: float, activation: str,
                 bias: bool = True) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.act = _activation(activation)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.act(self.linear1(x))))


class TransformerEncoderLayer(nn.Module):
    """Self-attention + feed-forward, each in a residual branch; pre-LN (``norm_first``)
    or post-LN (the original Transformer)."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        bias: bool = True,
        num_kv_heads: int | None = None,
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(
            d_model, nhead, bias=bias, dropout=dropout, num_kv_heads=num_kv_heads
        )
        self.ff = FeedForward(d_model, dim_feedforward, dropout, activation, bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.norm_first = norm_first

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
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise TypeError(
                f"layer must be a torch.nn.TransformerEncoderLayer, got {type(layer).__name__}"
            )
        act = layer.activation
        name = getattr(act, "__name__", type(act).__name__).lower()
        if name not in _ACTIVATIONS:
            raise ValueError(f"unsupported activation {name!r}; expected relu or gelu")
        sa = layer.self_attn
        ours = cls(
            sa.embed_dim, sa.num_heads, layer.linear1.out_features, layer.dropout.p, name,
            layer.norm1.eps, layer.norm_first, bias=sa.in_proj_bias is not None,
        )
        ours.self_attn = MultiHeadAttention.from_torch(sa)
        ours.ff.linear1.load_state_dict(layer.linear1.state_dict())
        ours.ff.linear2.load_state_dict(layer.linear2.state_dict())
        ours.norm1.load_state_dict(layer.norm1.state_dict())
        ours.norm2.load_state_dict(layer.norm2.state_dict())
        ref = layer.linear1.weight
        return ours.to(device=ref.device, dtype=ref.dtype).train(layer.training)


class TransformerDecoderLayer(nn.Module):
    """Causal self-attention, cross-attention over the encoder memory, feed-forward."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, nhead, bias=bias, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, nhead, bias=bias, dropout=dropout)
        self.ff = FeedForward(d_model, dim_feedforward, dropout, activation, bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.norm_first = norm_first

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


def _check_tokens(name: str, idx: object, vocab: int) -> Tensor:
    if not isinstance(idx, Tensor) or idx.dim() != 2 or idx.is_floating_point():
        got = (f"shape {tuple(idx.shape)} dtype {idx.dtype}" if isinstance(idx, Tensor)
               else type(idx).__name__)
        raise ValueError(f"{name} must be an integer tensor (B, N) of token ids, got {got}")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= vocab):
        raise ValueError(
            f"{name} holds ids in [{int(idx.min())}, {int(idx.max())}], outside the vocabulary "
            f"[0, {vocab})"
        )
    return idx


@dataclass(frozen=True)
class TransformerConfig:
    src_vocab_size: int = 64  # small synthetic vocabularies are the use case
    tgt_vocab_size: int = 64
    d_model: int = 128  # tiny enough to train on a laptop CPU in minutes
    n_heads: int = 4  # head_dim 32
    n_encoder_layers: int = 2
    n_decoder_layers: int = 2
    dim_feedforward: int = 512  # 4 x d_model, as in the original
    dropout: float = 0.0  # synthetic tasks do not overfit in the few steps we train
    max_len: int = 512  # sinusoidal table length
    norm_first: bool = True  # pre-LN trains without warmup


class Transformer(nn.Module):
    """Encoder-decoder Transformer with sinusoidal positions (Vaswani et al.)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = self.config = config
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model)
        self.tgt_embed = nn.Embedding(c.tgt_vocab_size, c.d_model)
        self.pos = SinusoidalPositionalEncoding(c.d_model, c.max_len, dropout=c.dropout)
        args = (c.d_model, c.n_heads, c.dim_feedforward, c.dropout, "relu", 1e-5, c.norm_first)
        self.encoder = nn.ModuleList(TransformerEncoderLayer(*args)
                                     for _ in range(c.n_encoder_layers))
        self.decoder = nn.ModuleList(TransformerDecoderLayer(*args)
                                     for _ in range(c.n_decoder_layers))
        self.enc_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.dec_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.lm_head = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        for emb in (self.src_embed, self.tgt_embed):  # x sqrt(d_model) in forward -> unit scale
            nn.init.normal_(emb.weight, std=c.d_model**-0.5)

    def encode(self, src: Tensor, src_key_mask: Tensor | None = None) -> Tensor:
        _check_tokens("src", src, self.config.src_vocab_size)
        x = self.pos(self.src_embed(src) * math.sqrt(self.config.d_model))
        for layer in self.encoder:
            x = layer(x, key_mask=src_key_mask)
        return self.enc_norm(x)  # (B, Ns, E)

    def decode(self, tgt: Tensor, memory: Tensor, memory_key_mask: Tensor | None = None,
               tgt_key_mask: Tensor | None = None) -> Tensor:
        _check_tokens("tgt", tgt, self.config.tgt_vocab_size)
        x = self.pos(self.tgt_embed(tgt) * math.sqrt(self.config.d_model))
        for layer in self.decoder:
            x = layer(x, memory, key_mask=tgt_key_mask, memory_key_mask=memory_key_mask)
        return self.lm_head(self.dec_norm(x))  # (B, Nt, V)

    def forward(self, src: Tensor, tgt: Tensor, src_key_mask: Tensor | None = None,
                tgt_key_mask: Tensor | None = None) -> Tensor:
        memory = self.encode(src, src_key_mask)
        return self.decode(tgt, memory, src_key_mask, tgt_key_mask)


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 64  # synthetic tasks use small vocabularies
    block_size: int = 256  # longest context the position table covers
    n_layer: int = 2  # two layers suffice for an induction circuit
    n_head: int = 4  # enough heads to watch them specialize
    n_embd: int = 128  # head_dim 32
    n_kv_head: int | None = None  # None = n_head (plain multi-head); fewer = GQA
    dropout: float = 0.0  # tiny models on synthetic data do not need it
    bias: bool = True  # biases in Linear and LayerNorm, like GPT-2
    positional: str = "learned"  # "learned" (GPT-2) or "rope"


class _Block(nn.Module):
    def __init__(self, c: GPTConfig, rotary: RotaryEmbedding | None) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.attn = MultiHeadAttention(
            c.n_embd, c.n_head, bias=c.bias, dropout=c.dropout, num_kv_heads=c.n_kv_head,
            rotary=rotary,
        )
        self.ln_2 = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.mlp = FeedForward(c.n_embd, 4 * c.n_embd, c.dropout, "gelu", c.bias)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        a, _ = self.attn(self.ln_1(x), causal=True, cache=cache)
        x = x + self.dropout(a)
        return x + self.dropout(self.mlp(self.ln_2(x)))


class GPT(nn.Module):
    """Decoder-only Transformer (pre-LN, tied embeddings), as in nanoGPT.

    >>> model = GPT(GPTConfig(vocab_size=10, block_size=16, n_layer=1, n_head=2, n_embd=8))
    >>> model(torch.zeros(2, 5, dtype=torch.long)).shape
    torch.Size([2, 5, 10])
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        c = self.config = config
        if c.positional not in ("learned", "rope"):
            raise ValueError(f"positional must be 'learned' or 'rope', got {c.positional!r}")
        if c.n_embd % c.n_head:
            raise ValueError(f"n_embd={c.n_embd} must be divisible by n_head={c.n_head}")
        self.wte = nn.Embedding(c.vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.block_size, c.n_embd) if c.positional == "learned" else None
        rotary = RotaryEmbedding(c.n_embd // c.n_head) if c.positional == "rope" else None
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(_Block(c, rotary) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.apply(self._init_weights)
        self.lm_head.weight = self.wte.weight  # tied: the same matrix reads and writes tokens

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        _check_tokens("idx", idx, self.config.vocab_size)
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
        """Append ``max_new_tokens`` sampled tokens to ``idx`` (B, N); KV cache by default."""
        _check_tokens("idx", idx, self.config.vocab_size)
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if idx.shape[1] + max_new_tokens > self.config.block_size:
            raise ValueError(
                f"{idx.shape[1]} prompt + {max_new_tokens} new tokens exceed block_size="
                f"{self.config.block_size}"
            )
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        caches = [KVCache() for _ in self.blocks] if use_cache else None
        step_input = idx
        for _ in range(max_new_tokens):
            logits = self(step_input if use_cache else idx, caches)[:, -1, :] / temperature
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
