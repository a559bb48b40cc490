"""The names of a trace's attention stacks and of its tensors, written once for the package.

>>> STACKS
('self', 'encoder', 'decoder', 'cross')
>>> STACK_ORDER
('encoder', 'decoder', 'cross')
>>> TRACE_TENSORS
('weights', 'q', 'k', 'v', 'lse', 'context', 'out_proj')
"""

from __future__ import annotations

__all__ = ["STACKS", "STACK_ORDER", "TRACE_TENSORS"]

#: The attention stacks a trace can belong to: ``"self"`` (a model with one stack),
#: ``"encoder"`` (encoder self-attention), ``"decoder"`` (decoder self-attention),
#: ``"cross"`` (decoder queries over encoder keys).
STACKS = ("self", "encoder", "decoder", "cross")
#: The stacks of an encoder–decoder model (all but ``"self"``), in the order a
#: :class:`~attnlab.tracing.stacks.StackedTrace` keeps them.
STACK_ORDER = tuple(s for s in STACKS if s != "self")
#: The tensors an :class:`~attnlab.tracing.attention.AttentionTrace` holds (each optional),
#: in the order a trace file stores them (its score shapes' tensors follow).
TRACE_TENSORS = ("weights", "q", "k", "v", "lse", "context", "out_proj")
