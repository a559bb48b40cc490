"""nn.Module layers over attnlab.core.

Modules take ``need_weights=`` (as ``torch.nn`` modules do); the functions of
:mod:`attnlab.core` take ``return_weights=``. Every attention module exposes the hook points
described in :mod:`attnlab.nn.attention` and a float ``scale``.
"""

from attnlab.nn.attention import HookPoint, KVCache, MultiHeadAttention, SelfAttention
from attnlab.nn.transformer import (
    GPT,
    FeedForward,
    GPTConfig,
    Transformer,
    TransformerConfig,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)

__all__ = [
    "GPT",
    "FeedForward",
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
