"""attnlab: the attention laboratory.

Transformer attention implemented exactly and fast in PyTorch, with every piece of its
mathematics computed, drawn and checked.

>>> import torch, attnlab
>>> q = k = v = torch.randn(1, 2, 4, 8)
>>> out, w = attnlab.scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)
>>> w[0, 0, 0].tolist()[1:]
[0.0, 0.0, 0.0]
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from attnlab._lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and the API reference; at run time, _LAZY below
    from attnlab import masks, positional
    from attnlab._errors import (
        ArgumentError,
        ArgumentTypeError,
        AttnlabWarning,
        Error,
        Refused,
    )
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
    from attnlab.tracing import AttentionTrace, StackedTrace, capture, load_trace
    from attnlab.viz.explorer import Explorer

#: The public API: name -> the module it lives in. Nothing is imported until a name is
#: used, so ``import attnlab`` (and ``attnlab --help``) does not load torch.
_LAZY: dict[str, str] = {
    "masks": "attnlab.masks",
    "positional": "attnlab.positional",
    **{name: "attnlab._errors" for name in ("ArgumentError", "ArgumentTypeError",
                                                   "AttnlabWarning", "Error", "Refused")},
    "chunked_attention": "attnlab.core.chunked",
    "scaled_dot_product_attention": "attnlab.core.functional",
    "linear_attention": "attnlab.core.linear",
    "attention_weights": "attnlab.core.weights",
    "pooled_attention_map": "attnlab.core.weights",
    **{name: "attnlab.nn" for name in (
        "GPT", "GPTConfig", "HookPoint", "KVCache", "MultiHeadAttention", "SelfAttention",
        "Transformer", "TransformerConfig", "TransformerDecoderLayer",
        "TransformerEncoderLayer")},
    **{name: "attnlab.tracing" for name in (
        "AttentionTrace", "StackedTrace", "capture", "load_trace")},
    "Explorer": "attnlab.viz.explorer",
}


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)

__version__ = "0.1.0"


def trace(model: Any, text_or_token_ids: Any = None, **kwargs: Any
          ) -> AttentionTrace | StackedTrace:
    """Load ``model`` if it is a name or a folder, then trace one input through it.

    An encoder–decoder model gives a :class:`~attnlab.tracing.StackedTrace` (encoder,
    decoder and cross-attention); any other model an :class:`AttentionTrace`.

    A convenience over :func:`attnlab.models.load` and :func:`attnlab.tracing.tracer.trace`
    (which takes an already-loaded model and accepts the same keyword arguments).
    ``model`` is a registered name (``"minilm"``, ``"smollm2"``), a model folder, a loaded
    model, or an ``nn.Module``; the traces themselves live in :mod:`attnlab.tracing`.

    >>> import attnlab
    >>> gpt = attnlab.GPT(attnlab.GPTConfig(vocab_size=10, num_layers=2, num_heads=2,
    ...                                     embed_dim=8))
    >>> t = attnlab.trace(gpt, [1, 2, 3, 4])
    >>> (t.num_layers, t.num_heads, t.seq_len), t.causal
    ((2, 2, 4), True)
    """
    from attnlab.models import load
    from attnlab.tracing.tracer import trace as trace_loaded

    if isinstance(model, (str, os.PathLike)):
        model = load(model)
    return trace_loaded(model, text_or_token_ids, **kwargs)

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "AttnlabWarning",
    "Error",
    "Refused",
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
    "StackedTrace",
    "capture",
    "load_trace",
    "trace",
    "masks",
    "positional",
    "scaled_dot_product_attention",
    "attention_weights",
    "chunked_attention",
    "linear_attention",
    "pooled_attention_map",
]
