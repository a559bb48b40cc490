"""What a trace keeps of the model beyond each attention call's tensors: each attention
module's output projection split by head (for value-weighted attention), and the layout of
its rotary positions (for the score's decomposition by frequency).

**Output projection.** Head ``h``'s output enters the residual stream as
``context_h · W_O^h``, ``W_O^h`` being the ``dv`` rows of the projection's input that belong
to head ``h``. :func:`output_projection` finds the projection among an attention module's
own children (``o_proj``, ``out_proj``, ``c_proj``, ``dense``, ``o``, ``W_o``, …) when its input
is exactly ``H · dv`` wide and returns the slices as (H, dv, E) float32; a model whose
projection lives elsewhere (BERT's is in a sibling module) has none, and the measures that
need it say so.

**Rotary layout.** :func:`rope_layout` reads the model's rotary embedding itself (the
``inv_freq`` buffer: one frequency per rotated pair, scaling such as Llama 3's or YaRN's
included) and the pairing its family rotates (``rotate_half`` or interleaved).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypedDict

import torch
from torch import Tensor, nn

__all__ = ["OUT_NAMES", "INTERLEAVED", "RopeLayout", "output_projection", "output_projections",
           "rope_layout"]

#: The names an attention module gives its output projection, in the order tried.
OUT_NAMES = ("o_proj", "out_proj", "c_proj", "dense", "o", "wo", "W_o", "out_lin", "proj")

#: Model types whose rotary embedding rotates dimensions (2a, 2a+1) together; every
#: other rotary model in transformers rotates (a, a + r/2) (``rotate_half``).
INTERLEAVED = ("gptj", "codegen", "cohere", "cohere2")


def output_projection(module: nn.Module, num_heads: int, head_dim: int) -> Tensor | None:
    """(H, dv, E) float32: head ``h``'s slice of ``module``'s output projection, or None
    when no child of the module is one of width ``H · dv``."""
    width = num_heads * head_dim
    for name in OUT_NAMES:
        lin = getattr(module, name, None)
        w = getattr(lin, "weight", None)
        if not isinstance(w, Tensor) or w.dim() != 2:
            continue
        if isinstance(lin, nn.Linear) and w.shape[1] == width:
            by_input = w.detach().t()  # (in, out)
        elif type(lin).__name__ == "Conv1D" and w.shape[0] == width:  # GPT-2: (in, out)
            by_input = w.detach()
        else:
            continue
        # a copy, never a view of the model's parameter
        return by_input.float().reshape(num_heads, head_dim, -1).clone()
    return None


def output_projections(root: nn.Module, names: Sequence[str], num_heads: int,
                       head_dim: int) -> Tensor | None:
    """(L, H, dv, E) of the attention modules ``names`` (dotted, inside ``root``), or None
    when any of them has no output projection attnlab can find."""
    out: list[Tensor] = []
    for name in names:
        try:
            module = root.get_submodule(name)
        except AttributeError:
            return None
        w = output_projection(module, num_heads, head_dim)
        if w is None or (out and w.shape != out[0].shape):
            return None
        out.append(w)
    return torch.stack(out) if out else None


def _config(root: nn.Module) -> Any:
    return getattr(root, "config", None)


class RopeLayout(TypedDict):
    """A model's rotary positions, as a trace's ``meta["positional"]`` records them."""

    kind: Literal["rope"]
    #: ``"interleaved"`` (dimensions 2a, 2a+1 rotate together) or ``"half"`` (a, a + r/2).
    pairing: Literal["interleaved", "half"]
    #: How many dimensions of each head rotate: two per frequency.
    rotary_dim: int
    #: The frequency of each rotated pair (``inv_freq``); None when the model has several
    #: rotary embeddings that differ.
    freqs: list[float] | None
    #: The config's ``rope_theta``, when it states one.
    base: float | None
    #: The config's ``model_type`` ("" without one).
    model_type: str


def rope_layout(root: nn.Module) -> RopeLayout | None:
    """``{"kind": "rope", "pairing", "rotary_dim", "freqs", "base"}`` read from the
    model's rotary embedding, or None for a model without one. ``freqs`` is None when the
    model has several rotary embeddings that differ (e.g. local and global layers)."""
    found = [b for m in root.modules()
             for n, b in m.named_buffers(recurse=False) if n == "inv_freq"]
    if not found:
        return None
    first = found[0].detach().float().flatten()
    same = all(b.numel() == first.numel() and torch.equal(b.detach().float().flatten(), first)
               for b in found[1:])
    cfg = _config(root)
    model_type = str(getattr(cfg, "model_type", "") or "")
    params = getattr(cfg, "rope_parameters", None)
    base = getattr(cfg, "rope_theta", None)
    if base is None and isinstance(params, dict):
        base = params.get("rope_theta")
    return {"kind": "rope", "pairing": "interleaved" if model_type in INTERLEAVED else "half",
            "rotary_dim": 2 * first.numel(), "freqs": first.tolist() if same else None,
            "base": float(base) if isinstance(base, (int, float)) else None,
            "model_type": model_type}
