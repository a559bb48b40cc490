"""Pure tensor math: attention, masks, positional encodings. Depends on torch only.

Import graph (a DAG, no import inside a function)::

    functional  -> explicit, chunked, linear, _tiles, masks
    explicit    -> _tiles
    chunked     -> _tiles
    linear      -> _tiles, masks
    weights     -> chunked, scores, _tiles
    _tiles      -> masks
    masks, positional, scores: torch only
"""

from attnlab.core import masks, positional
from attnlab.core.chunked import chunked_attention
from attnlab.core.functional import default_scale, scaled_dot_product_attention
from attnlab.core.linear import linear_attention
from attnlab.core.weights import attention_weights, pooled_attention_map

__all__ = [
    "attention_weights",
    "chunked_attention",
    "default_scale",
    "linear_attention",
    "masks",
    "pooled_attention_map",
    "positional",
    "scaled_dot_product_attention",
]
