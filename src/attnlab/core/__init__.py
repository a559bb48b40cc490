"""Pure tensor math: attention, masks, positional encodings. Depends on torch only."""

from attnlab.core import masks, positional
from attnlab.core.chunked import chunked_attention
from attnlab.core.functional import scaled_dot_product_attention
from attnlab.core.linear import linear_attention
from attnlab.core.weights import attention_weights, pooled_attention_map

__all__ = [
    "attention_weights",
    "chunked_attention",
    "linear_attention",
    "masks",
    "pooled_attention_map",
    "positional",
    "scaled_dot_product_attention",
]
