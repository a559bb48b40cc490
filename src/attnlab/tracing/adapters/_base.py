"""The adapter interface, the record each observed attention call becomes, and what the
tracer knows of a model's shape (:class:`ModelShape`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, TypeVar, overload

import torch
from torch import Tensor, nn

from attnlab._errors import Error
from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.core.weights import shaped_weights
from attnlab.tracing.forward_sums import SumsTaker

__all__ = ["Adapter", "AttentionRecord", "Handle", "ModelShape", "Restore", "Sink",
           "UnreadableAttentionError", "attach_each", "dense_weights", "exact_lse"]

T = TypeVar("T")


class _Shape(TypedDict):
    """The fields every model description has."""

    #: Whether the model is a decoder (each token attends to those before it).
    causal: bool
    num_layers: int
    num_heads: int
    #: Fewer than ``num_heads`` under grouped-query attention.
    num_kv_heads: int
    head_dim: int
    #: The longest input the model takes, in tokens.
    max_length: int


class ModelShape(_Shape, total=False):
    """A model as the tracer and :class:`attnlab.models.LoadedModel` know it: what the
    ``describe_model`` of the attnlab and Hugging Face adapters give (0 for a number a
    Hugging Face config does not state at the top level)."""

    #: The Hugging Face config's ``model_type`` (Hugging Face models only).
    model_type: str


@dataclass
class AttentionRecord:
    """One call of one attention module, batch-first, per head.

    With q and k (``capture(..., qkv=True)``): ``q (B, H, Lq, d)``, ``k (B, H_kv, Lk, d)``,
    ``v (B, H_kv, Lk, dv)`` (grouped heads not repeated) and ``lse (B, H, Lq)`` float32.
    Without: ``weights (B, H, Lq, Lk)``. ``shapes`` holds one
    :class:`~attnlab.core.scores.ScoreShape` per batch element (its key mask differs
    between them); ``context (B, H, Lq, dv)`` only when the capture asked for it.

    ``past``: keys before this record's ``k`` and ``v``. A decoding step through a KV cache
    (:mod:`attnlab.tracing.generation`) is kept as its new rows and new keys only; its
    queries read the ``past`` keys held by the earlier records of the same module too, and
    ``lse`` is over all of them. 0 for a call whose ``k`` holds every key it read.
    """

    name: str
    source: str
    shapes: list[ScoreShape]
    q: Tensor | None = None
    k: Tensor | None = None
    v: Tensor | None = None
    lse: Tensor | None = None
    weights: Tensor | None = None
    context: Tensor | None = None
    past: int = 0

    @property
    def dims(self) -> tuple[int, int, int]:
        """(H, Lq, Lk) of the call (``Lk`` counts the ``past`` keys too)."""
        if self.weights is not None:
            _, h, lq, lk = self.weights.shape
            return h, lq, lk
        return self._q.shape[1], self._q.shape[2], self.past + self._k.shape[2]

    @property
    def batch(self) -> int:
        return (self.weights if self.weights is not None else self._q).shape[0]

    @property
    def _q(self) -> Tensor:
        """``q`` of a record kept with it; :class:`attnlab.Error` for one that holds dense
        weights only."""
        if self.q is None:
            raise Error(f"the record of {self.name} holds no q (captured without qkv=True: "
                        "dense weights only)")
        return self.q

    @property
    def _k(self) -> Tensor:
        """``k``, as :attr:`_q`."""
        if self.k is None:
            raise Error(f"the record of {self.name} holds no k (captured without qkv=True: "
                        "dense weights only)")
        return self.k


class Sink(Protocol):
    """What an adapter sees of a capture."""

    qkv: bool
    context: bool
    taker: SumsTaker | None  # computes the recorded calls (attnlab.tracing.forward_sums)

    def add(self, record: AttentionRecord) -> None: ...

    def name_of(self, module: nn.Module) -> str: ...


class Handle(Protocol):
    def remove(self) -> None: ...


class Adapter(Protocol):
    name: str

    def matches(self, module: nn.Module) -> bool: ...

    def attach(self, cap: Sink, modules: list[nn.Module]) -> list[Handle]: ...


class Restore:
    """A handle that calls ``undo`` once, on :meth:`remove`."""

    def __init__(self, undo: Callable[[], Any]) -> None:
        self._undo: Callable[[], Any] | None = undo

    def remove(self) -> None:
        undo, self._undo = self._undo, None
        if undo is not None:
            undo()


def attach_each(items: Sequence[T], attach_one: Callable[[T], list[Handle]]) -> list[Handle]:
    """``attach_one(item)`` for every item (a module, or any step that returns handles),
    all or nothing: when one fails, the handles already made are removed (last first) and
    the error propagates."""
    handles: list[Handle] = []
    try:
        for item in items:
            handles.extend(attach_one(item))
    except BaseException:
        for hnd in reversed(handles):
            hnd.remove()
        raise
    return handles


def dense_weights(q: Tensor, k: Tensor, lse: Tensor, shapes: list[ScoreShape]) -> Tensor:
    """(B, H, Lq, Lk) float32 weights from q (B, H, Lq, d), k (B, H_kv, Lk, d), lse."""
    b, h, lq, _ = q.shape
    lk = k.shape[2]
    group = h // k.shape[1]
    out = torch.empty(b, h, lq, lk)
    rows = torch.arange(lq)
    for bi in range(b):
        for hd in range(h):
            out[bi, hd] = shaped_weights(q[bi, hd], k[bi, hd // group], lse[bi, hd],
                                         shapes[bi], rows=rows, head=hd, lq=lq, lk=lk)
    return out


def exact_lse(q: Tensor, k: Tensor, shapes: list[ScoreShape]) -> Tensor:
    """(B, H, Lq) float32 log-sum-exp of each row, computed in float32 from q (B, H, Lq, d)
    and k (B, H_kv, Lk, d) under each batch element's score shape, one tile of rows at a
    time (O(tile · Lk) memory): the log-sum-exp a trace records for a model run in half
    precision, whose own log-sum-exp comes from scores rounded in its dtype (``exp(s − lse)``
    of the trace's float32 scores would not sum to 1). ``q`` and ``k`` are what the trace
    stores (:func:`detached`: float32 copies of the model's values)."""
    if len(shapes) != q.shape[0]:
        raise ValueError(f"shapes must hold one ScoreShape per batch element ({q.shape[0]}), "
                         f"got {len(shapes)}")
    return torch.stack([row_logsumexp(q[bi], k[bi], shapes[bi]) for bi in range(q.shape[0])])


@overload
def detached(t: Tensor) -> Tensor: ...
@overload
def detached(t: None) -> None: ...
def detached(t: Tensor | None) -> Tensor | None:
    """A float32 CPU tensor detached from autograd (no copy when it already is one)."""
    return None if t is None else t.detach().to("cpu", torch.float32)


class UnreadableAttentionError(Error):
    """An attention module attnlab cannot read exactly: the message names its class and
    what is missing. Raised instead of recording weights that might not be the model's."""
