"""What tracing an image (:mod:`attnlab.tracing.media`) and tracing a sound
(:mod:`attnlab.tracing.media_audio`) share: the model unpacked from a loaded model or a
module, its family, one run of it without gradients (a failure inside becoming one
``ValueError`` naming the model and its input), a capture's records filtered by module name,
and its one trace relabelled as one stack of the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from attnlab._text import one_line
from attnlab.tracing._media_records import ModelInfo
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.capture import Capture
from attnlab.tracing.stacks import StackedTrace


def _unpack(model: Any) -> tuple[nn.Module, str, str | None, ModelInfo, Any]:
    """(module, name, folder, model_info, tokenizer) of a loaded model or a module."""
    if isinstance(model, nn.Module):
        cfg = getattr(model, "config", None)
        folder = getattr(cfg, "_name_or_path", None) or None
        return model, type(model).__name__, folder, {}, None
    inner = getattr(model, "model", None)
    if isinstance(inner, nn.Module):
        describe = getattr(model, "describe", None)
        described = describe() if callable(describe) else {}
        info: ModelInfo = {k: v for k, v in described.items()
                           if isinstance(v, (str, int, float, bool, type(None)))}
        folder = getattr(model, "path", None) or getattr(
            getattr(inner, "config", None), "_name_or_path", None) or None
        return (inner, str(getattr(model, "name", type(inner).__name__)), folder, info,
                getattr(model, "tokenizer", None))
    raise TypeError("model must be a loaded model (attnlab.models.load(...)) or a Hugging Face "
                    f"torch.nn.Module, got {type(model).__name__}")


def _family(module: nn.Module) -> str:
    return str(getattr(getattr(module, "config", None), "model_type", "") or "")


def _run(module: nn.Module, name: str, what: str, **inputs: Any) -> Any:
    """``module(**inputs)`` without gradients; a failure inside the model (other than
    attnlab's own refusal) becomes one ``ValueError`` naming the model and its input."""
    from attnlab.tracing.adapters._base import UnreadableAttentionError

    try:
        with torch.no_grad():
            return module(**inputs)
    except UnreadableAttentionError:
        raise
    except Exception as exc:
        raise ValueError(f"{name} cannot run on {what} ({type(exc).__name__}: "
                         f"{one_line(exc, 300)})") from exc


def _record_filter(cap: Capture, keep: Callable[[str], bool]) -> Capture:
    """A capture holding only the records whose module name ``keep`` accepts."""
    sub = Capture(cap.root, cap.qkv, cap.context)
    sub.records = [r for r in cap.records if keep(r.name)]
    return sub


def _one(t: Any) -> AttentionTrace:
    if isinstance(t, StackedTrace):
        if len(t) != 1:
            raise ValueError(f"expected one attention stack, got {', '.join(t.names)}")
        return next(iter(t.values()))
    return t


def _restack(t: AttentionTrace, stack: str, *, tokens: list[str],
             key_tokens: list[str] | None = None, token_ids: list[int] | None = None,
             text: str | None = None, meta: dict[str, Any] | None = None,
             model: str = "") -> AttentionTrace:
    """The same tensors and score shapes, labelled as one stack of a model."""
    dense = None if t.has_qk else t.weights
    return AttentionTrace(tokens, weights=dense, q=t.q, k=t.k, v=t.v, lse=t.lse,
                          context=t.context, shapes=list(t.shapes), model=model or t.model,
                          token_ids=token_ids, key_tokens=key_tokens, text=text,
                          meta={**t.meta, **(meta or {})}, stack=stack)
