"""The two ways an :class:`~attnlab.tracing.attention.AttentionTrace` holds its weights,
behind one interface: :class:`DenseWeights` keeps every weight (L, H, Lq, Lk) and reads
them; :class:`WeightsFromQK` keeps q, k and each row's log-sum-exp and computes a weight
exactly when it is asked for (``exp(q·k · scale − lse)``, shaped by the layer's
:class:`~attnlab.core.scores.ScoreShape`).

The trace picks one when it is made (:func:`storage_of`) and asks it, without a branch of
its own, for the weights of some rows of a head (in pieces: the tokens before a merge), for
a whole layer, or for a whole head; what both storages share (the merge of pieces into
tokens, tiling, pooling) stays in the trace. A strategy object rather than two subclasses:
a trace changes tokens and merges (:meth:`AttentionTrace.merge_tokens`) and moves between
devices over the same tensors, and the storage is the one thing those views never change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
from torch import Tensor

from attnlab.core.scores import ScoreShape
from attnlab.core.weights import shaped_weights

__all__ = ["DenseWeights", "Storage", "TraceParts", "WeightsFromQK", "storage_of"]


class TraceParts(Protocol):
    """What a storage reads of its trace (an
    :class:`~attnlab.tracing.attention.AttentionTrace`, which imports this module)."""

    @property
    def _pieces_q(self) -> int: ...
    @property
    def _pieces_k(self) -> int: ...
    @property
    def _shapes(self) -> Sequence[ScoreShape]: ...
    @property
    def device(self) -> torch.device: ...
    @property
    def num_heads(self) -> int: ...
    @property
    def num_kv_heads(self) -> int: ...
    @property
    def _q(self) -> Tensor: ...
    def layer_tensor(self, name: str, layer: int) -> Tensor: ...
    def kv_head(self, head: int) -> int: ...
    def _on_device(self, positions: Tensor) -> Tensor: ...
    def _tiled_head(self, layer: int, head: int) -> Tensor: ...
    def _dense_kept(self) -> Tensor: ...


class Storage(Protocol):
    """What a trace's weights storage answers."""

    #: how the weights are held, as the trace's repr says it
    kind: str
    #: the weights are computed from q, k and the lse (not read)
    from_qk: bool

    def piece_rows(self, trace: TraceParts, layer: int, head: int, rows: Tensor,
                   cols: Tensor | None) -> Tensor:
        """Weights (R, C) float32 of pieces ``rows`` x ``cols`` (every key when None);
        ``rows`` and ``cols`` are positions on the host."""
        ...

    def layer_weights(self, trace: TraceParts, layer: int) -> Tensor:
        """(H, Lq, Lk) float32 weights of every head of one layer, in pieces."""
        ...

    def head_weights(self, trace: TraceParts, layer: int, head: int) -> Tensor:
        """The dense (Lq, Lk) float32 weights of one head, in pieces."""
        ...

    def first(self, trace: TraceParts) -> Tensor:
        """The tensor that gives the trace's (L, H) and its device."""
        ...

    def kept(self, trace: TraceParts) -> Tensor | None:
        """The dense (L, H, Lq, Lk) weights as kept, or None when they are computed."""
        ...


class DenseWeights:
    """Every weight kept: rows are read from the (L, H, Lq, Lk) tensor."""

    kind = "dense weights"
    from_qk = False

    def piece_rows(self, trace: TraceParts, layer: int, head: int, rows: Tensor,
                   cols: Tensor | None) -> Tensor:
        w = trace.layer_tensor("weights", layer)[head].index_select(0, trace._on_device(rows))
        return (w if cols is None else w.index_select(1, trace._on_device(cols))).float()

    def layer_weights(self, trace: TraceParts, layer: int) -> Tensor:
        return trace.layer_tensor("weights", layer).float()

    def head_weights(self, trace: TraceParts, layer: int, head: int) -> Tensor:
        return trace.layer_tensor("weights", layer)[head].float()

    def first(self, trace: TraceParts) -> Tensor:
        return trace._dense_kept()

    def kept(self, trace: TraceParts) -> Tensor | None:
        return trace._dense_kept()


class WeightsFromQK:
    """q, k and the lse kept: each weight computed when asked, exactly as the model's
    softmax gave it; the keys no asked row may see (a causal or windowed shape) are not
    computed."""

    kind = "q, k, lse"
    from_qk = True

    def piece_rows(self, trace: TraceParts, layer: int, head: int, rows: Tensor,
                   cols: Tensor | None) -> Tensor:
        nq, nk = trace._pieces_q, trace._pieces_k
        shape = trace._shapes[layer]
        at_rows = trace._on_device(rows)
        q = trace.layer_tensor("q", layer)[head].index_select(0, at_rows)
        k = trace.layer_tensor("k", layer)[trace.kv_head(head)]
        lse = trace.layer_tensor("lse", layer)[head].index_select(0, at_rows)
        if cols is not None:
            return shaped_weights(q, k.index_select(0, trace._on_device(cols)), lse, shape,
                                  rows=rows, cols=cols, head=head, lq=nq, lk=nk)
        c0, c1 = 0, nk
        if rows.numel():
            c0, c1 = shape.key_range(int(rows.min()), int(rows.max()) + 1, lq=nq, lk=nk)
        if (c0, c1) == (0, nk):
            return shaped_weights(q, k, lse, shape, rows=rows, head=head, lq=nq, lk=nk)
        out = torch.zeros(rows.shape[0], nk, device=trace.device)
        if c1 > c0:  # only the keys some row may see; the others are 0
            out[:, c0:c1] = shaped_weights(q, k[c0:c1], lse, shape, rows=rows,
                                           cols=torch.arange(c0, c1), head=head, lq=nq, lk=nk)
        return out

    def layer_weights(self, trace: TraceParts, layer: int) -> Tensor:
        group = trace.num_heads // trace.num_kv_heads
        k = trace.layer_tensor("k", layer).repeat_interleave(group, dim=0)  # (H, Lk, d)
        return shaped_weights(trace.layer_tensor("q", layer), k,
                              trace.layer_tensor("lse", layer), trace._shapes[layer],
                              rows=torch.arange(trace._pieces_q),
                              head=torch.arange(trace.num_heads), lq=trace._pieces_q,
                              lk=trace._pieces_k)

    def head_weights(self, trace: TraceParts, layer: int, head: int) -> Tensor:
        return trace._tiled_head(layer, head)

    def first(self, trace: TraceParts) -> Tensor:
        return trace._q

    def kept(self, trace: TraceParts) -> Tensor | None:
        return None


def storage_of(weights: Tensor | None) -> Storage:
    """The storage of a trace made with (``DenseWeights``) or without dense weights."""
    return DenseWeights() if weights is not None else WeightsFromQK()
