"""nn.Module layers over attnlab.core."""

from attnlab.nn.attention import HookPoint, KVCache, MultiHeadAttention, SelfAttention
from attnlab.nn.transformer import (
    GPT,
    GPTConfig,
    Transformer,
    TransformerConfig,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)

__all__ = [
    "GPT",
    "GPTConfig",
    "HookPoint",
    "KVCache",
    "MultiHeadAttention",
    "SelfAttention",
    "Transformer",
    "TransformerConfig",
    "TransformerDecoderLayer",
    "TransformerEncoderLayer",
]
