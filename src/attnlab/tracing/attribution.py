"""What attention moves, read exactly from a trace: value-weighted attention, rollout over
layers, and a query·key score taken apart by positional frequency and by geometry.

**Value-weighted attention** (Kobayashi et al. 2020): key ``j`` adds ``α_ij · v_j W_O^h``
to query ``i``'s residual stream through head ``h``; a large weight can move a small
vector. :func:`value_weighted_rows` gives the norms per head, or of the sum over heads,
from the trace's v and its heads' slices of the output projection (``out_proj``).

**Rollout** (Abnar & Zuidema 2020, residual-adjusted): each layer's mixing is
``Â_l = ½·A_l + ½·I`` with ``A_l`` the mean of the layer's heads, and the attribution of
output row ``i`` to input ``j`` is row ``i`` of ``Â_L ··· Â_2 Â_1``. :func:`rollout_rows`
computes chosen rows as vector–matrix products, last layer first, over tiles of exact
weight rows recomputed from q and k — never an N × N matrix, so one row of SmolLM2 at
8,192 tokens needs O(tile · N) memory. In a causal stack only rows up to the last asked row
are ever visited. Rows whose softmax gives a share to a learned sink sum to less than one;
rollout keeps that deficit (it is attention that went to no token).

**The score decomposed.** ``scale · q_i·k_j`` is a sum over the head's dimensions; RoPE
rotates q and k in pairs of dimensions, one frequency per pair, so the score is exactly the
sum of one term per pair, each ``scale·|q_p||k_p|·cos(φ_p + (i−j)·θ_p)``. Which dimensions
pair up depends on the model: ``"half"`` (dimension ``a`` with ``a + r/2``, Llama, Mistral,
Qwen, SmolLM2, GPT-NeoX: ``rotate_half``) or ``"interleaved"`` (``2a`` with ``2a + 1``, GPT-J,
CodeGen). The layout is read from ``trace.meta["positional"]`` when the capture recorded it
(``{"kind": "rope", "pairing", "rotary_dim", "freqs", "base"}``, see
:func:`attnlab.tracing.model_parts.rope_layout`), else given as ``pairing=``; without
either, the pairs are consecutive dimensions and are labelled so. :func:`score_parts` gives
one pair's decomposition and the geometric one (``|q||k|cos θ``, article 000's angle);
:func:`band_lift` gives, per head, how much each band lifts the attended keys above the
average visible key (summed over rows, weighted by the exact attention) — the bands that
carry the head's pattern.

**Merged traces** (the byte pieces of a character merged into one token,
:meth:`~attnlab.tracing.attention.AttentionTrace.merge_tokens`) keep the pieces' q, k, v; a
measure is computed on the pieces (the trace's :meth:`~attnlab.tracing.attention.
AttentionTrace.unmerged`), where the model computed it, then merged by the merge's own
rule: **summed over a key token's pieces, averaged over the query token's pieces**
(:func:`attnlab.tracing._merge.merge`). So a merged row of weights is what ``merge_tokens``
gives, a merged value-weighted row is ``mean_{i in a} Σ_{j in b} α_ij·‖v_j W_O^h‖``, and a
merged rollout row is the pieces' rollout (through every layer) merged once at the end —
not the product of merged layers. A score belongs to one pair of pieces: :func:`score_parts`
of a merged pair is the list of its piece pairs, each labelled as a piece of its token;
:func:`band_lift` sums the lift over the pieces of the rows asked.

说明：合并追踪的各项度量先在片段上计算，再按合并规则合并：对键词元的各片段求和，对查询
词元的各片段取平均；分数属于一对片段，合并的一对词元给出其所有片段对。

>>> import torch
>>> from attnlab.core.scores import ScoreShape, row_logsumexp
>>> from attnlab.tracing.attention import AttentionTrace
>>> g = torch.Generator().manual_seed(0)
>>> q, k = torch.randn(1, 2, 6, 4, generator=g), torch.randn(1, 2, 6, 4, generator=g)
>>> shape = ScoreShape(scale=0.5, causal=True)
>>> lse = torch.stack([row_logsumexp(q[0], k[0], shape)])
>>> t = AttentionTrace(list("abcdef"), q=q, k=k, lse=lse, shapes=shape)
>>> r = rollout_rows(t, [5])
>>> r.shape, round(float(r.sum()), 6)
(torch.Size([1, 6]), 1.0)
>>> p = score_parts(t, 0, 1, 5, 2, pairing="half")
>>> abs(sum(b["value"] for b in p["bands"]) - p["score"]) < 1e-6
True
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import torch
from torch import Tensor

from attnlab.core.scores import TILE_BYTES
from attnlab.tracing import _merge

if TYPE_CHECKING:  # Python 3.11's; the annotations below are never evaluated at run time
    from typing import NotRequired

__all__ = ["rollout_rows", "RolloutRows", "rollout", "score_parts", "band_lift", "band_pairs",
           "PAIRINGS", "ROLLOUT_MAX_DENSE", "value_weighted_rows", "Band", "BandLift", "Layout"]

#: One stack's trace (:class:`attnlab.tracing.attention.AttentionTrace`), read by its query
#: API; this module does not import the class, whose own methods call it.
Trace = Any

#: The RoPE layouts: which dimensions rotate together (see the module docstring).
PAIRINGS = ("half", "interleaved", "adjacent")

#: The longest input :func:`rollout` gives whole (an (N, N) float64 matrix: 128 MiB at 4,096).
ROLLOUT_MAX_DENSE = 4096


def _check_trace(trace: Any, what: str) -> None:
    # One stack, read by its query API (this module is what AttentionTrace's own
    # value_weighted_rows, rollout_rows and score_parts call, so it does not import it).
    if not callable(getattr(trace, "weights_rows", None)) or hasattr(trace, "names"):
        raise TypeError(f"trace must be an AttentionTrace (one stack), got "
                        f"{type(trace).__name__}; pass one stack of a StackedTrace, e.g. "
                        f"trace['decoder']")
    if what == "rollout" and (trace.stack == "cross" or trace.seq_len != trace.key_len):
        raise ValueError(f"rollout composes a stack's layers, so rows and keys must be the same "
                         f"tokens; this trace is {trace.stack!r} with {trace.seq_len} queries "
                         f"and {trace.key_len} keys")


def _rows(trace: Trace, rows: Any, name: str = "rows") -> Tensor:
    return trace._select(name, rows, trace.seq_len)


def rollout_rows(trace: Trace, rows: Any, *, value_weighted: bool = False,
                 tile_rows: int | None = None) -> Tensor:
    """Residual-adjusted rollout of output ``rows`` (int, range, slice or sequence): a
    float64 (len(rows), N) tensor, row ``i`` being ``e_iᵀ Â_L ··· Â_1`` with
    ``Â_l = ½·mean_h A_l,h + ½·I`` (see the module docstring).

    ``tile_rows`` bounds the weight rows recomputed at once (default: about 8 MiB per head's
    tile). ``value_weighted=True`` mixes each layer by the norms of what the keys move
    instead of the weights (Kobayashi et al. 2020): ``A_l[i, j] = ‖Σ_h α^h_ij v_j W_O^h‖``,
    each row normalised to sum 1 — exact, and costlier (each row is (N, E) vectors summed
    over heads). A merged trace: the pieces' rollout, merged (see the module docstring).
    """
    _check_trace(trace, "rollout")
    if value_weighted:
        _need_values(trace, "value-weighted rollout")
    picked = _rows(trace, rows)
    if trace.groups is not None:  # through the pieces' layers, merged once at the end
        pieces = _merge.pieces_of(trace.groups, picked)[0]
        r = rollout_rows(trace.unmerged(), pieces, value_weighted=value_weighted,
                         tile_rows=tile_rows)
        return _merge.merge(r, trace.groups, picked, None)
    step = trace._tile_rows(tile_rows, TILE_BYTES)
    acc = RolloutRows(trace, picked)
    for layer in reversed(range(trace.num_layers)):
        first, top = acc.span()
        for r0 in range(0, top, step):
            r1 = min(top, r0 + step)
            if r1 <= first:
                continue
            if value_weighted:
                tile = value_weighted_rows(trace, layer, None, range(r0, r1)).double()
                acc.add_mix(layer, r0, r1, 0, tile / tile.sum(1, keepdim=True).clamp_min(1e-300))
                continue
            # the heads summed in float32 (rounding ~1e-7), then mixed in float64, over the
            # keys some row of the tile sees (a causal tile's later columns are exact zeros)
            c0, c1 = _seen(trace, layer, r0, r1)
            keys = range(c0, c1)
            tile32 = trace.weights_tile(layer, 0, range(r0, r1), keys)
            for head in range(1, trace.num_heads):
                tile32 += trace.weights_tile(layer, head, range(r0, r1), keys)
            acc.add(layer, r0, r1, c0, tile32)
        acc.end_layer(layer)
    return acc.result()


class RolloutRows:
    """Residual-adjusted rollout rows (:func:`rollout_rows`) built from weight tiles handed
    in by a pass over the trace's weights, last layer first: for each layer, each tile of
    weight rows ``[r0, r1)`` (its heads summed, keys from ``c0``) with :meth:`add`, then
    :meth:`end_layer`; :meth:`result` once every layer has ended. A pass that recomputes
    every weight for another measure (:func:`attnlab.analysis.eviction.evict`) makes the
    rollout rows on the way instead of recomputing the weights for them.

    The tiles of a layer may come in any order and in any cut of its rows, as long as each
    row that :meth:`span` reports live comes once, with every key its row sees.

    >>> import torch
    >>> from attnlab.core.scores import ScoreShape, row_logsumexp
    >>> from attnlab.tracing.attention import AttentionTrace
    >>> g = torch.Generator().manual_seed(0)
    >>> q, k = torch.randn(2, 2, 5, 4, generator=g), torch.randn(2, 2, 5, 4, generator=g)
    >>> shape = ScoreShape(scale=0.5, causal=True)
    >>> lse = torch.stack([row_logsumexp(q[i], k[i], shape) for i in range(2)])
    >>> t = AttentionTrace(list("abcde"), q=q, k=k, lse=lse, shapes=shape)
    >>> acc = RolloutRows(t, [4])
    >>> for layer in (1, 0):  # last layer first; rows cut 3 + 2, the heads summed
    ...     for r0, r1 in ((3, 5), (0, 3)):
    ...         acc.add(layer, r0, r1, 0, t.weights_tile(layer, 0, range(r0, r1), range(r1))
    ...                 + t.weights_tile(layer, 1, range(r0, r1), range(r1)))
    ...     acc.end_layer(layer)
    >>> bool(torch.allclose(acc.result(), rollout_rows(t, [4]), rtol=1e-6, atol=1e-12))
    True
    >>> acc.add(0, 0, 1, 0, torch.ones(1, 1))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: the rollout's layers come last first, each once: expected a tile of ... 0
    """

    def __init__(self, trace: Trace, rows: Any) -> None:
        _check_trace(trace, "rollout")
        picked = _rows(trace, rows)
        n, dev = trace.seq_len, trace.device
        self.rows, self.num_heads, self._layers = picked, trace.num_heads, trace.num_layers
        self._r = torch.zeros(picked.shape[0], n, dtype=torch.float64, device=dev)
        self._r[torch.arange(picked.shape[0], device=dev), picked.to(dev)] = 1.0
        self._mixed = torch.zeros_like(self._r)
        self._after = torch.arange(1, n + 1, device=dev)  # j + 1 of key j
        self._next = trace.num_layers - 1  # the layer whose tiles come now
        #: Seconds spent in this object's arithmetic (a pass that sums the heads for it
        #: adds the time of that sum).
        self.seconds = 0.0

    def span(self) -> tuple[int, int]:
        """The live keys' span ``[first, top)`` of the rows so far: the weight rows outside
        it add exact zeros (in a causal stack, r only ever reaches keys at or before the
        last asked row; under a window, only those after some first one). Two values read
        back from the trace's device (syncs on an accelerator)."""
        n = self._r.shape[1]
        if not n:
            return 0, 0
        live = (self._r != 0).any(0)
        return n - int((live * self._after.flip(0)).max()), int((live * self._after).max())

    def _layer(self, layer: int) -> None:
        if layer != self._next:
            done = " (every layer has ended)" if self._next < 0 else ""
            raise ValueError(f"the rollout's layers come last first, each once: expected a "
                             f"tile of layer {self._next}{done}, got layer {layer}")

    def add(self, layer: int, r0: int, r1: int, c0: int, heads_sum: Tensor) -> None:
        """Weight rows ``[r0, r1)`` of ``layer``, summed over its heads (float32), on the
        keys ``[c0, c0 + heads_sum.shape[1])``."""
        t0 = time.perf_counter()
        mix = heads_sum.double().div_(self.num_heads)
        self.seconds += time.perf_counter() - t0
        self.add_mix(layer, r0, r1, c0, mix)

    def add_mix(self, layer: int, r0: int, r1: int, c0: int, mix: Tensor) -> None:
        """Rows ``[r0, r1)`` of the layer's mixing matrix itself (float64, the mean of the
        heads or any other mix, such as the value-weighted one), keys from ``c0``."""
        self._layer(layer)
        t0 = time.perf_counter()
        self._mixed[:, c0:c0 + mix.shape[1]] += self._r[:, r0:r1] @ mix
        self.seconds += time.perf_counter() - t0

    def end_layer(self, layer: int) -> None:
        """Every tile of ``layer`` is in: ``r ← ½·r A_l + ½·r``."""
        self._layer(layer)
        t0 = time.perf_counter()
        self._r = 0.5 * self._mixed + 0.5 * self._r
        self._mixed.zero_()
        self._next = layer - 1
        self.seconds += time.perf_counter() - t0

    def result(self) -> Tensor:
        """The rows (len(rows), N), float64, once every layer has ended."""
        if self._next != -1:
            raise ValueError(f"the rollout has not ended layer {self._next} (of "
                             f"{self._layers})")
        return self._r


