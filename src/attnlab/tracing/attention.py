"""AttentionTrace: what one forward pass of a model attended to, per layer and head.

A trace keeps what *determines* attention, not its N x N image. Per layer and head
(``L`` layers, ``H`` query heads, ``H_kv`` key/value heads, all float32 on the CPU)::

    q        (L, H, Lq, d)      queries, after RoPE where the model uses it
    k        (L, H_kv, Lk, d)   keys: grouped heads stored once (query head h reads
                                key head h // (H / H_kv))
    v        (L, H_kv, Lk, dv)  values (optional)
    lse      (L, H, Lq)         log-sum-exp of each row of shaped scores
    context  (L, H, Lq, dv)     per-head outputs (optional)

and, per layer, the :class:`~attnlab.core.scores.ScoreShape` (scale, causal, window, key
mask, soft-cap, ALiBi slopes, sink logits; a dense bias only when no rule describes the
mask, or for a model's own additive bias). Any
weight is then exact and one exponential away, ``P_ij = exp(s_ij − lse_i)``, so the
methods compute what is asked — rows, tiles, pooled blocks, top-k — in O(tile · N)
memory: :meth:`~AttentionTrace.weights_rows`, :meth:`~AttentionTrace.weights_tile`,
:meth:`~AttentionTrace.pooled`, :meth:`~AttentionTrace.topk`,
:meth:`~AttentionTrace.head_weights`, :meth:`~AttentionTrace.iter_row_tiles`.

A trace made without q and k (``capture(..., qkv=False)``, or a version-1 file) stores
dense ``weights (L, H, Lq, Lk)`` instead; every method works on both kinds. The
:attr:`~AttentionTrace.weights` property gives the dense tensor of either kind, built
lazily, and refuses above :data:`DENSE_BUDGET_BYTES`.

Merged tokens (e.g. the byte pieces of one Chinese character, see
:meth:`~AttentionTrace.merge_tokens`) keep the pieces' q, k, v and lse; the merge is
applied on demand: a merged weight is **summed over the key pieces and averaged over the
query pieces**, so rows still sum to 1.

Files are safetensors (no pickle) with the JSON metadata under the header key
``"attnlab"`` and a ``format_version`` (:data:`FORMAT_VERSION` = 4, which added the
:attr:`~AttentionTrace.stack` a trace belongs to and files of several stacks, see
:mod:`attnlab.tracing.stacks`; version 3 added sink logits and windows without ``causal``;
files of versions 2 and 3 load unchanged, as stack ``"self"``, and version-1 files, which
held dense weights, still load). What is read is checked against the metadata; a bad file
raises :class:`TraceFormatError` naming the field.

>>> import torch
>>> from attnlab.core.scores import ScoreShape, row_logsumexp
>>> q, k = torch.randn(2, 1, 2, 5, 4).unbind(0)  # (L=1, H=2, N=5, d=4)
>>> shape = ScoreShape(scale=0.5, causal=True)
>>> t = AttentionTrace(tokens=list("abcde"), q=q, k=k[:, :1], shapes=shape,
...                    lse=row_logsumexp(q[0], k[0, :1], shape)[None])
>>> t.num_heads, t.num_kv_heads, t.seq_len, t.has_qk
(2, 1, 5, True)
>>> t.weights_rows(0, 1, [0, 4]).shape, t.weights_rows(0, 1, [0])[0, 1:].abs().max().item()
(torch.Size([2, 5]), 0.0)
>>> p = t.pooled(0, 1, 2)  # blocks of 2 tokens: mean over queries of sum over keys
>>> p.shape, bool(torch.allclose(p.sum(-1), torch.ones(3)))
(torch.Size([3, 3]), True)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab._io import atomic_open
from attnlab.core._layout import aligned
from attnlab.core.functional import default_scale
from attnlab.core.scores import TENSOR_FIELDS, TILE_BYTES, ScoreShape
from attnlab.core.weights import shaped_weights

__all__ = ["AttentionTrace", "TraceFormatError", "FORMAT_VERSION", "DENSE_BUDGET_BYTES",
           "STACKS"]

#: Version of the file layout :meth:`AttentionTrace.save` writes.
FORMAT_VERSION = 4
#: The attention stacks a trace can belong to: ``"self"`` (a model with one stack),
#: ``"encoder"`` (encoder self-attention), ``"decoder"`` (decoder self-attention),
#: ``"cross"`` (decoder queries over encoder keys).
STACKS = ("self", "encoder", "decoder", "cross")
#: The most bytes :attr:`AttentionTrace.weights` may build (float32, all layers and heads).
DENSE_BUDGET_BYTES = 1 << 30

_FORMAT = "attnlab.AttentionTrace"
_STACKED_FORMAT = "attnlab.StackedTrace"  # several stacks in one file (attnlab.tracing.stacks)
_STORED = ("weights", "q", "k", "v", "lse", "context")
_SHAPE_TENSORS = TENSOR_FIELDS
_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.float64: "F64", torch.bool: "BOOL", torch.int64: "I64", torch.int32: "I32",
           torch.uint8: "U8"}
#: Bytes of float32 weights one tile of :meth:`AttentionTrace.pooled` holds: a whole head
#: is visited, so fewer, larger tiles pay less per-operation overhead.
_POOL_TILE_BYTES = 32 << 20
_ON_DEMAND = ("weights_rows, weights_tile, pooled, topk, head_weights, iter_row_tiles")

Selector = int | slice | range | Sequence[int] | Tensor


class TraceFormatError(ValueError):
    """A file that is not a readable attnlab trace (corrupt, foreign, inconsistent, too new)."""


def _shape_of(t: Tensor | None) -> tuple[int, ...] | str:
    return tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__


def _index(name: str, i: object, size: int) -> int:
    """An int index into ``size`` items (negative ones count from the end), as ``0..size-1``."""
    if isinstance(i, bool) or not isinstance(i, int):
        raise TypeError(f"{name} must be an int, got {type(i).__name__}")
    if not -size <= i < size:
        raise IndexError(f"{name} must be in [0, {size}), got {i}")
    return i % size


def _check_groups(groups: object, n: int) -> list[list[int]]:
    ok = isinstance(groups, (list, tuple)) and all(
        isinstance(g, (list, tuple)) and g and all(
            isinstance(i, int) and not isinstance(i, bool) for i in g) for g in groups)
    if not ok or [i for g in groups for i in g] != list(range(n)):
        raise ValueError(f"groups must split 0..{n - 1} into consecutive runs, got {groups}")
    return [list(g) for g in groups]


class AttentionTrace:
    """Attention of one input through one model (see the module docstring).

    Args:
        tokens: the query tokens' labels (after any merge: one per group).
        weights: dense (L, H, Lq, Lk) weights, for traces without q and k.
        q, k, v, lse, context: the per-head tensors (shapes in the module docstring).
        shapes: one :class:`ScoreShape`, or one per layer; default
            ``ScoreShape(scale, causal)``.
        scale, causal: shorthand for ``shapes`` (``scale`` defaults to
            ``default_scale(d)``); for a dense trace, ``causal`` is a description.
        model, token_ids, text, meta: what was traced.
        key_tokens: the key tokens' labels when they differ (cross-attention).
        groups: consecutive runs of pieces merged into one token (see
            :meth:`merge_tokens`); the tensors hold the pieces.
        stack: which attention stack of the model this is, one of :data:`STACKS`:
            ``"self"`` for a model with one stack; ``"encoder"``, ``"decoder"`` or
            ``"cross"`` for one stack of an encoder–decoder model (cross-attention: rows are
            the decoder's ``tokens``, columns the encoder's ``key_tokens``).

    >>> w = torch.softmax(torch.randn(2, 3, 4, 4), dim=-1)
    >>> t = AttentionTrace(tokens=["a", "b", "c", "d"], weights=w, model="toy")
    >>> t.num_layers, t.num_heads, t.seq_len, t.has_qk
    (2, 3, 4, False)
    """

    def __init__(
        self,
        tokens: Sequence[str],
        *,
        weights: Tensor | None = None,
        q: Tensor | None = None,
        k: Tensor | None = None,
        v: Tensor | None = None,
        lse: Tensor | None = None,
        context: Tensor | None = None,
        shapes: ScoreShape | Sequence[ScoreShape] | None = None,
        scale: float | None = None,
        causal: bool | None = None,
        model: str = "",
        token_ids: Sequence[int] | None = None,
        key_tokens: Sequence[str] | None = None,
        text: str | None = None,
        meta: dict[str, Any] | None = None,
        groups: Sequence[Sequence[int]] | None = None,
        stack: str = "self",
    ) -> None:
        if isinstance(tokens, (str, bytes)) or not isinstance(tokens, Sequence):
            raise TypeError(f"tokens must be a list of str, got {type(tokens).__name__}")
        if not isinstance(stack, str) or stack not in STACKS:
            raise ValueError(f"stack must be one of {', '.join(map(repr, STACKS))}, got "
                             f"{stack!r}")
        self.stack = stack
        self.tokens = [str(t) for t in tokens]
        self.key_tokens = None if key_tokens is None else [str(t) for t in key_tokens]
        self.model = str(model)
        self.text = text
        self.meta = dict(meta or {})
        self.token_ids = None if token_ids is None else [int(i) for i in token_ids]
        for name, t in zip(_STORED, (weights, q, k, v, lse, context)):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"{name} must be a tensor or None, got {type(t).__name__}")
        self._weights = weights
        self.q, self.k, self.v, self.lse, self.context = q, k, v, lse, context
        self._dense: Tensor | None = None  # lazily built weights
        if weights is None and (q is None or k is None or lse is None):
            missing = [n for n, t in (("q", q), ("k", k), ("lse", lse)) if t is None]
            raise ValueError(
                "a trace needs dense weights (L, H, Lq, Lk), or q, k and lse to compute them; "
                f"missing: {', '.join(missing)}"
            )
        nl, nh, nq, nk = self._check_tensors()
        self._pieces_q, self._pieces_k = nq, nk
        self.groups = None
        if groups is not None:
            if self.key_tokens is not None or nq != nk:
                raise ValueError("groups (merged tokens) need self-attention: Lq == Lk and no "
                                 "key_tokens")
            self.groups = _check_groups(groups, nq)
        n_rows = len(self.groups) if self.groups is not None else nq
        keys = self.key_tokens if self.key_tokens is not None else self.tokens
        n_cols = len(self.groups) if self.groups is not None else nk
        if len(self.tokens) != n_rows or len(keys) != n_cols:
            raise ValueError(
                f"the trace has {n_rows} query and {n_cols} key positions but "
                f"{len(self.tokens)} tokens and {len(keys)} key tokens"
            )
        if self.token_ids is not None and len(self.token_ids) != n_rows:
            raise ValueError(f"token_ids has {len(self.token_ids)} entries for {n_rows} tokens")
        self._shapes = self._make_shapes(shapes, scale, causal, nl, nh, nq, nk)
        self._causal = (all(s.causal for s in self._shapes) if self._shapes
                        else bool(causal))

    # -- construction ---------------------------------------------------------------------

    def _check_tensors(self) -> tuple[int, int, int, int]:
        """(L, H, Lq, Lk) in pieces, after checking every stored tensor's shape."""
        w, q, k = self._weights, self.q, self.k
        if w is not None:
            if w.dim() != 4:
                raise ValueError(f"weights must have shape (L, H, Lq, Lk), got {_shape_of(w)}")
            nl, nh, nq, nk = w.shape
        else:
            if q.dim() != 4:
                raise ValueError(f"q must have shape (L, H, Lq, d), got {_shape_of(q)}")
            nl, nh, nq = q.shape[:3]
            nk = k.shape[2] if k.dim() == 4 else -1
        if q is not None:
            if q.dim() != 4 or tuple(q.shape[:3]) != (nl, nh, nq):
                raise ValueError(f"q must have shape ({nl}, {nh}, {nq}, d), got {_shape_of(q)}")
        if k is not None:
            if q is None:
                raise ValueError("k needs q (both are kept, or neither)")
            ok = (k.dim() == 4 and k.shape[0] == nl and k.shape[2] == nk and k.shape[1] >= 1
                  and nh % k.shape[1] == 0 and k.shape[3] == q.shape[3])
            if not ok:
                raise ValueError(
                    f"k must have shape ({nl}, H_kv, {nk}, {q.shape[3]}) with H_kv dividing "
                    f"{nh}, got {_shape_of(k)}"
                )
        hkv = k.shape[1] if k is not None else nh
        if self.v is not None:
            v = self.v
            if v.dim() != 4 or tuple(v.shape[:3]) != (nl, hkv, nk):
                raise ValueError(f"v must have shape ({nl}, {hkv}, {nk}, dv), got {_shape_of(v)}")
        if self.lse is not None and tuple(self.lse.shape) != (nl, nh, nq):
            raise ValueError(f"lse must have shape ({nl}, {nh}, {nq}), got {_shape_of(self.lse)}")
        c = self.context
        if c is not None and (c.dim() != 4 or tuple(c.shape[:3]) != (nl, nh, nq)):
            raise ValueError(f"context must have shape ({nl}, {nh}, {nq}, dv), got {_shape_of(c)}")
        return nl, nh, nq, nk

    def _make_shapes(self, shapes: Any, scale: float | None, causal: bool | None, nl: int,
                     nh: int, nq: int, nk: int) -> tuple[ScoreShape, ...]:
        if shapes is None:
            if self.q is None and scale is None:
                return ()
            if scale is None:
                scale = default_scale(self.q.shape[-1])
            shapes = ScoreShape(scale=scale, causal=bool(causal))
        elif scale is not None or causal is not None:
            given = [s for s in ((shapes,) if isinstance(shapes, ScoreShape) else shapes)]
            if any((scale is not None and s.scale != float(scale))
                   or (causal is not None and s.causal != causal) for s in given):
                raise ValueError("scale/causal disagree with shapes; give one or the other")
        if isinstance(shapes, ScoreShape):
            shapes = [shapes] * nl
        shapes = tuple(shapes)
        if len(shapes) != nl or not all(isinstance(s, ScoreShape) for s in shapes):
            raise ValueError(f"shapes must be one ScoreShape or one per layer ({nl}), got "
                             f"{len(shapes)} items")
        for i, s in enumerate(shapes):
            try:
                s.check(num_heads=nh, lq=nq, lk=nk)
            except ValueError as exc:
                raise ValueError(f"shapes[{i}]: {exc}") from None
        return shapes

    # -- shape ----------------------------------------------------------------------------

    @property
    def num_layers(self) -> int:
        return (self._weights if self._weights is not None else self.q).shape[0]

    @property
    def num_heads(self) -> int:
        return (self._weights if self._weights is not None else self.q).shape[1]

    @property
    def num_kv_heads(self) -> int:
        return self.k.shape[1] if self.k is not None else self.num_heads

    @property
    def seq_len(self) -> int:
        """Lq: the number of query tokens (merged groups count once)."""
        return len(self.tokens)

    @property
    def key_len(self) -> int:
        """Lk: the number of key tokens."""
        return len(self.key_tokens) if self.key_tokens is not None else len(self.tokens)

    @property
    def head_dim(self) -> int | None:
        return None if self.q is None else self.q.shape[-1]

    @property
    def has_qk(self) -> bool:
        """q and k are kept (a trace made with ``qkv=True``)."""
        return self.q is not None and self.k is not None

    @property
    def causal(self) -> bool:
        return self._causal

    @property
    def shapes(self) -> tuple[ScoreShape, ...]:
        """One :class:`ScoreShape` per layer (empty for a dense trace without a scale)."""
        return self._shapes

    @property
    def scale(self) -> float | None:
        """The score scale when every layer shares one, else None."""
        scales = {s.scale for s in self._shapes}
        return scales.pop() if len(scales) == 1 else None

    def score_shape(self, layer: int) -> ScoreShape:
        """The :class:`ScoreShape` of ``layer``."""
        if not self._shapes:
            raise ValueError("this trace holds dense weights only; it has no score shape")
        return self._shapes[self._layer(layer)]

    def kv_head(self, head: int) -> int:
        """The key/value head that query ``head`` reads (grouped-query attention)."""
        h = self._head(head)
        return h // (self.num_heads // self.num_kv_heads)

    def _layer(self, layer: int) -> int:
        return _index("layer", layer, self.num_layers)

    def _head(self, head: int) -> int:
        return _index("head", head, self.num_heads)

    # -- on demand ------------------------------------------------------------------------

    def _select(self, name: str, sel: Selector, size: int) -> Tensor:
        """Any row/column selector -> 1-D long tensor of positions in [0, size)."""
        if isinstance(sel, bool):
            raise TypeError(f"{name} must be an int, slice, range or sequence of ints, got bool")
        if isinstance(sel, int):
            return torch.tensor([_index(name, sel, size)])
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

    def _piece_rows(self, layer: int, head: int, rows: Tensor, cols: Tensor | None) -> Tensor:
        """Weights (R, C) of pieces ``rows`` x ``cols`` (all keys when None), float32."""
        nq, nk = self._pieces_q, self._pieces_k
        if self._weights is not None:
            w = self._weights[layer, head].index_select(0, rows)
            return (w if cols is None else w.index_select(1, cols)).float()
        shape = self._shapes[layer]
        q = self.q[layer, head].index_select(0, rows)
        k = self.k[layer, self.kv_head(head)]
        lse = self.lse[layer, head].index_select(0, rows)
        if cols is not None:
            return shaped_weights(q, k.index_select(0, cols), lse, shape, rows=rows,
                                  cols=cols, head=head, lq=nq, lk=nk)
        c0, c1 = 0, nk
        if rows.numel():
            c0, c1 = shape.key_range(int(rows.min()), int(rows.max()) + 1, lq=nq, lk=nk)
        if (c0, c1) == (0, nk):
            return shaped_weights(q, k, lse, shape, rows=rows, head=head, lq=nq, lk=nk)
        out = torch.zeros(rows.shape[0], nk)
        if c1 > c0:  # only the keys some row may see; the others are 0
            out[:, c0:c1] = shaped_weights(q, k[c0:c1], lse, shape, rows=rows,
                                           cols=torch.arange(c0, c1), head=head, lq=nq, lk=nk)
        return out

    def _tile(self, layer: int, head: int, rows: Tensor, cols: Tensor | None) -> Tensor:
        """Weights (R, C) of tokens ``rows`` x ``cols``, the merge applied."""
        if self.groups is None:
            return self._piece_rows(layer, head, rows, cols)
        g = self.groups
        size = torch.tensor([len(x) for x in g])
        prow = torch.tensor([i for a in rows.tolist() for i in g[a]], dtype=torch.long)
        row_of = torch.repeat_interleave(torch.arange(rows.shape[0]), size[rows])
        if cols is None:
            pcol, n_cols = None, len(g)
            col_of = torch.repeat_interleave(torch.arange(len(g)), size)
        else:
            pcol = torch.tensor([j for b in cols.tolist() for j in g[b]], dtype=torch.long)
            n_cols = cols.shape[0]
            col_of = torch.repeat_interleave(torch.arange(n_cols), size[cols])
        raw = self._piece_rows(layer, head, prow, pcol)  # (R pieces, C pieces)
        summed = torch.zeros(raw.shape[0], n_cols).index_add_(1, col_of, raw)  # keys summed
        out = torch.zeros(rows.shape[0], n_cols).index_add_(0, row_of, summed)
        return out / size[rows].to(out.dtype)[:, None]  # queries averaged

    def weights_rows(self, layer: int, head: int, queries: Selector) -> Tensor:
        """Exact weights (len(queries), Lk) of query rows ``queries`` of one head."""
        layer, head = self._layer(layer), self._head(head)
        return self._tile(layer, head, self._select("queries", queries, self.seq_len), None)

    def weights_tile(self, layer: int, head: int, rows: Selector, cols: Selector) -> Tensor:
        """Exact weights (len(rows), len(cols)) of one head (slices, ranges or ints)."""
        layer, head = self._layer(layer), self._head(head)
        return self._tile(layer, head, self._select("rows", rows, self.seq_len),
                          self._select("cols", cols, self.key_len))

    def topk(self, layer: int, head: int, query: int, k: int) -> tuple[Tensor, Tensor]:
        """The ``k`` largest weights of row ``query`` and their key positions."""
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.key_len:
            raise ValueError(f"k must be an int in [1, {self.key_len}], got {k!r}")
        if isinstance(query, bool) or not isinstance(query, int):
            raise TypeError(f"query must be an int, got {type(query).__name__}")
        row = self.weights_rows(layer, head, query)[0]
        values, indices = torch.topk(row, k)
        return values, indices

    def _tile_rows(self, tile_rows: int | None, budget: int = TILE_BYTES) -> int:
        if tile_rows is None:
            return max(1, budget // max(1, 4 * self._pieces_k))
        if isinstance(tile_rows, bool) or not isinstance(tile_rows, int) or tile_rows < 1:
            raise ValueError(f"tile_rows must be a positive int or None, got {tile_rows!r}")
        return tile_rows

    def iter_row_tiles(self, layer: int, head: int, tile_rows: int | None = None
                       ) -> Iterator[tuple[int, int, Tensor]]:
        """``(r0, r1, weights of rows [r0, r1))`` over all rows of one head.

        ``tile_rows`` rows at a time (default: about 8 MiB of float32 per tile), so a whole
        head is visited in O(tile_rows · Lk) memory.
        """
        layer, head = self._layer(layer), self._head(head)
        step = self._tile_rows(tile_rows)
        for r0 in range(0, self.seq_len, step):
            r1 = min(self.seq_len, r0 + step)
            yield r0, r1, self._tile(layer, head, torch.arange(r0, r1), None)

    def head_weights(self, layer: int, head: int) -> Tensor:
        """The dense (Lq, Lk) weights of one head."""
        layer, head = self._layer(layer), self._head(head)
        if self._weights is not None and self.groups is None:
            return self._weights[layer, head].float()
        out = torch.empty(self.seq_len, self.key_len)
        step = self._tile_rows(None, _POOL_TILE_BYTES)
        for r0, r1, tile in self.iter_row_tiles(layer, head, step):
            out[r0:r1] = tile
        return out

    def _spans(self, blocks: int | Sequence[tuple[int, int]]) -> tuple[Tensor, Tensor, Tensor,
                                                                       Tensor]:
        """(row starts, row stops, col starts, col stops) of the pooled blocks."""
        lq, lk = self.seq_len, self.key_len
        if isinstance(blocks, int) and not isinstance(blocks, bool):
            if blocks < 1:
                raise ValueError(f"blocks must be a positive int or a list of (start, stop) "
                                 f"spans, got {blocks}")
            rs = torch.arange(0, lq, blocks)
            cs = torch.arange(0, lk, blocks)
            return rs, (rs + blocks).clamp_max(lq), cs, (cs + blocks).clamp_max(lk)
        try:
            spans = [(int(a), int(b)) for a, b in blocks]
        except (TypeError, ValueError):
            raise TypeError(f"blocks must be a positive int or a list of (start, stop) spans, "
                            f"got {blocks!r}") from None
        if lq != lk:
            raise ValueError(f"spans need Lq == Lk (self-attention), got {lq} and {lk}")
        bad = [s for s in spans if not 0 <= s[0] < s[1] <= lq]
        if not spans or bad:
            raise ValueError(f"spans must be non-empty (start, stop) with 0 <= start < stop <= "
                             f"{lq}, got {bad or spans}")
        st = torch.tensor([a for a, _ in spans])
        en = torch.tensor([b for _, b in spans])
        return st, en, st, en

    def pooled(self, layer: int, head: int, blocks: int | Sequence[tuple[int, int]]
               ) -> Tensor:
        """The pooled map of one head: each block is the mean over its queries of the sum
        over its keys, so rows still sum to 1.

        ``blocks``: an int block size (the last block may be shorter), or a list of
        ``(start, stop)`` token spans used for both queries and keys. Computed by tiles of
        rows in O(tile · Lk) memory; returns float32 (n_row_blocks, n_col_blocks).
        """
        layer, head = self._layer(layer), self._head(head)
        if isinstance(blocks, int) and not isinstance(blocks, bool) and blocks >= 1:
            return self._pooled_blocks(layer, head, blocks)
        rs, re, cs, ce = self._spans(blocks)
        acc = torch.zeros(rs.shape[0], cs.shape[0], dtype=torch.float64)
        lo_row, hi_row = int(rs.min()), int(re.max())
        step = self._tile_rows(None, _POOL_TILE_BYTES)
        for r0 in range(lo_row, hi_row, step):
            r1 = min(hi_row, r0 + step)
            w = self._tile(layer, head, torch.arange(r0, r1), None).double()  # (R, Lk)
            ccum = F.pad(w.cumsum(1), (1, 0))  # (R, Lk + 1)
            colsum = ccum[:, ce] - ccum[:, cs]  # (R, n_col_blocks): keys summed
            rcum = F.pad(colsum.cumsum(0), (0, 0, 1, 0))
            lo = (rs - r0).clamp(0, r1 - r0)
            hi = (re - r0).clamp(0, r1 - r0)
            acc += rcum[hi] - rcum[lo]
        return (acc / (re - rs).to(acc.dtype)[:, None]).float()  # queries averaged

    def _pooled_blocks(self, layer: int, head: int, b: int) -> Tensor:
        """:meth:`pooled` with equal blocks of ``b`` tokens: tiles of whole row blocks,
        keys summed block by block in one reshape."""
        lq, lk = self.seq_len, self.key_len
        nbq, nbk = -(-lq // b), -(-lk // b)
        acc = torch.zeros(nbq, nbk, dtype=torch.float64)
        step = max(1, self._tile_rows(None, _POOL_TILE_BYTES) // b) * b
        for r0 in range(0, lq, step):
            r1 = min(lq, r0 + step)
            w = self._tile(layer, head, torch.arange(r0, r1), None)  # (R, Lk)
            # keys summed block by block in float32 (b terms each; no copy of the tile),
            # the last, shorter block apart; only the (R, nbk) sums become float64
            full = lk // b * b
            colsum = torch.empty(r1 - r0, nbk, dtype=torch.float64)
            colsum[:, : lk // b] = w[:, :full].reshape(r1 - r0, lk // b, b).sum(-1)
            if full < lk:
                colsum[:, -1] = w[:, full:].sum(-1)
            nb = -(-(r1 - r0) // b)
            colsum = F.pad(colsum, (0, 0, 0, nb * b - (r1 - r0)))
            acc[r0 // b: r0 // b + nb] += colsum.view(nb, b, nbk).sum(1)
        rows_in = torch.full((nbq,), float(b), dtype=torch.float64)
        rows_in[-1] = lq - b * (nbq - 1)
        return (acc / rows_in[:, None]).float()  # queries averaged

    @property
    def weights(self) -> Tensor:
        """Dense (L, H, Lq, Lk) float32 weights, built on first use (short inputs only).

        Raises ``ValueError`` when they would take more than
        ``attnlab.tracing.attention.DENSE_BUDGET_BYTES``; the on-demand methods work at any
        length.
        """
        if self._weights is not None and self.groups is None:
            return self._weights
        if self._dense is None:
            nl, nh = self.num_layers, self.num_heads
            need = nl * nh * self.seq_len * self.key_len * 4
            if need > DENSE_BUDGET_BYTES:
                raise ValueError(
                    f"dense weights ({nl}, {nh}, {self.seq_len}, {self.key_len}) would take "
                    f"{need / 2**30:.2f} GiB, over the budget "
                    f"attnlab.tracing.attention.DENSE_BUDGET_BYTES = "
                    f"{DENSE_BUDGET_BYTES / 2**30:.2f} GiB; use the on-demand methods "
                    f"({_ON_DEMAND}) instead"
                )
            dense = torch.empty(nl, nh, self.seq_len, self.key_len)
            for li in range(nl):
                dense[li] = self._layer_weights(li)
            self._dense = dense
        return self._dense

    def _layer_weights(self, layer: int) -> Tensor:
        """(H, Lq, Lk) weights of every head of one layer at once, the merge applied."""
        if self._weights is not None:
            w = self._weights[layer].float()
        else:
            group = self.num_heads // self.num_kv_heads
            k = self.k[layer].repeat_interleave(group, dim=0)  # (H, Lk, d)
            w = shaped_weights(self.q[layer], k, self.lse[layer], self._shapes[layer],
                               rows=torch.arange(self._pieces_q),
                               head=torch.arange(self.num_heads), lq=self._pieces_q,
                               lk=self._pieces_k)
        if self.groups is None:
            return w
        member = torch.zeros(len(self.groups), self._pieces_q)  # (G, N): piece i in group a
        for a, g in enumerate(self.groups):
            member[a, g] = 1.0
        mean = member / member.sum(-1, keepdim=True)
        return mean @ w @ member.T  # queries averaged, keys summed

    # -- views ----------------------------------------------------------------------------

    def merge_tokens(self, groups: list[list[int]], labels: list[str] | None = None, *,
                     rule: str = "weights summed over keys, averaged over queries"
                     ) -> AttentionTrace:
        """Merge consecutive tokens (e.g. byte pieces of one character) into one.

        With groups ``G``, the merged weight from group ``a`` to group ``b`` is
        ``W'[a, b] = mean_{i in a} sum_{j in b} W[i, j]``: summed over keys, averaged over
        queries, so every row still sums to 1. The tensors keep the pieces and the merge is
        applied by the methods on demand; ``meta["merged"]`` records the groups and the rule.

        >>> w = torch.tensor([[[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]]])
        >>> t = AttentionTrace(tokens=["a", "b1", "b2"], weights=w).merge_tokens(
        ...     [[0], [1, 2]], ["a", "b"])
        >>> t.tokens, t.weights[0, 0]
        (['a', 'b'], tensor([[1.0000, 0.0000],
                [0.3500, 0.6500]]))
        """
        if self.key_tokens is not None:
            raise ValueError("merge_tokens needs self-attention (no separate key_tokens)")
        groups = _check_groups(groups, self.seq_len)
        if labels is None:
            labels = ["".join(self.tokens[i] for i in g) for g in groups]
        if len(labels) != len(groups):
            raise ValueError(f"{len(labels)} labels for {len(groups)} groups")
        pieces = (self.groups if self.groups is not None
                  else [[i] for i in range(self._pieces_q)])
        merged = [[p for i in g for p in pieces[i]] for g in groups]
        meta = dict(self.meta)
        before = meta.get("merged", {})
        meta["merged"] = {"rule": rule, "groups": merged,
                          "pieces": before.get("pieces", list(self.tokens)),
                          "piece_ids": before.get("piece_ids", self.token_ids)}
        return AttentionTrace(
            tokens=list(labels), weights=self._weights, q=self.q, k=self.k, v=self.v,
            lse=self.lse, context=self.context, shapes=self._shapes or None,
            causal=None if self._shapes else self._causal, model=self.model, token_ids=None,
            text=self.text, meta=meta, groups=merged, stack=self.stack)

    # -- files ----------------------------------------------------------------------------

    def _tensors_and_shapes(self) -> tuple[dict[str, Tensor], list[dict[str, Any]]]:
        tensors: dict[str, Tensor] = {}
        for name in _STORED:
            t = self._weights if name == "weights" else getattr(self, name)
            if t is not None:
                tensors[name] = t.detach().to("cpu").contiguous()
        shapes: list[dict[str, Any]] = []
        for i, s in enumerate(self._shapes):
            entry: dict[str, Any] = s.describe()
            for field, t in s.tensors().items():
                ref = None
                for j in range(i):  # the same tensor as an earlier layer's: stored once
                    prev = getattr(self._shapes[j], field)
                    if prev is not None and prev.shape == t.shape and torch.equal(prev, t):
                        ref = shapes[j][field]
                        break
                if ref is None:
                    ref = f"shapes.{i}.{field}"
                    tensors[ref] = t.detach().to("cpu").contiguous()
                entry[field] = ref
            for field in _SHAPE_TENSORS:
                entry.setdefault(field, None)
            shapes.append(entry)
        return tensors, shapes

    def _file_part(self) -> tuple[dict[str, Any], dict[str, Tensor]]:
        """This trace's metadata (all but ``format`` and ``format_version``) and tensors, as
        a file holds them (a several-stack file holds one such part per stack)."""
        tensors, shapes = self._tensors_and_shapes()
        for name, t in tensors.items():
            if t.dtype not in _DTYPES:
                raise ValueError(f"{name} has dtype {t.dtype}, which a trace file cannot hold")
        meta = {
            "stack": self.stack, "tokens": self.tokens, "key_tokens": self.key_tokens,
            "token_ids": self.token_ids, "model": self.model, "causal": self._causal,
            "text": self.text, "meta": self.meta, "groups": self.groups, "shapes": shapes,
            "tensors": {n: {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                            "sha256": _sha256(t)} for n, t in tensors.items()},
        }
        return meta, tensors

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write a ``.safetensors`` file atomically, tensor by tensor (no second copy); the
        metadata holds each tensor's sha256, which :meth:`load` verifies."""
        meta, tensors = self._file_part()
        return _write_file(Path(path), {"format": _FORMAT, "format_version": FORMAT_VERSION,
                                        **meta}, tensors)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AttentionTrace:
        """Read a trace written by :meth:`save` (format version 1 to 4).

        Everything read is checked: each tensor's shape and dtype against the metadata and
        (version 2 on) the sha256 of its bytes; the types of tokens, ids, scale, stack and
        meta; and the values: q, k, v, context and the score-shape tensors finite, ``lse``
        finite except ``-inf`` on a row that sees no key, dense weights finite,
        non-negative, each row summing to 1 (or 0 for a row that sees no key; at most 1
        under sink logits). Anything else raises :class:`TraceFormatError` naming the field
        or tensor. A file of several stacks (:meth:`attnlab.tracing.stacks.StackedTrace
        .save`) is refused with a :class:`TraceFormatError` saying to read it with
        :func:`attnlab.tracing.load_trace` or ``StackedTrace.load``.
        """
        path = Path(path)

        def check(meta: dict[str, Any], info: dict[str, tuple[str, list[int]]]) -> None:
            if meta.get("format") == _STACKED_FORMAT:
                stacks = meta.get("stacks")
                names = ", ".join(stacks) if isinstance(stacks, dict) else "several"
                raise TraceFormatError(
                    f"{path} holds several attention stacks ({names}), not one "
                    "AttentionTrace; read it with attnlab.tracing.load_trace(path) or "
                    "attnlab.tracing.StackedTrace.load(path)")
            _check_format(path, meta, _FORMAT, 1)
            _check_fields(path, meta, meta["format_version"])
            _check_manifest(path, meta, info)

        meta, tensors = _open_file(path, check)
        return _finish(path, meta, tensors, meta["format_version"])

    def __repr__(self) -> str:
        kind = "q, k, lse" if self._weights is None else "dense weights"
        extra = [n for n in ("v", "context") if getattr(self, n) is not None]
        merged = f", merged={len(self.groups)} groups" if self.groups is not None else ""
        stack = "" if self.stack == "self" else f"stack={self.stack!r}, "
        return (f"AttentionTrace({stack}model={self.model!r}, layers={self.num_layers}, "
                f"heads={self.num_heads}, kv_heads={self.num_kv_heads}, tokens={self.seq_len}, "
                f"causal={self.causal}, kind={kind!r}, with={extra}{merged})")


# -- writing and reading files ------------------------------------------------------------


def _write_file(path: Path, meta: dict[str, Any], tensors: dict[str, Tensor]) -> Path:
    """A safetensors file at ``path`` (atomically): ``meta`` as JSON under the header key
    ``"attnlab"``, then the tensors' bytes in order, each written straight from its tensor."""
    header: dict[str, Any] = {"__metadata__": {"attnlab": json.dumps(meta,
                                                                      ensure_ascii=False)}}
    offset = 0
    for name, t in tensors.items():
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, ensure_ascii=False).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned, as safetensors writes it
    with atomic_open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for t in tensors.values():
            if t.numel():
                f.write(t.reshape(-1).view(torch.uint8).numpy().data)
    return path


def _open_file(path: Path, check: Any) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(the attnlab metadata, the tensors) of the file at ``path``; ``check(meta, info)``
    (info: name -> (dtype, shape)) runs before any tensor is read and raises
    :class:`TraceFormatError` on what it refuses. Bytes that are not safetensors raise
    :class:`TraceFormatError` too."""
    from safetensors import safe_open

    if not path.is_file():
        raise FileNotFoundError(f"no trace file at {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            header = f.metadata() or {}
            info = {n: (f.get_slice(n).get_dtype(), list(f.get_slice(n).get_shape()))
                    for n in f.keys()}
            meta = _parse_json(path, header.get("attnlab"))
            check(meta, info)
            tensors = {n: f.get_tensor(n) for n in f.keys()}
    except TraceFormatError:
        raise
    except Exception as exc:  # safetensors raises several types for bad bytes
        raise TraceFormatError(f"{path} is not a safetensors file ({exc})") from None
    return meta, tensors


def _finish(where: Path | str, meta: dict[str, Any], tensors: dict[str, Tensor],
            version: int) -> AttentionTrace:
    """The trace of checked metadata and its tensors: sha256 verified (version 2 on), built,
    values checked. ``where`` names the file (and stack) in errors."""
    if version >= 2:
        for name, t in tensors.items():
            digest = meta["tensors"][name].get("sha256")
            if not isinstance(digest, str):
                raise _bad(where, f"tensors.{name}.sha256", "the sha256 of the tensor", digest)
            if digest != _sha256(t):
                raise TraceFormatError(
                    f"{where}: tensor {name!r} does not match the sha256 the metadata "
                    "states (the file is corrupt)")
    # each tensor on a 64-byte boundary, as a freshly computed one (the bytes as hashed): the
    # weights on demand are then the same bits whether the trace was computed or read
    tensors = {name: aligned(t) for name, t in tensors.items()}
    try:
        trace = _from_v1(meta, tensors) if version == 1 else _from_v2(meta, tensors)
    except (KeyError, ValueError, TypeError) as exc:
        raise TraceFormatError(f"{where}: inconsistent trace ({exc})") from None
    _check_values(where, trace)
    return trace


def _sha256(t: Tensor) -> str:
    """The sha256 of a contiguous CPU tensor's bytes, as they stand in the file."""
    data = t.reshape(-1).view(torch.uint8).numpy().data if t.numel() else b""
    return hashlib.sha256(data).hexdigest()


def _check_values(path: Path | str, t: AttentionTrace) -> None:
    """Refuse values no model gives: non-finite q, k, v, context or score-shape tensors,
    an ``lse`` of NaN or +inf (or -inf on a row that sees a key), dense weights that are
    not a distribution per row."""
    def bad(name: str, what: str) -> TraceFormatError:
        return TraceFormatError(f"{path}: tensor {name!r} {what}")

    for name in ("q", "k", "v", "context"):
        x = getattr(t, name)
        if x is not None and not bool(torch.isfinite(x).all()):
            raise bad(name, "holds NaN or infinite values")
    for i, s in enumerate(t.shapes):
        for field in ("alibi_slopes", "sinks"):
            x = getattr(s, field)
            if x is not None and not bool(torch.isfinite(x).all()):
                raise bad(f"shapes.{i}.{field}", "holds NaN or infinite values")
        if s.bias is not None and bool((s.bias.isnan() | (s.bias == math.inf)).any()):
            raise bad(f"shapes.{i}.bias", "holds NaN or +inf (only -inf hides a key)")
    if t.lse is not None:
        _check_lse(t, bad)
    w = t._weights
    if w is not None:
        tol = 1e-4 + torch.finfo(w.dtype).eps  # float32 sums; rounding of the stored values
        for layer in range(w.shape[0]):
            wl = w[layer].double()
            if not bool(torch.isfinite(wl).all()) or bool((wl < 0).any()):
                raise bad("weights", f"holds NaN, infinite or negative values (layer {layer})")
            sums = wl.sum(-1)
            sink = bool(t.shapes) and t.shapes[layer].sinks is not None
            ok = (sums <= 1 + tol) if sink else ((sums - 1).abs() <= tol).logical_or(sums == 0)
            if not bool(ok.all()):
                raise bad("weights", f"has rows that do not sum to 1 (layer {layer})")


def _check_lse(t: AttentionTrace, bad: Any) -> None:
    """``lse`` is finite, or ``-inf`` on exactly the rows whose shaped scores are all
    ``-inf`` (a row that sees no key)."""
    lse = t.lse
    if bool((lse.isnan() | (lse == math.inf)).any()):
        raise bad("lse", "holds NaN or +inf")
    if t.q is None or t.k is None:
        return
    nq, nk = t._pieces_q, t._pieces_k
    step = max(1, TILE_BYTES // max(1, 4 * nk))
    for layer, head in (lse == -math.inf).any(-1).nonzero().tolist():
        empty = (lse[layer, head] == -math.inf).nonzero()[:, 0]
        for rows in empty.split(step):
            s = t._shapes[layer].scores(t.q[layer, head, rows], t.k[layer, t.kv_head(head)],
                                        rows=rows, head=head, lq=nq, lk=nk)
            if bool((s > -math.inf).any()):
                raise bad("lse", f"is -inf on a row that sees keys (layer {layer}, head "
                          f"{head})")


def _bad(path: Path | str, field: str, want: str, got: object) -> TraceFormatError:
    shown = repr(got)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return TraceFormatError(f"{path}: field {field!r} must be {want}, got {shown}")


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _parse_json(path: Path, raw: str | None) -> dict[str, Any]:
    """The attnlab metadata of a safetensors header, as a JSON object."""
    if raw is None:
        raise TraceFormatError(f"{path} is a safetensors file but not an attnlab trace")
    try:
        meta = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"{path}: corrupt attnlab metadata ({exc})") from None
    if not isinstance(meta, dict):
        raise _bad(path, "attnlab", "a JSON object", meta)
    return meta


def _check_format(path: Path, meta: dict[str, Any], fmt: str, oldest: int) -> None:
    """The file holds ``fmt`` at a format_version this attnlab reads (``oldest`` on)."""
    if meta.get("format") != fmt:
        what = "an AttentionTrace" if fmt == _FORMAT else "a StackedTrace"
        raise TraceFormatError(f"{path} holds {meta.get('format')!r}, not {what}")
    version = meta.get("format_version")
    if not _is_int(version) or not oldest <= version <= FORMAT_VERSION:
        raise TraceFormatError(
            f"{path} has format_version {version!r}; this attnlab reads {oldest} to "
            f"{FORMAT_VERSION} for {fmt}")


def _check_fields(path: Path | str, meta: dict[str, Any], version: int) -> None:
    """The fields of one trace's metadata have the types ``version`` of the format states."""
    tokens = meta.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise _bad(path, "tokens", "a list of str", tokens)
    kt = meta.get("key_tokens")
    if kt is not None and (not isinstance(kt, list) or not all(isinstance(t, str) for t in kt)):
        raise _bad(path, "key_tokens", "null or a list of str", kt)
    ids = meta.get("token_ids")
    if ids is not None and (not isinstance(ids, list) or not all(_is_int(i) for i in ids)):
        raise _bad(path, "token_ids", "null or a list of ints", ids)
    for field, types, want in (("model", (str,), "a str"), ("causal", (bool,), "a bool"),
                               ("text", (str, type(None)), "null or a str"),
                               ("meta", (dict, type(None)), "a JSON object")):
        if field in meta and not isinstance(meta[field], types):
            raise _bad(path, field, want, meta[field])
    if version == 1:
        scale = meta.get("scale")
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                                  or not math.isfinite(scale)):
            raise _bad(path, "scale", "null or a finite float", scale)
        return
    if version >= 4 and meta.get("stack") not in STACKS:
        raise _bad(path, "stack", f"one of {', '.join(STACKS)}", meta.get("stack"))
    groups = meta.get("groups")
    if groups is not None and (not isinstance(groups, list) or not all(
            isinstance(g, list) and all(_is_int(i) for i in g) for g in groups)):
        raise _bad(path, "groups", "null or a list of lists of ints", groups)
    shapes = meta.get("shapes")
    if not isinstance(shapes, list):
        raise _bad(path, "shapes", "a list (one entry per layer)", shapes)
    for i, s in enumerate(shapes):
        f = f"shapes[{i}]"
        if not isinstance(s, dict):
            raise _bad(path, f, "a JSON object", s)
        sc = s.get("scale")
        if isinstance(sc, bool) or not isinstance(sc, (int, float)) or not math.isfinite(sc):
            raise _bad(path, f"{f}.scale", "a finite float", sc)
        if not isinstance(s.get("causal"), bool):
            raise _bad(path, f"{f}.causal", "a bool", s.get("causal"))
        if s.get("window") is not None and not _is_int(s["window"]):
            raise _bad(path, f"{f}.window", "null or an int", s["window"])
        if version < 3 and (s.get("sinks") is not None or (s.get("window") is not None
                                                            and not s["causal"])):
            raise TraceFormatError(
                f"{path}: field {f!r} has sinks or a window without causal, which only "
                f"format_version 3 holds (and later ones), but the file says {version}")
        cap = s.get("softcap")
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float))
                                or not math.isfinite(cap)):
            raise _bad(path, f"{f}.softcap", "null or a finite float", cap)
        for field in _SHAPE_TENSORS:
            if s.get(field) is not None and not isinstance(s[field], str):
                raise _bad(path, f"{f}.{field}", "null or a tensor name", s[field])
    manifest = meta.get("tensors")
    if not isinstance(manifest, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("dtype"), str)
            and isinstance(v.get("shape"), list) for v in manifest.values()):
        raise _bad(path, "tensors", "a map of name -> {dtype, shape}", manifest)


