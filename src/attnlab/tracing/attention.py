"""AttentionTrace: what one forward pass of a model attended to, per layer and head.

A trace keeps what *determines* attention, not its N x N image. Per layer and head
(``L`` layers, ``H`` query heads, ``H_kv`` key/value heads, float32, all on one device:
the CPU unless moved, :meth:`~AttentionTrace.to`)::

    q        (L, H, Lq, d)      queries, after RoPE where the model uses it
    k        (L, H_kv, Lk, d)   keys: grouped heads stored once (query head h reads
                                key head h // (H / H_kv))
    v        (L, H_kv, Lk, dv)  values (optional)
    lse      (L, H, Lq)         log-sum-exp of each row of shaped scores
    context  (L, H, Lq, dv)     per-head outputs (optional)
    out_proj (L, H, dv, E)      each head's slice of the output projection (optional)

and, per layer, the :class:`~attnlab.core.scores.ScoreShape` (scale, causal, window, key
mask, soft-cap, ALiBi slopes, sink logits; a dense bias only when no rule describes the
mask, or for a model's own additive bias). Any
weight is then exact and one exponential away, ``P_ij = exp(s_ij − lse_i)``, so the
methods compute what is asked — rows, tiles, pooled blocks, top-k — in O(tile · N)
memory: :meth:`~AttentionTrace.weights_rows`, :meth:`~AttentionTrace.weights_tile`,
:meth:`~AttentionTrace.pooled`, :meth:`~AttentionTrace.topk`,
:meth:`~AttentionTrace.head_weights`, :meth:`~AttentionTrace.iter_row_tiles`.
They compute where the tensors are (:attr:`~AttentionTrace.device`): a trace moved to an
accelerator (``trace.to("cuda")``) gives its rows there; positions asked for (rows, columns,
blocks, merged groups) are bookkept on the host and sent over, never read back.

A trace made without q and k (``capture(..., qkv=False)``, or a version-1 file) stores
dense ``weights (L, H, Lq, Lk)`` instead; every method works on both kinds. The
:attr:`~AttentionTrace.weights` property gives the dense tensor of either kind, built
lazily, and refuses above :data:`DENSE_BUDGET_BYTES`.

Merged tokens (e.g. the byte pieces of one Chinese character, see
:meth:`~AttentionTrace.merge_tokens`) keep the pieces' q, k, v and lse; the merge is
applied on demand: a merged weight is **summed over the key pieces and averaged over the
query pieces**, so rows still sum to 1.

Files (:meth:`~AttentionTrace.save`, :meth:`~AttentionTrace.load`) are safetensors, format
version :data:`FORMAT_VERSION`, written, checked and upgraded by
:mod:`attnlab.tracing.trace_file`; a bad file raises :class:`TraceFormatError` naming the
field.

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

import copy
import dataclasses
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnlab._errors import check_int
from attnlab.core.scores import ScoreShape
from attnlab.core.weights import why_not_kernel_rows
from attnlab.tracing import _merge, _pooling, trace_file
from attnlab.tracing._file_records import TraceFields
from attnlab.tracing._names import STACKS, TRACE_TENSORS
from attnlab.tracing._resident import RESIDENT_BYTES
from attnlab.tracing._storage import storage_of
from attnlab.tracing._trace_checks import (
    check_groups,
    check_one_device,
    make_shapes,
    move_target,
    trace_dims,
)
from attnlab.tracing._trace_reads import _POOL_TILE_BYTES, Selector, TraceReads
from attnlab.tracing.trace_file import FORMAT_VERSION, TraceFormatError

__all__ = ["AttentionTrace", "TraceFormatError", "FORMAT_VERSION", "DENSE_BUDGET_BYTES",
           "STACKS"]

#: The most bytes :attr:`AttentionTrace.weights` may build (float32, all layers and heads).
DENSE_BUDGET_BYTES = 1 << 30

_ON_DEMAND = ("weights_rows, weights_tile, pooled, topk, head_weights, iter_row_tiles")


class AttentionTrace(TraceReads):
    """Attention of one input through one model (see the module docstring).

    Args:
        tokens: the query tokens' labels (after any merge: one per group).
        weights: dense (L, H, Lq, Lk) weights, for traces without q and k.
        q, k, v, lse, context, out_proj: the per-head tensors (shapes in the module
            docstring).
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

    #: The head sums its traced forward computed from the same weights
    #: (:class:`attnlab.analysis.scores.ForwardSums`), which ``scan`` returns in place of its
    #: own pass over q and k when asked for the same ones; None: none were taken.
    forward_sums: Any = None

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
        out_proj: Tensor | None = None,
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
        for name, t in zip(TRACE_TENSORS, (weights, q, k, v, lse, context, out_proj)):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"{name} must be a tensor or None, got {type(t).__name__}")
        self._weights = weights
        self._store = storage_of(weights)
        self.q, self.k, self.v, self.lse, self.context = q, k, v, lse, context
        self.out_proj = out_proj
        self._dense: Tensor | None = None  # lazily built weights
        # an opened version-5 file's per-layer sha256 (trace_file.LayerDigests), else None
        self._layer_digests: Any = None
        self._resident: Any = None  # an opened file's bound on the pages held, else None
        #: the file this trace was opened from (:meth:`open`), else None
        self.opened_from: Path | None = None
        self._opened_stack: str | None = None  # its stack's name in a file of several
        self._mapped: dict[str, Tensor] | None = None  # the file's own mapping, for verify()
        self._unmerged: AttentionTrace | None = None  # a merged trace's pieces, when asked
        if weights is None and (q is None or k is None or lse is None):
            missing = [n for n, t in (("q", q), ("k", k), ("lse", lse)) if t is None]
            raise ValueError(
                "a trace needs dense weights (L, H, Lq, Lk), or q, k and lse to compute them; "
                f"missing: {', '.join(missing)}"
            )
        nl, nh, nq, nk = trace_dims(self._weights, self.q, self.k, self.v, self.lse,
                                    self.context, self.out_proj)
        self._pieces_q, self._pieces_k = nq, nk
        self.groups = None
        if groups is not None:
            if self.key_tokens is not None or nq != nk:
                raise ValueError("groups (merged tokens) need self-attention: Lq == Lk and no "
                                 "key_tokens")
            self.groups = check_groups(groups, nq)
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
        self._shapes = make_shapes(shapes, scale, causal, self.q, nl, nh, nq, nk)
        self._causal = (all(s.causal for s in self._shapes) if self._shapes
                        else bool(causal))
        self._check_devices()

    # -- construction ---------------------------------------------------------------------

    def _opened(self, path: Path, mapped: dict[str, Tensor], resident: Any, *,
                digests: Any = None, stack: str | None = None) -> None:
        """Record the file this trace was just opened from (:mod:`.trace_file`, once): its
        path and stack, its memory mapping (which :meth:`verify` reads through), the bound
        on its resident pages and, for a version-5 file, the layer digests checked on first
        read."""
        self.opened_from, self._opened_stack, self._mapped = path, stack, mapped
        self._resident = resident
        if digests is not None:
            self._layer_digests = digests

    def _check_devices(self) -> None:
        """Every stored tensor, and every score shape's, on the trace's one device."""
        tensors = {n: self._weights if n == "weights" else getattr(self, n)
                   for n in TRACE_TENSORS}
        check_one_device(tensors, self._shapes, self.device,
                         "q" if self._store.from_qk else "weights")

    # -- shape ----------------------------------------------------------------------------

    @property
    def num_layers(self) -> int:
        return self._first.shape[0]

    @property
    def num_heads(self) -> int:
        return self._first.shape[1]

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
    def device(self) -> torch.device:
        """Where the trace's tensors are, and so where its on-demand methods compute."""
        return self._first.device

    def to(self, device: str | torch.device) -> AttentionTrace:
        """A trace whose tensors (q, k, v, lse, dense weights, context, out_proj and each
        score shape's key mask, ALiBi slopes, bias and sinks) are on ``device``; this trace
        is unchanged, and a tensor already there is shared, as ``Tensor.to`` does. The
        on-demand methods of the new trace compute on ``device`` and return tensors there
        (the compiled kernel runs on the CPU only: :meth:`why_not_kernel`).

        A trace opened from a file (:meth:`open`, memory-mapped and checked as it is read)
        stays on the CPU: moving it elsewhere raises ``ValueError`` saying to load it
        (:meth:`load`, which checks every tensor) and move that. A trace on the ``meta``
        device holds shapes only and cannot be moved back to one with values.

        >>> w = torch.softmax(torch.randn(1, 2, 3, 3), dim=-1)
        >>> t = AttentionTrace(tokens=list("abc"), weights=w)
        >>> m = t.to("meta")
        >>> m.device, t.device, m.weights_rows(0, 1, [0, 2]).shape
        (device(type='meta'), device(type='cpu'), torch.Size([2, 3]))
        """
        opened = self.opened_from is not None or self._layer_digests is not None
        dev = move_target(device, self.device, opened, self.opened_from)
        if opened:
            return copy.copy(self)  # the same mapped tensors, checks and bound
        def mv(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(dev)

        moved: dict[int, ScoreShape] = {}  # one copy of a shape shared by several layers
        for shape in self._shapes:
            if id(shape) not in moved:
                moved[id(shape)] = dataclasses.replace(
                    shape, key_mask=mv(shape.key_mask), alibi_slopes=mv(shape.alibi_slopes),
                    bias=mv(shape.bias), sinks=mv(shape.sinks))

        out = AttentionTrace(
            tokens=list(self.tokens), weights=mv(self._weights), q=mv(self.q), k=mv(self.k),
            v=mv(self.v), lse=mv(self.lse), context=mv(self.context),
            out_proj=mv(self.out_proj),
            shapes=tuple(moved[id(s)] for s in self._shapes) or None,
            causal=None if self._shapes else self._causal, model=self.model,
            token_ids=self.token_ids, key_tokens=self.key_tokens, text=self.text,
            meta=self.meta, groups=self.groups, stack=self.stack)
        return out  # (dense weights built from q and k are built again there, on demand)

    def why_not_kernel(self, layer: int = 0, *, build: bool = True) -> str | None:
        """Why the on-demand weights of ``layer`` would not be computed on attnlab's
        compiled CPU kernel (e.g. ``"the tensors are on cuda:0, the kernel is CPU-only"``),
        or None if they would (:func:`attnlab.core.weights.why_not_kernel_rows`;
        ``build=False`` never builds the kernel)."""
        layer = self._layer(layer)
        if not self.weights_from_qk:
            return "this trace holds dense weights: its rows are read, not computed"
        return why_not_kernel_rows(self._q, self._k, self._shapes[layer], build=build)

    @property
    def has_qk(self) -> bool:
        """q and k are kept (a trace made with ``qkv=True``)."""
        return self.q is not None and self.k is not None

    @property
    def weights_from_qk(self) -> bool:
        """The weights are computed from q, k and lse (no dense weights are kept)."""
        return self._store.from_qk and self.has_qk and self.lse is not None

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

    def layer_tensor(self, name: str, layer: int) -> Tensor:
        """One layer of a stored tensor: ``getattr(trace, name)[layer]`` (``name``: one of
        ``weights``, ``q``, ``k``, ``v``, ``lse``, ``context``, ``out_proj``), the one place
        the on-demand methods read the stored tensors through.

        On a trace opened from a version-5 file (a streamed trace, :meth:`open`), that
        layer's bytes of the tensor are first checked against the sha256 the file states for
        them, once per tensor and layer: a corrupt chunk raises :class:`TraceFormatError`
        naming the tensor and the layer, when first read.
        """
        if name not in TRACE_TENSORS:
            raise ValueError(f"name must be one of {', '.join(TRACE_TENSORS)}, got {name!r}")
        t = self._weights if name == "weights" else getattr(self, name)
        if t is None:
            raise ValueError(f"this trace holds no {name}")
        layer = self._layer(layer)
        if self._layer_digests is not None:
            self._layer_digests.check(name, layer)
        if self._resident is not None:
            self._resident.touch((name, layer), t[layer])
        return t[layer]

    # -- on demand ------------------------------------------------------------------------

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
        check_int("k", k, minimum=1, maximum=self.key_len)
        check_int("query", query, minimum=None)
        row = self.weights_rows(layer, head, query)[0]
        values, indices = torch.topk(row, k)
        return values, indices

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
        if self.groups is None:
            return self._store.head_weights(self, layer, head)
        return self._tiled_head(layer, head)

    def pooled(self, layer: int, head: int, blocks: int | Sequence[tuple[int, int]]
               ) -> Tensor:
        """The pooled map of one head: each block is the mean over its queries of the sum
        over its keys, so rows still sum to 1.

        ``blocks``: an int block size (the last block may be shorter), or a list of
        ``(start, stop)`` token spans used for both queries and keys. Computed by tiles of
        rows in O(tile · Lk) memory (:mod:`attnlab.tracing._pooling`); returns float32
        (n_row_blocks, n_col_blocks).
        """
        layer, head = self._layer(layer), self._head(head)
        step = self._tile_rows(None, _POOL_TILE_BYTES)

        def tile(r0: int, r1: int) -> Tensor:
            return self._tile(layer, head, torch.arange(r0, r1), None)

        if isinstance(blocks, int) and not isinstance(blocks, bool) and blocks >= 1:
            return _pooling.pooled_blocks(tile, self.seq_len, self.key_len, blocks, step,
                                          device=self.device)
        return _pooling.pooled_spans(tile, *_pooling.spans(blocks, self.seq_len, self.key_len),
                                     step, device=self.device)

    @property
    def weights(self) -> Tensor:
        """Dense (L, H, Lq, Lk) float32 weights, built on first use (short inputs only).

        Raises ``ValueError`` when they would take more than
        ``attnlab.tracing.attention.DENSE_BUDGET_BYTES``; the on-demand methods work at any
        length.
        """
        kept = self._store.kept(self)
        if kept is not None and self.groups is None:
            return kept
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
            dense = torch.empty(nl, nh, self.seq_len, self.key_len, device=self.device)
            for li in range(nl):
                dense[li] = self._layer_weights(li)
            self._dense = dense
        return self._dense

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
        groups = check_groups(groups, self.seq_len)
        if labels is None:
            labels = ["".join(self.tokens[i] for i in g) for g in groups]
        if len(labels) != len(groups):
            raise ValueError(f"{len(labels)} labels for {len(groups)} groups")
        pieces = (self.groups if self.groups is not None
                  else [[i] for i in range(self._pieces_q)])
        merged = [[p for i in g for p in pieces[i]] for g in groups]
        meta = dict(self.meta)
        before = meta.get("merged", {})
        record: _merge.MergeRecord = {"rule": rule, "groups": merged,
                                      "pieces": before.get("pieces", list(self.tokens)),
                                      "piece_ids": before.get("piece_ids", self.token_ids)}
        meta["merged"] = record
        return self._regrouped(labels, merged, meta, None)

    def _regrouped(self, tokens: Sequence[str], groups: list[list[int]] | None,
                   meta: dict[str, Any], token_ids: Sequence[int] | None) -> AttentionTrace:
        """This trace's tensors (no copy) with other tokens and groups (None: the pieces)."""
        out = AttentionTrace(
            tokens=list(tokens), weights=self._weights, q=self.q, k=self.k, v=self.v,
            lse=self.lse, context=self.context, out_proj=self.out_proj,
            shapes=self._shapes or None,
            causal=None if self._shapes else self._causal, model=self.model,
            token_ids=token_ids, text=self.text, meta=meta, groups=groups, stack=self.stack)
        out._layer_digests = self._layer_digests  # the same file's bytes, still checked
        out._resident = self._resident  # and still held within the same bound
        return out

    def unmerged(self) -> AttentionTrace:
        """The trace of the pieces this merged trace holds: the same tensors (no copy), one
        token per piece, labelled as before the merge (``meta["merged"]["pieces"]``); a trace
        without a merge is itself. A measure of a merged trace is this trace's measure,
        merged by the rule (:mod:`attnlab.tracing.attribution`)."""
        if self.groups is None:
            return self
        if self._unmerged is None:
            labels, meta, ids = _merge.piece_fields(self.meta, self.tokens, self.groups)
            self._unmerged = self._regrouped(labels, None, meta, ids)
        return self._unmerged

    # -- what attention moves (attnlab.tracing.attribution) --------------------------------

    def value_weighted_rows(self, layer: int, head: int | None, rows: Selector) -> Tensor:
        """``α_ij · ‖v_j W_O^h‖`` of query ``rows`` (``head=None``: the norm of the sum over
        heads), (len(rows), Lk); see :func:`attnlab.tracing.attribution.value_weighted_rows`."""
        from attnlab.tracing.attribution import value_weighted_rows

        return value_weighted_rows(self, layer, head, rows)

    def rollout_rows(self, rows: Selector, value_weighted: bool = False) -> Tensor:
        """Residual-adjusted rollout of output ``rows``, (len(rows), Lk) float64; see
        :func:`attnlab.tracing.attribution.rollout_rows`."""
        from attnlab.tracing.attribution import rollout_rows

        return rollout_rows(self, rows, value_weighted=value_weighted)

    def score_parts(self, layer: int, head: int, i: int, j: int, *,
                    pairing: str | None = None) -> dict[str, Any]:
        """Query ``i``'s score for key ``j`` taken apart by RoPE band and by angle; see
        :func:`attnlab.tracing.attribution.score_parts`."""
        from attnlab.tracing.attribution import score_parts

        return score_parts(self, layer, head, i, j, pairing=pairing)

    # -- files ----------------------------------------------------------------------------

    def _file_fields(self) -> TraceFields:
        """What a trace file holds of this trace: its constructor's arguments
        (:mod:`attnlab.tracing.trace_file` writes them)."""
        return {"stack": self.stack, "tokens": self.tokens, "key_tokens": self.key_tokens,
                "token_ids": self.token_ids, "model": self.model, "causal": self._causal,
                "text": self.text, "meta": self.meta, "groups": self.groups,
                "shapes": self._shapes, "weights": self._weights, "q": self.q, "k": self.k,
                "v": self.v, "lse": self.lse, "context": self.context,
                "out_proj": self.out_proj}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write a ``.safetensors`` file atomically, tensor by tensor (no second copy); the
        metadata holds each tensor's sha256, which :meth:`load` verifies (the format:
        :mod:`attnlab.tracing.trace_file`)."""
        return trace_file.save_one(path, self._file_fields())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AttentionTrace:
        """Read a trace written by :meth:`save` (format version 1 to 4) or streamed by
        :func:`attnlab.tracing.tracer.trace` with ``out=`` (version 5, whose per-layer
        sha256 are checked too).

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
        return trace_file.load_one(path, cls)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *,
             resident_bytes: int = RESIDENT_BYTES) -> AttentionTrace:
        """A trace file (version 2 on) opened without reading it: its tensors are
        memory-mapped, so a row, a head or a layer costs what it reads, whatever the file's
        size. The header and every tensor's dtype and shape are checked now; :meth:`verify`
        checks the sha256 of every tensor and the values, as :meth:`load` does at once; a
        version-5 file's layers are each checked when first read (:meth:`layer_tensor`). Of
        the layer chunks read, at most ``resident_bytes`` stay in the process's memory, the
        oldest let go first (:mod:`attnlab.tracing._resident`)."""
        return trace_file.open_one(path, cls, resident_bytes=resident_bytes)

    def verify(self, *, share: tuple[int, int] = (0, 1)) -> AttentionTrace:
        """For an opened trace: every check :meth:`load` makes (each tensor's sha256, each
        layer's for a version-5 file, the values), reading the file once; raises
        :class:`TraceFormatError`, else returns the trace. ``share=(rank, world)``: this
        process's part of the check when ``world`` processes make it together
        (:func:`attnlab.tracing.verify_across`, which ``torchrun`` commands use)."""
        where = self.opened_from
        if where is None:
            raise ValueError("verify() checks a trace against the file it was opened from; "
                             "this trace was not opened (AttentionTrace.open)")
        trace_file.verify_one(where, self, share)
        return self

    def __repr__(self) -> str:
        kind = self._store.kind
        extra = [n for n in ("v", "context", "out_proj") if getattr(self, n) is not None]
        merged = f", merged={len(self.groups)} groups" if self.groups is not None else ""
        stack = "" if self.stack == "self" else f"stack={self.stack!r}, "
        return (f"AttentionTrace({stack}model={self.model!r}, layers={self.num_layers}, "
                f"heads={self.num_heads}, kv_heads={self.num_kv_heads}, tokens={self.seq_len}, "
                f"causal={self.causal}, kind={kind!r}, with={extra}{merged})")
