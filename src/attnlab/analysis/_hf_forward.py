"""What the analyses that run a Hugging Face model again share: its forward's parameters,
and its attention implementation switched for a block (``config._attn_implementation``,
which transformers reads at every call).

The analyses that only need a forward's outputs (a loss, a cache), not its attention
weights, run it through torch's ``sdpa`` where the model has it
(:func:`fast_attention`): the models attnlab loads are set to ``eager`` for their traces,
and eager attention materialises every head's scores and probabilities. The outputs agree
to float32 rounding (what the analyses' tests check against eager forwards).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["attention_implementation", "fast_attention", "forward_params"]


def forward_params(net: Any) -> Mapping[str, inspect.Parameter]:
    """The parameters of ``net``'s forward, by name (none where it has no signature)."""
    forward = getattr(net, "forward", net)
    try:
        return inspect.signature(forward).parameters
    except (TypeError, ValueError):  # (a callable without a signature to read)
        return {}


@contextlib.contextmanager
def attention_implementation(net: Any, name: str) -> Iterator[None]:
    """``net``'s attention implementation set to ``name`` for the block, then restored."""
    config = net.config
    before = config._attn_implementation_internal
    config._attn_implementation_internal = name
    try:
        yield
    finally:
        config._attn_implementation_internal = before


def fast_attention(net: Any) -> contextlib.AbstractContextManager[None]:
    """``net``'s attention through torch's ``sdpa`` for the block where the model supports
    it; else (a model without it, an object that is not a transformers model) as it is."""
    config = getattr(net, "config", None)
    if (not getattr(net, "_supports_sdpa", False)
            or not hasattr(config, "_attn_implementation_internal")):
        return contextlib.nullcontext()
    return attention_implementation(net, "sdpa")