def _seen(trace: Trace, layer: int, r0: int, r1: int) -> tuple[int, int]:
    """Keys [c0, c1) outside which self-attention rows [r0, r1) of ``layer`` see nothing."""
    if trace.shapes:
        return trace.shapes[layer].key_range(r0, r1, lq=trace.seq_len, lk=trace.key_len)
    return (0, r1) if trace.causal else (0, trace.key_len)  # (a dense trace without shapes)


def _need_values(trace: Trace, what: str) -> None:
    if trace.v is None or trace.out_proj is None:
        missing = "v" if trace.v is None else "each head's output projection (out_proj)"
        raise ValueError(f"{what} needs the trace's {missing}: trace with q, k and v from a "
                         f"model whose attention module holds its output projection "
                         f"(o_proj, out_proj, c_proj, dense, ...)")


def _moved(trace: Trace, layer: int, heads: Sequence[int]) -> Tensor:
    """(len(heads), Lk, E) float32: ``v_j W_O^h``, what key ``j`` moves through head ``h``."""
    v, o = trace.layer_tensor("v", layer), trace.layer_tensor("out_proj", layer)  # checked
    return torch.stack([v[trace.kv_head(h)].float() @ o[h] for h in heads])


def value_weighted_rows(trace: Trace, layer: int, head: int | None, rows: Any
                        ) -> Tensor:
    """(len(rows), Lk) float32: ``α_ij · ‖v_j W_O^h‖`` for one head, or with ``head=None``
    ``‖Σ_h α^h_ij v_j W_O^h‖``, the norm of what key ``j`` adds to query ``i``'s residual
    stream through the whole layer (Kobayashi et al. 2020). Summed over ``j`` (as vectors)
    the contributions are the attention output that enters the residual stream, less the
    projection's bias. A merged trace: the pieces' rows, summed over each key token's
    pieces and averaged over the query token's pieces (see the module docstring)."""
    _need_values(trace, "value-weighted attention")
    layer = trace._layer(layer)
    picked = _rows(trace, rows)
    if trace.groups is not None:
        pieces = _merge.pieces_of(trace.groups, picked)[0]
        raw = value_weighted_rows(trace.unmerged(), layer, head, pieces)
        return _merge.merge(raw, trace.groups, picked, None)
    if head is not None:
        h = trace._head(head)
        return trace.weights_rows(layer, h, picked) * _moved(trace, layer, [h])[0].norm(dim=-1)
    gram = _key_gram(trace, layer)  # (Lk, H, H)
    out = torch.empty(picked.shape[0], trace.key_len, device=gram.device)
    step = max(1, TILE_BYTES // (8 * trace.num_heads * trace.key_len))
    for s in range(0, picked.shape[0], step):
        part = picked[s:s + step]
        alpha = torch.stack([trace.weights_rows(layer, h, part)
                             for h in range(trace.num_heads)]).double()  # (H, T, Lk)
        sq = torch.einsum("htk,khg,gtk->tk", alpha, gram, alpha)
        out[s:s + step] = sq.clamp_min_(0).sqrt_().float()
    return out


#: Per trace and layer, the Gram matrix of what each key moves through each pair of heads
#: (float64 (Lk, H, H): 2.6 MB a layer for SmolLM2 at 8,192 tokens), kept while the trace
#: lives so that a served row costs a weight row, not a product with the projection.
_GRAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _key_gram(trace: Trace, layer: int) -> Tensor:
    """(Lk, H, H) float64: ``(v_j W_O^h)·(v_j W_O^g)`` — the squared norm of
    ``Σ_h α^h_ij v_j W_O^h`` is ``Σ_{h,g} α^h_ij α^g_ij G_j[h, g]``."""
    per = _GRAMS.setdefault(trace, {})
    if layer not in per:
        moved = _moved(trace, layer, range(trace.num_heads)).double()  # (H, Lk, E)
        per[layer] = torch.einsum("hke,gke->khg", moved, moved)
    return per[layer]


def rollout(trace: Trace, *, tile_rows: int | None = None) -> Tensor:
    """The whole (N, N) float64 rollout matrix, for inputs of at most
    :data:`ROLLOUT_MAX_DENSE` tokens (longer ones: :func:`rollout_rows` for the rows you
    need)."""
    _check_trace(trace, "rollout")
    if trace.seq_len > ROLLOUT_MAX_DENSE:
        raise ValueError(f"rollout of the whole matrix holds N x N float64 values; this trace "
                         f"has {trace.seq_len} tokens, more than {ROLLOUT_MAX_DENSE}: ask "
                         f"rollout_rows for the rows you need")
    return rollout_rows(trace, range(trace.seq_len), tile_rows=tile_rows)


# ----------------------------------------------------------------------------------------
# the score decomposed
# ----------------------------------------------------------------------------------------


class Layout(TypedDict):
    """The positional layout a score is taken apart by (``layout`` of :func:`score_parts`
    and :func:`band_lift`)."""

    #: ``"rope"``, or ``"none"``: no rotation (the bands are consecutive dimensions).
    kind: str
    #: One of :data:`PAIRINGS`.
    pairing: str
    #: The rotated dimensions (the first ones of the head).
    rotary_dim: int
    #: The rotary base, where recorded.
    base: float | None
    #: The model's own (possibly scaled) frequencies, one per pair, where recorded.
    freqs: list[float] | None
    #: ``"trace"`` (recorded), ``"argument"`` (``pairing=``), or why neither.
    source: str


class Band(TypedDict):
    """One band of a head's dimensions (:func:`band_pairs`): a RoPE pair, or unrotated
    dimensions."""

    dims: list[int]
    rotated: bool
    #: Its angular frequency, in radians per position (None: not rotated).
    freq: float | None
    #: ``2π / freq``, in positions.
    wavelength: float | None
    #: :func:`score_parts`: the band's part of the score.
    value: NotRequired[float]
    #: :func:`band_lift`: how much the band lifts the attended keys, and its share of the
    #: head's whole lift.
    lift: NotRequired[float]
    share: NotRequired[float]


class BandLift(TypedDict):
    """Which bands carry a head's pattern (:func:`band_lift`)."""

    layer: int
    head: int
    #: How many rows (query tokens) were summed over.
    rows: int
    #: The head's whole lift (the bands' lifts sum to it).
    lift: float
    bands: list[Band]
    layout: Layout
    #: A merged trace: how many pieces the rows hold.
    pieces: NotRequired[int]


def _layout(trace: Trace, pairing: str | None) -> Layout:
    """The positional layout: the recorded one, else ``pairing`` given, else adjacent."""
    d = trace.head_dim
    if d is None:
        raise ValueError("the score's parts need q and k; this trace holds weights only")
    recorded = trace.meta.get("positional") if isinstance(trace.meta, dict) else None
    if pairing is not None:
        if pairing not in PAIRINGS:
            raise ValueError(f"pairing must be one of {', '.join(PAIRINGS)}, got {pairing!r}")
        rec = recorded if isinstance(recorded, dict) else {}
        return {"kind": "rope" if pairing != "adjacent" else "none", "pairing": pairing,
                "rotary_dim": int(rec.get("rotary_dim") or d), "base": rec.get("base"),
                "freqs": rec.get("freqs"), "source": "argument"}
    if isinstance(recorded, dict) and recorded.get("pairing") in PAIRINGS:
        return {"kind": recorded.get("kind", "rope"), "pairing": recorded["pairing"],
                "rotary_dim": int(recorded.get("rotary_dim") or d),
                "base": recorded.get("base"), "freqs": recorded.get("freqs"),
                "source": "trace"}
    return {"kind": "none", "pairing": "adjacent", "rotary_dim": d, "base": None,
            "freqs": None, "source": "none recorded: consecutive dimensions"}


def band_pairs(head_dim: int, pairing: str, rotary_dim: int | None = None
               ) -> list[tuple[int, ...]]:
    """The dimensions of each band: one pair per RoPE frequency (in the model's own
    pairing) over the first ``rotary_dim`` dimensions, then the unrotated dimensions in
    consecutive pairs (the last alone if their number is odd).

    >>> band_pairs(8, "half")
    [(0, 4), (1, 5), (2, 6), (3, 7)]
    >>> band_pairs(8, "interleaved", 4)
    [(0, 1), (2, 3), (4, 5), (6, 7)]
    >>> band_pairs(6, "half", 4)
    [(0, 2), (1, 3), (4, 5)]
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {', '.join(PAIRINGS)}, got {pairing!r}")
    r = head_dim if rotary_dim is None else int(rotary_dim)
    if not 0 <= r <= head_dim or r % 2:
        raise ValueError(f"rotary_dim must be an even number in [0, {head_dim}], got {r}")
    if pairing == "half":
        pairs: list[tuple[int, ...]] = [(a, a + r // 2) for a in range(r // 2)]
    else:
        pairs = [(a, a + 1) for a in range(0, r, 2)]
    rest = list(range(r, head_dim))
    pairs += [tuple(rest[i:i + 2]) for i in range(0, len(rest), 2)]
    return pairs


def _bands(layout: Layout, d: int) -> list[Band]:
    r = layout["rotary_dim"]
    pairs = band_pairs(d, layout["pairing"], r)
    base, freqs = layout["base"], layout["freqs"]
    out: list[Band] = []
    for p, dims in enumerate(pairs):
        rotated = layout["kind"] == "rope" and p < r // 2
        freq: float | None
        if rotated and freqs and p < len(freqs):  # the model's own (scaled) frequencies
            freq = float(freqs[p])
        else:
            freq = base ** (-2.0 * p / r) if rotated and base else None
        out.append({"dims": list(dims), "rotated": rotated, "freq": freq,
                    "wavelength": 2 * math.pi / freq if freq else None})
    return out


def _merged_parts(trace: Trace, layer: int, head: int, i: int, j: int,
                  pairing: str | None) -> dict[str, Any]:
    """score_parts of merged tokens ``i`` and ``j``: one entry per pair of their pieces."""
    qi = int(trace._select("i", i, trace.seq_len)[0])
    kj = int(trace._select("j", j, trace.key_len)[0])
    pieces = trace.unmerged()
    g, tokens = trace.groups, trace.tokens
    qs, ks = _merge.piece_labels(g, tokens, g[qi]), _merge.piece_labels(g, tokens, g[kj])
    pairs = []
    for qp in qs:
        for kp in ks:
            part = score_parts(pieces, layer, head, qp["piece"], kp["piece"], pairing=pairing)
            part.update(query_piece=qp, key_piece=kp)
            pairs.append(part)
    return {"layer": pairs[0]["layer"], "head": pairs[0]["head"], "i": qi, "j": kj,
            "merged": True, "rule": "one entry per pair of pieces: a score belongs to a "
            "query piece and a key piece", "query_pieces": qs, "key_pieces": ks,
            "pairs": pairs, "layout": pairs[0]["layout"]}


def score_parts(trace: Trace, layer: int, head: int, i: int, j: int, *,
                pairing: str | None = None) -> dict[str, Any]:
    """Query ``i``'s score for key ``j`` in one head, taken apart.

    Returns ``score`` (``scale·q_i·k_j``, float32 as the model computes it), ``shaped``
    (the score the softmax sees, after soft-cap, ALiBi and masks), ``bands`` (one entry per
    band, see :func:`band_pairs`: ``dims``, ``value``, ``freq``, ``wavelength``, ``rotated``;
    their values sum to ``score`` to float32 rounding), ``q_norm``, ``k_norm``, ``cos`` and
    ``angle_deg`` (``score = scale·q_norm·k_norm·cos``), ``scale`` and the ``layout`` used.

    A merged trace (``i`` and ``j`` merged tokens): ``merged`` True, ``query_pieces`` and
    ``key_pieces`` (each piece labelled as a piece of its token:
    :func:`attnlab.tracing._merge.piece_labels`), and ``pairs``, the decomposition above of
    each pair of their pieces (query pieces outer), with its ``query_piece`` and
    ``key_piece``: a score belongs to one query piece and one key piece.
    """
    if trace.q is None or trace.k is None:
        raise ValueError("the score's parts need q and k; this trace holds weights only")
    if trace.groups is not None:
        return _merged_parts(trace, layer, head, i, j, pairing)
    layer, head = trace._layer(layer), trace._head(head)
    qi = int(trace._select("i", i, trace.seq_len)[0])
    kj = int(trace._select("j", j, trace.key_len)[0])
    shape = trace.score_shape(layer)
    q = trace.layer_tensor("q", layer)[head, qi].float()
    k = trace.layer_tensor("k", layer)[trace.kv_head(head), kj].float()
    d = q.shape[0]
    layout = _layout(trace, pairing)
    scale = float(shape.scale)
    score = float(scale * torch.dot(q, k))
    prod = scale * q.double() * k.double()
    bands = _bands(layout, d)
    for b in bands:
        b["value"] = float(prod[b["dims"]].sum())
    qn, kn = float(q.double().norm()), float(k.double().norm())
    cos = float(torch.dot(q.double(), k.double()) / (qn * kn)) if qn and kn else 0.0
    shaped = float(shape.scores(q[None], k[None], rows=torch.tensor([qi]),
                                cols=torch.tensor([kj]), head=head, lq=trace.seq_len,
                                lk=trace.key_len)[0, 0])
    return {"layer": layer, "head": head, "i": qi, "j": kj, "score": score, "shaped": shaped,
            "scale": scale, "bands": bands, "q_norm": qn, "k_norm": kn, "cos": cos,
            "angle_deg": math.degrees(math.acos(max(-1.0, min(1.0, cos)))),
            "layout": layout}


def band_lift(trace: Trace, layer: int, head: int, *, rows: Any = None,
              pairing: str | None = None, tile_rows: int | None = None) -> BandLift:
    """Which bands carry a head's pattern: for each band, summed over ``rows`` (default all),
    ``Σ_j α_ij·part_ij − (Σ_j α_ij)·mean_{j visible} part_ij`` — how much the band raises
    the keys the head attends to above the average key the row may see. The bands' lifts
    sum to the head's whole ``lift`` (the same with the whole score); ``share`` is each
    band's fraction of it. Exact weights, tiles of rows; O(tile · N) memory. A merged
    trace: summed over the pieces of ``rows`` (each piece a row of its own, its keys the
    pieces), so that over all rows it is the pieces' lift; ``pieces`` counts them."""
    if trace.q is None or trace.k is None:
        raise ValueError("band_lift needs q and k; this trace holds weights only")
    if trace.groups is not None:
        picked = _rows(trace, slice(None) if rows is None else rows)
        pieces = _merge.pieces_of(trace.groups, picked)[0]
        out = band_lift(trace.unmerged(), layer, head, rows=pieces, pairing=pairing,
                        tile_rows=tile_rows)
        return {**out, "rows": int(picked.shape[0]), "pieces": int(pieces.shape[0])}
    layer, head = trace._layer(layer), trace._head(head)
    picked = _rows(trace, slice(None) if rows is None else rows)
    shape = trace.score_shape(layer)
    q_all = trace.layer_tensor("q", layer)[head].double()
    k = trace.layer_tensor("k", layer)[trace.kv_head(head)].double()
    lq, lk, dev = trace.seq_len, trace.key_len, trace.device
    d = k.shape[1]
    per_dim = torch.zeros(d, dtype=torch.float64, device=dev)
    step = trace._tile_rows(tile_rows, TILE_BYTES)
    for s in range(0, picked.shape[0], step):
        rows_t = picked[s:s + step]  # positions on the host; their copy on the device:
        alpha = trace.weights_rows(layer, head, rows_t).double()  # (T, Lk)
        rows_t = rows_t.to(dev)
        vis = shape.visible(rows_t, None, lq=lq, lk=lk)
        vis = (torch.ones(rows_t.shape[0], lk, dtype=torch.bool, device=dev) if vis is None
               else vis)
        count = vis.sum(1, keepdim=True).clamp_min(1).double()
        kbar = (vis.double() @ k) / count  # (T, d): the mean visible key
        mass = alpha.sum(1, keepdim=True)
        q = q_all.index_select(0, rows_t)
        per_dim += (q * (alpha @ k - mass * kbar)).sum(0)
    per_dim *= float(shape.scale)
    layout = _layout(trace, pairing)
    bands = _bands(layout, d)
    total = float(per_dim.sum())
    for b in bands:
        b["lift"] = float(per_dim[b["dims"]].sum())
        b["share"] = b["lift"] / total if total else 0.0
    return {"layer": layer, "head": head, "rows": int(picked.shape[0]), "lift": total,
            "bands": bands, "layout": layout}
