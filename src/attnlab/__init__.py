"""attnlab: the attention laboratory.

Transformer attention implemented exactly and fast in PyTorch, with every piece of its
mathematics computed, drawn and checked.

>>> import torch, attnlab
>>> q = k = v = torch.randn(1, 2, 4, 8)
>>> out, w = attnlab.scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)
>>> w[0, 0, 0].tolist()[1:]
[0.0, 0.0, 0.0]
"""

from attnlab import masks, positional
from attnlab.core.chunked import chunked_attention
from attnlab.core.functional import scaled_dot_product_attention
from attnlab.core.linear import linear_attention
from attnlab.core.weights import attention_weights, pooled_attention_map
from attnlab.nn import (
    GPT,
    GPTConfig,
    HookPoint,
    KVCache,
    MultiHeadAttention,
    SelfAttention,
    Transformer,
    TransformerConfig,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)
from attnlab.trace import AttentionTrace, capture  # noqa: E402  (attnlab.trace is callable)
from attnlab.viz.explorer import Explorer

__version__ = "0.1.0"

__all__ = [
    "Explorer",
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
    "AttentionTrace",
    "capture",
    "trace",
    "masks",
    "positional",
    "scaled_dot_product_attention",
    "attention_weights",
    "chunked_attention",
    "linear_attention",
    "pooled_attention_map",
]
