"""What a Hugging Face model is, as the tracer and :mod:`attnlab.models` need to know it:
whether an object is one (:func:`is_hf_model`, :func:`is_hf_module`), whether it is a
decoder (:func:`is_causal_config`), the longest input it takes (:func:`max_length`) and
its shape (:func:`describe_model`). Re-exported by
:mod:`attnlab.tracing.adapters.huggingface`."""

from __future__ import annotations

from typing import Any

from torch import nn

from attnlab.tracing.adapters._base import ModelShape
from attnlab.tracing.budget import first_int

__all__ = ["CAUSAL_TYPES", "describe_model", "is_causal_config", "is_hf_model", "is_hf_module",
           "max_length"]

#: Hugging Face model types that are decoder-only (causal) when no architecture says so.
CAUSAL_TYPES = frozenset({"gpt2", "llama", "mistral", "qwen2", "gpt_neox", "gptj", "opt",
                          "phi", "phi3", "gemma", "gemma2", "smollm3", "olmo", "falcon",
                          "bloom"})


def is_hf_model(model: object) -> bool:
    """A Hugging Face model: it has a ``config`` with a ``model_type``."""
    return hasattr(model, "config") and hasattr(model.config, "model_type")


def is_hf_module(module: object) -> bool:
    """A module whose class is one of transformers' own (defined in a ``transformers.``
    module)."""
    return type(module).__module__.startswith("transformers.")


def is_causal_config(config: Any) -> bool:
    """Whether a Hugging Face config describes a decoder (causal) model: its architectures
    say so, it is marked a decoder, or (a config made in code, without architectures) its
    model type has a causal-LM model and no masked-LM one in transformers' auto mappings."""
    archs = getattr(config, "architectures", None) or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return True
    if bool(getattr(config, "is_decoder", False)) or config.model_type in CAUSAL_TYPES:
        return True
    if archs or getattr(config, "is_encoder_decoder", False):
        return False
    try:
        from transformers.models.auto import modeling_auto as auto
    except ImportError:
        return False
    return (config.model_type in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
            and config.model_type not in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def max_length(config: Any, tokenizer: Any) -> int:
    """The longest input the model (and its tokenizer) accepts."""
    n = None
    for attr in ("max_position_embeddings", "n_positions", "n_ctx"):
        n = getattr(config, attr, None)
        if isinstance(n, int) and n > 0:
            break
    tok_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < 1_000_000:
        n = tok_max if n is None else min(n, tok_max)
    return int(n or 512)


def describe_model(model: nn.Module, tokenizer: Any = None,
                   causal: bool | None = None) -> ModelShape:
    """causal/layers/heads/head_dim/max_length/model_type of a Hugging Face model (0 for
    a number the config does not state at the top level, e.g. per-layer head counts)."""
    c: Any = model.config  # (a Hugging Face config, of the model's own class)

    def num(*names: str) -> int:
        return first_int(c, *names) or 0

    heads = num("num_attention_heads", "n_head")
    hidden = num("hidden_size", "n_embd", "d_model")
    head_dim = num("head_dim") or (hidden // heads if heads else 0)
    return {"causal": is_causal_config(c) if causal is None else causal,
            "num_layers": num("num_hidden_layers", "n_layer"), "num_heads": heads,
            "num_kv_heads": num("num_key_value_heads") or heads, "head_dim": head_dim,
            "max_length": max_length(c, tokenizer), "model_type": c.model_type}
