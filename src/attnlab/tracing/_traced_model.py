"""What the tracer (:func:`attnlab.tracing.tracer.trace`) knows of the model it runs: a bare
``nn.Module`` described in a loaded model's fields (:class:`_Bare`), the most tokens the
model admits (:func:`token_limit`: its own window, or past it for a model with rotary
positions, whose positions are computed, not looked up in a table), whether it reads a
source and a target (:func:`is_seq2seq`), one forward pass of it with what a trace needs,
and how many token ids it embeds. The public names are importable from
:mod:`attnlab.tracing.tracer` too.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnlab._errors import check_int
from attnlab.tracing._hf_forward import forward_params
from attnlab.tracing.adapters._base import ModelShape
from attnlab.tracing.adapters.attnlab import describe_model as describe_attnlab
from attnlab.tracing.adapters.huggingface import describe_model as describe_hf
from attnlab.tracing.adapters.huggingface import is_hf_model

__all__ = ["beyond_window_note", "is_seq2seq", "token_limit"]


class _BareDescription(ModelShape):
    """A bare module's description, as a loaded model's ``describe()`` starts."""

    name: str
    #: ``"hf"`` or ``"attnlab"``: which adapter describes it.
    kind: str


class _Bare:
    """What the tracer needs to know of a bare ``nn.Module`` (a LoadedModel's fields)."""

    def __init__(self, model: nn.Module, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = type(model).__name__
        info: ModelShape
        if is_hf_model(model):
            info = describe_hf(model, tokenizer)
            self.kind = "hf"
        else:
            try:
                info = describe_attnlab(model)
            except TypeError:
                info = {"causal": False, "num_layers": 0, "num_heads": 0, "num_kv_heads": 0,
                        "head_dim": 0, "max_length": 1 << 30}
            self.kind = "attnlab"
        self.info = info
        self.causal = bool(info["causal"])
        self.num_layers = int(info["num_layers"])
        self.max_length = int(info["max_length"])

    def describe(self) -> _BareDescription:
        return {"name": self.name, "kind": self.kind, **self.info}


def _resolve(model: Any, tokenizer: Any) -> Any:
    if isinstance(model, nn.Module):
        return _Bare(model, tokenizer)
    inner = getattr(model, "model", None)
    if isinstance(inner, nn.Module) and all(
            hasattr(model, a) for a in ("tokenizer", "name", "max_length", "describe")):
        return model
    if isinstance(model, str):
        raise TypeError(
            f"model must be a loaded model or a torch.nn.Module, got the name {model!r}; "
            "load it first (attnlab.models.load(name)) or call attnlab.trace(name, text), "
            "which loads then traces"
        )
    raise TypeError(
        "model must be a loaded model (with .model, .tokenizer, .name, .max_length, "
        f".describe(), like attnlab.models.LoadedModel) or a torch.nn.Module, got "
        f"{type(model).__name__}"
    )


#: The names a model gives a learned table of absolute positions.
_POSITION_TABLES = ("wpe", "position_embeddings", "embed_positions", "pos_embed",
                    "position_embedding")


def _rope_theta(cfg: Any) -> float | None:
    """The rotary base a config states (``rope_theta``, or inside ``rope_parameters`` /
    ``rope_scaling``), else None."""
    theta = getattr(cfg, "rope_theta", None)
    for name in ("rope_parameters", "rope_scaling"):
        params = getattr(cfg, name, None)
        if theta is None and isinstance(params, dict):
            theta = params.get("rope_theta")
    if isinstance(theta, (int, float)) and not isinstance(theta, bool) and theta > 0:
        return float(theta)
    return None


def _past_window_refusal(loaded: Any) -> str | None:
    """None when ``loaded``'s positions go on past its window (rotary positions, stated by
    its config), else why they do not."""
    net, window = loaded.model, int(loaded.max_length)
    cfg: Any = getattr(net, "config", None)  # (a Hugging Face model's config, of any class)
    if not is_hf_model(net):
        if getattr(cfg, "positional", None) == "rope":
            return (f"it is an attnlab model whose forward accepts at most its block_size "
                    f"({window}) tokens")
        return ("it learns one absolute position embedding per position (positional="
                f"{getattr(cfg, 'positional', None)!r}): there is none past the window")
    if _rope_theta(cfg) is not None:
        return None
    kind = getattr(cfg, "position_embedding_type", None)
    tables = [n for n, m in net.named_modules()
              if isinstance(m, nn.Embedding) and n.rsplit(".", 1)[-1] in _POSITION_TABLES]
    if kind == "absolute" or tables:
        where = f" ({tables[0]})" if tables else ""
        return (f"its config ({cfg.model_type}) gives it learned absolute positions{where}, "
                f"one embedding per position up to {window}: there is none past the window")
    return (f"its config ({cfg.model_type}) states no rotary positions (no rope_theta or "
            "rope_parameters)")


def token_limit(loaded: Any, max_tokens: int | None = None) -> int:
    """The most tokens :func:`~attnlab.tracing.tracer.trace` admits for ``loaded``: its own
    window (``max_length``), or ``max_tokens``. Past the window only for a model with
    rotary positions (see :mod:`attnlab.tracing.tracer`); any other raises ``ValueError``
    naming the model and why."""
    window = int(loaded.max_length)
    if max_tokens is None:
        return window
    max_tokens = check_int("max_tokens", max_tokens, minimum=1)
    if max_tokens > window:
        why = _past_window_refusal(loaded)
        if why is not None:
            raise ValueError(
                f"max_tokens: {max_tokens} is past {loaded.name}'s window of {window} tokens "
                f"and {loaded.name} cannot go past it: {why}; tracing past the window is for "
                "models with rotary positions (RoPE)")
    return max_tokens


def beyond_window_note(name: str, n: int, window: int) -> str:
    """The warning of a trace of ``n`` tokens past a window of ``window``."""
    return (f"{n} tokens are past {name}'s trained window of {window}: the attention there is "
            f"traced exactly as the model computes it, but the model never saw positions past "
            f"{window} in training; quality there is not the point: it shows how its rotary "
            "positions extrapolate, not how it reads a text")


def is_seq2seq(model: nn.Module) -> bool:
    """Whether ``model`` is an encoder–decoder model: a Hugging Face model whose config says
    ``is_encoder_decoder``, or attnlab's :class:`~attnlab.nn.transformer.Transformer`."""
    if is_hf_model(model):
        return bool(getattr(model.config, "is_encoder_decoder", False))
    from attnlab.nn.transformer import Transformer

    return isinstance(model, Transformer)


def _forward(model: nn.Module, ids: Tensor, target: Tensor | None = None) -> None:
    """One forward pass with what the trace needs (no KV cache, no vocabulary logits);
    ``target``: the decoder's input ids of an encoder–decoder model."""
    if is_hf_model(model):
        base = getattr(model, "base_model", model)  # skips the LM head: no N x V logits
        params = forward_params(base)
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if target is not None:
            kwargs["decoder_input_ids"] = target
            if "decoder_attention_mask" in params:
                kwargs["decoder_attention_mask"] = torch.ones_like(target)
        if "use_cache" in params:
            kwargs["use_cache"] = False
        base(**kwargs)
    elif is_seq2seq(model):
        model(ids, target if target is not None else ids)
    else:
        model(ids)


def _vocab_size(model: Any) -> int | None:
    """How many token ids ``model`` embeds, when it says (None when it does not)."""
    if is_hf_model(model):
        try:
            n = getattr(model.get_input_embeddings(), "num_embeddings", None)
        except (AttributeError, NotImplementedError):
            n = None
        return n if isinstance(n, int) else None
    config = getattr(model, "config", None)  # attnlab: one vocabulary, or src and tgt ones
    sizes = [getattr(config, n, None) for n in ("vocab_size", "src_vocab_size",
                                                "tgt_vocab_size")]
    known = [n for n in sizes if isinstance(n, int) and not isinstance(n, bool)]
    return min(known) if known else None
