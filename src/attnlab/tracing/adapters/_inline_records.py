"""The records the inline-softmax readers of :mod:`attnlab.tracing.adapters.inline` take and
give: the arguments of one attention call, by the parameter names of the module's own
``forward`` (:class:`CallArguments`), and what a reader makes of them
(:class:`InlineReading`).

Shape legend: B batch, H query heads, H_kv key/value heads, Lq queries, Lk keys, d head
size, D model size.
"""

from __future__ import annotations

from typing import Any, TypedDict

from torch import Tensor

__all__ = ["CallArguments", "InlineReading"]


class CallArguments(TypedDict, total=False):
    """The arguments of one call of an inline-softmax attention module, by the names of its
    ``forward``'s parameters, as a forward pre-hook binds them. Each module class has the
    few its reader reads (and others no reader reads); the names differ between families
    (``hidden_states``, ``x``, ``input``, ``query``)."""

    #: (B, L, D) the call's input (most families).
    hidden_states: Tensor
    #: (B, L, D) the call's input (OpenAI GPT).
    x: Tensor
    #: (B, L, D) the call's input (XLM, FlauBERT).
    input: Tensor
    #: (L, B, D) the call's input (FSMT).
    query: Tensor
    #: (Lk, B, D) the encoder's states in a cross-attention call (FSMT).
    key: Tensor
    #: (B, Lk, D) the encoder's states in a cross-attention call (the BART-style modules).
    key_value_states: Tensor | None
    #: (B, Lk, D) the encoder's states in a cross-attention call (the BERT-style modules).
    encoder_hidden_states: Tensor | None
    #: (B, Lk, D) the encoder's states in a cross-attention call (XLM, FlauBERT).
    kv: Tensor | None
    #: The model's mask: additive (float, hidden keys at the dtype's minimum) broadcastable
    #: to (B, 1, Lq, Lk), or bool (MPT: True where a key is hidden).
    attention_mask: Tensor | None
    #: (Lq, Lk) FSMT's additive causal mask of the decoder.
    attn_mask: Tensor | None
    #: (B, Lk) FSMT's padding, True where a key is hidden.
    key_padding_mask: Tensor | None
    #: (B, Lk) or (B, Lq, Lk) XLM's mask, 0 where a key is hidden.
    mask: Tensor | None
    #: (B·H, 1, Lk) or broadcastable: the ALiBi bias (BLOOM, Falcon).
    alibi: Tensor | None
    #: MPT's ALiBi bias (H, 1, Lk), or MPNet's relative position bias (B|1, H, Lq, Lk).
    position_bias: Tensor | None
    #: (cos, sin) of the rotary positions (Falcon, GPT-NeoX-Japanese).
    position_embeddings: tuple[Tensor, Tensor]
    #: RoFormer's rotary positions.
    sinusoidal_pos: Tensor | None
    #: MVP's prompt keys and values (refused when given).
    attn_prompt: Tensor | None
    #: The KV cache (a transformers cache of its own class, or None).
    layer_past: Any
    #: The KV cache, under the name newer modules give it.
    cache: Any
    #: FSMT's KV cache.
    layer_state: Any


class _Reading(TypedDict):
    """The keys every reader gives (:class:`InlineReading` adds those some readers give)."""

    #: (B, H, Lq, d) the queries, as the module multiplies them with the keys.
    q: Tensor
    #: (B, H_kv, Lk, d) the keys.
    k: Tensor
    #: (B, H_kv, Lk, dv) the values.
    v: Tensor
    #: What multiplies ``q·k``.
    scale: float
    #: (B, Lq, Lk) bool: the keys each row sees (None: every key).
    visible: Tensor | None


class InlineReading(_Reading, total=False):
    """What a reader reads of one call: q, k, v, the scale and the keys each row sees, and,
    where the module has them, its ALiBi bias, its local window and an additive bias of its
    own."""

    #: (B|1, H, 1, Lk) float: the ALiBi bias added to every row's scores.
    alibi: Tensor | None
    #: The local window the module's own causal buffer keeps (GPT-Neo's local layers).
    window: int | None
    #: (B|1, H, Lq, Lk) float: a bias of the model's own, kept as it is (MPNet).
    bias: Tensor | None