def _check_manifest(path: Path | str, meta: dict[str, Any], info: dict[str, tuple[str, list[int]]]
                    ) -> None:
    """Every tensor present with the shape and dtype the metadata states, no others."""
    if meta["format_version"] == 1:
        expect = {n: None for n in info}
        if "weights" not in info:
            raise TraceFormatError(f"{path} has no 'weights' tensor")
        unknown = set(info) - {"weights", "q", "k", "v", "scores", "context"}
    else:
        expect = meta["tensors"]
        unknown = set(info) ^ set(expect)
    if unknown:
        raise TraceFormatError(
            f"{path}: tensors {sorted(unknown)} are not the ones the metadata lists")
    for name, (dtype, shape) in info.items():
        want = expect.get(name)
        if want is not None and (want["dtype"] != dtype or want["shape"] != shape):
            raise TraceFormatError(
                f"{path}: tensor {name!r} is {dtype} {shape}, the metadata says "
                f"{want['dtype']} {want['shape']}"
            )
        if name in _STORED or name == "scores":
            if dtype not in ("F32", "F16", "BF16", "F64") or len(shape) != (
                    3 if name == "lse" else 4):
                raise TraceFormatError(
                    f"{path}: tensor {name!r} must be a float tensor with "
                    f"{3 if name == 'lse' else 4} dims, got {dtype} {shape}")


