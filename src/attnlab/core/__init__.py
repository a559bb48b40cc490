"""Pure tensor math: attention, masks, positional encodings. Depends on torch only."""

from attnlab.core import masks, positional
from attnlab.core.functional import scaled_dot_product_attention

__all__ = ["masks", "positional", "scaled_dot_product_attention"]
