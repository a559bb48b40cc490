"""What the code that runs a Hugging Face model's forward itself shares (the tracer's and
the support matrix's forwards, generation, the ablation, the eviction losses): the
forward's parameters, the keyword of its key/value
cache, and its attention implementation switched for a block
(``config._attn_implementation``, which transformers reads at every call).

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

__all__ = ["attention_implementation", "cache_keyword", "fast_attention", "forward_params"]


def forward_params(net: Any) -> Mapping[str, inspect.Parameter]:
    """The parameters of ``net``'s forward, by name (none where it has no signature)."""
    forward = getattr(net, "forward", net)
    try:
        return inspect.signature(forward).parameters
    except (TypeError, ValueError):  # (a callable without a signature to read)
        return {}


def cache_keyword(net: Any) -> str:
    """The forward's keyword for its key/value cache: ``cache`` from transformers 5.2x,
    ``past_key_values`` before (and the field of a generation's output that holds it).

    >>> def recent(input_ids, cache=None, use_cache=None): ...
    >>> def earlier(input_ids, past_key_values=None, use_cache=None): ...
    >>> cache_keyword(recent), cache_keyword(earlier)
    ('cache', 'past_key_values')
    """
    return "cache" if "cache" in forward_params(net) else "past_key_values"


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
    """``net``'s eager attention through torch's ``sdpa`` for the block, where the model
    supports it; anything else as it is: a model without ``sdpa``, an object that is not a
    transformers model, and another implementation (flash attention on an accelerator, or a
    capture's route, which would lose what it records)."""
    config = getattr(net, "config", None)
    if (not getattr(net, "_supports_sdpa", False)
            or getattr(config, "_attn_implementation_internal", None) != "eager"):
        return contextlib.nullcontext()
    return attention_implementation(net, "sdpa")