def _from_v1(meta: dict[str, Any], tensors: dict[str, Tensor]) -> AttentionTrace:
    """A version-1 file: dense weights (already merged), q/k/v/context repeated per head."""
    return AttentionTrace(
        tokens=meta["tokens"], weights=tensors["weights"], q=tensors.get("q"),
        k=tensors.get("k"), v=tensors.get("v"), context=tensors.get("context"),
        scale=meta.get("scale"), causal=bool(meta.get("causal", False)),
        model=meta.get("model", ""), token_ids=meta.get("token_ids"),
        key_tokens=meta.get("key_tokens"), text=meta.get("text"), meta=meta.get("meta") or {},
    )


def _from_v2(meta: dict[str, Any], tensors: dict[str, Tensor]) -> AttentionTrace:
    shapes = []
    for i, s in enumerate(meta["shapes"]):
        try:
            shapes.append(ScoreShape(
                scale=s["scale"], causal=s["causal"], window=s.get("window"),
                softcap=s.get("softcap"),
                **{f: tensors[s[f]] for f in _SHAPE_TENSORS if s.get(f) is not None}))
        except (KeyError, ValueError, TypeError) as exc:
            raise ValueError(f"shapes[{i}]: {exc}") from None
    stored = {n: tensors.get(n) for n in _STORED}
    return AttentionTrace(
        tokens=meta["tokens"], **stored, shapes=shapes or None,
        causal=None if shapes else bool(meta.get("causal", False)),
        model=meta.get("model", ""), token_ids=meta.get("token_ids"),
        key_tokens=meta.get("key_tokens"), text=meta.get("text"), meta=meta.get("meta") or {},
        groups=meta.get("groups"), stack=meta.get("stack", "self"),
    )
