"""How an :class:`~attnlab.tracing.attention.AttentionTrace` reads its weights under its
on-demand methods: the stored tensors they need (q, k or the dense weights, refused by name
when the trace holds none), layer and head indices checked, any row or column selector made
one tensor of positions on the host and sent to the trace's device, the pieces' weights read
or computed by the trace's storage (:mod:`attnlab.tracing._storage`), the merge of pieces
into tokens applied, and tiles of rows sized to a budget of bytes.

:class:`TraceReads` is a base of ``AttentionTrace`` with no state of its own: what it reads
(the tensors, the groups, the storage, the sizes) is the trace's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from attnlab._errors import Error, check_int
from attnlab.core.scores import TILE_BYTES, ScoreShape
from attnlab.tracing import _merge
from attnlab.tracing._storage import Storage
from attnlab.tracing._trace_checks import index

__all__ = ["Selector", "TraceReads"]

#: Bytes of float32 weights one tile of
#: :meth:`~attnlab.tracing.attention.AttentionTrace.pooled` holds: a whole head is visited,
#: so fewer, larger tiles pay less per-operation overhead.
_POOL_TILE_BYTES = 32 << 20

#: What selects rows or columns: an index, a slice, a range, a sequence of ints or a 1-D
#: integer tensor.
Selector = int | slice | range | Sequence[int] | Tensor


class TraceReads:
    """The reads under an ``AttentionTrace``'s on-demand methods (see the module
    docstring)."""

    if TYPE_CHECKING:  # the trace's own: set or defined by AttentionTrace
        q: Tensor | None
        k: Tensor | None
        groups: list[list[int]] | None
        _weights: Tensor | None
        _store: Storage
        _shapes: tuple[ScoreShape, ...]
        _pieces_q: int
        _pieces_k: int

        @property
        def num_layers(self) -> int: ...
        @property
        def num_heads(self) -> int: ...
        @property
        def num_kv_heads(self) -> int: ...
        @property
        def seq_len(self) -> int: ...
        @property
        def key_len(self) -> int: ...
        @property
        def device(self) -> torch.device: ...
        def layer_tensor(self, name: str, layer: int) -> Tensor: ...
        def kv_head(self, head: int) -> int: ...
        def iter_row_tiles(self, layer: int, head: int, tile_rows: int | None = None
                           ) -> Iterator[tuple[int, int, Tensor]]: ...

    # -- the stored tensors ---------------------------------------------------------------

    @property
    def _q(self) -> Tensor:
        """``q``, for the methods that need it; :class:`attnlab.Error` if the trace holds
        none (dense weights only: traced without ``qkv=True``)."""
        if self.q is None:
            raise Error("this trace holds no q (dense weights only; trace with qkv=True to "
                        "keep q and k)")
        return self.q

    @property
    def _k(self) -> Tensor:
        """``k``, as :attr:`_q`."""
        if self.k is None:
            raise Error("this trace holds no k (dense weights only; trace with qkv=True to "
                        "keep q and k)")
        return self.k

    @property
    def _first(self) -> Tensor:
        """The dense weights, or q: the tensor that gives (L, H) and the device."""
        return self._store.first(self)

    def _dense_kept(self) -> Tensor:
        """The dense weights this trace was made with (its storage's tensor)."""
        if self._weights is None:
            raise Error("this trace holds no dense weights (q, k and lse: its weights are "
                        "computed on demand)")
        return self._weights

    # -- indices and positions ------------------------------------------------------------

    def _layer(self, layer: int) -> int:
        return index("layer", layer, self.num_layers)

    def _head(self, head: int) -> int:
        return index("head", head, self.num_heads)

    def _select(self, name: str, sel: Selector, size: int) -> Tensor:
        """Any row/column selector -> 1-D long tensor of positions in [0, size)."""
        if isinstance(sel, bool):
            raise TypeError(f"{name} must be an int, slice, range or sequence of ints, got bool")
        if isinstance(sel, int):
            return torch.tensor([index(name, sel, size)])
        if isinstance(sel, slice):
            return torch.arange(size)[sel]
        if isinstance(sel, range):
            t = torch.arange(sel.start, sel.stop, sel.step)
        else:
            try:
                t = torch.as_tensor(sel)
            except (TypeError, ValueError, RuntimeError):
                raise TypeError(
                    f"{name} must be an int, slice, range or sequence of ints, got "
                    f"{type(sel).__name__}") from None
        if t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool:
            raise TypeError(
                f"{name} must be an int, slice, range or sequence of ints, got dtype {t.dtype} "
                f"shape {tuple(t.shape)}"
            )
        t = t.long()
        if t.numel() and (int(t.min()) < -size or int(t.max()) >= size):
            raise IndexError(f"{name} must index [0, {size}), got {t.tolist()}")
        return t % size if size else t

    def _on_device(self, positions: Tensor) -> Tensor:
        """Positions bookkept on the host, copied to the trace's device to index its
        tensors."""
        return positions.to(self.device)

    # -- weights --------------------------------------------------------------------------

    def _piece_rows(self, layer: int, head: int, rows: Tensor, cols: Tensor | None) -> Tensor:
        """Weights (R, C) of pieces ``rows`` x ``cols`` (all keys when None), float32, read
        or computed by the trace's storage (:mod:`attnlab.tracing._storage`); ``rows`` and
        ``cols`` are positions on the host, the result is on the trace's device."""
        return self._store.piece_rows(self, layer, head, rows, cols)

    def _tile(self, layer: int, head: int, rows: Tensor, cols: Tensor | None) -> Tensor:
        """Weights (R, C) of tokens ``rows`` x ``cols``, the merge applied."""
        if self.groups is None:
            return self._piece_rows(layer, head, rows, cols)
        pcol = None if cols is None else _merge.pieces_of(self.groups, cols)[0]
        raw = self._piece_rows(layer, head, _merge.pieces_of(self.groups, rows)[0], pcol)
        return _merge.merge(raw, self.groups, rows, cols)

    def _tile_rows(self, tile_rows: int | None, budget: int = TILE_BYTES) -> int:
        if tile_rows is None:
            return max(1, budget // max(1, 4 * self._pieces_k))
        check_int("tile_rows", tile_rows, minimum=1)
        return tile_rows

    def _tiled_head(self, layer: int, head: int) -> Tensor:
        """One head's (Lq, Lk) weights, built a tile of rows at a time (the merge
        applied)."""
        out = torch.empty(self.seq_len, self.key_len, device=self.device)
        step = self._tile_rows(None, _POOL_TILE_BYTES)
        for r0, r1, tile in self.iter_row_tiles(layer, head, step):
            out[r0:r1] = tile
        return out

    def _layer_weights(self, layer: int) -> Tensor:
        """(H, Lq, Lk) weights of every head of one layer at once, the merge applied."""
        w = self._store.layer_weights(self, layer)
        if self.groups is None:
            return w
        member = torch.zeros(len(self.groups), self._pieces_q)  # (G, N): piece i in group a
        for a, g in enumerate(self.groups):
            member[a, g] = 1.0  # (made on the host, from the groups, then sent over)
        member = member.to(w.device)
        mean = member / member.sum(-1, keepdim=True)
        return mean @ w @ member.T  # queries averaged, keys summed
